//===- DType.h - Element types of stored and exchanged tensors --*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The one set of element types that artifacts, step programs, checkpoints
// and safetensors files record, their names in that format and in the
// project's precision rules, and exact float <-> bf16 / fp16 bit
// conversions. The compiler writes these dtypes and the runtime reads them,
// so they live in the floor below both (docs/architecture.md); the compiler
// converts MLIR element types to and from them in one place
// (mantissa/Dialect/Train/IR/StoredDTypes.h).
//
// Part of mantissa_format: no LLVM, MLIR or runtime headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_FORMAT_DTYPE_H
#define MANTISSA_FORMAT_DTYPE_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace mlir::mantissa::rt {

/// Element type of a host tensor. The set is what safetensors files written
/// by torch for training state contain; values are stored little-endian.
enum class DType : uint8_t { F32, BF16, F16, F64, I64, I32, I16, I8, U8, Bool };

/// Size in bytes of one element (a Bool takes one byte, as in safetensors).
size_t elementSize(DType dtype);

/// True for F32, BF16, F16 and F64: the types `toFloat32` converts without
/// going through an integer value.
bool isFloatingPoint(DType dtype);

/// The name of `dtype` in a safetensors header ("F32", "BF16", ..., "BOOL").
std::string_view safeTensorsDTypeName(DType dtype);

/// Parses a safetensors header dtype name; the format's names are
/// case-sensitive, so "f32" is rejected just as other readers reject it.
std::optional<DType> parseSafeTensorsDTypeName(std::string_view name);

/// Parses a precision name as written in the project's options and rules:
/// "fp32", "bf16", "fp16", and torch's spellings "float32", "bfloat16",
/// "float16". Only these floating-point precisions can be chosen there.
std::optional<DType> parseProjectDTypeName(std::string_view name);

/// The canonical project name of a floating-point precision ("fp32", "bf16",
/// "fp16", "fp64"); the safetensors name for other types, so that diagnostics
/// always have something to print.
std::string_view projectDTypeName(DType dtype);

//===----------------------------------------------------------------------===//
// Bit conversions
//===----------------------------------------------------------------------===//
//
// These are inline because they sit in the inner loops of checkpoint
// conversion and of the reference optimizer. They use integer arithmetic only,
// so the results do not depend on the floating-point environment (rounding
// mode, flush-to-zero) and match torch bit for bit.

namespace detail {
inline uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}
inline float floatFromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}
} // namespace detail

/// Rounds `value` to bfloat16 (round to nearest, ties to even). Values beyond
/// the largest bf16 round to infinity. Every NaN becomes the quiet NaN 0x7FC0,
/// which is what torch and MLIR's `arith-expand` produce, so results compare
/// bit-exactly with both; plain truncation could turn a NaN into infinity.
///
/// A NaN is replaced by 0x7FC00000 before the rounding, which keeps it (its
/// low half is zero): where a loop of these is vectorised, that is one
/// unordered compare and one blend of 32-bit lanes, where a test of the
/// magnitude's bits after the rounding costs an unsigned compare AVX2 lacks
/// and a select of the 16-bit results (the runtime GEMM's rounding of a
/// tile into a bf16 C took 16 AVX2 instructions per 8 values, now 12).
inline uint16_t floatToBF16Bits(float value) {
  uint32_t bits = value != value ? 0x7FC00000u : detail::floatBits(value);
  uint32_t lowestKeptBit = (bits >> 16) & 1u;
  bits += 0x7FFFu + lowestKeptBit;
  return static_cast<uint16_t>(bits >> 16);
}

/// Widens a bfloat16 to float; exact, as bf16 is the top half of a float.
inline float bf16BitsToFloat(uint16_t bits) {
  return detail::floatFromBits(static_cast<uint32_t>(bits) << 16);
}

/// The split (`master: fp32_split`) of an fp32 master into the bf16
/// parameter, a 16-bit remainder and a tie mark, as the fused AdamW kernels
/// keep it (AdamWToLoops.cpp's encodeRemainder/decodeRemainder). `high` is
/// the master rounded to nearest-even (floatToBF16Bits: the copy an fp32
/// master keeps, so forward and backward see the same bf16 values either
/// way); the master's bits minus high's, d in [-2^15, 2^15], is stored as
/// its low 16 bits `low`. Every fp32 value other than NaN is reconstructed
/// exactly; NaN becomes 0x7FC0 with a zero remainder.
///
/// 16 bits are one short: an even bf16 value h is the nearest-even rounding
/// of 2^16 + 1 masters (both ties, h -/+ half an ulp, d = -/+2^15), an odd
/// one of 2^16 - 1, so no encoding of the master in the parameter and 16
/// more bits makes the parameter the nearest-even copy of every master
/// (Transformer Engine's rounds exact ties away from zero instead, wrong for
/// 1 master in 2^17). The one extra bit, `upperTie` (d = +2^15, which shares
/// its low 16 bits with d = -2^15), is kept in the sign bit of the member's
/// exp_avg_sq: Adam's second moment is never below +0, so that bit is free.
inline void splitFp32Master(float master, uint16_t &high, uint16_t &low,
                            bool &upperTie) {
  uint32_t bits = detail::floatBits(master);
  high = floatToBF16Bits(master);
  uint32_t difference = bits - (uint32_t(high) << 16);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u)
    difference = 0;
  low = static_cast<uint16_t>(difference & 0xFFFFu);
  upperTie = difference == 0x8000u;
}

/// The fp32 master that splitFp32Master split into `high`, `low` and
/// `upperTie`.
inline float joinFp32Master(uint16_t high, uint16_t low, bool upperTie) {
  uint32_t bits = (uint32_t(high) << 16) + uint32_t(int32_t(int16_t(low))) +
                  (upperTie ? 0x10000u : 0u);
  return detail::floatFromBits(bits);
}

/// Rounds `value` to IEEE binary16 (round to nearest, ties to even). Values
/// of magnitude 65520 and above become infinity, tiny values become fp16
/// subnormals or a signed zero, and NaN becomes a quiet NaN (0x7E00) that
/// keeps the sign, as torch's conversion does.
inline uint16_t floatToF16Bits(float value) {
  uint32_t bits = detail::floatBits(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7FFFFFFFu;

  if (magnitude > 0x7F800000u)
    return sign | 0x7E00u;
  // 65520 is halfway between the largest fp16 (65504, odd mantissa) and the
  // next power of two, so it and everything above rounds to infinity.
  if (magnitude >= 0x477FF000u)
    return sign | 0x7C00u;

  // Below 2^-14 the result is an fp16 subnormal: a multiple of 2^-24.
  if (magnitude < 0x38800000u) {
    uint32_t exponent = magnitude >> 23;
    uint32_t shift = 126 - exponent; // value = mantissa * 2^-24 >> shift
    if (exponent == 0 || shift > 24) // below half the smallest subnormal
      return sign;
    uint32_t mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
    uint32_t rounded = mantissa >> shift;
    uint32_t remainder = mantissa & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (remainder > half || (remainder == half && (rounded & 1u)))
      ++rounded; // may carry into the smallest normal, which encodes right
    return sign | static_cast<uint16_t>(rounded);
  }

  // Normal: rebias the exponent (127 -> 15) and drop 13 mantissa bits. A
  // carry out of the mantissa correctly bumps the exponent.
  uint32_t rounded = (magnitude >> 13) - (112u << 10);
  uint32_t remainder = magnitude & 0x1FFFu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (rounded & 1u)))
    ++rounded;
  return sign | static_cast<uint16_t>(rounded);
}

/// Widens an IEEE binary16 to float; exact for every input, NaN stays NaN.
inline float f16BitsToFloat(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1Fu;
  uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F)
    return detail::floatFromBits(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in float (a normal float).
    float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return detail::floatFromBits(sign | ((exponent + 112u) << 23) |
                               (mantissa << 13));
}

/// Element `index` of a dense buffer of floating-point `dtype` (F32, BF16,
/// F16, or F64 read through float), as a float; 0 for other dtypes.
inline float loadFloatElement(const uint8_t *base, int64_t index, DType dtype) {
  switch (dtype) {
  case DType::F32: {
    float value;
    std::memcpy(&value, base + index * 4, 4);
    return value;
  }
  case DType::BF16: {
    uint16_t bits;
    std::memcpy(&bits, base + index * 2, 2);
    return bf16BitsToFloat(bits);
  }
  case DType::F16: {
    uint16_t bits;
    std::memcpy(&bits, base + index * 2, 2);
    return f16BitsToFloat(bits);
  }
  case DType::F64: {
    double value;
    std::memcpy(&value, base + index * 8, 8);
    return static_cast<float>(value);
  }
  default:
    return 0;
  }
}

/// Stores `value` as element `index` of a dense buffer of floating-point
/// `dtype`, rounding to nearest even; does nothing for other dtypes.
inline void storeFloatElement(uint8_t *base, int64_t index, DType dtype,
                              float value) {
  switch (dtype) {
  case DType::F32:
    std::memcpy(base + index * 4, &value, 4);
    return;
  case DType::BF16: {
    uint16_t bits = floatToBF16Bits(value);
    std::memcpy(base + index * 2, &bits, 2);
    return;
  }
  case DType::F16: {
    uint16_t bits = floatToF16Bits(value);
    std::memcpy(base + index * 2, &bits, 2);
    return;
  }
  case DType::F64: {
    double wide = value;
    std::memcpy(base + index * 8, &wide, 8);
    return;
  }
  default:
    return;
  }
}

/// Converts `count` elements between dense floating-point buffers (a copy
/// when the dtypes agree), each rounded as storeFloatElement rounds. The
/// buffers do not overlap. Defined in DType.cpp, where each pair of dtypes
/// has a loop of its own: the runtime converts whole gradients with it
/// every micro-batch (a step's bf16 gradient to a `reduce: fp32` buffer).
void convertFloatElements(const uint8_t *source, DType from,
                          uint8_t *destination, DType to, int64_t count);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_FORMAT_DTYPE_H
