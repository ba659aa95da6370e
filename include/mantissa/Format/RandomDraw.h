//===- RandomDraw.h - The random tensors a step draws -----------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// A random operator of the exported step (randn_like, rand, randint,
// bernoulli, native_dropout's mask, ...) becomes a step argument of role
// `random` (StepTensor.h) whose values the runtime computes before each
// micro-batch, from one definition here, for the CPU step, the GPU step and
// the reference interpreter alike (docs/randomness.md). Element e of a draw
// is a pure function of
//
//   (the run's --seed, the node's stream, the sample's global index, e)
//
// for a per-sample draw (its leading dimension is the micro-batch's sample
// dimension; e counts within the sample), or of (seed, stream, step, e) for
// a draw without a sample dimension. So any split of the global batch into
// W ranks x K micro-batches, a resume at any world size, and every backend
// give the same bits.
//
// The counter of element e is Philox4x32-10 (Philox.h) of
//   counter = (e, stream, index low 32 bits, index high 32 bits),
//   key     = (seed low 32 bits, seed high 32 bits),
// index = the global sample index, or 2^63 + step for a per-step draw, and
// stream = FNV-1a (32-bit) of the torch node's name.
//
// Part of mantissa_format: no LLVM, MLIR or runtime headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_FORMAT_RANDOMDRAW_H
#define MANTISSA_FORMAT_RANDOMDRAW_H

#include "mantissa/Format/DType.h"
#include "mantissa/Format/Philox.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlir::mantissa::rt {

/// What one random step argument holds.
struct RandomDraw {
  enum class Distribution {
    /// Uniform on [low, high) (rand, rand_like, uniform).
    Uniform,
    /// Normal with mean `low`, standard deviation `high` (randn, normal).
    Normal,
    /// Integers uniform on [low, high) (randint); low and high are integers.
    Integer,
    /// 1 with probability `low`, else 0 (bernoulli.p, dropout's keep mask).
    Bernoulli
  };
  Distribution distribution = Distribution::Uniform;
  double low = 0, high = 1;
  /// The torch node the draw comes from: its stream is derived from the name.
  std::string node;
  /// The leading dimension is the sample dimension: each sample's elements
  /// are keyed by its global sample index. Otherwise the whole tensor is keyed
  /// by the step (every micro-batch of a step sees the same values).
  bool perSample = false;
};

/// The distribution's name in step programs and IR ("uniform", "normal",
/// "integer", "bernoulli"), and back.
const char *randomDistributionName(RandomDraw::Distribution distribution);
std::optional<RandomDraw::Distribution>
parseRandomDistribution(std::string_view name);

/// The stream of a draw: FNV-1a (32-bit) of its node's name.
uint32_t randomStream(std::string_view node);

/// When the run's values come from: the seed, the global index of the
/// micro-batch's first sample, and the 1-based step.
struct RandomPosition {
  uint64_t seed = 0;
  int64_t firstSample = 0;
  int64_t step = 1;
};

/// Element `element` of the draw for Philox counter index `index` (a global
/// sample index, or 2^63 + step), before rounding to the dtype: the exact
/// double docs/randomness.md defines for `dtype`.
double randomValue(const RandomDraw &draw, DType dtype, uint32_t stream,
                   uint64_t seed, uint64_t index, uint64_t element);

/// Fills `out` (dense row-major, `shape`, `dtype`) with the draw at
/// `position`. A per-sample draw's leading dimension counts samples from
/// position.firstSample.
void fillRandomDraw(const RandomDraw &draw, DType dtype,
                    const std::vector<int64_t> &shape,
                    const RandomPosition &position, uint8_t *out);

/// Why `draw` of `dtype` and `shape` cannot be generated ("" if it can): an
/// unsupported dtype, bounds out of order, a sample of 2^32 or more elements.
std::string checkRandomDraw(const RandomDraw &draw, DType dtype,
                            const std::vector<int64_t> &shape);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_FORMAT_RANDOMDRAW_H
