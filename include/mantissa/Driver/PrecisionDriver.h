//===- PrecisionDriver.h - Applying a precision spec from a tool -*- C++
//-*-===//
//
// What mantissa-compile and mantissa-run share when a command line asks for
// a precision spec: initial magnitudes for the stall lint, the spec, the
// pass, and diagnostics printed as one tool's errors and warnings.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DRIVER_PRECISIONDRIVER_H
#define MANTISSA_DRIVER_PRECISIONDRIVER_H

#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Import/Pt2Archive.h"
#include "mantissa/Transforms/PrecisionSpec.h"

namespace mlir::mantissa {

/// Applies `specOptions` to `step` (imported from `program`): attaches each
/// parameter's initial RMS, loads and resolves the spec and runs the
/// precision plan. Errors, warnings and notes go to stderr prefixed by
/// `toolName`, with the rule's file:line and the tensor's FQN in their text.
FailureOr<precision::StepPlan>
applyPrecisionFromCommandLine(train::StepOp step, const pt2::Program &program,
                              const precision::SpecOptions &specOptions,
                              double learningRate, bool warningsAsErrors,
                              llvm::StringRef toolName);

} // namespace mlir::mantissa

#endif // MANTISSA_DRIVER_PRECISIONDRIVER_H
