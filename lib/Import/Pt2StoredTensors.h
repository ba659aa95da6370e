//===- Pt2StoredTensors.h - Weights and constants of a .pt2 -----*- C++ -*-===//
//
// Reading the tensors stored under data/weights/ and data/constants/ into
// StoredTensors with contiguous bytes, and checking them against the graph
// signature. Private to lib/Import.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_LIB_IMPORT_PT2STOREDTENSORS_H
#define MANTISSA_LIB_IMPORT_PT2STOREDTENSORS_H

#include "mantissa/Import/Pt2Archive.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <vector>

namespace mlir::mantissa::pt2::detail {

class ZipArchive;

/// Reads the payload config `configEntry` (kWeightsConfigEntry or
/// kConstantsConfigEntry) and materialises each tensor it lists from its blob
/// under `directory`, into `tensors` sorted by FQN. `kindName` ("weight",
/// "constant") names the tensors in errors.
llvm::Error readStoredTensors(ZipArchive &archive, llvm::StringRef displayName,
                              llvm::StringRef kindName,
                              llvm::StringRef directory,
                              llvm::StringRef configEntry,
                              const ReadOptions &options,
                              std::vector<StoredTensor> &tensors);

/// Checks that every parameter, buffer and tensor constant the signature
/// names has stored data of the graph input's type and shape.
llvm::Error checkStoredInputs(const Program &program,
                              llvm::StringRef displayName);

} // namespace mlir::mantissa::pt2::detail

#endif // MANTISSA_LIB_IMPORT_PT2STOREDTENSORS_H
