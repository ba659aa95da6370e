//===- TrainTypeRules.cpp - torch's shape and dtype rules -----------------===//
//
// Mirrors c10's promote_types and ATen's result_type (TypeProperties.cpp).
//
//===----------------------------------------------------------------------===//

#include "mantissa/Dialect/Train/IR/TrainTypeRules.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::mantissa::train;

std::optional<SmallVector<int64_t>>
mlir::mantissa::train::broadcastShapes(ArrayRef<int64_t> lhs,
                                       ArrayRef<int64_t> rhs) {
  size_t rank = std::max(lhs.size(), rhs.size());
  SmallVector<int64_t> result(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t l = i < rank - lhs.size() ? 1 : lhs[i - (rank - lhs.size())];
    int64_t r = i < rank - rhs.size() ? 1 : rhs[i - (rank - rhs.size())];
    if (l != r && l != 1 && r != 1)
      return std::nullopt;
    result[i] = l == 1 ? r : l;
  }
  return result;
}

namespace {
enum class Category { Bool, Integer, Float };
} // namespace

static Category categoryOf(Type type) {
  if (type.isInteger(1))
    return Category::Bool;
  if (isa<IntegerType>(type))
    return Category::Integer;
  return Category::Float;
}

Type mlir::mantissa::train::promoteElementTypes(Type lhs, Type rhs) {
  if (!lhs)
    return rhs;
  if (!rhs || lhs == rhs)
    return lhs;
  Category lhsCategory = categoryOf(lhs), rhsCategory = categoryOf(rhs);
  if (lhsCategory != rhsCategory)
    return lhsCategory > rhsCategory ? lhs : rhs;
  unsigned lhsWidth = lhs.getIntOrFloatBitWidth();
  unsigned rhsWidth = rhs.getIntOrFloatBitWidth();
  if (lhsCategory == Category::Integer)
    return lhsWidth >= rhsWidth ? lhs : rhs;
  // Two different floats of the same width are bf16 and fp16: neither holds
  // the other, so torch goes to fp32.
  if (lhsWidth == rhsWidth)
    return Float32Type::get(lhs.getContext());
  return lhsWidth > rhsWidth ? lhs : rhs;
}

/// ATen's combine_categories: `higher` wins unless `lower` is of a higher
/// category.
static Type combineCategories(Type higher, Type lower) {
  if (!higher)
    return lower;
  if (categoryOf(higher) == Category::Float)
    return higher;
  if (categoryOf(higher) == Category::Bool ||
      (lower && categoryOf(lower) == Category::Float))
    return promoteElementTypes(higher, lower);
  return higher;
}

Type mlir::mantissa::train::resultType(MLIRContext *context,
                                       ArrayRef<PromotionOperand> operands) {
  Type dimResult, zeroDimResult, scalarResult;
  for (const PromotionOperand &operand : operands) {
    Type &tier = operand.isScalar    ? scalarResult
                 : operand.isZeroDim ? zeroDimResult
                                     : dimResult;
    tier = promoteElementTypes(tier, operand.elementType);
  }
  return combineCategories(dimResult,
                           combineCategories(zeroDimResult, scalarResult));
}

Type mlir::mantissa::train::scalarElementType(Attribute scalar) {
  MLIRContext *context = scalar.getContext();
  if (isa<BoolAttr>(scalar))
    return IntegerType::get(context, 1);
  if (isa<FloatAttr>(scalar))
    return Float32Type::get(context);
  return IntegerType::get(context, 64);
}

Type mlir::mantissa::train::computeType(Type type) {
  if (type.isBF16() || type.isF16())
    return Float32Type::get(type.getContext());
  return type;
}

std::string mlir::mantissa::train::formatShape(ArrayRef<int64_t> shape) {
  std::string text = "[";
  llvm::raw_string_ostream os(text);
  llvm::interleaveComma(shape, os);
  os << "]";
  return text;
}
