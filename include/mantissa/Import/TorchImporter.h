//===- TorchImporter.h - torch.export programs to `train` IR ----*- C++ -*-===//
//
// Turns an exported joint forward + backward program (read by Pt2Archive.h)
// into one `train.step` operation.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_IMPORT_TORCHIMPORTER_H
#define MANTISSA_IMPORT_TORCHIMPORTER_H

#include "mantissa/Import/Pt2Archive.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"
#include <string>
#include <vector>

namespace mlir::mantissa {

/// Imports `program` (read from the file `fileName`, which names the step
/// and the locations) as a module holding one `train.step`. Every argument
/// carries its `#train.tensor` metadata and every result its
/// `#train.result` role. Fails with one error that names every problem at
/// once: each unsupported operator with its graph node and module path, a
/// forward-only program, unsupported dtypes or signature entries.
llvm::Expected<OwningOpRef<ModuleOp>>
importTrainingStep(MLIRContext &context, const pt2::Program &program,
                   llvm::StringRef fileName);

/// The ATen operator overloads the importer supports, as the graph names
/// them ("torch.ops.aten.add.Tensor"), sorted: the keys of its one handler
/// table, whose entries each family's file (lib/Import/Import*.cpp) adds.
std::vector<std::string> getSupportedOperators();

/// The MLIR element type of a torch dtype, or null if `train` has none.
Type getElementType(MLIRContext &context, pt2::ScalarType dtype);

/// The owning module path of a parameter or buffer FQN: everything before
/// the last dot (`layers.0.mlp.up_proj.weight` -> `layers.0.mlp.up_proj`),
/// empty for tensors of the root module.
llvm::StringRef getOwningModulePath(llvm::StringRef fqn);

} // namespace mlir::mantissa

#endif // MANTISSA_IMPORT_TORCHIMPORTER_H
