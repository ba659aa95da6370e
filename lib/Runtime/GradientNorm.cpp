//===- GradientNorm.cpp - A gradient tile's mean and sum of squares -------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// GradientNorm.h. The dtype is dispatched once per tile; each dtype's loop
// reads, divides, rounds and squares without branches, so the compiler
// vectorises it.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/GradientNorm.h"

#include <cstring>

using namespace mlir::mantissa::rt;

namespace {

/// How a gradient dtype's bits widen to float and a float rounds back.
struct F32Element {
  using Bits = float;
  static float widen(float bits) { return bits; }
  static float round(float value) { return value; }
};
struct BF16Element {
  using Bits = uint16_t;
  static float widen(uint16_t bits) { return bf16BitsToFloat(bits); }
  static uint16_t round(float value) { return floatToBF16Bits(value); }
};
struct F16Element {
  using Bits = uint16_t;
  static float widen(uint16_t bits) { return f16BitsToFloat(bits); }
  static uint16_t round(float value) { return floatToF16Bits(value); }
};

/// Element `i`'s (divided) value into its lane.
template <typename Element, bool Divide>
inline void addSquare(uint8_t *data, int64_t i, float divisor, double &lane) {
  using Bits = typename Element::Bits;
  Bits bits;
  std::memcpy(&bits, data + i * int64_t(sizeof(Bits)), sizeof(Bits));
  if (Divide) {
    bits = Element::round(Element::widen(bits) / divisor);
    std::memcpy(data + i * int64_t(sizeof(Bits)), &bits, sizeof(Bits));
  }
  double value = Element::widen(bits);
  lane += value * value;
}

template <typename Element, bool Divide>
double sumSquares(uint8_t *data, int64_t count, float divisor) {
  double lanes[kSquareLanes] = {};
  int64_t whole = count - count % kSquareLanes;
  for (int64_t i = 0; i < whole; i += kSquareLanes)
    for (int lane = 0; lane < kSquareLanes; ++lane)
      addSquare<Element, Divide>(data, i + lane, divisor, lanes[lane]);
  for (int64_t i = whole; i < count; ++i)
    addSquare<Element, Divide>(data, i, divisor, lanes[i - whole]);
  return addSquareLanes(lanes);
}

template <typename Element>
double sumSquares(uint8_t *data, int64_t count, int64_t divisor) {
  return divisor == 1 ? sumSquares<Element, false>(data, count, 1.0f)
                      : sumSquares<Element, true>(data, count, float(divisor));
}

} // namespace

double mlir::mantissa::rt::divideAndSumSquares(uint8_t *data, int64_t count,
                                               DType dtype, int64_t divisor) {
  switch (dtype) {
  case DType::F32:
    return sumSquares<F32Element>(data, count, divisor);
  case DType::BF16:
    return sumSquares<BF16Element>(data, count, divisor);
  case DType::F16:
    return sumSquares<F16Element>(data, count, divisor);
  default:
    break;
  }
  // Other float dtypes (not a gradient dtype today) element by element,
  // through float as loadFloatElement reads them.
  double lanes[kSquareLanes] = {};
  float divide = float(divisor);
  for (int64_t i = 0; i < count; ++i) {
    float value = loadFloatElement(data, i, dtype);
    if (divisor != 1) {
      storeFloatElement(data, i, dtype, value / divide);
      value = loadFloatElement(data, i, dtype);
    }
    lanes[i % kSquareLanes] += double(value) * double(value);
  }
  return addSquareLanes(lanes);
}
