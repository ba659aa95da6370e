//===- TrainTypeRules.h - torch's shape and dtype rules ---------*- C++ -*-===//
//
// Broadcasting and type promotion as torch defines them, shared by the
// compute operations' type inference, the importer and the interpreter.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINTYPERULES_H
#define MANTISSA_DIALECT_TRAIN_IR_TRAINTYPERULES_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/StringRef.h"
#include <optional>
#include <string>

namespace mlir::mantissa::train {

/// The broadcast of two shapes (right-aligned, size-1 dimensions stretch),
/// or nullopt when they do not broadcast.
std::optional<SmallVector<int64_t>> broadcastShapes(ArrayRef<int64_t> lhs,
                                                    ArrayRef<int64_t> rhs);

/// torch's `promote_types` for two element types: bool < integers < floats;
/// within floats the wider wins and bf16 with fp16 gives fp32.
Type promoteElementTypes(Type lhs, Type rhs);

/// torch's `result_type` over operands, each a tensor's element type and
/// rank, or a Python scalar (`isScalar`): a zero-dimensional tensor or a
/// scalar only raises the result when it is of a higher category.
struct PromotionOperand {
  Type elementType;
  bool isZeroDim = false;
  bool isScalar = false;
};
Type resultType(MLIRContext *context, ArrayRef<PromotionOperand> operands);

/// The element type torch gives a Python scalar attribute: i64 for integers,
/// fp32 (the default dtype) for floats, i1 for bools.
Type scalarElementType(Attribute scalar);

/// The element type floating-point math is done in for `type`: fp32 for
/// bf16 and fp16, the type itself otherwise.
Type computeType(Type type);

/// Marks an op of a fused torch kernel that the importer decomposes
/// (SDPA's score products, dp and the rows of dout * out) and that the
/// kernel runs on operands in the compute dtype but in fp32, keeping an
/// fp32 result: under `compute:` (Autocast.cpp) it reads its operands
/// rounded to the compute dtype and widened back, as torch's kernel reads
/// bf16 and accumulates in fp32, rather than being rounded as a bf16 bmm.
inline constexpr llvm::StringLiteral kFp32AccumulateAttrName =
    "train.fp32_accumulate";

/// A shape as torch prints it in messages: `[32, 16]`.
std::string formatShape(ArrayRef<int64_t> shape);

/// Whether `type` is an integer or boolean element type.
inline bool isIntegral(Type type) { return isa<IntegerType>(type); }

} // namespace mlir::mantissa::train

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINTYPERULES_H
