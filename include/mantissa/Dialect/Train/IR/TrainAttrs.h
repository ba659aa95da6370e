//===- TrainAttrs.h - Attributes of the train dialect -----------*- C++ -*-===//
//
// Dtypes, tensor roles, per-tensor metadata and precision plans.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINATTRS_H
#define MANTISSA_DIALECT_TRAIN_IR_TRAINATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectImplementation.h"
#include <optional>

#include "mantissa/Dialect/Train/IR/TrainEnums.h.inc"

namespace mlir::mantissa::train {

/// Parses a dtype name as specs and reports write it: `fp32`, `bf16`, `fp16`,
/// also accepting torch's `float32`, `bfloat16` and `float16`.
std::optional<DType> parseDTypeName(llvm::StringRef name);

/// The MLIR element type that stores `dtype`.
Type getElementType(MLIRContext *context, DType dtype);

/// The dtype whose element type is `type`, if it is one of ours.
std::optional<DType> getDTypeOf(Type type);

/// Bytes per element of `dtype`.
unsigned getByteWidth(DType dtype);

/// Whether every value of element type `narrow` is exactly a value of `wide`,
/// so that a round trip through `wide` loses nothing.
bool holdsExactly(Type wide, Type narrow);

/// Parses and prints a dtype as a bare keyword (`bf16`) in custom assembly.
ParseResult parseDTypeKeyword(AsmParser &parser, DType &dtype);
void printDTypeKeyword(AsmPrinter &printer, DType dtype);

} // namespace mlir::mantissa::train

#define GET_ATTRDEF_CLASSES
#include "mantissa/Dialect/Train/IR/TrainAttrs.h.inc"

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINATTRS_H
