//===- Tensor.cpp - Tensors of the reference interpreter ------------------===//
//
// Construction, raw little-endian storage and conversions of Tensor.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Reference/Tensor.h"
#include "Numerics.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/bit.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/raw_ostream.h"
#include <cassert>

using namespace mlir;
using namespace mlir::mantissa::reference;
using namespace mlir::mantissa::reference::kernels;
namespace endian = llvm::support::endian;

bool Tensor::isSupportedElementType(Type elementType) {
  if (auto integerType = dyn_cast_or_null<IntegerType>(elementType))
    return integerType.getWidth() <= 64;
  return elementType && (elementType.isF64() || elementType.isF32() ||
                         elementType.isBF16() || elementType.isF16());
}

unsigned Tensor::getStorageByteWidth(Type elementType) {
  if (!isSupportedElementType(elementType))
    return 0;
  if (elementType.isInteger(1))
    return 1;
  unsigned bits = elementType.getIntOrFloatBitWidth();
  return bits % 8 == 0 ? bits / 8 : 0;
}

Tensor::Tensor(Type elementType, ArrayRef<int64_t> shape)
    : elementType(elementType), shape(shape) {
  assert(isSupportedElementType(elementType) && "unsupported element type");
  if (isFloatingPoint())
    floats.assign(getNumElements(), 0.0);
  else
    integers.assign(getNumElements(), 0);
}

Tensor Tensor::fromFloats(Type elementType, ArrayRef<int64_t> shape,
                          ArrayRef<float> values) {
  SmallVector<double> widened(values.begin(), values.end());
  return fromDoubles(elementType, shape, widened);
}

Tensor Tensor::fromDoubles(Type elementType, ArrayRef<int64_t> shape,
                           ArrayRef<double> values) {
  Tensor tensor(elementType, shape);
  assert(static_cast<int64_t>(values.size()) == tensor.getNumElements() &&
         "value count does not match the shape");
  for (auto [index, value] : llvm::enumerate(values)) {
    if (tensor.isFloatingPoint())
      tensor.floats[index] = roundToFloat(value, elementType);
    else
      tensor.integers[index] = floatToInteger(value, elementType);
  }
  return tensor;
}

Tensor Tensor::fromIntegers(Type elementType, ArrayRef<int64_t> shape,
                            ArrayRef<int64_t> values) {
  Tensor tensor(elementType, shape);
  assert(static_cast<int64_t>(values.size()) == tensor.getNumElements() &&
         "value count does not match the shape");
  for (auto [index, value] : llvm::enumerate(values)) {
    if (tensor.isFloatingPoint())
      tensor.floats[index] = integerToFloat(value, elementType);
    else
      tensor.integers[index] = wrapToInteger(value, elementType);
  }
  return tensor;
}

llvm::Expected<Tensor> Tensor::fromBytes(Type elementType,
                                         ArrayRef<int64_t> shape,
                                         ArrayRef<uint8_t> bytes) {
  auto describe = [&] {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << RankedTensorType::get(shape, elementType);
    return text;
  };
  unsigned width = getStorageByteWidth(elementType);
  if (width == 0)
    return llvm::createStringError("cannot store elements of type " +
                                   describe());
  for (int64_t size : shape)
    if (size < 0)
      return llvm::createStringError("negative dimension in " + describe());
  Tensor tensor(elementType, shape);
  uint64_t expected = static_cast<uint64_t>(tensor.getNumElements()) * width;
  if (bytes.size() != expected)
    return llvm::createStringError("expected " + std::to_string(expected) +
                                   " bytes for " + describe() + ", got " +
                                   std::to_string(bytes.size()));
  auto isUnsigned = elementType.isUnsignedInteger();
  for (int64_t i = 0, e = tensor.getNumElements(); i < e; ++i) {
    const uint8_t *element = bytes.data() + i * width;
    if (elementType.isF64()) {
      tensor.floats[i] = llvm::bit_cast<double>(endian::read64le(element));
    } else if (elementType.isF32()) {
      tensor.floats[i] = llvm::bit_cast<float>(endian::read32le(element));
    } else if (elementType.isBF16()) {
      uint32_t bits = static_cast<uint32_t>(endian::read16le(element)) << 16;
      tensor.floats[i] = llvm::bit_cast<float>(bits);
    } else if (elementType.isF16()) {
      llvm::APFloat half(llvm::APFloat::IEEEhalf(),
                         llvm::APInt(16, endian::read16le(element)));
      tensor.floats[i] = half.convertToFloat();
    } else if (elementType.isInteger(1)) {
      tensor.integers[i] = *element != 0;
    } else if (width == 1) {
      tensor.integers[i] = isUnsigned ? int64_t(*element)
                                      : int64_t(static_cast<int8_t>(*element));
    } else if (width == 2) {
      uint16_t bits = endian::read16le(element);
      tensor.integers[i] =
          isUnsigned ? int64_t(bits) : int64_t(static_cast<int16_t>(bits));
    } else if (width == 4) {
      uint32_t bits = endian::read32le(element);
      tensor.integers[i] =
          isUnsigned ? int64_t(bits) : int64_t(static_cast<int32_t>(bits));
    } else {
      tensor.integers[i] = static_cast<int64_t>(endian::read64le(element));
    }
  }
  return tensor;
}

std::vector<uint8_t> Tensor::toBytes() const {
  unsigned width = getStorageByteWidth(elementType);
  assert(width != 0 && "element type has no storage layout");
  std::vector<uint8_t> bytes(getNumElements() * width);
  for (int64_t i = 0, e = getNumElements(); i < e; ++i) {
    uint8_t *element = bytes.data() + i * width;
    if (elementType.isF64()) {
      endian::write64le(element, llvm::bit_cast<uint64_t>(floats[i]));
    } else if (elementType.isF32()) {
      endian::write32le(
          element, llvm::bit_cast<uint32_t>(static_cast<float>(floats[i])));
    } else if (elementType.isBF16()) {
      uint32_t bits = llvm::bit_cast<uint32_t>(static_cast<float>(floats[i]));
      endian::write16le(element, static_cast<uint16_t>(bits >> 16));
    } else if (elementType.isF16()) {
      llvm::APFloat half(static_cast<float>(floats[i]));
      bool losesInfo = false;
      half.convert(llvm::APFloat::IEEEhalf(),
                   llvm::APFloat::rmNearestTiesToEven, &losesInfo);
      endian::write16le(
          element, static_cast<uint16_t>(half.bitcastToAPInt().getZExtValue()));
    } else if (width == 1) {
      *element = static_cast<uint8_t>(integers[i]);
    } else if (width == 2) {
      endian::write16le(element, static_cast<uint16_t>(integers[i]));
    } else if (width == 4) {
      endian::write32le(element, static_cast<uint32_t>(integers[i]));
    } else {
      endian::write64le(element, static_cast<uint64_t>(integers[i]));
    }
  }
  return bytes;
}

std::vector<float> Tensor::toFloats() const {
  std::vector<float> values(getNumElements());
  for (int64_t i = 0, e = getNumElements(); i < e; ++i)
    values[i] = static_cast<float>(getAsDouble(i));
  return values;
}

int64_t Tensor::getNumElements() const { return numElementsOf(shape); }

RankedTensorType Tensor::getType() const {
  return RankedTensorType::get(shape, elementType);
}

double Tensor::getAsDouble(int64_t index) const {
  if (isFloatingPoint())
    return floats[index];
  return static_cast<double>(integers[index]);
}
