//===- BatchSourceTest.cpp - Token data as a batch source -----------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// TokenBatches through the BatchSource interface: a micro-batch is B
// consecutive samples of the global order from its first global sample
// index, the same ids TokenBatches::load gives for the micro-batch count.
//
//===----------------------------------------------------------------------===//

#include "RuntimeTestUtils.h"
#include "mantissa/Runtime/TokenData.h"
#include "gtest/gtest.h"

#include <cstring>
#include <fstream>

using namespace mlir::mantissa::rt;

namespace {

/// A headerless uint16 token file of tokens 0, 1, ..., count - 1.
std::string writeCounting(const ScratchDir &dir, const std::string &name,
                          int count) {
  std::string path = dir.file(name);
  std::ofstream stream(path, std::ios::binary);
  for (int i = 0; i < count; ++i) {
    uint8_t bytes[2] = {uint8_t(i), uint8_t(i >> 8)};
    stream.write(reinterpret_cast<const char *>(bytes), 2);
  }
  return path;
}

std::vector<int64_t> ids(const HostTensor &tensor) {
  std::vector<int64_t> values(tensor.bytes.size() / 8);
  std::memcpy(values.data(), tensor.bytes.data(), tensor.bytes.size());
  return values;
}

TEST(BatchSourceTest, TokenBatchesByGlobalSampleIndex) {
  ScratchDir dir;
  TokenBatches::Options options;
  options.train = {writeCounting(dir, "train.bin", 401)};
  options.validation = {writeCounting(dir, "val.bin", 81)};
  options.format = "raw-u16";
  options.shuffleSeed = 7;
  options.batch = 3;
  options.seqLen = 4;
  options.evalBatches = 2;
  options.tokens.bound = options.targets.bound = 1000;
  options.tokens.what = "tokens";
  options.targets.what = "targets";
  std::string error;
  std::unique_ptr<TokenBatches> batches = TokenBatches::open(options, error);
  ASSERT_TRUE(batches) << error;
  BatchSource &source = *batches;
  EXPECT_EQ(source.samplesPerMicroBatch(), 3);
  EXPECT_EQ(source.tokensPerMicroBatch(), 12);
  EXPECT_EQ(source.validationMicroBatches(), 6);
  // Global micro-batch 37 (past the first epoch of 100 samples) starts at
  // global sample 111.
  EXPECT_EQ(source.firstSample(37), 111);
  for (DataSplit split : {DataSplit::Training, DataSplit::Validation}) {
    bool validation = split == DataSplit::Validation;
    int64_t index = validation ? 5 : 37;
    std::vector<HostTensor> inputs;
    ASSERT_TRUE(
        source.loadMicroBatch(split, source.firstSample(index), inputs, error))
        << error;
    ASSERT_EQ(inputs.size(), 2u);
    EXPECT_EQ(inputs[0].name, "tokens");
    EXPECT_EQ(inputs[1].name, "targets");
    EXPECT_EQ(inputs[0].shape, (std::vector<int64_t>{3, 4}));
    std::vector<int64_t> tokens, targets;
    ASSERT_TRUE(batches->load(validation, index, tokens, targets, error))
        << error;
    EXPECT_EQ(ids(inputs[0]), tokens);
    EXPECT_EQ(ids(inputs[1]), targets);
  }
}

} // namespace
