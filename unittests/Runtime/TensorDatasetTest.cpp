//===- TensorDatasetTest.cpp - Safetensors files as a step's samples ------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// TensorDataset (TensorDataset.h): files concatenate along the samples, a
// sharded index is one dataset, a micro-batch holds the samples of the
// global order docs/data.md writes down, and data that does not fit the step
// is refused with the file, the tensor and what differs.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/TensorDataset.h"
#include "RuntimeTestUtils.h"
#include "gtest/gtest.h"

#include <cstring>
#include <fstream>

using namespace mlir::mantissa::rt;

namespace {

/// A tensor of `shape` holding `values` converted to `dtype` (F32, I64, I32
/// or BOOL).
HostTensor tensorOf(const std::string &name, DType dtype,
                    std::vector<int64_t> shape,
                    const std::vector<double> &values) {
  HostTensor tensor;
  tensor.name = name;
  tensor.dtype = dtype;
  tensor.shape = std::move(shape);
  size_t width = elementSize(dtype);
  tensor.bytes.resize(values.size() * width);
  for (size_t i = 0; i < values.size(); ++i) {
    uint8_t *out = tensor.bytes.data() + i * width;
    if (dtype == DType::F32) {
      float value = float(values[i]);
      std::memcpy(out, &value, 4);
    } else if (dtype == DType::I64) {
      int64_t value = int64_t(values[i]);
      std::memcpy(out, &value, 8);
    } else if (dtype == DType::I32) {
      int32_t value = int32_t(values[i]);
      std::memcpy(out, &value, 4);
    } else {
      *out = uint8_t(values[i]);
    }
  }
  return tensor;
}

/// Samples [first, first + count) of the features (x[s] = {10 s, 10 s + 1})
/// and labels (s % 3).
std::vector<HostTensor> samples(int64_t first, int64_t count) {
  std::vector<double> x, label;
  for (int64_t s = first; s < first + count; ++s) {
    x.push_back(10.0 * s);
    x.push_back(10.0 * s + 1);
    label.push_back(double(s % 3));
  }
  return {tensorOf("x", DType::F32, {count, 2}, x),
          tensorOf("label", DType::I64, {count}, label)};
}

std::string write(const ScratchDir &dir, const std::string &name,
                  const std::vector<HostTensor> &tensors) {
  std::string path = dir.file(name), error;
  EXPECT_TRUE(writeSafeTensors(path, tensors, {}, error)) << error;
  return path;
}

StepTensor userInput(const std::string &name, DType dtype,
                     std::vector<int64_t> shape, int64_t bound = 0) {
  StepTensor input;
  input.name = name;
  input.role = StepTensor::Role::UserInput;
  input.dtype = dtype;
  input.shape = std::move(shape);
  input.bytes = input.numElements() * int64_t(elementSize(dtype));
  input.indexBound.bound = bound;
  input.indexBound.what = "the rows of embedding 'emb.weight'";
  return input;
}

/// The step of these tests: 3 samples of features and int32 labels < 3.
std::vector<StepTensor> step() {
  StepTensor weight;
  weight.name = "w";
  weight.shape = {2};
  weight.bytes = 8;
  return {weight, userInput("x", DType::F32, {3, 2}),
          userInput("label", DType::I32, {3}, 3)};
}

std::vector<float> floats(const HostTensor &tensor) {
  std::vector<float> values(tensor.bytes.size() / 4);
  std::memcpy(values.data(), tensor.bytes.data(), tensor.bytes.size());
  return values;
}

std::vector<int32_t> ints(const HostTensor &tensor) {
  std::vector<int32_t> values(tensor.bytes.size() / 4);
  std::memcpy(values.data(), tensor.bytes.data(), tensor.bytes.size());
  return values;
}

/// What open() says about `files` for step(), or "" when it opens.
std::string refusal(const std::vector<std::string> &files,
                    const std::vector<StepTensor> &arguments = step()) {
  TensorDataset::Options options;
  options.train = files;
  std::string error;
  return TensorDataset::open(arguments, options, error) ? "" : error;
}

TEST(TensorDatasetTest, MicroBatchesFollowTheGlobalSampleOrder) {
  ScratchDir dir;
  TensorDataset::Options options;
  // Ten samples in two files of 6 and 4, concatenated.
  options.train = {write(dir, "a.safetensors", samples(0, 6)),
                   write(dir, "b.safetensors", samples(6, 4))};
  options.validation = {write(dir, "val.safetensors", samples(100, 7))};
  options.shuffleSeed = 42;
  options.evalBatches = 2;
  std::string error;
  std::unique_ptr<TensorDataset> dataset =
      TensorDataset::open(step(), options, error);
  ASSERT_TRUE(dataset) << error;
  EXPECT_EQ(dataset->samplesPerMicroBatch(), 3);
  EXPECT_EQ(dataset->tokensPerMicroBatch(), 0);
  EXPECT_EQ(dataset->validationMicroBatches(), 2);
  EXPECT_EQ(dataset->columns(DataSplit::Training).numSamples(), 10);

  // Global micro-batch 4 is global samples 12, 13, 14: positions 2, 3, 4 of
  // epoch 1, whose permutation docs/data.md gives for (10, 42, 1):
  // [7, 5, 8, 0, 9, 6, 2, 1, 4, 3].
  std::vector<HostTensor> inputs;
  ASSERT_TRUE(dataset->loadMicroBatch(DataSplit::Training,
                                      dataset->firstSample(4), inputs, error))
      << error;
  ASSERT_EQ(inputs.size(), 2u);
  EXPECT_EQ(inputs[0].name, "x");
  EXPECT_EQ(inputs[0].shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(floats(inputs[0]), (std::vector<float>{80, 81, 0, 1, 90, 91}));
  // The int64 labels arrive in the input's int32.
  EXPECT_EQ(inputs[1].name, "label");
  EXPECT_EQ(inputs[1].dtype, DType::I32);
  EXPECT_EQ(ints(inputs[1]), (std::vector<int32_t>{2, 0, 0}));

  // Validation micro-batch 1 is samples 3, 4, 5 in order.
  ASSERT_TRUE(dataset->loadMicroBatch(DataSplit::Validation,
                                      dataset->firstSample(1), inputs, error))
      << error;
  EXPECT_EQ(floats(inputs[0]),
            (std::vector<float>{1030, 1031, 1040, 1041, 1050, 1051}));
  // Its samples end at 6: micro-batch 2 would need sample 8 of 7.
  EXPECT_FALSE(dataset->loadMicroBatch(DataSplit::Validation,
                                       dataset->firstSample(2), inputs, error));
  EXPECT_CONTAINS(error, "are not in the 7 samples of the validation dataset");
}

TEST(TensorDatasetTest, UnshuffledOrderCrossesFilesAndEpochs) {
  ScratchDir dir;
  TensorDataset::Options options;
  options.train = {write(dir, "a.safetensors", samples(0, 4)),
                   write(dir, "b.safetensors", samples(4, 1))};
  std::string error;
  std::unique_ptr<TensorDataset> dataset =
      TensorDataset::open(step(), options, error);
  ASSERT_TRUE(dataset) << error;
  // Global samples 3, 4, 5 are samples 3 (file a), 4 (file b) and 0 (the
  // second epoch).
  std::vector<HostTensor> inputs;
  ASSERT_TRUE(dataset->loadMicroBatch(DataSplit::Training, 3, inputs, error))
      << error;
  EXPECT_EQ(floats(inputs[0]), (std::vector<float>{30, 31, 40, 41, 0, 1}));
}

TEST(TensorDatasetTest, ShardedIndexIsOneDataset) {
  ScratchDir dir;
  std::vector<HostTensor> all = samples(0, 5);
  write(dir, "features.safetensors", {all[0]});
  write(dir, "labels.safetensors", {all[1]});
  std::string index = dir.file("model.safetensors.index.json");
  std::ofstream(index) << R"({"metadata": {"total_size": 60}, "weight_map":
      {"x": "features.safetensors", "label": "labels.safetensors"}})";
  TensorDataset::Options options;
  options.train = {index};
  std::string error;
  std::unique_ptr<TensorDataset> dataset =
      TensorDataset::open(step(), options, error);
  ASSERT_TRUE(dataset) << error;
  EXPECT_EQ(dataset->columns(DataSplit::Training).files().size(), 2u);
  std::vector<HostTensor> inputs;
  ASSERT_TRUE(dataset->loadMicroBatch(DataSplit::Training, 2, inputs, error))
      << error;
  EXPECT_EQ(floats(inputs[0]), (std::vector<float>{20, 21, 30, 31, 40, 41}));
  EXPECT_EQ(ints(inputs[1]), (std::vector<int32_t>{2, 0, 1}));

  // The index must say what the shards hold.
  std::ofstream(index) << R"({"weight_map": {"x": "labels.safetensors",
      "label": "labels.safetensors"}})";
  std::string message = refusal({index});
  EXPECT_CONTAINS(message, "labels.safetensors: does not hold what the index");
  EXPECT_CONTAINS(message, "missing 'x'");
  std::ofstream(index) << R"({"shards": []})";
  EXPECT_CONTAINS(refusal({index}), "no 'weight_map' object");
}

TEST(TensorDatasetTest, RefusesSampleCountsThatDisagree) {
  ScratchDir dir;
  std::vector<HostTensor> ragged = samples(0, 5);
  ragged[1] = samples(0, 4)[1];
  EXPECT_CONTAINS(
      refusal({write(dir, "ragged.safetensors", ragged)}),
      "ragged.safetensors: tensor 'x' holds 5 samples, tensor "
      "'label' 4; the tensors of one file share their first (sample) "
      "dimension");
  EXPECT_CONTAINS(
      refusal({write(dir, "empty.safetensors", samples(0, 0))}),
      "empty.safetensors: holds no samples (its tensors' first dimension, N, "
      "is 0)");
  std::vector<HostTensor> five = samples(0, 5), six = samples(0, 6);
  std::string message = refusal({write(dir, "x5.safetensors", {five[0]}),
                                 write(dir, "label6.safetensors", {six[1]})});
  EXPECT_CONTAINS(message, "the tensors 'x' (from ");
  EXPECT_CONTAINS(message, "x5.safetensors) hold 5 samples, the tensors "
                           "'label' (from ");
  EXPECT_CONTAINS(message, "label6.safetensors) 6; every tensor of a dataset "
                           "holds the same samples");
  EXPECT_CONTAINS(refusal({write(dir, "both.safetensors", five),
                           write(dir, "xonly.safetensors", {five[0]})}),
                  "xonly.safetensors: holds the tensors 'x', but ");
  HostTensor scalar = tensorOf("x", DType::F32, {}, {1});
  EXPECT_CONTAINS(refusal({write(dir, "scalar.safetensors", {scalar})}),
                  "tensor 'x' is a scalar");
}

TEST(TensorDatasetTest, RefusesDataThatDoesNotFitTheStep) {
  ScratchDir dir;
  std::vector<HostTensor> data = samples(0, 5);
  // A name no input has, besides the ones every input needs.
  std::vector<HostTensor> extra = data;
  extra.push_back(tensorOf("z", DType::F32, {5}, {0, 0, 0, 0, 0}));
  EXPECT_CONTAINS(refusal({write(dir, "extra.safetensors", extra)}),
                  "extra.safetensors: tensor 'z' fills none of the step's user "
                  "inputs ('x', 'label'");
  EXPECT_EQ(refusal({write(dir, "nolabel.safetensors", {data[0]})}),
            "--dataset: no tensor 'label' for the step's user input 'label' "
            "(the dataset holds 'x'; --dataset-map INPUT=TENSOR fills an "
            "input from a tensor of another name)");
  std::vector<HostTensor> wide = data;
  wide[0] = tensorOf("x", DType::F32, {5, 3}, std::vector<double>(15, 0.0));
  EXPECT_CONTAINS(refusal({write(dir, "wide.safetensors", wide)}),
                  "wide.safetensors: tensor 'x' holds samples of [3], the "
                  "step's user input 'x' takes [3, 2]: 3 samples of [2]");
  std::vector<HostTensor> floatLabels = data;
  floatLabels[1] = tensorOf("label", DType::F32, {5}, {0, 1, 2, 0, 1});
  EXPECT_CONTAINS(refusal({write(dir, "floatlabels.safetensors", floatLabels)}),
                  "tensor 'label' is F32, the step's user input 'label' takes "
                  "I32");
}

TEST(TensorDatasetTest, ChecksIdsAgainstTheirBound) {
  ScratchDir dir;
  std::vector<HostTensor> data = samples(0, 5);
  data[1] = tensorOf("label", DType::I64, {5}, {0, 1, 2, 3, 1});
  EXPECT_CONTAINS(refusal({write(dir, "a.safetensors", samples(0, 5)),
                           write(dir, "bad.safetensors", data)}),
                  "bad.safetensors: tensor 'label' sample 3 (sample 8 of the "
                  "dataset), element 0: id 3 is outside [0, 3) (the rows of "
                  "embedding 'emb.weight'), for the step's user input 'label'");
  // A loss's ignored id passes.
  std::vector<StepTensor> arguments = step();
  arguments[2].indexBound.ignored = -100;
  data[1] = tensorOf("label", DType::I64, {5}, {0, 1, -100, 2, 1});
  EXPECT_EQ(refusal({write(dir, "ignored.safetensors", data)}, arguments), "");
  // Without a bound an int64 id still has to fit the int32 input.
  arguments[2].indexBound = IndexBound();
  data[1] = tensorOf("label", DType::I64, {5}, {0, 1, 4294967296.0, 2, 1});
  EXPECT_CONTAINS(refusal({write(dir, "huge.safetensors", data)}, arguments),
                  "id 4294967296 is outside the step's I32 input");
}

TEST(TensorDatasetTest, RenamesAndGeneratedInputs) {
  ScratchDir dir;
  std::vector<HostTensor> data = samples(0, 5);
  data[1].name = "class";
  TensorDataset::Options options;
  options.train = {write(dir, "renamed.safetensors", data)};
  options.tensorOfInput = {{"label", "class"}};
  std::string error;
  std::unique_ptr<TensorDataset> dataset =
      TensorDataset::open(step(), options, error);
  ASSERT_TRUE(dataset) << error;
  std::vector<HostTensor> inputs;
  ASSERT_TRUE(dataset->loadMicroBatch(DataSplit::Training, 0, inputs, error))
      << error;
  EXPECT_EQ(inputs[1].name, "label");
  EXPECT_EQ(ints(inputs[1]), (std::vector<int32_t>{0, 1, 2}));

  options.tensorOfInput = {{"lable", "class"}};
  EXPECT_FALSE(TensorDataset::open(step(), options, error));
  EXPECT_EQ(error, "--dataset-map: 'lable' is not a user input of the step "
                   "(its user inputs are 'x', 'label')");

  // An input the step fills itself (random state) is neither needed nor
  // given.
  std::vector<StepTensor> arguments = step();
  arguments.push_back(userInput("noise", DType::F32, {3, 2}));
  options.tensorOfInput = {{"label", "class"}};
  options.generatedInputs = {"noise"};
  dataset = TensorDataset::open(arguments, options, error);
  ASSERT_TRUE(dataset) << error;
  ASSERT_TRUE(dataset->loadMicroBatch(DataSplit::Training, 0, inputs, error))
      << error;
  EXPECT_EQ(inputs.size(), 2u);
  options.generatedInputs.clear();
  EXPECT_FALSE(TensorDataset::open(arguments, options, error));
  EXPECT_CONTAINS(error, "no tensor 'noise' for the step's user input 'noise'");
}

} // namespace
