// Inline SVG charts and text helpers for the HTML eval report. Coordinates are computed here in a
// fixed viewBox; the page's CSS scales the SVG to its column width.
#include "report_charts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kernelllm::eval::html {
namespace {

std::string num(double v) {  // an SVG coordinate
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

// The smallest of 1, 2, 5 × 10^m that splits `range` into at most `max_ticks` steps.
double nice_step(double range, int max_ticks) {
  if (range <= 0.0) return 1.0;
  const double raw = range / max_ticks;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * magnitude >= raw) return m * magnitude;
  }
  return 10.0 * magnitude;
}

std::string text(double x, double y, std::string_view anchor, std::string_view body, std::string_view cls = "axis") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" text-anchor=\"" + std::string(anchor) + "\" class=\"" +
         std::string(cls) + "\">" + escape(body) + "</text>";
}

std::string line(double x1, double y1, double x2, double y2, std::string_view cls) {
  return "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) + "\" class=\"" +
         std::string(cls) + "\"/>";
}

// "0.5×", "1×", "2×" for a power of two 2^e.
std::string power_label(double e) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g\xC3\x97", std::exp2(e));
  return buf;
}

}  // namespace

std::string escape(std::string_view in) {
  std::string out;
  out.reserve(in.size() + in.size() / 8);
  for (char ch : in) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string fixed(std::optional<double> value, int decimals) {
  if (!value) return "\xE2\x80\x94";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, *value);
  return buf;
}

std::string speedup_text(std::optional<double> value) {
  if (!value) return "\xE2\x80\x94";
  return fixed(value, 2) + "\xC3\x97";
}

std::string pass_at_k_curve_svg(const std::vector<CurveSeries>& series, int max_k) {
  constexpr double kWidth = 720, kHeight = 340, kLeft = 60, kRight = 24, kTop = 44, kBottom = 52;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  auto x_of = [&](int k) {
    return max_k <= 1 ? kLeft + pw / 2 : kLeft + pw * static_cast<double>(k - 1) / static_cast<double>(max_k - 1);
  };
  auto y_of = [&](double v) { return kTop + (1.0 - v) * ph; };

  std::string svg = "<svg class=\"chart\" viewBox=\"0 0 " + num(kWidth) + " " + num(kHeight) +
                    "\" role=\"img\" aria-label=\"pass@k curve\" xmlns=\"http://www.w3.org/2000/svg\">";
  for (int i = 0; i <= 5; ++i) {
    const double v = i / 5.0;
    svg += line(kLeft, y_of(v), kLeft + pw, y_of(v), i == 0 ? "axisline" : "grid");
    svg += text(kLeft - 8, y_of(v) + 4, "end", fixed(v, 1));
  }
  svg += line(kLeft, kTop, kLeft, kTop + ph, "axisline");
  const int step = std::max(1, static_cast<int>(nice_step(max_k - 1, 10)));
  for (int k = 1; k <= max_k; ++k) {
    if (k != 1 && k % step != 0) continue;
    // Skip a multiple of step crowding the first tick (k = 1 is always labelled).
    if (k != 1 && x_of(k) - x_of(1) < 18) continue;
    svg += line(x_of(k), kTop + ph, x_of(k), kTop + ph + 5, "axisline");
    svg += text(x_of(k), kTop + ph + 19, "middle", std::to_string(k));
  }
  svg += text(kLeft + pw / 2, kHeight - 10, "middle", "k (samples drawn per problem)", "label");
  svg += "<text transform=\"translate(16 " + num(kTop + ph / 2) +
         ") rotate(-90)\" text-anchor=\"middle\" class=\"label\">pass@k</text>";

  double legend_x = kLeft;
  for (const CurveSeries& s : series) {
    svg += "<line x1=\"" + num(legend_x) + "\" y1=\"18\" x2=\"" + num(legend_x + 24) + "\" y2=\"18\" stroke=\"" +
           escape(s.color) + "\" stroke-width=\"3\"/>";
    svg += text(legend_x + 30, 22, "start", s.name, "legend");
    legend_x += 30 + 8.0 * static_cast<double>(s.name.size()) + 28;

    std::string points;
    std::string dots;
    auto flush = [&]() {
      if (!points.empty()) {
        svg += "<polyline fill=\"none\" stroke=\"" + escape(s.color) + "\" stroke-width=\"2.5\" points=\"" + points + "\"/>";
      }
      points.clear();
    };
    for (int k = 1; k <= max_k && k <= static_cast<int>(s.values.size()); ++k) {
      const std::optional<double>& v = s.values[static_cast<size_t>(k - 1)];
      if (!v) {
        flush();
        continue;
      }
      points += num(x_of(k)) + "," + num(y_of(*v)) + " ";
      dots += "<circle cx=\"" + num(x_of(k)) + "\" cy=\"" + num(y_of(*v)) + "\" r=\"3.5\" fill=\"" + escape(s.color) +
              "\"><title>" + escape(s.name) + ": pass@" + std::to_string(k) + " = " + fixed(v, 3) + "</title></circle>";
    }
    flush();
    svg += dots;
  }
  svg += "</svg>";
  return svg;
}

std::string speedup_histogram_svg(const std::vector<double>& speedups, std::string_view color) {
  constexpr double kWidth = 720, kHeight = 310, kLeft = 60, kRight = 24, kTop = 40, kBottom = 56;
  const double pw = kWidth - kLeft - kRight, ph = kHeight - kTop - kBottom;
  std::vector<double> logs;
  logs.reserve(speedups.size());
  for (double s : speedups) logs.push_back(std::log2(s));
  const auto [min_it, max_it] = std::minmax_element(logs.begin(), logs.end());
  const double span = *max_it - *min_it;
  // Bins of 2^(1/4), 2^(1/2) or 2×, aligned so that 1× (log2 = 0) is an edge; the axis always shows 1×.
  const double width = span <= 3.0 ? 0.25 : span <= 6.0 ? 0.5 : 1.0;
  double lo = std::min(0.0, std::floor(*min_it / width) * width);
  double hi = std::max(0.0, std::ceil(*max_it / width) * width);
  if (hi - lo < width) hi = lo + width;
  if (*max_it >= hi) hi += width;  // a value on the top edge gets its own bin
  const int bins = static_cast<int>(std::lround((hi - lo) / width));
  std::vector<int> counts(static_cast<size_t>(bins), 0);
  for (double v : logs) {
    const int b = std::clamp(static_cast<int>(std::floor((v - lo) / width + 1e-9)), 0, bins - 1);
    counts[static_cast<size_t>(b)] += 1;
  }
  const int max_count = *std::max_element(counts.begin(), counts.end());
  auto x_of = [&](double e) { return kLeft + (e - lo) / (hi - lo) * pw; };
  const double y_max = std::max(1.0, std::ceil(max_count / nice_step(max_count, 5)) * nice_step(max_count, 5));
  auto y_of = [&](double c) { return kTop + ph - c / y_max * ph; };

  std::string svg = "<svg class=\"chart\" viewBox=\"0 0 " + num(kWidth) + " " + num(kHeight) +
                    "\" role=\"img\" aria-label=\"speedup histogram\" xmlns=\"http://www.w3.org/2000/svg\">";
  const double y_step = std::max(1.0, nice_step(y_max, 5));
  for (double c = 0; c <= y_max + 1e-9; c += y_step) {
    svg += line(kLeft, y_of(c), kLeft + pw, y_of(c), c == 0 ? "axisline" : "grid");
    svg += text(kLeft - 8, y_of(c) + 4, "end", std::to_string(static_cast<int>(c)));
  }
  for (int b = 0; b < bins; ++b) {
    const double e0 = lo + b * width, e1 = e0 + width;
    const int count = counts[static_cast<size_t>(b)];
    if (count == 0) continue;
    const double x0 = x_of(e0) + 1, x1 = x_of(e1) - 1;
    const std::string fill = e1 <= 1e-9 ? "#a3aab8" : std::string(color);  // grey: slower, whatever the profile color
    svg += "<rect x=\"" + num(x0) + "\" y=\"" + num(y_of(count)) + "\" width=\"" + num(std::max(1.0, x1 - x0)) +
           "\" height=\"" + num(y_of(0) - y_of(count)) + "\" fill=\"" + escape(fill) + "\"><title>" +
           fixed(std::exp2(e0), 2) + "\xC3\x97 to " + fixed(std::exp2(e1), 2) + "\xC3\x97: " + std::to_string(count) +
           (count == 1 ? " sample" : " samples") + "</title></rect>";
    svg += text((x0 + x1) / 2, y_of(count) - 4, "middle", std::to_string(count), "count");
  }
  // Label the powers of two; every other one when they would crowd.
  const int powers = static_cast<int>(std::floor(hi) - std::ceil(lo)) + 1;
  const int label_every = powers > 12 ? 2 : 1;
  for (double e = std::ceil(lo); e <= hi + 1e-9; e += 1.0) {
    svg += line(x_of(e), kTop + ph, x_of(e), kTop + ph + 5, "axisline");
    if (static_cast<long>(std::lround(e)) % label_every == 0) svg += text(x_of(e), kTop + ph + 19, "middle", power_label(e));
  }
  svg += line(x_of(0), kTop - 22, x_of(0), kTop + ph, "marker");
  svg += text(x_of(0) + 5, kTop - 14, "start", "1\xC3\x97 = reference speed", "markerlabel");
  svg += text(kLeft + pw / 2, kHeight - 12, "middle", "speedup over the reference (log scale; grey: slower)", "label");
  svg += "<text transform=\"translate(16 " + num(kTop + ph / 2) +
         ") rotate(-90)\" text-anchor=\"middle\" class=\"label\">correct samples</text>";
  svg += "</svg>";
  return svg;
}

}  // namespace kernelllm::eval::html
