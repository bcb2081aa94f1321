// Eval metrics: unbiased pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained on
// Code", https://arxiv.org/abs/2107.03374, the estimator 1 - C(n-c,k)/C(n,k)), KernelBench's fast_p
// (correct and speedup > p), geometric-mean speedup, and the per-problem rows; JSON both ways.
#include "kernelllm/eval/metrics.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace kernelllm::eval {
namespace {

// Speedups are ratios of medians; anything else is corrupt data, not a slow kernel.
Status check_speedup(const SampleOutcome& s, const std::string& problem_id) {
  if (s.speedup && !(std::isfinite(*s.speedup) && *s.speedup > 0.0)) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%g", *s.speedup);
    return error(ErrorCode::invalid_argument, "problem " + problem_id + " sample " + std::to_string(s.sample) +
                                                  ": expected a positive finite speedup, found " + buf);
  }
  return {};
}

Json optional_number(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

template <class Key>
Json keyed_map(const std::map<Key, std::optional<double>>& m) {
  Json out = Json::object();
  for (const auto& [key, value] : m) out[metric_key(static_cast<double>(key))] = optional_number(value);
  return out;
}

// Reads {"1": 0.5, "10": null, ...} back; keys must parse as numbers of the map's key type.
template <class Key>
Result<std::map<Key, std::optional<double>>> read_keyed_map(const Json& obj, std::string_view key, std::string_view what) {
  auto it = obj.find(std::string(key));
  if (it == obj.end()) return error(ErrorCode::not_found, std::string(what) + ": missing " + std::string(key));
  if (!it->is_object()) {
    return error(ErrorCode::parse_error, std::string(what) + ": expected object for " + std::string(key) + ", found " +
                                             std::string(json_type_name(*it)));
  }
  std::map<Key, std::optional<double>> out;
  for (const auto& [name, value] : it->items()) {
    Key parsed{};
    const char* end = name.data() + name.size();
    auto [ptr, ec] = std::from_chars(name.data(), end, parsed);
    if (ec != std::errc() || ptr != end) {
      return error(ErrorCode::parse_error,
                   std::string(what) + ": expected a number as key of " + std::string(key) + ", found \"" + name + "\"");
    }
    if (value.is_null()) {
      out[parsed] = std::nullopt;
    } else if (value.is_number()) {
      out[parsed] = value.template get<double>();
    } else {
      return error(ErrorCode::parse_error, std::string(what) + ": expected number or null for " + std::string(key) + "." +
                                               name + ", found " + std::string(json_type_name(value)));
    }
  }
  return out;
}

Result<ProblemRow> row_from_json(const Json& j, std::string_view what) {
  ProblemRow row;
  KLLM_ASSIGN_OR_RETURN(row.id, json_string(j, "id", what));
  KLLM_ASSIGN_OR_RETURN(int64_t level, json_int(j, "level", what));
  KLLM_ASSIGN_OR_RETURN(int64_t n, json_int(j, "n", what));
  KLLM_ASSIGN_OR_RETURN(int64_t c, json_int(j, "c", what));
  row.level = static_cast<int>(level);
  row.n = static_cast<int>(n);
  row.c = static_cast<int>(c);
  KLLM_ASSIGN_OR_RETURN(row.pass_at_k, read_keyed_map<int>(j, "pass_at_k", what));
  KLLM_ASSIGN_OR_RETURN(row.best_speedup, json_opt_number(j, "best_speedup", what));
  auto counts = j.find("verdict_counts");
  if (counts == j.end() || !counts->is_object()) {
    return error(ErrorCode::parse_error, std::string(what) + ": expected object verdict_counts");
  }
  for (const auto& [name, value] : counts->items()) {
    if (!value.is_number_integer()) {
      return error(ErrorCode::parse_error, std::string(what) + ": expected integer for verdict_counts." + name +
                                               ", found " + std::string(json_type_name(value)));
    }
    row.verdict_counts[name] = value.get<int>();
  }
  return row;
}

}  // namespace

std::string metric_key(double value) {
  char buf[32];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  if (ec != std::errc()) return "nan";
  return std::string(buf, ptr);
}

Result<double> pass_at_k(int n, int c, int k) {
  if (n < 0 || c < 0 || c > n || k < 1 || k > n) {
    return error(ErrorCode::invalid_argument, "pass@k: expected 0 <= c <= n and 1 <= k <= n, found n=" +
                                                  std::to_string(n) + " c=" + std::to_string(c) + " k=" + std::to_string(k));
  }
  // Every k-subset holds a correct sample when fewer than k samples are wrong.
  if (n - c < k) return 1.0;
  // C(n-c,k)/C(n,k) = prod_{i=n-c+1}^{n} (1 - k/i): c factors in (0,1], no large intermediates.
  double all_wrong = 1.0;
  for (int i = n - c + 1; i <= n; ++i) all_wrong *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  return 1.0 - all_wrong;
}

Result<ProfileMetrics> compute_metrics(const std::vector<ProblemOutcome>& outcomes, const std::string& profile,
                                       const MetricsOptions& options) {
  for (int k : options.ks) {
    if (k < 1) return error(ErrorCode::invalid_argument, "metrics: expected every k >= 1, found " + std::to_string(k));
  }
  for (double p : options.ps) {
    if (!std::isfinite(p)) return error(ErrorCode::invalid_argument, "metrics: expected finite p values for fast_p");
  }
  ProfileMetrics m;
  m.profile = profile;
  bool any_speedup = false;
  double log_sum = 0.0;
  for (const ProblemOutcome& problem : outcomes) {
    auto it = problem.samples.find(profile);
    if (it == problem.samples.end() || it->second.empty()) {
      return error(ErrorCode::invalid_argument, "metrics: problem " + problem.id + " has no samples for profile " +
                                                    profile + " (expected a complete run, found n = 0)");
    }
    const std::vector<SampleOutcome>& samples = it->second;
    ProblemRow row;
    row.id = problem.id;
    row.level = problem.level;
    row.n = static_cast<int>(samples.size());
    for (const SampleOutcome& s : samples) {
      KLLM_RETURN_IF_ERROR(check_speedup(s, problem.id));
      row.verdict_counts[s.verdict] += 1;
      if (s.speedup) any_speedup = true;
      if (!s.correct) continue;
      row.c += 1;
      if (s.multishape) {
        m.multishape_checked += 1;
        if (*s.multishape == "fail") m.multishape_failed += 1;
      }
      if (!s.speedup) continue;
      m.timed_samples += 1;
      log_sum += std::log(*s.speedup);
      if (!row.best_speedup || *s.speedup > *row.best_speedup) row.best_speedup = *s.speedup;
    }
    for (int k : options.ks) {
      if (k > row.n) {
        row.pass_at_k[k] = std::nullopt;
      } else {
        KLLM_ASSIGN_OR_RETURN(double v, pass_at_k(row.n, row.c, k));
        row.pass_at_k[k] = v;
      }
    }
    m.problems += 1;
    m.samples += row.n;
    m.correct += row.c;
    m.rows.push_back(std::move(row));
  }

  for (int k : options.ks) {
    std::optional<double> mean;
    if (!m.rows.empty()) {
      double sum = 0.0;
      bool complete = true;
      for (const ProblemRow& row : m.rows) {
        const std::optional<double>& v = row.pass_at_k.at(k);
        if (!v) {
          complete = false;
          break;
        }
        sum += *v;
      }
      if (complete) mean = sum / static_cast<double>(m.rows.size());
    }
    m.pass_at_k[k] = mean;
  }

  const bool timing = options.timing_meaningful.value_or(any_speedup);
  for (double p : options.ps) {
    std::optional<double> per_sample;
    std::optional<double> best;
    if (timing && !m.rows.empty()) {
      double sum_fraction = 0.0;
      double sum_best = 0.0;
      size_t r = 0;
      for (const ProblemOutcome& problem : outcomes) {
        const std::vector<SampleOutcome>& samples = problem.samples.at(profile);
        int fast = 0;
        for (const SampleOutcome& s : samples) {
          if (s.correct && s.speedup && *s.speedup > p) fast += 1;
        }
        sum_fraction += static_cast<double>(fast) / static_cast<double>(samples.size());
        const std::optional<double>& top = m.rows[r++].best_speedup;
        if (top && *top > p) sum_best += 1.0;
      }
      per_sample = sum_fraction / static_cast<double>(m.rows.size());
      best = sum_best / static_cast<double>(m.rows.size());
    }
    m.fast_p[p] = per_sample;
    m.fast_p_best[p] = best;
  }
  if (m.timed_samples > 0) m.geomean_speedup = std::exp(log_sum / static_cast<double>(m.timed_samples));
  return m;
}

Json ProfileMetrics::to_json() const {
  Json rows_json = Json::array();
  for (const ProblemRow& row : rows) {
    Json counts = Json::object();
    for (const auto& [verdict, count] : row.verdict_counts) counts[verdict] = count;
    rows_json.push_back({{"id", row.id},
                         {"level", row.level},
                         {"n", row.n},
                         {"c", row.c},
                         {"pass_at_k", keyed_map(row.pass_at_k)},
                         {"best_speedup", optional_number(row.best_speedup)},
                         {"verdict_counts", counts}});
  }
  Json j{{"profile", profile},
          {"problems", problems},
          {"samples", samples},
          {"correct", correct},
          {"pass_at_k", keyed_map(pass_at_k)},
          {"fast_p", keyed_map(fast_p)},
          {"fast_p_best", keyed_map(fast_p_best)},
          {"geomean_speedup", optional_number(geomean_speedup)},
          {"timed_samples", timed_samples},
          {"rows", rows_json}};
  if (multishape_checked > 0) j["multishape"] = {{"checked", multishape_checked}, {"failed", multishape_failed}};
  return j;
}

Result<ProfileMetrics> ProfileMetrics::from_json(const Json& j, std::string_view what) {
  if (!j.is_object()) {
    return error(ErrorCode::parse_error, std::string(what) + ": expected object, found " + std::string(json_type_name(j)));
  }
  ProfileMetrics m;
  KLLM_ASSIGN_OR_RETURN(m.profile, json_string(j, "profile", what));
  KLLM_ASSIGN_OR_RETURN(int64_t problems, json_int(j, "problems", what));
  KLLM_ASSIGN_OR_RETURN(int64_t samples, json_int(j, "samples", what));
  KLLM_ASSIGN_OR_RETURN(int64_t correct, json_int(j, "correct", what));
  KLLM_ASSIGN_OR_RETURN(int64_t timed, json_int(j, "timed_samples", what));
  m.problems = static_cast<int>(problems);
  m.samples = static_cast<int>(samples);
  m.correct = static_cast<int>(correct);
  m.timed_samples = static_cast<int>(timed);
  KLLM_ASSIGN_OR_RETURN(m.pass_at_k, read_keyed_map<int>(j, "pass_at_k", what));
  KLLM_ASSIGN_OR_RETURN(m.fast_p, read_keyed_map<double>(j, "fast_p", what));
  KLLM_ASSIGN_OR_RETURN(m.fast_p_best, read_keyed_map<double>(j, "fast_p_best", what));
  KLLM_ASSIGN_OR_RETURN(m.geomean_speedup, json_opt_number(j, "geomean_speedup", what));
  if (auto shapes = j.find("multishape"); shapes != j.end()) {
    KLLM_ASSIGN_OR_RETURN(int64_t checked, json_int(*shapes, "checked", std::string(what) + ".multishape"));
    KLLM_ASSIGN_OR_RETURN(int64_t failed, json_int(*shapes, "failed", std::string(what) + ".multishape"));
    m.multishape_checked = static_cast<int>(checked);
    m.multishape_failed = static_cast<int>(failed);
  }
  auto rows = j.find("rows");
  if (rows == j.end() || !rows->is_array()) return error(ErrorCode::parse_error, std::string(what) + ": expected array rows");
  for (size_t i = 0; i < rows->size(); ++i) {
    KLLM_ASSIGN_OR_RETURN(ProblemRow row, row_from_json((*rows)[i], std::string(what) + ".rows[" + std::to_string(i) + "]"));
    m.rows.push_back(std::move(row));
  }
  return m;
}

}  // namespace kernelllm::eval
