//===- TrainLoop.h - Training a step through the runtime --------*- C++ -*-===//
//
// Trains an imported (and possibly precision-planned) step on one batch:
// forward and backward by a StepEvaluator (compiled CPU code, or the
// reference interpreter), the optimizer by the runtime's update path
// (sharded across the communicator's ranks, with checkpoints and resume).
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DRIVER_TRAINLOOP_H
#define MANTISSA_DRIVER_TRAINLOOP_H

#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Driver/GpuStepWriter.h"
#include "mantissa/Driver/StepEvaluator.h"
#include "mantissa/Format/StepTensor.h"
#include "mantissa/Import/Pt2Archive.h"
#include "mantissa/Reference/Tensor.h"
#include "mantissa/Runtime/BatchSource.h"
#include "mantissa/Runtime/Communicator.h"
#include "mantissa/Runtime/UpdateRunner.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"
#include <memory>
#include <string>
#include <vector>

namespace mlir::mantissa {

/// The forward-only step evaluation runs (the `mantissa-forward-only` pass
/// on a copy of the planned step), and its evaluator; both null to evaluate
/// with the joint step.
struct ForwardStep {
  train::StepOp step;
  StepEvaluator *evaluator = nullptr;
};

/// The step's arguments as the runtime describes them (name, role, dtype,
/// shape, bytes, the bounds of integer ids): what its data is checked
/// against (rt::openBatchSource) before the step is compiled.
std::vector<rt::StepTensor> describeStepArguments(train::StepOp step);

/// Checks the run's data (opened as `batches`, null for a fixed batch)
/// against the schedule: the data positions of `worldSize` ranks. Cheap, so
/// that every such mistake is reported before the step is compiled.
llvm::Error checkTrainingData(const rt::BatchSource *batches,
                              const rt::TrainerOptions &options, int worldSize);

/// Trains `step` up to step `options.schedule.steps` starting from `arguments`
/// (one reference tensor per step argument, parameters in their master dtype),
/// with `evaluator` computing forward and backward (on every rank for the
/// run's data, `batches`, opened by rt::openBatchSource from
/// `options.data`; on rank 0 for the fixed batch in `arguments` when
/// `batches` is null)
/// and the runtime's trainer doing the rest: exact gradient combination,
/// schedule, clipping, the sharded update, checkpoints, metrics and
/// progress. On the GPU, `gpuHostKernels` (when not empty) is where the
/// run's kernels are also compiled for the host (--gpu-host-kernels, test
/// support). Returns the runtime's exit status (it reports its own errors),
/// or an error from setting up.
llvm::Expected<int>
trainStep(ModuleOp module, train::StepOp step, const pt2::Program &program,
          SmallVector<reference::Tensor> arguments,
          const rt::TrainerOptions &options,
          std::unique_ptr<rt::BatchSource> batches, StepEvaluator &evaluator,
          const ForwardStep &forward, rt::Communicator &communicator,
          const GpuHostKernels &gpuHostKernels = {});

} // namespace mlir::mantissa

#endif // MANTISSA_DRIVER_TRAINLOOP_H
