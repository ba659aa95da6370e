//===- GradientNorm.cpp - A gradient tile's mean and sum of squares -------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// GradientNorm.h. The dtype is dispatched once per tile; each dtype's loops
// (widen, divide and round into floats; square into the lanes) have no
// branches, so the compiler vectorises them, except fp16's rounding after a
// divide (floatToF16Bits), which stays element by element.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/GradientNorm.h"
#include "mantissa/Format/CpuClones.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

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
  /// f16BitsToFloat without its branches: the exponent and mantissa, shifted
  /// into a float's, are the value times 2^-112 (a float subnormal for an
  /// fp16 one), so one exact multiply rebiases both; Inf and NaN are
  /// selected.
  static float widen(uint16_t bits) {
    uint32_t sign = uint32_t(bits & 0x8000u) << 16;
    uint32_t magnitude = uint32_t(bits & 0x7FFFu) << 13;
    float scaled = detail::floatFromBits(magnitude) * 0x1p112f;
    uint32_t finite = detail::floatBits(scaled);
    uint32_t special = 0x7F800000u | (magnitude & 0x7FE000u);
    return detail::floatFromBits(
        sign | (magnitude >= (0x7C00u << 13) ? special : finite));
  }
  static uint16_t round(float value) { return floatToF16Bits(value); }
};

/// Elements are read (divided, rounded and stored back) a block at a time
/// into floats, a map the compiler vectorises, then squared into the lanes.
constexpr int64_t kBlock = 256;

template <typename Element, bool Divide>
[[gnu::always_inline]] inline void widenBlock(uint8_t *data, int64_t count,
                                              float divisor, float *values) {
  using Bits = typename Element::Bits;
  auto *elements = reinterpret_cast<Bits *>(data);
  for (int64_t i = 0; i < count; ++i) {
    Bits bits;
    std::memcpy(&bits, elements + i, sizeof(Bits));
    if (Divide) {
      bits = Element::round(Element::widen(bits) / divisor);
      std::memcpy(elements + i, &bits, sizeof(Bits));
    }
    values[i] = Element::widen(bits);
  }
}

/// Adds the squares of `size` floats to the lanes, element i in lane
/// i % kSquareLanes (the caller starts `values` at a multiple of them).
template <typename Values>
[[gnu::always_inline]] inline void
addSquares(const Values &values, int64_t size, double (&lanes)[kSquareLanes]) {
  int64_t whole = size - size % kSquareLanes;
  for (int64_t i = 0; i < whole; i += kSquareLanes)
    for (int lane = 0; lane < kSquareLanes; ++lane)
      lanes[lane] += double(values(i + lane)) * double(values(i + lane));
  for (int64_t i = whole; i < size; ++i)
    lanes[i - whole] += double(values(i)) * double(values(i));
}

template <typename Element, bool Divide>
[[gnu::always_inline]] inline double sumSquares(uint8_t *data, int64_t count,
                                                float divisor) {
  using Bits = typename Element::Bits;
  double lanes[kSquareLanes] = {};
  // fp32 gradients that are not divided are squared where they are: a
  // copy into a block would be one more pass over them (on one thread,
  // most of the norm's time).
  if constexpr (std::is_same_v<Element, F32Element> && !Divide) {
    addSquares(
        [data](int64_t i) {
          float value;
          std::memcpy(&value, data + i * int64_t(sizeof(float)), sizeof(float));
          return value;
        },
        count, lanes);
    return addSquareLanes(lanes);
  }
  alignas(64) float values[kBlock];
  for (int64_t first = 0; first < count; first += kBlock) {
    int64_t size = std::min(kBlock, count - first);
    widenBlock<Element, Divide>(data + first * int64_t(sizeof(Bits)), size,
                                divisor, values);
    // kBlock is a multiple of the lanes: element first + i is in lane i % 8.
    addSquares([&values](int64_t i) { return values[i]; }, size, lanes);
  }
  return addSquareLanes(lanes);
}

template <typename Element>
[[gnu::always_inline]] inline double sumSquares(uint8_t *data, int64_t count,
                                                int64_t divisor) {
  return divisor == 1 ? sumSquares<Element, false>(data, count, 1.0f)
                      : sumSquares<Element, true>(data, count, float(divisor));
}

} // namespace

/// Compiled for AVX2 and the baseline (CpuClones.h; the loops above are
/// inlined into both): with 8 lanes, llama_medium's bf16 gradients divided
/// by 2 take 3.9M instructions a step, not 7.7M (cachegrind).
MANTISSA_AVX2_AND_BASELINE double
mlir::mantissa::rt::divideAndSumSquares(uint8_t *data, int64_t count,
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
