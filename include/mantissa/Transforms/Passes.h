//===- Passes.h - Transformations of train IR -------------------*- C++ -*-===//
//
// Declares and registers the passes of Passes.td, and the precision pass's
// entry points for tools that drive it directly (mantissa-compile builds its
// report from the plan they return).
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_TRANSFORMS_PASSES_H
#define MANTISSA_TRANSFORMS_PASSES_H

#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Transforms/PrecisionSpec.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::mantissa {

#define GEN_PASS_DECL
#include "mantissa/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mantissa/Transforms/Passes.h.inc"

/// The argument attribute (an f64 FloatAttr) holding the RMS of a
/// parameter's initial values, the typical magnitude the stall lint uses.
inline constexpr llvm::StringLiteral kInitRmsAttrName = "train.init_rms";

/// Builds the spec that `options` describe, reporting every problem as an
/// error at `location`.
/// The step attribute `mantissa-autocast` leaves: the compute dtype.
inline constexpr llvm::StringLiteral kComputeAttrName = "train.compute";

/// Rewrites `step` to compute as torch.autocast with `compute` would (see
/// Autocast.cpp); fp32 leaves it as exported.
LogicalResult applyAutocast(train::StepOp step, train::DType compute);

/// The matrix products of `step` as they are now typed, in program order.
std::vector<precision::MatrixProduct> collectMatrixProducts(train::StepOp step);

FailureOr<precision::Spec>
loadPrecisionSpec(const precision::SpecOptions &options, Location location);

/// Resolves `spec` for `step`, validates it (errors and warnings go to the
/// step's diagnostics, on the arguments they concern) and, if nothing is
/// wrong, applies it: plans, master-dtype arguments, casts, gradient reduce
/// casts and shard groups. The IR is untouched on failure. Returns the plan,
/// which reports are printed from.
FailureOr<precision::StepPlan> applyPrecisionPlan(train::StepOp step,
                                                  const precision::Spec &spec,
                                                  double learningRate,
                                                  bool warningsAsErrors);

} // namespace mlir::mantissa

#endif // MANTISSA_TRANSFORMS_PASSES_H
