//===- IndexBound.h - The bound an integer input's ids respect --*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// An integer step input that indexes a table (token ids into an embedding,
// targets into a loss's classes) carries the bound its ids must respect.
// The compiler derives it from the step and records it with the argument
// (`index_bound` in step.gpu.json and step.cpu.json); the runtime checks
// every batch against it (TokenData.h's checkIndexIds), so a compiled step
// never reads out of bounds.
//
// Part of mantissa_format: no LLVM, MLIR or runtime headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_FORMAT_INDEXBOUND_H
#define MANTISSA_FORMAT_INDEXBOUND_H

#include <cstdint>
#include <optional>
#include <string>

namespace mlir::mantissa::rt {

/// What the ids of one integer input must respect: ids < `bound`, `what`
/// naming the table (e.g. "the rows of embedding 'tok.weight'").
struct IndexBound {
  int64_t bound = 0;
  std::string what;
  /// An id outside the bound the step masks out before indexing (a loss's
  /// ignore_index, e.g. -100), which a fixed batch may hold.
  std::optional<int64_t> ignored;
};

} // namespace mlir::mantissa::rt

#endif // MANTISSA_FORMAT_INDEXBOUND_H
