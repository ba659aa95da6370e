//===- GradientNormTest.cpp - Tests for a gradient tile's mean and norm ---===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/GradientNorm.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace mlir::mantissa::rt;

namespace {

/// `count` elements of `dtype` drawn from a spread of magnitudes (tiny,
/// ordinary and large ones, of both signs), as stored bytes.
std::vector<uint8_t> randomGradient(DType dtype, int64_t count, unsigned seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 10);
  std::vector<uint8_t> bytes(size_t(count) * elementSize(dtype));
  for (int64_t i = 0; i < count; ++i)
    storeFloatElement(bytes.data(), i, dtype,
                      std::ldexp(normal(random), exponent(random)));
  return bytes;
}

/// The straightforward reference: element by element through
/// loadFloatElement / storeFloatElement, each square added to lane i % 8,
/// the lanes added pairwise.
double referenceDivideAndSumSquares(uint8_t *data, int64_t count, DType dtype,
                                    int64_t divisor) {
  double lanes[8] = {};
  for (int64_t i = 0; i < count; ++i) {
    float value = loadFloatElement(data, i, dtype);
    if (divisor != 1) {
      storeFloatElement(data, i, dtype, value / float(divisor));
      value = loadFloatElement(data, i, dtype);
    }
    lanes[i % 8] += double(value) * double(value);
  }
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

const char *nameOf(DType dtype) {
  return dtype == DType::F32 ? "f32" : dtype == DType::BF16 ? "bf16" : "f16";
}

TEST(GradientNormTest, MatchesTheReferenceForEveryDtypeAndDivisor) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16})
    for (int64_t divisor : {1, 2, 3, 7, 64})
      for (int64_t count : {0, 1, 5, 8, 13, 1024, 4099}) {
        SCOPED_TRACE(std::string(nameOf(dtype)) + " / " +
                     std::to_string(divisor) + ", " + std::to_string(count) +
                     " elements");
        std::vector<uint8_t> got =
            randomGradient(dtype, count, unsigned(count * 31 + divisor));
        std::vector<uint8_t> expected = got;
        double sum = divideAndSumSquares(got.data(), count, dtype, divisor);
        double reference = referenceDivideAndSumSquares(expected.data(), count,
                                                        dtype, divisor);
        // The same quotients, rounded to the dtype, and the same sum.
        EXPECT_EQ(got, expected);
        EXPECT_EQ(sum, reference);
      }
}

TEST(GradientNormTest, DividesAndRoundsToTheGradientDtype) {
  // 1/3 rounded to each dtype: the stored quotient, and the square of the
  // stored (not the exact) quotient in the sum.
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(nameOf(dtype));
    std::vector<uint8_t> bytes(9 * elementSize(dtype));
    for (int64_t i = 0; i < 9; ++i)
      storeFloatElement(bytes.data(), i, dtype, 1.0f);
    double sum = divideAndSumSquares(bytes.data(), 9, dtype, 3);
    std::vector<uint8_t> third(elementSize(dtype));
    storeFloatElement(third.data(), 0, dtype, 1.0f / 3.0f);
    double rounded = loadFloatElement(third.data(), 0, dtype);
    for (int64_t i = 0; i < 9; ++i)
      EXPECT_EQ(loadFloatElement(bytes.data(), i, dtype), float(rounded)) << i;
    EXPECT_EQ(sum, 9 * rounded * rounded);
  }
}

TEST(GradientNormTest, WidensEveryF16AndBF16Value) {
  // Every 16-bit pattern (subnormals, Inf and NaN included), alone: its
  // square, or NaN.
  for (DType dtype : {DType::BF16, DType::F16})
    for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
      uint16_t element = uint16_t(bits);
      uint8_t bytes[2];
      std::memcpy(bytes, &element, 2);
      double value = loadFloatElement(bytes, 0, dtype);
      double sum = divideAndSumSquares(bytes, 1, dtype, 1);
      if (std::isnan(value))
        EXPECT_TRUE(std::isnan(sum)) << nameOf(dtype) << " " << bits;
      else
        EXPECT_EQ(sum, value * value) << nameOf(dtype) << " " << bits;
    }
}

TEST(GradientNormTest, IsTheSumOfSquares) {
  // Whatever its order, the sum is the sum of squares to double precision.
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(nameOf(dtype));
    std::vector<uint8_t> bytes = randomGradient(dtype, 100003, 7);
    double sequential = 0;
    for (int64_t i = 0; i < 100003; ++i) {
      double value = loadFloatElement(bytes.data(), i, dtype);
      sequential += value * value;
    }
    double sum = divideAndSumSquares(bytes.data(), 100003, dtype, 1);
    EXPECT_GT(sum, 0);
    EXPECT_NEAR(sum, sequential, 1e-12 * sequential);
  }
}

TEST(GradientNormTest, KeepsNonFiniteValues) {
  // A NaN or infinite gradient makes the norm non-finite: the step is
  // skipped.
  for (DType dtype : {DType::F32, DType::BF16, DType::F16})
    for (int64_t divisor : {1, 4}) {
      SCOPED_TRACE(std::string(nameOf(dtype)) + " / " +
                   std::to_string(divisor));
      std::vector<uint8_t> bytes = randomGradient(dtype, 20, 3);
      storeFloatElement(bytes.data(), 11, dtype,
                        std::numeric_limits<float>::infinity());
      EXPECT_TRUE(
          std::isinf(divideAndSumSquares(bytes.data(), 20, dtype, divisor)));
      storeFloatElement(bytes.data(), 17, dtype,
                        std::numeric_limits<float>::quiet_NaN());
      EXPECT_TRUE(
          std::isnan(divideAndSumSquares(bytes.data(), 20, dtype, divisor)));
    }
}

} // namespace
