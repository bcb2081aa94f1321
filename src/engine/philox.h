// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11;
// Random123's constants), for the host sampler (sampler.cpp) and the device one
// (sample_block.h): key = seed, counter = {sample index, step}.
#pragma once

#include "engine/host_device.h"

namespace kernelllm {

KLLM_HD void philox4x32_10(uint64_t seed, uint64_t sample_index, uint64_t step, uint32_t out[4]) {
  constexpr uint32_t kMul0 = 0xD2511F53u;
  constexpr uint32_t kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u;
  constexpr uint32_t kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(sample_index), c1 = static_cast<uint32_t>(sample_index >> 32);
  uint32_t c2 = static_cast<uint32_t>(step), c3 = static_cast<uint32_t>(step >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed);
  uint32_t k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{kMul0} * c0;
    const uint64_t p1 = uint64_t{kMul1} * c2;
    const auto hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const auto hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

// The 24 high bits of the block's first word: the draw is u = that / 2^24 in [0, 1).
KLLM_HD uint32_t philox_u24(uint64_t seed, uint64_t sample_index, uint64_t step) {
  uint32_t w[4];
  philox4x32_10(seed, sample_index, step, w);
  return w[0] >> 8;
}

}  // namespace kernelllm
