// Decode steps launched one ahead (CudaBackend's chain, see ARCHITECTURE.md): while the GPU runs
// the step a caller asked for, the backend already queues the step after it, fed on the device
// with the tokens that step draws, so the GPU does not wait for the host between steps. What is
// here is the host's side of it, with no CUDA: which steps can be followed, what the next one is
// when every sample goes on, and whether the caller's next request is that step (with some rows
// left out, for samples that stopped).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kernelllm/engine/backend.h"

namespace kernelllm {

// A row of a step launched ahead: the sequence it extends by one token, and the draw it makes
// (draw.row: its row in that step).
struct ChainRow {
  SeqId seq = -1;
  RowDraw draw;
};

// Whether forward_sample(batch, draws) is a step the chain can follow: a non-empty batch, every
// request one token without all_logits, exactly one draw per row.
bool chain_serves(std::span<const ForwardRequest> batch, std::span<const RowDraw> draws);

// Such a step's own rows: row i extends request i's sequence and makes the draw of row i.
std::vector<ChainRow> chain_rows(std::span<const ForwardRequest> batch, std::span<const RowDraw> draws);
// The step after it when every sample goes on: row i extends request i's sequence by the token
// its draw gives, and draws again one step later (the same params and index).
std::vector<ChainRow> chain_next(std::span<const ForwardRequest> batch, std::span<const RowDraw> draws);

// Whether (batch, draws) is the step `ahead` with some of its rows left out, `fed[r]` being the
// token row r of `ahead` was fed: for each request, the row of `ahead` that computed it; nullopt
// when any request, token or draw differs. A row whose sequence was released (seq < 0) matches
// nothing.
std::optional<std::vector<int64_t>> chain_match(std::span<const ChainRow> ahead, std::span<const int32_t> fed,
                                                std::span<const ForwardRequest> batch,
                                                std::span<const RowDraw> draws);

}  // namespace kernelllm
