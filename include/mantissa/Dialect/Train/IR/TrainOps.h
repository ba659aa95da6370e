//===- TrainOps.h - Operations of the train dialect -------------*- C++ -*-===//
//
// Declares the operations of the `train` dialect.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINOPS_H
#define MANTISSA_DIALECT_TRAIN_IR_TRAINOPS_H

#include "mantissa/Dialect/Train/IR/TrainAttrs.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mantissa/Dialect/Train/IR/TrainTypeRules.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Bufferization/IR/BufferizableOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/RegionKindInterface.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/DestinationStyleOpInterface.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include <algorithm>

namespace mlir::mantissa::train {

/// Where a bound (`start` or `end`) of train.slice or train.slice_scatter
/// falls along a dimension of `size`: a negative one counts from the end,
/// and both clamp to [0, size], as torch's slicing.
inline int64_t normalizeSliceBound(int64_t bound, int64_t size) {
  return std::clamp<int64_t>(bound < 0 ? bound + size : bound, 0, size);
}

/// Parses and prints a `#train.dtype` attribute as a bare keyword.
ParseResult parseDTypeKeyword(OpAsmParser &parser, DTypeAttr &dtype);
void printDTypeKeyword(OpAsmPrinter &printer, Operation *op, DTypeAttr dtype);

namespace detail {
/// How an elementwise operation derives its result element type.
enum class ElementwiseKind {
  /// torch's type promotion of the operands.
  Arithmetic,
  /// Promotion, then integers become fp32 (true division).
  TrueDivide,
  /// Promotion for the comparison; the result is i1.
  Compare,
  /// The input's type; integers become fp32 (exp, sigmoid, ...).
  FloatMath,
  /// The input's type, whatever it is (neg, abs, relu).
  SameType,
};

/// Result type of a broadcasting binary operation on two tensors.
LogicalResult inferBinaryOp(std::optional<Location> location, Type lhs,
                            Type rhs, ElementwiseKind kind,
                            SmallVectorImpl<Type> &inferred);
/// Result type of an operation on a tensor and a Python scalar.
LogicalResult inferScalarOp(std::optional<Location> location, Type input,
                            Attribute scalar, ElementwiseKind kind,
                            SmallVectorImpl<Type> &inferred);
/// Result type of an elementwise function of one tensor.
LogicalResult inferUnaryOp(std::optional<Location> location, Type input,
                           ElementwiseKind kind,
                           SmallVectorImpl<Type> &inferred);
} // namespace detail

} // namespace mlir::mantissa::train

#include "mantissa/Dialect/Train/IR/TrainInterfaces.h.inc"

#define GET_OP_CLASSES
#include "mantissa/Dialect/Train/IR/TrainOps.h.inc"

namespace mlir::mantissa::train {
/// What `value` widens exactly (a train.cast to an element type that holds
/// every value of its input's: bf16 to fp32, say), or null.
Value getWidenedSource(Value value);

/// The sources of `lhs` and `rhs` where both widen exactly values of one
/// element type (the operands of a product that reads bf16 and keeps an
/// fp32 result), or nullopt.
std::optional<std::pair<Value, Value>> getWidenedSources(Value lhs, Value rhs);
} // namespace mlir::mantissa::train

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINOPS_H
