//===- Philox.h - The Philox4x32-10 counter-based generator -----*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// Philox4x32 with 10 rounds (Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3", SC 2011), the generator cuRAND and torch's CUDA
// generator use: four 32-bit output words are a pure function of a 128-bit
// counter and a 64-bit key, so any element of a draw is computed on its own,
// on any backend, in any order. Every random number of a step is derived
// from it (RandomDraw.h, docs/randomness.md); the Python reference
// (python/mantissa/random_reference.py) is the same function.
//
// Part of mantissa_format: no LLVM, MLIR or runtime headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_FORMAT_PHILOX_H
#define MANTISSA_FORMAT_PHILOX_H

#include <array>
#include <cstdint>

namespace mlir::mantissa::rt {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

/// Philox4x32-10 of `counter` under `key`: ten rounds of two 32x32->64-bit
/// multiplications, the key bumped by the Weyl constants between rounds.
inline PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t product0 = uint64_t(kMultiplier0) * counter[0];
    uint64_t product1 = uint64_t(kMultiplier1) * counter[2];
    uint32_t hi0 = uint32_t(product0 >> 32), lo0 = uint32_t(product0);
    uint32_t hi1 = uint32_t(product1 >> 32), lo1 = uint32_t(product1);
    counter = {hi1 ^ counter[1] ^ key[0], lo1, hi0 ^ counter[3] ^ key[1], lo0};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return counter;
}

} // namespace mlir::mantissa::rt

#endif // MANTISSA_FORMAT_PHILOX_H
