//===- TrainAttrsTest.cpp - Tests of the dtype helpers and attributes -----===//

#include "mantissa/Dialect/Train/IR/TrainAttrs.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mlir/IR/MLIRContext.h"
#include "gtest/gtest.h"

using namespace mlir;
using namespace mlir::mantissa::train;

namespace {

TEST(DTypeNames, AcceptsProjectAndTorchSpellings) {
  EXPECT_EQ(parseDTypeName("fp32"), DType::fp32);
  EXPECT_EQ(parseDTypeName("float32"), DType::fp32);
  EXPECT_EQ(parseDTypeName("bf16"), DType::bf16);
  EXPECT_EQ(parseDTypeName("bfloat16"), DType::bf16);
  EXPECT_EQ(parseDTypeName("fp16"), DType::fp16);
  EXPECT_EQ(parseDTypeName("float16"), DType::fp16);
}

TEST(DTypeNames, RejectsEverythingElse) {
  for (StringRef name : {"", "f32", "FP32", "fp8", "half", "float", "bf16 "})
    EXPECT_EQ(parseDTypeName(name), std::nullopt) << "'" << name.str() << "'";
}

TEST(DTypeNames, PrintsCanonicalNames) {
  EXPECT_EQ(stringifyDType(DType::fp32), "fp32");
  EXPECT_EQ(stringifyDType(DType::bf16), "bf16");
  EXPECT_EQ(stringifyDType(DType::fp16), "fp16");
}

TEST(DTypeTypes, ElementTypesRoundTrip) {
  MLIRContext context;
  for (DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
    Type type = getElementType(&context, dtype);
    EXPECT_EQ(getDTypeOf(type), dtype);
    EXPECT_EQ(getByteWidth(dtype) * 8, type.getIntOrFloatBitWidth());
  }
  EXPECT_EQ(getDTypeOf(Float64Type::get(&context)), std::nullopt);
  EXPECT_EQ(getDTypeOf(IntegerType::get(&context, 64)), std::nullopt);
}

TEST(PrecisionPlan, BuffersCarryNoReduceOrMoments) {
  MLIRContext context;
  context.loadDialect<TrainDialect>();
  auto parameterPlan = PrecisionPlanAttr::get(
      &context, DType::fp32, DType::bf16, DType::bf16, DType::fp32);
  EXPECT_EQ(parameterPlan.getReduce(), DType::bf16);
  auto bufferPlan = PrecisionPlanAttr::get(&context, DType::fp32, DType::fp32,
                                           std::nullopt, std::nullopt);
  EXPECT_FALSE(bufferPlan.getMoments().has_value());
  // Plans are uniqued: equal decisions are the same attribute.
  EXPECT_EQ(bufferPlan,
            PrecisionPlanAttr::get(&context, DType::fp32, DType::fp32,
                                   std::nullopt, std::nullopt));
  EXPECT_NE(bufferPlan, parameterPlan);
}

} // namespace
