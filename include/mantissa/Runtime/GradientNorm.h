//===- GradientNorm.h - A gradient tile's mean and sum of squares -*- C++
//-*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// After the combination each rank holds the sum of the step's M micro-batch
// gradients for its tiles. The mean divides it by M in place, rounded to the
// gradient's dtype (torch's p.grad.div_(M)), and the global norm adds the
// squares of the result tile by tile (ShardedState::meanAndNorm). Both run in
// one pass over the tile, here.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_GRADIENTNORM_H
#define MANTISSA_RUNTIME_GRADIENTNORM_H

#include "mantissa/Format/DType.h"

#include <cstdint>

namespace mlir::mantissa::rt {

/// The lanes of a tile's sum of squares: element i is added to lane
/// i % kSquareLanes, and the lanes are added pairwise at the end
/// (addSquareLanes). A fixed scheme inside a tile keeps the norm independent
/// of the world size and the micro-batch split, as tiles are; several lanes
/// let the loop run at the adder's throughput, not its latency.
constexpr int kSquareLanes = 8;

/// ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)).
inline double addSquareLanes(const double (&lanes)[kSquareLanes]) {
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

/// Divides the `count` elements of `dtype` at `data` by `divisor` in place
/// (when it is not 1), each quotient rounded to `dtype` as torch's
/// p.grad.div_(divisor) rounds it, and returns the sum of the squares of the
/// (divided) elements in double, in the lane order above.
double divideAndSumSquares(uint8_t *data, int64_t count, DType dtype,
                           int64_t divisor);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_GRADIENTNORM_H
