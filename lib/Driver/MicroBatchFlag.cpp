//===- MicroBatchFlag.cpp - --micro-batch, defined once -------------------===//

#include "mantissa/Driver/MicroBatchFlag.h"

using namespace mlir::mantissa;
namespace cl = llvm::cl;

MicroBatchFlag::MicroBatchFlag(cl::OptionCategory &category)
    : microBatch("micro-batch",
                 cl::desc("The micro-batch the step is compiled for: binds "
                          "the batch dimension of a program exported with a "
                          "dynamic batch (default: the exported batch)"),
                 cl::value_desc("B"), cl::cat(category)) {}

llvm::Expected<mlir::mantissa::pt2::ReadOptions>
MicroBatchFlag::getReadOptions() const {
  pt2::ReadOptions options;
  if (microBatch.getNumOccurrences() == 0)
    return options;
  if (microBatch < 1)
    return llvm::createStringError("--micro-batch: expected B >= 1, not " +
                                   std::to_string(microBatch));
  options.microBatch = int64_t(microBatch);
  return options;
}
