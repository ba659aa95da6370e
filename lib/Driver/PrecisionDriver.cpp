//===- PrecisionDriver.cpp - Applying a precision spec from a tool --------===//

#include "mantissa/Driver/PrecisionDriver.h"
#include "mantissa/Driver/WeightsFile.h"
#include "mantissa/Transforms/Passes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::mantissa;

FailureOr<precision::StepPlan> mlir::mantissa::applyPrecisionFromCommandLine(
    train::StepOp step, const pt2::Program &program,
    const precision::SpecOptions &specOptions, double learningRate,
    bool warningsAsErrors, llvm::StringRef toolName) {
  attachInitialRms(step, program);

  // Diagnostics carry the rule's file:line and the tensor's FQN in their
  // text, so they are printed without the IR locations.
  bool failedAny = false;
  ScopedDiagnosticHandler handler(
      step.getContext(), [&](Diagnostic &diagnostic) {
        bool isError = diagnostic.getSeverity() == DiagnosticSeverity::Error;
        failedAny |= isError;
        (isError ? llvm::WithColor::error(llvm::errs(), toolName)
                 : llvm::WithColor::warning(llvm::errs(), toolName))
            << diagnostic.str() << "\n";
        for (Diagnostic &note : diagnostic.getNotes())
          llvm::WithColor::note(llvm::errs(), toolName) << note.str() << "\n";
        return success();
      });

  FailureOr<precision::Spec> spec =
      loadPrecisionSpec(specOptions, step.getLoc());
  if (failed(spec))
    return failure();
  FailureOr<precision::StepPlan> plan =
      applyPrecisionPlan(step, *spec, learningRate, warningsAsErrors);
  if (failed(plan) || failedAny)
    return failure();
  return plan;
}
