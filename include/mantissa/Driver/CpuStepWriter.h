//===- CpuStepWriter.h - Writing a step's CPU program -----------*- C++ -*-===//
//
// step.cpu.json, step.cpu.so and step.cpu.forward.so (mantissa/Runtime/
// CpuStep.h) for a planned train.step, written into an artifact directory,
// so that the runtime alone trains on CPUs.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DRIVER_CPUSTEPWRITER_H
#define MANTISSA_DRIVER_CPUSTEPWRITER_H

#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Format/IndexBound.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace mlir::mantissa {

/// The bound the integer ids fed to step argument `index` must respect: the
/// smallest table any of its uses indexes (the rows of an embedding, the
/// size of a gathered dimension, e.g. the classes of a cross-entropy),
/// followed through the views and reshapes in between. Bound 0 when no use
/// indexes anything.
rt::IndexBound getIndexBound(train::StepOp step, unsigned index);

/// A module holding `step` reduced to its forward pass
/// (mantissa-forward-only), or an error.
llvm::Expected<OwningOpRef<ModuleOp>> deriveForwardStep(train::StepOp step);

/// Compiles `step` as the CPU runs it (deriveCpuStep; and, with
/// `withForward`, its forward pass) for this CPU, or takes them from the
/// compile cache, and writes the program into `directory` (which exists).
/// Returns the file names written.
llvm::Expected<std::vector<std::string>>
writeCpuStep(train::StepOp step, llvm::StringRef directory, bool withForward);

} // namespace mlir::mantissa

#endif // MANTISSA_DRIVER_CPUSTEPWRITER_H
