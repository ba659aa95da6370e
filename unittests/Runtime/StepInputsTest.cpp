//===- StepInputsTest.cpp - A micro-batch into the step's user inputs -----===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// storeStepInput matches a micro-batch's tensors to the step's user inputs
// by name, checks the shape, converts token ids to the input's integer type,
// and names the input when it cannot.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/StepInputs.h"
#include "gtest/gtest.h"

#include <cstring>

using namespace mlir::mantissa::rt;

namespace {

HostTensor ids(const std::string &name, std::vector<int64_t> shape,
               const std::vector<int64_t> &values) {
  HostTensor tensor;
  tensor.name = name;
  tensor.dtype = DType::I64;
  tensor.shape = std::move(shape);
  tensor.bytes.resize(values.size() * 8);
  std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

StepTensor input(const std::string &name, DType dtype,
                 std::vector<int64_t> shape) {
  StepTensor tensor;
  tensor.name = name;
  tensor.role = StepTensor::Role::UserInput;
  tensor.dtype = dtype;
  tensor.shape = std::move(shape);
  tensor.bytes = tensor.numElements() * int64_t(elementSize(dtype));
  return tensor;
}

TEST(StepInputsTest, ByNameInTheInputsIntegerType) {
  // The micro-batch's order is not the step's: names decide.
  std::vector<HostTensor> batch = {ids("labels", {1, 3}, {7, 8, 9}),
                                   ids("input_ids", {1, 3}, {1, 2, 3})};
  std::string error;
  StepTensor wide = input("input_ids", DType::I64, {1, 3});
  std::vector<int64_t> got(3);
  ASSERT_TRUE(storeStepInput(batch, wide,
                             reinterpret_cast<uint8_t *>(got.data()), error))
      << error;
  EXPECT_EQ(got, (std::vector<int64_t>{1, 2, 3}));
  StepTensor narrow = input("labels", DType::I32, {1, 3});
  std::vector<int32_t> got32(3);
  ASSERT_TRUE(storeStepInput(batch, narrow,
                             reinterpret_cast<uint8_t *>(got32.data()), error))
      << error;
  EXPECT_EQ(got32, (std::vector<int32_t>{7, 8, 9}));
}

TEST(StepInputsTest, NamesTheInputItCannotFill) {
  std::vector<HostTensor> batch = {
      ids("input_ids", {2, 3}, {1, 2, 3, 4, 5, 6})};
  std::vector<uint8_t> out(64);
  std::string error;
  EXPECT_FALSE(storeStepInput(batch, input("labels", DType::I64, {2, 3}),
                              out.data(), error));
  EXPECT_EQ(error,
            "user input 'labels': the micro-batch has no tensor of that name");
  EXPECT_FALSE(storeStepInput(batch, input("input_ids", DType::I64, {3, 2}),
                              out.data(), error));
  EXPECT_EQ(error, "user input 'input_ids': the micro-batch holds [2, 3], the "
                   "step takes [3, 2]");
  EXPECT_FALSE(storeStepInput(batch, input("input_ids", DType::F32, {2, 3}),
                              out.data(), error));
  EXPECT_EQ(error, "user input 'input_ids': the micro-batch holds I64, the "
                   "step takes F32");
}

} // namespace
