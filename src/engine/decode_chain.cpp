// Decode steps launched one ahead: the host's side; see decode_chain.h.
#include "engine/decode_chain.h"

namespace kernelllm {

namespace {

// Where chain_serves(batch, draws): the draw of each row (draws[i].row = r gives by_row[r] = i);
// else nothing.
std::optional<std::vector<size_t>> draws_by_row(std::span<const ForwardRequest> batch,
                                                std::span<const RowDraw> draws) {
  const size_t rows = batch.size();
  if (rows == 0 || draws.size() != rows) return std::nullopt;
  for (const ForwardRequest& r : batch) {
    if (r.tokens.size() != 1 || r.all_logits) return std::nullopt;
  }
  std::vector<size_t> by_row(rows, rows);
  for (size_t i = 0; i < draws.size(); ++i) {
    const int64_t r = draws[i].row;
    if (r < 0 || static_cast<size_t>(r) >= rows || by_row[static_cast<size_t>(r)] != rows) return std::nullopt;
    by_row[static_cast<size_t>(r)] = i;
  }
  return by_row;
}

bool same_draw(const RowDraw& a, const RowDraw& b) {
  return a.params.temperature == b.params.temperature && a.params.top_p == b.params.top_p &&
         a.params.top_k == b.params.top_k && a.params.seed == b.params.seed && a.index == b.index &&
         a.step == b.step;
}

}  // namespace

bool chain_serves(std::span<const ForwardRequest> batch, std::span<const RowDraw> draws) {
  return draws_by_row(batch, draws).has_value();
}

std::vector<ChainRow> chain_rows(std::span<const ForwardRequest> batch, std::span<const RowDraw> draws) {
  std::vector<ChainRow> rows;
  const auto by_row = draws_by_row(batch, draws);
  if (!by_row) return rows;
  for (size_t i = 0; i < batch.size(); ++i) {
    RowDraw d = draws[(*by_row)[i]];
    d.row = static_cast<int64_t>(i);
    rows.push_back(ChainRow{batch[i].seq, d});
  }
  return rows;
}

std::vector<ChainRow> chain_next(std::span<const ForwardRequest> batch, std::span<const RowDraw> draws) {
  std::vector<ChainRow> next = chain_rows(batch, draws);
  for (ChainRow& r : next) ++r.draw.step;
  return next;
}

std::optional<std::vector<int64_t>> chain_match(std::span<const ChainRow> ahead, std::span<const int32_t> fed,
                                                std::span<const ForwardRequest> batch,
                                                std::span<const RowDraw> draws) {
  const auto by_row = draws_by_row(batch, draws);
  if (fed.size() != ahead.size() || !by_row) return std::nullopt;
  std::vector<bool> taken(ahead.size(), false);
  std::vector<int64_t> rows(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    size_t r = 0;
    while (r < ahead.size() && (ahead[r].seq < 0 || ahead[r].seq != batch[i].seq)) ++r;
    if (r == ahead.size() || taken[r] || batch[i].tokens[0] != fed[r]) return std::nullopt;
    if (!same_draw(draws[(*by_row)[i]], ahead[r].draw)) return std::nullopt;
    taken[r] = true;
    rows[i] = static_cast<int64_t>(r);
  }
  return rows;
}

}  // namespace kernelllm
