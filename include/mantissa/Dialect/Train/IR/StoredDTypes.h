//===- StoredDTypes.h - MLIR element types as stored dtypes -----*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The compiler's one converter between MLIR element types (and the train
// dialect's precision dtypes) and the dtypes that artifacts, step programs
// and safetensors files record (mantissa/Format/DType.h, which also names
// them). Compiler code only: the runtime and the formats have no MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_STOREDDTYPES_H
#define MANTISSA_DIALECT_TRAIN_IR_STOREDDTYPES_H

#include "mantissa/Dialect/Train/IR/TrainAttrs.h"
#include "mantissa/Format/DType.h"
#include "mlir/IR/BuiltinTypes.h"

#include <optional>

namespace mlir::mantissa::train {

/// The element type that holds `dtype`'s values: f32, bf16, f16, f64,
/// signless i64, i32, i16, i8 and i1 (Bool), and ui8 (U8).
Type getStoredElementType(MLIRContext *context, rt::DType dtype);

/// The stored dtype of element type `type` (the inverse of
/// getStoredElementType; any signedness of an integer width it has), or
/// none for a type that no file stores.
std::optional<rt::DType> getStoredDType(Type type);

/// The stored dtype of a precision dtype.
rt::DType getStoredDType(DType dtype);

} // namespace mlir::mantissa::train

#endif // MANTISSA_DIALECT_TRAIN_IR_STOREDDTYPES_H
