//===- MicroBatchFlag.h - --micro-batch, defined once -----------*- C++ -*-===//
//
// --micro-batch B: the batch size mantissa-compile and mantissa-run
// specialise a program exported with a dynamic batch for (docs/export.md).
// The reader binds the batch symbol to B (pt2::ReadOptions::microBatch), so
// the compiled step, and its cache entry, are B's.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DRIVER_MICROBATCHFLAG_H
#define MANTISSA_DRIVER_MICROBATCHFLAG_H

#include "mantissa/Import/Pt2Archive.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"

#include <cstdint>

namespace mlir::mantissa {

/// The flag, registered with llvm::cl while the object lives.
struct MicroBatchFlag {
  explicit MicroBatchFlag(llvm::cl::OptionCategory &category);

  /// The archive's read options with the flag's micro-batch; an error
  /// naming the flag for a B below 1, before anything is read.
  llvm::Expected<pt2::ReadOptions> getReadOptions() const;

  llvm::cl::opt<int64_t> microBatch;
};

} // namespace mlir::mantissa

#endif // MANTISSA_DRIVER_MICROBATCHFLAG_H
