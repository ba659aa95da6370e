//===- GpuProgramTest.cpp - step.gpu.json written and read back -----------===//
//
// The compiler writes the GPU program with writeGpuProgram and the runtime
// and the cost model read it with parseGpuProgram: every field must survive
// the trip, and what the writer would never emit must be refused with the
// entry it is in. (GpuStepTest.cpp checks loading with the PTX beside it.)
//
//===----------------------------------------------------------------------===//

#include "mantissa/Format/GpuProgram.h"

#include <gtest/gtest.h>

using namespace mlir::mantissa::rt;

namespace {

GpuProgram sampleProgram() {
  GpuProgram program;
  program.stepName = "train_step";
  program.ptxFile = "step.ptx";
  program.constantsFile = "step.constants.bin";
  program.forwardFile = "step.forward.gpu.json";
  program.blockSize = 128;
  program.arenaBytes = 1024;

  StepTensor weight;
  weight.name = "w";
  weight.role = StepTensor::Role::Parameter;
  weight.dtype = DType::BF16;
  weight.shape = {4, 8};
  weight.bytes = 64;
  StepTensor tokens;
  tokens.name = "tokens";
  tokens.role = StepTensor::Role::UserInput;
  tokens.dtype = DType::I64;
  tokens.shape = {2, 4};
  tokens.bytes = 64;
  tokens.indexBound.bound = 4;
  tokens.indexBound.what = "rows of w";
  tokens.indexBound.ignored = -100;
  program.arguments = {weight, tokens};

  StepTensor loss;
  loss.name = "";
  loss.role = StepTensor::Role::Loss;
  loss.dtype = DType::F32;
  loss.bytes = 4;
  StepTensor gradient = weight;
  gradient.role = StepTensor::Role::Gradient;
  gradient.dtype = DType::F32;
  gradient.bytes = 128;
  program.results = {loss, gradient};

  GpuStepBuffer argument;
  argument.kind = GpuStepBuffer::Kind::Argument;
  argument.index = 0;
  argument.bytes = 64;
  GpuStepBuffer result;
  result.kind = GpuStepBuffer::Kind::Result;
  result.index = 1;
  result.bytes = 128;
  GpuStepBuffer temporary;
  temporary.offset = 256;
  temporary.bytes = 512;
  GpuStepBuffer constant;
  constant.kind = GpuStepBuffer::Kind::Constant;
  constant.offset = 0;
  constant.bytes = 16;
  program.buffers = {argument, result, temporary, constant};

  GpuStepOp kernel;
  kernel.source = "linalg.generic (model.py:3)";
  kernel.entry = "step_kernel_0";
  kernel.grid = 2;
  kernel.buffers = {0, 2, 3};
  kernel.threads = 200;
  kernel.serialIterations = 1;
  GpuStepOp::Member first, second;
  first.source = "linalg.generic (model.py:3)";
  first.buffers = {0, 1};
  first.threads = 200;
  second.source = "linalg.reduce (model.py:4)";
  second.buffers = {1, 2};
  second.threads = 4;
  second.serialIterations = 32;
  second.threadStride = 32;
  second.rowColumns = 64;
  first.elementsPerThread = 4;
  kernel.members = {first, second};

  GpuStepOp gemm;
  gemm.kind = GpuStepOp::Kind::Gemm;
  gemm.source = "linalg.matmul (model.py:5)";
  gemm.transa = true;
  gemm.m = 8;
  gemm.n = 4;
  gemm.k = 4;
  gemm.alpha = 0.125;
  gemm.beta = 0;
  gemm.a = {0, 0, 4, 0, DType::BF16};
  gemm.b = {0, 0, 4, 0, DType::BF16};
  gemm.c = {1, 0, 8, 0, DType::F32};
  gemm.epilogue = GemmEpilogue::Bias;
  gemm.bias = {2, 16, 0, 0, DType::F32};
  program.ops = {kernel, gemm};
  return program;
}

void expectSameTensor(const StepTensor &a, const StepTensor &b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.role, b.role);
  EXPECT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.indexBound.bound, b.indexBound.bound);
  EXPECT_EQ(a.indexBound.what, b.indexBound.what);
  EXPECT_EQ(a.indexBound.ignored, b.indexBound.ignored);
}

void expectSameOperand(const GpuGemmOperand &a, const GpuGemmOperand &b) {
  EXPECT_EQ(a.buffer, b.buffer);
  EXPECT_EQ(a.offset, b.offset);
  EXPECT_EQ(a.dtype, b.dtype);
}

/// The sample's text with `from` replaced by `to` (which must occur).
std::string edited(const std::string &from, const std::string &to) {
  std::string text = writeGpuProgram(sampleProgram());
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos)
    text.replace(at, from.size(), to);
  return text;
}

std::string parseError(const std::string &text) {
  GpuProgram program;
  std::string error;
  EXPECT_FALSE(parseGpuProgram(text, program, error));
  return error;
}

} // namespace

TEST(GpuProgram, EveryFieldSurvivesWritingAndReading) {
  GpuProgram written = sampleProgram();
  GpuProgram read;
  std::string error;
  ASSERT_TRUE(parseGpuProgram(writeGpuProgram(written), read, error)) << error;
  EXPECT_EQ(read.format, GpuProgram::kFormat);
  EXPECT_EQ(read.stepName, written.stepName);
  EXPECT_EQ(read.ptxFile, written.ptxFile);
  EXPECT_EQ(read.constantsFile, written.constantsFile);
  EXPECT_EQ(read.forwardFile, written.forwardFile);
  EXPECT_EQ(read.blockSize, written.blockSize);
  EXPECT_EQ(read.arenaBytes, written.arenaBytes);
  ASSERT_EQ(read.arguments.size(), 2u);
  ASSERT_EQ(read.results.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    expectSameTensor(read.arguments[i], written.arguments[i]);
    expectSameTensor(read.results[i], written.results[i]);
  }
  ASSERT_EQ(read.buffers.size(), written.buffers.size());
  for (size_t i = 0; i < read.buffers.size(); ++i) {
    EXPECT_EQ(read.buffers[i].kind, written.buffers[i].kind) << i;
    EXPECT_EQ(read.buffers[i].index, written.buffers[i].index) << i;
    EXPECT_EQ(read.buffers[i].bytes, written.buffers[i].bytes) << i;
  }
  EXPECT_EQ(read.buffers[2].offset, 256);
  ASSERT_EQ(read.ops.size(), 2u);
  const GpuStepOp &kernel = read.ops[0];
  EXPECT_EQ(kernel.kind, GpuStepOp::Kind::Kernel);
  EXPECT_EQ(kernel.entry, "step_kernel_0");
  EXPECT_EQ(kernel.grid, 2);
  EXPECT_EQ(kernel.buffers, (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(kernel.threads, 200);
  ASSERT_EQ(kernel.members.size(), 2u);
  EXPECT_EQ(kernel.members[1].source, "linalg.reduce (model.py:4)");
  EXPECT_EQ(kernel.members[1].buffers, (std::vector<unsigned>{1, 2}));
  EXPECT_EQ(kernel.members[1].threads, 4);
  EXPECT_EQ(kernel.members[1].serialIterations, 32);
  EXPECT_EQ(kernel.members[1].threadStride, 32);
  EXPECT_EQ(kernel.members[1].rowColumns, 64);
  EXPECT_EQ(kernel.members[0].rowColumns, 0);
  EXPECT_EQ(kernel.members[0].threadStride, 1);
  EXPECT_EQ(kernel.members[0].elementsPerThread, 4);
  EXPECT_EQ(kernel.members[1].elementsPerThread, 1);
  const GpuStepOp &gemm = read.ops[1];
  EXPECT_EQ(gemm.kind, GpuStepOp::Kind::Gemm);
  EXPECT_TRUE(gemm.transa);
  EXPECT_FALSE(gemm.transb);
  EXPECT_EQ(gemm.m, 8);
  EXPECT_EQ(gemm.alpha, 0.125);
  EXPECT_EQ(gemm.epilogue, GemmEpilogue::Bias);
  expectSameOperand(gemm.a, written.ops[1].a);
  expectSameOperand(gemm.c, written.ops[1].c);
  expectSameOperand(gemm.bias, written.ops[1].bias);
  EXPECT_EQ(read.countOps(GpuStepOp::Kind::Gemm), 1);
  EXPECT_EQ(read.findArgument("tokens"), 1);
}

TEST(GpuProgram, OptionalFieldsAreLeftOutWhenEmpty) {
  GpuProgram program = sampleProgram();
  program.forwardFile.clear();
  program.ops[0].members.resize(1);
  program.ops[0].members[0].elementsPerThread = 1;
  std::string text = writeGpuProgram(program);
  EXPECT_EQ(text.find("\"forward\""), std::string::npos);
  EXPECT_EQ(text.find("\"members\""), std::string::npos);
  GpuProgram read;
  std::string error;
  ASSERT_TRUE(parseGpuProgram(text, read, error)) << error;
  EXPECT_TRUE(read.forwardFile.empty());
  EXPECT_TRUE(read.ops[0].members.empty());
  // A member on consecutive threads has no thread_stride, one running an
  // iteration a thread no elements_per_thread, one not by rows no
  // row_columns: the sample's second member has a stride and runs by rows,
  // its first several iterations a thread.
  text = writeGpuProgram(sampleProgram());
  for (const char *key :
       {"\"thread_stride\"", "\"elements_per_thread\"", "\"row_columns\""}) {
    EXPECT_NE(text.find(key), std::string::npos) << key;
    EXPECT_EQ(text.find(key), text.rfind(key)) << key;
  }
  // One member alone is written when it runs on other threads than the
  // first ones.
  program = sampleProgram();
  program.ops[0].members.resize(1);
  text = writeGpuProgram(program);
  ASSERT_TRUE(parseGpuProgram(text, read, error)) << error;
  ASSERT_EQ(read.ops[0].members.size(), 1u);
  EXPECT_EQ(read.ops[0].members[0].elementsPerThread, 4);
}

TEST(GpuProgram, RefusesWhatTheWriterNeverEmits) {
  EXPECT_EQ(parseError("{"), "damaged GPU step program (not valid JSON)");
  EXPECT_EQ(parseError(edited("\"format\": 2", "\"format\": 3")),
            "unknown format 3 (this runtime reads 1 and 2)");
  EXPECT_EQ(parseError(edited("\"role\": \"loss\"", "\"role\": \"parameter\"")),
            "result 0 '': unknown role 'parameter'");
  EXPECT_EQ(parseError(edited("\"dtype\": \"I64\"", "\"dtype\": \"I65\"")),
            "argument 1 'tokens': unknown dtype 'I65'");
  EXPECT_EQ(parseError(edited("\"index_bound\": 4", "\"index_bound\": 0")),
            "argument 1: 'index_bound' is not a positive integer");
  EXPECT_EQ(parseError(edited("\"kind\": \"temporary\"", "\"kind\": \"heap\"")),
            "buffer 2: unknown kind 'heap'");
  EXPECT_EQ(parseError(edited("\"offset\": 256", "\"offset\": 768")),
            "buffer 2: bytes [768, 1280) lie past the arena of 1024 bytes");
  EXPECT_EQ(
      parseError(edited("\"ptx\": \"step.ptx\"", "\"ptx\": \"../step.ptx\"")),
      "'ptx' is not a file name beside the program: \"../step.ptx\"");
  EXPECT_EQ(parseError(edited("\"serial_iterations\": 32",
                              "\"serial_iterations\": 0")),
            "op 0 (linalg.generic (model.py:3)): member 1: "
            "'serial_iterations' is 0, out of range [1, "
            "9223372036854775807]");
  EXPECT_EQ(parseError(edited("\"buffers\": [\n            1,\n            2\n"
                              "          ]",
                              "\"buffers\": [7]")),
            "op 0 (linalg.generic (model.py:3)): member 1: a buffer index is "
            "not one of the 3 the launch takes");
  EXPECT_EQ(
      parseError(edited("\"thread_stride\": 32", "\"thread_stride\": 48")),
      "op 0 (linalg.generic (model.py:3)): member 1: thread_stride 48 "
      "does not divide the block size 128");
  EXPECT_EQ(parseError(edited("\"elements_per_thread\": 4",
                              "\"elements_per_thread\": -1")),
            "op 0 (linalg.generic (model.py:3)): member 0: "
            "'elements_per_thread' is -1, out of range [1, "
            "9223372036854775807]");
  EXPECT_EQ(parseError(edited("\"row_columns\": 64", "\"row_columns\": -2")),
            "op 0 (linalg.generic (model.py:3)): member 1: 'row_columns' is "
            "-2, out of range [0, 9223372036854775807]");
  EXPECT_EQ(parseError(edited("\"thread_stride\": 32", "\"thread_stride\": 0")),
            "op 0 (linalg.generic (model.py:3)): member 1: 'thread_stride' is "
            "0, out of range [1, 9223372036854775807]");
  EXPECT_EQ(
      parseError(edited("\"epilogue\": \"bias\"", "\"epilogue\": \"relu\"")),
      "op 1 (linalg.matmul (model.py:5)): unknown epilogue 'relu' "
      "(none or bias)");
}

/// A kernel that says what it issues (the fused attention's): its weighted
/// instructions per serial iteration and its tensor-core flops, written
/// only when set, read back, and refused out of range.
TEST(GpuProgram, IssueCountsSurviveWritingAndReading) {
  GpuProgram program = sampleProgram();
  std::string plain = writeGpuProgram(program);
  EXPECT_EQ(plain.find("\"ops_per_iteration\""), std::string::npos);
  EXPECT_EQ(plain.find("\"tensor_flops\""), std::string::npos);
  program.ops[0].opsPerIteration = 1043;
  program.ops[0].tensorFlops = 4563402752;
  std::string text = writeGpuProgram(program);
  GpuProgram read;
  std::string error;
  ASSERT_TRUE(parseGpuProgram(text, read, error)) << error;
  EXPECT_EQ(read.ops[0].opsPerIteration, 1043);
  EXPECT_EQ(read.ops[0].tensorFlops, 4563402752);
  ASSERT_TRUE(parseGpuProgram(plain, read, error)) << error;
  EXPECT_EQ(read.ops[0].opsPerIteration, 1);
  EXPECT_EQ(read.ops[0].tensorFlops, 0);
  auto replaced = [&](const std::string &from, const std::string &to) {
    std::string copy = text;
    size_t at = copy.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos)
      copy.replace(at, from.size(), to);
    return copy;
  };
  EXPECT_EQ(parseError(replaced("\"ops_per_iteration\": 1043",
                                "\"ops_per_iteration\": 0")),
            "op 0 (linalg.generic (model.py:3)): 'ops_per_iteration' is 0, "
            "out of range [1, 9223372036854775807]");
  EXPECT_EQ(parseError(replaced("\"tensor_flops\": 4563402752",
                                "\"tensor_flops\": -2")),
            "op 0 (linalg.generic (model.py:3)): 'tensor_flops' is -2, out "
            "of range [0, 9223372036854775807]");
}
