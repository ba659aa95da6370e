//===- Pt2ArchiveLayout.h - Entry names of a .pt2 archive -------*- C++ -*-===//
//
// Where torch/export/pt2_archive/_package.py puts the exported program and
// its tensors, relative to the archive's root folder. Private to lib/Import.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_LIB_IMPORT_PT2ARCHIVELAYOUT_H
#define MANTISSA_LIB_IMPORT_PT2ARCHIVELAYOUT_H

#include "llvm/ADT/StringRef.h"

namespace mlir::mantissa::pt2::detail {

constexpr llvm::StringRef kModelJsonEntry = "models/model.json";
constexpr llvm::StringRef kWeightsDir = "data/weights/";
constexpr llvm::StringRef kWeightsConfigEntry =
    "data/weights/model_weights_config.json";
constexpr llvm::StringRef kConstantsDir = "data/constants/";
constexpr llvm::StringRef kConstantsConfigEntry =
    "data/constants/model_constants_config.json";
/// What mantissa.export records beside the program (torch.export.save's
/// extra_files; docs/export.md): among it the names of the user outputs.
constexpr llvm::StringRef kMantissaExtraEntry = "extra/mantissa.json";

} // namespace mlir::mantissa::pt2::detail

#endif // MANTISSA_LIB_IMPORT_PT2ARCHIVELAYOUT_H
