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

namespace {
/// How an element type is held in raw storage.
enum class StorageKind { F64, F32, BF16, F16, Bool, Integer };
} // namespace

static StorageKind classifyStorage(Type elementType) {
  if (elementType.isF64())
    return StorageKind::F64;
  if (elementType.isF32())
    return StorageKind::F32;
  if (elementType.isBF16())
    return StorageKind::BF16;
  if (elementType.isF16())
    return StorageKind::F16;
  if (elementType.isInteger(1))
    return StorageKind::Bool;
  return StorageKind::Integer;
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
  bool isUnsigned = elementType.isUnsignedInteger();
  int64_t count = tensor.getNumElements();
  // One loop per storage kind: the type is tested once, not per element
  // (training converts every parameter and gradient each step).
  auto readEach = [&](auto &destination, auto read) {
    for (int64_t i = 0; i < count; ++i)
      destination[i] = read(bytes.data() + i * width);
  };
  switch (classifyStorage(elementType)) {
  case StorageKind::F64:
    readEach(tensor.floats, [](const uint8_t *element) {
      return llvm::bit_cast<double>(endian::read64le(element));
    });
    break;
  case StorageKind::F32:
    readEach(tensor.floats, [](const uint8_t *element) {
      return double(llvm::bit_cast<float>(endian::read32le(element)));
    });
    break;
  case StorageKind::BF16:
    readEach(tensor.floats, [](const uint8_t *element) {
      uint32_t bits = static_cast<uint32_t>(endian::read16le(element)) << 16;
      return double(llvm::bit_cast<float>(bits));
    });
    break;
  case StorageKind::F16:
    readEach(tensor.floats, [](const uint8_t *element) {
      llvm::APFloat half(llvm::APFloat::IEEEhalf(),
                         llvm::APInt(16, endian::read16le(element)));
      return double(half.convertToFloat());
    });
    break;
  case StorageKind::Bool:
    readEach(tensor.integers,
             [](const uint8_t *element) { return int64_t(*element != 0); });
    break;
  case StorageKind::Integer:
    readEach(tensor.integers, [&](const uint8_t *element) -> int64_t {
      switch (width) {
      case 1:
        return isUnsigned ? int64_t(*element)
                          : int64_t(static_cast<int8_t>(*element));
      case 2: {
        uint16_t bits = endian::read16le(element);
        return isUnsigned ? int64_t(bits) : int64_t(static_cast<int16_t>(bits));
      }
      case 4: {
        uint32_t bits = endian::read32le(element);
        return isUnsigned ? int64_t(bits) : int64_t(static_cast<int32_t>(bits));
      }
      default:
        return static_cast<int64_t>(endian::read64le(element));
      }
    });
    break;
  }
  return tensor;
}

std::vector<uint8_t> Tensor::toBytes() const {
  unsigned width = getStorageByteWidth(elementType);
  assert(width != 0 && "element type has no storage layout");
  int64_t count = getNumElements();
  std::vector<uint8_t> bytes(count * width);
  auto writeEach = [&](const auto &source, auto write) {
    for (int64_t i = 0; i < count; ++i)
      write(bytes.data() + i * width, source[i]);
  };
  switch (classifyStorage(elementType)) {
  case StorageKind::F64:
    writeEach(floats, [](uint8_t *element, double value) {
      endian::write64le(element, llvm::bit_cast<uint64_t>(value));
    });
    break;
  case StorageKind::F32:
    writeEach(floats, [](uint8_t *element, double value) {
      endian::write32le(element,
                        llvm::bit_cast<uint32_t>(static_cast<float>(value)));
    });
    break;
  case StorageKind::BF16:
    writeEach(floats, [](uint8_t *element, double value) {
      uint32_t bits = llvm::bit_cast<uint32_t>(static_cast<float>(value));
      endian::write16le(element, static_cast<uint16_t>(bits >> 16));
    });
    break;
  case StorageKind::F16:
    writeEach(floats, [](uint8_t *element, double value) {
      llvm::APFloat half(static_cast<float>(value));
      bool losesInfo = false;
      half.convert(llvm::APFloat::IEEEhalf(),
                   llvm::APFloat::rmNearestTiesToEven, &losesInfo);
      endian::write16le(
          element, static_cast<uint16_t>(half.bitcastToAPInt().getZExtValue()));
    });
    break;
  case StorageKind::Bool:
  case StorageKind::Integer:
    writeEach(integers, [&](uint8_t *element, int64_t value) {
      switch (width) {
      case 1:
        *element = static_cast<uint8_t>(value);
        break;
      case 2:
        endian::write16le(element, static_cast<uint16_t>(value));
        break;
      case 4:
        endian::write32le(element, static_cast<uint32_t>(value));
        break;
      default:
        endian::write64le(element, static_cast<uint64_t>(value));
      }
    });
    break;
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
