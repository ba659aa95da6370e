//===- ArenaPlacement.h - First-fit offsets of temporaries -----*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// Where each temporary of a bufferized step goes in one arena, given when it
// is alive: the one placement the GPU step's arena (mantissa-pack-arena) and
// the CPU step's (mantissa-pack-cpu-arena) share.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_TRAINTOGPU_BUFFERS_ARENAPLACEMENT_H
#define MANTISSA_CONVERSION_TRAINTOGPU_BUFFERS_ARENAPLACEMENT_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>

namespace mlir::mantissa {

/// A temporary's bytes (a multiple of the arena's alignment) and the
/// positions of the first and last op that touch it.
struct ArenaInterval {
  int64_t bytes, begin, end;
};

/// First fit, in the order the intervals begin (ties in index order): each
/// takes the lowest offset that no interval alive at the same time
/// occupies. `offsets` gets one offset per interval; returns the arena's
/// bytes.
int64_t placeInArena(llvm::ArrayRef<ArenaInterval> intervals,
                     llvm::SmallVectorImpl<int64_t> &offsets);

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_TRAINTOGPU_BUFFERS_ARENAPLACEMENT_H
