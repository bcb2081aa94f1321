// Pieces of the HTML eval report: escaping, number formatting and the two inline SVG charts
// (pass@k curve, log2 speedup histogram). Internal to src/eval; the page itself is report_html.cpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kernelllm::eval::html {

// Escapes & < > " ' so that any text is safe in element content and in quoted attributes.
std::string escape(std::string_view text);

// Fixed-point with `decimals` digits ("0.400"); "—" for nullopt.
std::string fixed(std::optional<double> value, int decimals);

// "1.23×"; "—" for nullopt.
std::string speedup_text(std::optional<double> value);

struct CurveSeries {
  std::string name;
  std::string color;                         // CSS color
  std::vector<std::optional<double>> values;  // values[k-1] = pass@k; nullopt where undefined
};

// Line chart of pass@k over k = 1..max_k, y in [0, 1]; one line per series, legend above the plot.
std::string pass_at_k_curve_svg(const std::vector<CurveSeries>& series, int max_k);

// Histogram of speedups in log2 bins (a bin edge always falls on 1×), with 1× marked.
// `speedups` must be non-empty and positive.
std::string speedup_histogram_svg(const std::vector<double>& speedups, std::string_view color);

}  // namespace kernelllm::eval::html
