//===- CpuProgramTest.cpp - step.cpu.json written and read back -----------===//
//
// The compiler writes the CPU step program with writeCpuProgram and the
// runtime reads it with parseCpuProgram (CpuProgram.h) before it loads the
// libraries: every field must survive the trip, and what the writer would
// never emit must be refused with the entry it is in.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Format/CpuProgram.h"

#include <gtest/gtest.h>

using namespace mlir::mantissa::rt;

namespace {

StepTensor tensor(const std::string &name, StepTensor::Role role, DType dtype,
                  std::vector<int64_t> shape) {
  StepTensor out;
  out.name = name;
  out.role = role;
  out.dtype = dtype;
  out.shape = std::move(shape);
  out.bytes = out.numElements() * int64_t(elementSize(dtype));
  return out;
}

CpuProgram sampleProgram() {
  CpuProgram program;
  program.cpuGemmAbi = 3;
  program.targetCpu = "znver3";
  program.targetFeatures = std::vector<std::string>{"avx2", "fma"};
  program.widenedBf16Products = "bf16 products run as fp32 GEMMs on widened "
                                "operands: ...";
  StepTensor tokens =
      tensor("tokens", StepTensor::Role::UserInput, DType::I64, {2, 4});
  tokens.indexBound.bound = 16;
  tokens.indexBound.what = "rows of w";
  program.arguments = {
      tensor("w", StepTensor::Role::Parameter, DType::BF16, {16, 8}), tokens};
  program.step = {
      "step.cpu.so",
      "train_step_packed",
      {tensor("loss", StepTensor::Role::Loss, DType::F32, {}),
       tensor("w.grad", StepTensor::Role::Gradient, DType::F32, {16, 8})}};
  program.forward = CpuProgramLibrary{
      "step.cpu.forward.so",
      "train_step_forward_packed",
      {tensor("loss", StepTensor::Role::Loss, DType::F32, {})}};
  return program;
}

TEST(CpuProgramTest, EveryFieldSurvivesTheTrip) {
  std::string text = writeCpuProgram(sampleProgram());
  CpuProgram read;
  std::string error;
  ASSERT_TRUE(parseCpuProgram(text, read, error)) << error;
  EXPECT_EQ(read.version, kCpuProgramVersion);
  EXPECT_EQ(read.cpuGemmAbi, 3);
  EXPECT_EQ(read.targetCpu, "znver3");
  EXPECT_EQ(read.targetFeatures, (std::vector<std::string>{"avx2", "fma"}));
  EXPECT_EQ(read.widenedBf16Products,
            "bf16 products run as fp32 GEMMs on widened operands: ...");
  ASSERT_EQ(read.arguments.size(), 2u);
  EXPECT_EQ(read.arguments[1].indexBound.bound, 16);
  EXPECT_EQ(read.arguments[1].indexBound.what, "rows of w");
  EXPECT_EQ(read.arguments[0].dtype, DType::BF16);
  EXPECT_EQ(read.step.entry, "train_step_packed");
  ASSERT_EQ(read.step.results.size(), 2u);
  EXPECT_EQ(read.step.results[1].role, StepTensor::Role::Gradient);
  ASSERT_TRUE(read.forward);
  EXPECT_EQ(read.forward->library, "step.cpu.forward.so");
  EXPECT_EQ(writeCpuProgram(read), text);
  EXPECT_EQ(text.rfind("{\n  \"arguments\": [", 0), 0u) << text;
}

TEST(CpuProgramTest, WhatTheWriterNeverEmitsIsRefused) {
  CpuProgram program = sampleProgram();
  program.step.results.pop_back();
  program.step.results.push_back(program.step.results[0]);
  CpuProgram read;
  std::string error;
  EXPECT_FALSE(parseCpuProgram(writeCpuProgram(program), read, error));
  EXPECT_EQ(error, "the step: has 2 loss results; training needs one");

  program = sampleProgram();
  program.version = 3;
  EXPECT_FALSE(parseCpuProgram(writeCpuProgram(program), read, error));
  EXPECT_EQ(error, "not a version 1 or 2 mantissa-cpu-step program");

  std::string text = writeCpuProgram(sampleProgram());
  size_t at = text.find("\"bf16 products run");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, text.find('"', at + 1) + 1 - at, "7");
  EXPECT_FALSE(parseCpuProgram(text, read, error));
  EXPECT_EQ(error, "'widened_bf16_products' is not a string");

  EXPECT_FALSE(parseCpuProgram("{\"format\": 1}", read, error));
  EXPECT_NE(error.find("damaged CPU step program"), std::string::npos) << error;
  EXPECT_FALSE(parseCpuProgram("[]", read, error));
  EXPECT_EQ(error, "not a JSON object");
}

} // namespace
