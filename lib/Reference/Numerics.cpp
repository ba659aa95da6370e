//===- Numerics.cpp - Rounding, conversion and indexing helpers -----------===//
//
// Conversions follow c10: a double reaches bf16 and fp16 through fp32
// (c10::BFloat16 and c10::Half are constructed from float), integers reach
// floats with one static_cast, floats reach integers by truncation.
//
//===----------------------------------------------------------------------===//

#include "Numerics.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/bit.h"
#include <cassert>
#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::mantissa::reference;
using namespace mlir::mantissa::reference::kernels;

float kernels::roundToBFloat16(float value) {
  uint32_t bits = llvm::bit_cast<uint32_t>(value);
  if (std::isnan(value))
    return llvm::bit_cast<float>((bits | 0x00400000u) & 0xffff0000u);
  // Round-to-nearest-even on the 16 discarded bits; a carry out of the
  // mantissa correctly bumps the exponent (up to infinity).
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return llvm::bit_cast<float>(bits & 0xffff0000u);
}

/// `value` rounded to fp16 with round-to-nearest-even.
static float roundToHalf(float value) {
  llvm::APFloat number(value);
  bool losesInfo = false;
  number.convert(llvm::APFloat::IEEEhalf(), llvm::APFloat::rmNearestTiesToEven,
                 &losesInfo);
  return number.convertToFloat();
}

double kernels::roundToFloat(double value, Type type) {
  if (type.isF64())
    return value;
  auto single = static_cast<float>(value);
  if (type.isF32())
    return single;
  if (type.isBF16())
    return roundToBFloat16(single);
  assert(type.isF16() && "unsupported floating-point type");
  return roundToHalf(single);
}

int64_t kernels::wrapToInteger(int64_t value, Type type) {
  auto integerType = cast<IntegerType>(type);
  unsigned width = integerType.getWidth();
  if (width == 1)
    return value != 0;
  if (width >= 64)
    return value;
  uint64_t mask = (uint64_t{1} << width) - 1;
  uint64_t bits = static_cast<uint64_t>(value) & mask;
  if (!integerType.isUnsigned() && (bits >> (width - 1)) != 0)
    bits |= ~mask;
  return static_cast<int64_t>(bits);
}

double kernels::integerToFloat(int64_t value, Type type) {
  if (type.isF64())
    return static_cast<double>(value);
  return roundToFloat(static_cast<float>(value), type);
}

int64_t kernels::floatToInteger(double value, Type type) {
  if (type.isInteger(1))
    return value != 0;
  int64_t truncated;
  // 0x1p63 is exactly representable; anything at or beyond it (or NaN) has
  // no int64 value, and x86 answers with the "integer indefinite" INT64_MIN.
  if (std::isnan(value) || value >= 0x1p63 || value < -0x1p63)
    truncated = std::numeric_limits<int64_t>::min();
  else
    truncated = static_cast<int64_t>(value);
  return wrapToInteger(truncated, type);
}

Tensor kernels::convertTensor(const Tensor &tensor, Type elementType) {
  if (tensor.getElementType() == elementType)
    return tensor;
  Tensor result(elementType, tensor.getShape());
  int64_t count = tensor.getNumElements();
  bool fromFloat = tensor.isFloatingPoint();
  bool toFloat = result.isFloatingPoint();
  for (int64_t i = 0; i < count; ++i) {
    if (fromFloat && toFloat)
      result.getFloats()[i] = roundToFloat(tensor.getFloats()[i], elementType);
    else if (fromFloat)
      result.getIntegers()[i] =
          floatToInteger(tensor.getFloats()[i], elementType);
    else if (toFloat)
      result.getFloats()[i] =
          integerToFloat(tensor.getIntegers()[i], elementType);
    else
      result.getIntegers()[i] =
          wrapToInteger(tensor.getIntegers()[i], elementType);
  }
  return result;
}

int64_t kernels::numElementsOf(ArrayRef<int64_t> shape) {
  int64_t count = 1;
  for (int64_t size : shape)
    count *= size;
  return count;
}

SmallVector<int64_t> kernels::rowMajorStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t dim = static_cast<int64_t>(shape.size()) - 2; dim >= 0; --dim)
    strides[dim] = strides[dim + 1] * shape[dim + 1];
  return strides;
}

template <typename T>
static void broadcastInto(ArrayRef<T> source, MutableArrayRef<T> target,
                          ArrayRef<int64_t> shape, ArrayRef<int64_t> strides) {
  if (target.empty())
    return;
  IndexWalker walker(shape, strides);
  int64_t position = 0;
  do {
    target[position++] = source[walker.getOffset()];
  } while (walker.next());
}

Tensor kernels::broadcastTensor(const Tensor &tensor, ArrayRef<int64_t> shape) {
  if (tensor.getShape() == shape)
    return tensor;
  int64_t rank = static_cast<int64_t>(shape.size());
  int64_t leading = rank - tensor.getRank();
  assert(leading >= 0 && "cannot broadcast to a lower rank");
  SmallVector<int64_t> sourceStrides = rowMajorStrides(tensor.getShape());
  SmallVector<int64_t> strides(rank, 0);
  for (int64_t dim = 0; dim < tensor.getRank(); ++dim) {
    assert((tensor.getShape()[dim] == shape[leading + dim] ||
            tensor.getShape()[dim] == 1) &&
           "shapes do not broadcast");
    if (tensor.getShape()[dim] != 1)
      strides[leading + dim] = sourceStrides[dim];
  }
  Tensor result(tensor.getElementType(), shape);
  if (tensor.isFloatingPoint())
    broadcastInto(tensor.getFloats(), result.getFloats(), shape, strides);
  else
    broadcastInto(tensor.getIntegers(), result.getIntegers(), shape, strides);
  return result;
}

double kernels::scalarAsDouble(Attribute scalar) {
  if (auto boolAttr = dyn_cast<BoolAttr>(scalar))
    return boolAttr.getValue() ? 1.0 : 0.0;
  if (auto floatAttr = dyn_cast<FloatAttr>(scalar))
    return floatAttr.getValueAsDouble();
  return static_cast<double>(cast<IntegerAttr>(scalar).getInt());
}

bool kernels::isFloatScalar(Attribute scalar) { return isa<FloatAttr>(scalar); }

/// The integer value of a non-float scalar (bools as 0/1).
static int64_t integerScalarValue(Attribute scalar) {
  if (auto boolAttr = dyn_cast<BoolAttr>(scalar))
    return boolAttr.getValue();
  return cast<IntegerAttr>(scalar).getInt();
}

double kernels::scalarToFloat(Attribute scalar, Type floatType) {
  if (auto floatAttr = dyn_cast<FloatAttr>(scalar))
    return roundToFloat(floatAttr.getValueAsDouble(), floatType);
  return integerToFloat(integerScalarValue(scalar), floatType);
}

int64_t kernels::scalarToInteger(Attribute scalar, Type integerType) {
  if (auto floatAttr = dyn_cast<FloatAttr>(scalar))
    return floatToInteger(floatAttr.getValueAsDouble(), integerType);
  return wrapToInteger(integerScalarValue(scalar), integerType);
}

DimSplit kernels::splitAtDim(ArrayRef<int64_t> shape, int64_t dim) {
  DimSplit split;
  if (shape.empty())
    return split;
  for (int64_t i = 0; i < dim; ++i)
    split.outer *= shape[i];
  split.size = shape[dim];
  for (int64_t i = dim + 1, e = shape.size(); i < e; ++i)
    split.inner *= shape[i];
  return split;
}
