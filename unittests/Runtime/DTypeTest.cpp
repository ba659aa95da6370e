//===- DTypeTest.cpp - Tests for runtime dtypes and bit conversions -------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Format/DType.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

using namespace mlir::mantissa::rt;

namespace {

float fromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

/// Independent reference: round `value` to a binary format with
/// `mantissaBits` stored mantissa bits, smallest normal exponent
/// `minExponent` and largest finite value `maxFinite`, using exact double
/// arithmetic and nearbyint (ties to even in the default rounding mode).
double referenceRound(float value, int mantissaBits, int minExponent,
                      double maxFinite) {
  double x = value;
  if (x == 0.0 || std::isinf(x))
    return x;
  int exponent;
  std::frexp(x, &exponent); // x = m * 2^exponent, 0.5 <= |m| < 1
  exponent = std::max(exponent - 1, minExponent);
  double quantum = std::ldexp(1.0, exponent - mantissaBits);
  double rounded = std::nearbyint(x / quantum) * quantum;
  if (std::fabs(rounded) > maxFinite)
    return std::copysign(std::numeric_limits<double>::infinity(), x);
  return rounded;
}

const double kMaxBF16 = fromBits(0x7F7F0000u);
const double kMaxF16 = 65504.0;

void expectBF16MatchesReference(uint32_t bits) {
  float value = fromBits(bits);
  uint16_t converted = floatToBF16Bits(value);
  if (std::isnan(value)) {
    EXPECT_EQ(converted, 0x7FC0) << std::hex << bits;
    return;
  }
  double expected = referenceRound(value, 7, -126, kMaxBF16);
  // Compare values and signs (the reference keeps the sign of zero).
  float actual = bf16BitsToFloat(converted);
  ASSERT_EQ(static_cast<double>(actual), expected) << std::hex << bits;
  ASSERT_EQ(std::signbit(actual), std::signbit(value)) << std::hex << bits;
}

void expectF16MatchesReference(uint32_t bits) {
  float value = fromBits(bits);
  uint16_t converted = floatToF16Bits(value);
  if (std::isnan(value)) {
    EXPECT_TRUE(std::isnan(f16BitsToFloat(converted))) << std::hex << bits;
    return;
  }
  double expected = referenceRound(value, 10, -14, kMaxF16);
  float actual = f16BitsToFloat(converted);
  ASSERT_EQ(static_cast<double>(actual), expected) << std::hex << bits;
  ASSERT_EQ(std::signbit(actual), std::signbit(value)) << std::hex << bits;
}

TEST(DTypeTest, ElementSizes) {
  EXPECT_EQ(elementSize(DType::F32), 4u);
  EXPECT_EQ(elementSize(DType::BF16), 2u);
  EXPECT_EQ(elementSize(DType::F16), 2u);
  EXPECT_EQ(elementSize(DType::F64), 8u);
  EXPECT_EQ(elementSize(DType::I64), 8u);
  EXPECT_EQ(elementSize(DType::I32), 4u);
  EXPECT_EQ(elementSize(DType::I16), 2u);
  EXPECT_EQ(elementSize(DType::I8), 1u);
  EXPECT_EQ(elementSize(DType::U8), 1u);
  EXPECT_EQ(elementSize(DType::Bool), 1u);
}

TEST(DTypeTest, SafeTensorsNamesRoundTrip) {
  const DType all[] = {DType::F32, DType::BF16, DType::F16, DType::F64,
                       DType::I64, DType::I32,  DType::I16, DType::I8,
                       DType::U8,  DType::Bool};
  const char *names[] = {"F32", "BF16", "F16", "F64", "I64",
                         "I32", "I16",  "I8",  "U8",  "BOOL"};
  for (size_t i = 0; i < std::size(all); ++i) {
    EXPECT_EQ(safeTensorsDTypeName(all[i]), names[i]);
    EXPECT_EQ(parseSafeTensorsDTypeName(names[i]), all[i]) << names[i];
  }
  EXPECT_FALSE(parseSafeTensorsDTypeName("f32"));
  EXPECT_FALSE(parseSafeTensorsDTypeName("Bool"));
  EXPECT_FALSE(parseSafeTensorsDTypeName("F8_E4M3"));
  EXPECT_FALSE(parseSafeTensorsDTypeName(""));
}

TEST(DTypeTest, ProjectNames) {
  EXPECT_EQ(parseProjectDTypeName("fp32"), DType::F32);
  EXPECT_EQ(parseProjectDTypeName("float32"), DType::F32);
  EXPECT_EQ(parseProjectDTypeName("bf16"), DType::BF16);
  EXPECT_EQ(parseProjectDTypeName("bfloat16"), DType::BF16);
  EXPECT_EQ(parseProjectDTypeName("fp16"), DType::F16);
  EXPECT_EQ(parseProjectDTypeName("float16"), DType::F16);
  EXPECT_FALSE(parseProjectDTypeName("F32"));
  EXPECT_FALSE(parseProjectDTypeName("int8"));
  EXPECT_FALSE(parseProjectDTypeName("bf16 "));
  EXPECT_EQ(projectDTypeName(DType::BF16), "bf16");
  EXPECT_EQ(projectDTypeName(DType::I64), "I64");
  EXPECT_TRUE(isFloatingPoint(DType::F16));
  EXPECT_FALSE(isFloatingPoint(DType::I32));
}

TEST(DTypeTest, BF16KnownPatterns) {
  EXPECT_EQ(floatToBF16Bits(1.0f), 0x3F80);
  EXPECT_EQ(floatToBF16Bits(-2.0f), 0xC000);
  // 1/3 = 0x3EAAAAAB: the dropped half 0xAAAB is above the tie, round up.
  EXPECT_EQ(floatToBF16Bits(1.0f / 3.0f), 0x3EAB);
  EXPECT_EQ(floatToBF16Bits(0.0f), 0x0000);
  EXPECT_EQ(floatToBF16Bits(-0.0f), 0x8000);
  // Largest bf16 stays; FLT_MAX is past the tie above it and overflows.
  EXPECT_EQ(floatToBF16Bits(fromBits(0x7F7F0000u)), 0x7F7F);
  EXPECT_EQ(floatToBF16Bits(fromBits(0x7F7F7FFFu)), 0x7F7F);
  EXPECT_EQ(floatToBF16Bits(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(floatToBF16Bits(-std::numeric_limits<float>::max()), 0xFF80);
  // Smallest bf16 subnormal is 2^-133; half of it ties to even (zero).
  EXPECT_EQ(floatToBF16Bits(std::ldexp(1.0f, -133)), 0x0001);
  EXPECT_EQ(floatToBF16Bits(fromBits(0x00008000u)), 0x0000);
  EXPECT_EQ(floatToBF16Bits(fromBits(0x00008001u)), 0x0001);
  EXPECT_EQ(floatToBF16Bits(fromBits(0x00018000u)), 0x0002);
  EXPECT_EQ(floatToBF16Bits(std::numeric_limits<float>::denorm_min()), 0);
  // Ties to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(floatToBF16Bits(fromBits(0x3F808000u)), 0x3F80);
  EXPECT_EQ(floatToBF16Bits(fromBits(0x3F818000u)), 0x3F82);
  EXPECT_EQ(floatToBF16Bits(fromBits(0x3F808001u)), 0x3F81);
  EXPECT_EQ(floatToBF16Bits(fromBits(0x3F817FFFu)), 0x3F81);
  // Infinities.
  EXPECT_EQ(floatToBF16Bits(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(floatToBF16Bits(-std::numeric_limits<float>::infinity()), 0xFF80);
  // NaNs, including ones that naive rounding would turn into inf or -0.
  EXPECT_EQ(floatToBF16Bits(std::numeric_limits<float>::quiet_NaN()), 0x7FC0);
  EXPECT_EQ(floatToBF16Bits(fromBits(0x7F800001u)), 0x7FC0);
  EXPECT_EQ(floatToBF16Bits(fromBits(0x7FFFFFFFu)), 0x7FC0);
  EXPECT_EQ(floatToBF16Bits(fromBits(0xFFFFFFFFu)), 0x7FC0);
  EXPECT_TRUE(
      std::isnan(bf16BitsToFloat(floatToBF16Bits(fromBits(0x7F800001u)))));
}

TEST(DTypeTest, BF16ToFloat) {
  EXPECT_EQ(bf16BitsToFloat(0x3F80), 1.0f);
  EXPECT_EQ(bf16BitsToFloat(0x3EAB), 0.333984375f);
  EXPECT_EQ(bf16BitsToFloat(0x0001), std::ldexp(1.0f, -133));
  EXPECT_EQ(bf16BitsToFloat(0x7F80), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(bf16BitsToFloat(0x7F81)));
  EXPECT_TRUE(std::isnan(bf16BitsToFloat(0xFFC0)));
  EXPECT_TRUE(std::signbit(bf16BitsToFloat(0x8000)));
}

TEST(DTypeTest, F16KnownPatterns) {
  EXPECT_EQ(floatToF16Bits(1.0f), 0x3C00);
  EXPECT_EQ(floatToF16Bits(-2.0f), 0xC000);
  EXPECT_EQ(floatToF16Bits(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(floatToF16Bits(0.0f), 0x0000);
  EXPECT_EQ(floatToF16Bits(-0.0f), 0x8000);
  // Largest fp16 is 65504; 65520 is the tie above it and goes to infinity.
  EXPECT_EQ(floatToF16Bits(65504.0f), 0x7BFF);
  EXPECT_EQ(floatToF16Bits(65519.996f), 0x7BFF);
  EXPECT_EQ(floatToF16Bits(65520.0f), 0x7C00);
  EXPECT_EQ(floatToF16Bits(1e5f), 0x7C00);
  EXPECT_EQ(floatToF16Bits(-1e5f), 0xFC00);
  EXPECT_EQ(floatToF16Bits(std::numeric_limits<float>::max()), 0x7C00);
  // Subnormals: 2^-24 is the smallest, 2^-25 ties to even (zero).
  EXPECT_EQ(floatToF16Bits(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(floatToF16Bits(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(floatToF16Bits(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(floatToF16Bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)),
            0x0001);
  EXPECT_EQ(floatToF16Bits(std::ldexp(3.0f, -25)), 0x0002);
  EXPECT_EQ(floatToF16Bits(std::ldexp(1.0f, -14)), 0x0400);
  // 1023.5 * 2^-24 ties between the largest subnormal and the smallest normal.
  EXPECT_EQ(floatToF16Bits(std::ldexp(2047.0f, -25)), 0x0400);
  EXPECT_EQ(floatToF16Bits(std::ldexp(2045.0f, -25)), 0x03FE);
  EXPECT_EQ(floatToF16Bits(std::numeric_limits<float>::denorm_min()), 0);
  // Ties to even on normals: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(floatToF16Bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(floatToF16Bits(1.0f + std::ldexp(3.0f, -11)), 0x3C02);
  EXPECT_EQ(
      floatToF16Bits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)),
      0x3C01);
  // Infinities and NaN.
  EXPECT_EQ(floatToF16Bits(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(floatToF16Bits(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(floatToF16Bits(std::numeric_limits<float>::quiet_NaN()), 0x7E00);
  EXPECT_EQ(floatToF16Bits(fromBits(0xFFC00000u)), 0xFE00);
  EXPECT_EQ(floatToF16Bits(fromBits(0x7F800001u)), 0x7E00);
}

TEST(DTypeTest, F16ToFloat) {
  EXPECT_EQ(f16BitsToFloat(0x3C00), 1.0f);
  EXPECT_EQ(f16BitsToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(f16BitsToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(f16BitsToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16BitsToFloat(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(f16BitsToFloat(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16BitsToFloat(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(f16BitsToFloat(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16BitsToFloat(0x7C01)));
  EXPECT_TRUE(std::isnan(f16BitsToFloat(0x7E00)));
  EXPECT_TRUE(std::signbit(f16BitsToFloat(0x8000)));
}

/// Every 16-bit pattern survives widening and narrowing unchanged (NaNs stay
/// NaN), which pins down both directions over their whole domain.
TEST(DTypeTest, AllHalfPatternsRoundTrip) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    uint16_t pattern = static_cast<uint16_t>(bits);
    float wideBF16 = bf16BitsToFloat(pattern);
    if (std::isnan(wideBF16))
      EXPECT_EQ(floatToBF16Bits(wideBF16), 0x7FC0);
    else
      ASSERT_EQ(floatToBF16Bits(wideBF16), pattern) << std::hex << bits;

    float wideF16 = f16BitsToFloat(pattern);
    if (std::isnan(wideF16))
      ASSERT_TRUE(std::isnan(f16BitsToFloat(floatToF16Bits(wideF16))));
    else
      ASSERT_EQ(floatToF16Bits(wideF16), pattern) << std::hex << bits;
  }
}

/// Compares against the double-arithmetic reference on a sample spread over
/// all float bit patterns, plus every tie and near-tie pattern, which is
/// where rounding bugs live.
TEST(DTypeTest, ConversionsMatchReference) {
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFu; bits += 4099)
    expectBF16MatchesReference(static_cast<uint32_t>(bits));
  for (uint64_t bits = 7; bits <= 0xFFFFFFFFu; bits += 4099)
    expectF16MatchesReference(static_cast<uint32_t>(bits));
  for (uint32_t high = 0; high <= 0xFFFF; ++high)
    for (uint32_t low : {0x7FFFu, 0x8000u, 0x8001u, 0x0000u})
      expectBF16MatchesReference((high << 16) | low);
  for (uint32_t high = 0; high < (1u << 19); ++high)
    for (uint32_t low : {0x0FFFu, 0x1000u, 0x1001u})
      expectF16MatchesReference((high << 13) | low);
}

/// convertFloatElements (a loop per pair of dtypes, vectorised) writes the
/// bytes that converting element by element writes, for every pair, every
/// tail length of the vector loops and a buffer starting at an odd element:
/// float patterns around every bf16 and fp16 tie, NaNs with payloads,
/// infinities, subnormals and zeros, and every 16-bit pattern.
TEST(DTypeTest, ConvertFloatElementsMatchesElementByElement) {
  std::vector<uint32_t> patterns = {0x00000000u, 0x80000000u, 0x7F800000u,
                                    0xFF800000u, 0x7FC00000u, 0xFFC00001u,
                                    0x7F800001u, 0x00000001u, 0x807FFFFFu,
                                    0x7F7FFFFFu, 0x477FF000u, 0x477FEFFFu};
  for (uint32_t high = 0; high <= 0xFFFF; high += 7)
    for (uint32_t low : {0x7FFFu, 0x8000u, 0x8001u, 0x0000u, 0x1000u})
      patterns.push_back((high << 16) | low);
  for (uint32_t half = 0; half <= 0xFFFF; ++half)
    patterns.push_back(half | (half << 16));
  const DType dtypes[] = {DType::F32, DType::BF16, DType::F16, DType::F64};
  for (DType from : dtypes) {
    int64_t fromSize = int64_t(elementSize(from));
    // The patterns as `from` (each rounded as a stored `from` tensor would
    // hold it), behind one element so the buffer starts unaligned.
    std::vector<uint8_t> source((patterns.size() + 1) * fromSize);
    for (size_t i = 0; i < patterns.size(); ++i)
      storeFloatElement(source.data(), int64_t(i) + 1, from,
                        fromBits(patterns[i]));
    const uint8_t *first = source.data() + fromSize;
    for (DType to : dtypes) {
      int64_t toSize = int64_t(elementSize(to));
      std::vector<int64_t> counts;
      for (int64_t count = 0; count <= 40; ++count)
        counts.push_back(count);
      counts.push_back(int64_t(patterns.size()));
      for (int64_t count : counts) {
        std::vector<uint8_t> expected(count * toSize + 1, 0xA5),
            actual(count * toSize + 1, 0xA5);
        for (int64_t i = 0; i < count; ++i)
          storeFloatElement(expected.data(), i, to,
                            loadFloatElement(first, i, from));
        convertFloatElements(first, from, actual.data(), to, count);
        ASSERT_EQ(actual, expected)
            << projectDTypeName(from) << " to " << projectDTypeName(to) << ", "
            << count << " elements";
      }
    }
  }
}

#ifdef __FLT16_MAX__
/// Where the compiler has _Float16, its conversion is a third opinion.
TEST(DTypeTest, F16MatchesCompiler) {
  for (uint64_t bits = 3; bits <= 0xFFFFFFFFu; bits += 65537) {
    float value = fromBits(static_cast<uint32_t>(bits));
    if (std::isnan(value))
      continue;
    _Float16 narrowed = static_cast<_Float16>(value);
    uint16_t expected;
    std::memcpy(&expected, &narrowed, sizeof(expected));
    ASSERT_EQ(floatToF16Bits(value), expected) << std::hex << bits;
  }
}
#endif

} // namespace
