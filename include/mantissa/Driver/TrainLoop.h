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
#include "mantissa/Driver/StepEvaluator.h"
#include "mantissa/Import/Pt2Archive.h"
#include "mantissa/Reference/Tensor.h"
#include "mantissa/Runtime/Communicator.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"
#include <string>

namespace mlir::mantissa {

struct TrainOptions {
  int64_t steps = 1;
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.01;
  /// `{"losses": [...]}` of every step, if set.
  std::string lossesPath;
  /// The final parameters by FQN as fp32 (the master where there is one).
  std::string finalParamsPath;
  /// Checkpoints every `saveEvery` steps (and at the last) into this
  /// directory, and the checkpoint to resume from (`steps` is the step to
  /// reach), as for the runtime's update path.
  std::string saveCheckpointDir, resumeDir;
  int64_t saveEvery = 0;
  /// "cpu", or "cuda" (also "gpu"): the step compiled for the GPU
  /// (docs/gpu-step.md) and the update on the device, at world size 1.
  std::string device = "cpu";
  /// Print the per-rank peak memory report.
  bool memoryReport = true;
};

/// Trains `step` up to step `options.steps` starting from `arguments` (one
/// reference tensor per step argument, parameters in their master dtype),
/// with `evaluator` computing forward and backward on rank 0 of
/// `communicator` and the runtime updating the sharded state. Reports
/// progress. Returns the runtime's exit status (it reports its own errors),
/// or an error from setting up.
llvm::Expected<int>
trainStep(ModuleOp module, train::StepOp step, const pt2::Program &program,
          SmallVector<reference::Tensor> arguments, const TrainOptions &options,
          StepEvaluator &evaluator, rt::Communicator &communicator);

} // namespace mlir::mantissa

#endif // MANTISSA_DRIVER_TRAINLOOP_H
