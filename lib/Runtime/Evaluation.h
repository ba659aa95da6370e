//===- Evaluation.h - The validation loss during training -------*- C++ -*-===//
//
// Part of the Mantissa project. Internal to libmantissa_rt.
//
//===----------------------------------------------------------------------===//
//
// `--val-data PATH --eval-every N --eval-batches M`: every N steps the mean
// loss over M validation micro-batches at the current parameters, split over
// the ranks by the micro-batch schedule (MicroBatchSchedule.h) as a step's
// micro-batches are, and gathered so that every rank has the same value.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_EVALUATION_H
#define MANTISSA_RUNTIME_EVALUATION_H

#include "ShardedState.h"
#include "mantissa/Runtime/GradientSource.h"
#include "mantissa/Runtime/MicroBatchSchedule.h"

#include <vector>

namespace mlir::mantissa::rt::detail {

/// The validation loss: the mean over `batches` micro-batches of `source`'s
/// validation data, evaluated at `members` (gathered beforehand; `ready` is
/// false when this rank could not gather them, its error already kept).
/// Every rank calls it; all fail together.
bool evaluateValidationLoss(GradientSource &source,
                            const std::vector<GradientSource::Member> &members,
                            bool ready, const MicroBatchSchedule &schedule,
                            int64_t batches, Communicator &comm,
                            RunError &errors, double &loss);

} // namespace mlir::mantissa::rt::detail

#endif // MANTISSA_RUNTIME_EVALUATION_H
