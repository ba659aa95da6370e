//===- TensorTest.cpp - Tests of the reference interpreter's tensors ------===//
//
// Raw little-endian storage in every supported layout, and the rounding the
// constructors apply. Expected bytes and values are written out by hand.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Reference/Tensor.h"
#include "mlir/IR/MLIRContext.h"
#include "gtest/gtest.h"
#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::mantissa::reference;

namespace {

class TensorTest : public ::testing::Test {
protected:
  MLIRContext context;
  Type f64 = Float64Type::get(&context);
  Type f32 = Float32Type::get(&context);
  Type bf16 = BFloat16Type::get(&context);
  Type f16 = Float16Type::get(&context);
  Type i64 = IntegerType::get(&context, 64);
  Type i32 = IntegerType::get(&context, 32);
  Type i1 = IntegerType::get(&context, 1);
};

TEST_F(TensorTest, Float32BytesRoundTrip) {
  // 1.0f = 0x3F800000, -2.5f = 0xC0200000, little-endian.
  std::vector<uint8_t> bytes = {0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x20, 0xC0};
  auto tensor = Tensor::fromBytes(f32, {2}, bytes);
  ASSERT_TRUE(static_cast<bool>(tensor)) << llvm::toString(tensor.takeError());
  EXPECT_EQ(tensor->getFloats()[0], 1.0);
  EXPECT_EQ(tensor->getFloats()[1], -2.5);
  EXPECT_EQ(tensor->toBytes(), bytes);
  EXPECT_EQ(tensor->toFloats(), (std::vector<float>{1.0f, -2.5f}));
}

TEST_F(TensorTest, BFloat16BytesAreTheHighHalfOfFloat32) {
  // 0x3F80 = 1.0, 0x4049 = 3.140625, 0xFF80 = -inf.
  std::vector<uint8_t> bytes = {0x80, 0x3F, 0x49, 0x40, 0x80, 0xFF};
  auto tensor = Tensor::fromBytes(bf16, {3}, bytes);
  ASSERT_TRUE(static_cast<bool>(tensor)) << llvm::toString(tensor.takeError());
  EXPECT_EQ(tensor->getFloats()[0], 1.0);
  EXPECT_EQ(tensor->getFloats()[1], 3.140625);
  EXPECT_EQ(tensor->getFloats()[2], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(tensor->toBytes(), bytes);
}

TEST_F(TensorTest, Float16AndFloat64Bytes) {
  // fp16: 0x3C00 = 1.0, 0xC000 = -2.0, 0x7C00 = inf, 0x0001 = 2^-24.
  std::vector<uint8_t> half = {0x00, 0x3C, 0x00, 0xC0, 0x00, 0x7C, 0x01, 0x00};
  auto tensor = Tensor::fromBytes(f16, {4}, half);
  ASSERT_TRUE(static_cast<bool>(tensor)) << llvm::toString(tensor.takeError());
  EXPECT_EQ(tensor->getFloats()[0], 1.0);
  EXPECT_EQ(tensor->getFloats()[1], -2.0);
  EXPECT_TRUE(std::isinf(tensor->getFloats()[2]));
  EXPECT_EQ(tensor->getFloats()[3], std::ldexp(1.0, -24));
  EXPECT_EQ(tensor->toBytes(), half);

  // 0.1 as a double: 0x3FB999999999999A.
  std::vector<uint8_t> dbl = {0x9A, 0x99, 0x99, 0x99, 0x99, 0x99, 0xB9, 0x3F};
  auto wide = Tensor::fromBytes(f64, {}, dbl);
  ASSERT_TRUE(static_cast<bool>(wide)) << llvm::toString(wide.takeError());
  EXPECT_EQ(wide->getFloats()[0], 0.1);
  EXPECT_EQ(wide->toBytes(), dbl);
}

TEST_F(TensorTest, IntegerAndBoolBytes) {
  std::vector<uint8_t> longs = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                                0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  auto i64Tensor = Tensor::fromBytes(i64, {2}, longs);
  ASSERT_TRUE(static_cast<bool>(i64Tensor));
  EXPECT_EQ(i64Tensor->getIntegers()[0], -1);
  EXPECT_EQ(i64Tensor->getIntegers()[1], 5);
  EXPECT_EQ(i64Tensor->toBytes(), longs);

  std::vector<uint8_t> ints = {0xFE, 0xFF, 0xFF, 0xFF};
  auto i32Tensor = Tensor::fromBytes(i32, {1}, ints);
  ASSERT_TRUE(static_cast<bool>(i32Tensor));
  EXPECT_EQ(i32Tensor->getIntegers()[0], -2);
  EXPECT_EQ(i32Tensor->toBytes(), ints);

  std::vector<uint8_t> bools = {0, 1, 1};
  auto boolTensor = Tensor::fromBytes(i1, {3}, bools);
  ASSERT_TRUE(static_cast<bool>(boolTensor));
  EXPECT_EQ(boolTensor->getIntegers()[1], 1);
  EXPECT_EQ(boolTensor->toBytes(), bools);
}

TEST_F(TensorTest, RejectsWrongByteCounts) {
  std::vector<uint8_t> bytes(7);
  auto tensor = Tensor::fromBytes(f32, {2}, bytes);
  ASSERT_FALSE(static_cast<bool>(tensor));
  EXPECT_EQ(llvm::toString(tensor.takeError()),
            "expected 8 bytes for tensor<2xf32>, got 7");
}

TEST_F(TensorTest, ConstructorsRoundToTheElementType) {
  // 1 + 2^-8 is halfway between the bf16 neighbours 1 and 1 + 2^-7: the even
  // one (1) wins; 1 + 3 * 2^-8 goes up to the even 1 + 2^-6.
  Tensor rounded = Tensor::fromFloats(bf16, {2}, {1.00390625f, 1.01171875f});
  EXPECT_EQ(rounded.getFloats()[0], 1.0);
  EXPECT_EQ(rounded.getFloats()[1], 1.015625);
  // 0.1 in fp32 is 0x3DCCCCCD = 0.100000001490116...
  Tensor single = Tensor::fromDoubles(f32, {1}, {0.1});
  EXPECT_EQ(single.getFloats()[0], static_cast<double>(0.1f));
  // Floats to integers truncate toward zero; integers wrap to the width.
  Tensor truncated = Tensor::fromFloats(i64, {2}, {-2.7f, 2.7f});
  EXPECT_EQ(truncated.getIntegers()[0], -2);
  EXPECT_EQ(truncated.getIntegers()[1], 2);
  Tensor wrapped = Tensor::fromIntegers(i32, {1}, {(int64_t{1} << 32) + 5});
  EXPECT_EQ(wrapped.getIntegers()[0], 5);
  Tensor zero(f16, {2, 3});
  EXPECT_EQ(zero.getNumElements(), 6);
  EXPECT_EQ(zero.getType(), RankedTensorType::get({2, 3}, f16));
}

} // namespace
