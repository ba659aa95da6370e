//===- TrainLoop.h - Training a step with the reference semantics -*- C++
//-*-===//
//
// Trains an imported (and possibly precision-planned) step on one batch:
// forward and backward by a StepEvaluator (compiled CPU code, or the
// reference interpreter), the optimizer by the compiled fused AdamW kernels
// of the step's shard groups.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DRIVER_TRAINLOOP_H
#define MANTISSA_DRIVER_TRAINLOOP_H

#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Driver/StepEvaluator.h"
#include "mantissa/Import/Pt2Archive.h"
#include "mantissa/Reference/Tensor.h"
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
};

/// Trains `step` for `options.steps` steps starting from `arguments` (one
/// reference tensor per step argument, parameters in their master dtype),
/// with `evaluator` computing forward and backward. Reports progress.
llvm::Error trainStep(ModuleOp module, train::StepOp step,
                      const pt2::Program &program,
                      SmallVector<reference::Tensor> arguments,
                      const TrainOptions &options, StepEvaluator &evaluator);

} // namespace mlir::mantissa

#endif // MANTISSA_DRIVER_TRAINLOOP_H
