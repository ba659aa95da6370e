//===- SafeTensorsTest.cpp - Tests for safetensors reading and writing ----===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/SafeTensors.h"
#include "RuntimeTestUtils.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace mlir::mantissa::rt;

namespace {

std::string corpusPath(const std::string &name) {
  return std::string(MANTISSA_CORPUS_DIR) + "/" + name;
}

std::vector<uint8_t> readBytes(const std::string &path) {
  std::ifstream stream(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(stream), {});
}

void writeBytes(const std::string &path, const std::vector<uint8_t> &bytes) {
  std::ofstream stream(path, std::ios::binary);
  stream.write(reinterpret_cast<const char *>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
}

/// A safetensors image with `header` as its JSON and `dataSize` bytes of data;
/// `declaredLength` overrides the header length field to corrupt it.
std::vector<uint8_t>
makeImage(const std::string &header, size_t dataSize,
          std::optional<uint64_t> declaredLength = std::nullopt) {
  uint64_t length = declaredLength.value_or(header.size());
  std::vector<uint8_t> image;
  for (int i = 0; i < 8; ++i)
    image.push_back(static_cast<uint8_t>(length >> (8 * i)));
  image.insert(image.end(), header.begin(), header.end());
  for (size_t i = 0; i < dataSize; ++i)
    image.push_back(static_cast<uint8_t>(i));
  return image;
}

/// Parses `image` and returns the error, failing the test if it parsed.
std::string parseError(const std::vector<uint8_t> &image) {
  SafeTensorsFile file;
  std::string error;
  bool ok = SafeTensorsFile::parse(image.data(), image.size(),
                                   "corrupt.safetensors", file, error);
  EXPECT_FALSE(ok) << "expected a parse error";
  EXPECT_EQ(file.size(), 0u);
  EXPECT_EQ(error.rfind("corrupt.safetensors: ", 0), 0u) << error;
  return error;
}

HostTensor makeRawTensor(std::string name, DType dtype,
                         std::vector<int64_t> shape,
                         std::vector<uint8_t> bytes) {
  HostTensor tensor;
  tensor.name = std::move(name);
  tensor.dtype = dtype;
  tensor.shape = std::move(shape);
  tensor.bytes = std::move(bytes);
  return tensor;
}

//===----------------------------------------------------------------------===//
// HostTensor helpers
//===----------------------------------------------------------------------===//

TEST(HostTensorTest, NumElements) {
  EXPECT_EQ(makeRawTensor("s", DType::F32, {}, {}).numElements(), 1);
  EXPECT_EQ(makeRawTensor("m", DType::F32, {3, 4, 5}, {}).numElements(), 60);
  EXPECT_EQ(makeRawTensor("z", DType::F32, {3, 0}, {}).numElements(), 0);
  EXPECT_EQ(makeRawTensor("n", DType::F32, {3, -1}, {}).numElements(), -1);
  int64_t big = int64_t(1) << 40;
  EXPECT_EQ(makeRawTensor("o", DType::F32, {big, big}, {}).numElements(), -1);
}

TEST(HostTensorTest, FloatConversions) {
  const float values[] = {1.0f, 1.0f / 3.0f, -65520.0f, 1e-5f, NAN};
  HostTensor bf16 = fromFloat32("b", {5}, values, DType::BF16);
  ASSERT_EQ(bf16.bytes.size(), 10u);
  EXPECT_EQ(bf16.bytes[2], 0xAB); // 1/3 -> 0x3EAB, little-endian
  EXPECT_EQ(bf16.bytes[3], 0x3E);
  std::vector<float> back = toFloat32(bf16);
  ASSERT_EQ(back.size(), 5u);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], 0.333984375f);
  EXPECT_EQ(back[2], -65536.0f);
  EXPECT_TRUE(std::isnan(back[4]));

  HostTensor f16 = fromFloat32("h", {5}, values, DType::F16);
  back = toFloat32(f16);
  EXPECT_EQ(back[1], 0.333251953125f);
  EXPECT_EQ(back[2], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(back[3], std::ldexp(168.0f, -24)); // 1e-5 as an fp16 subnormal
  EXPECT_TRUE(std::isnan(back[4]));

  HostTensor f64 = fromFloat32("d", {5}, values, DType::F64);
  EXPECT_EQ(f64.bytes.size(), 40u);
  EXPECT_EQ(toFloat32(f64)[1], 1.0f / 3.0f);
}

TEST(HostTensorTest, IntegerConversionsSaturate) {
  const float values[] = {300.0f, -300.0f, NAN, 2.7f, -2.7f, 0.0f};
  HostTensor i8 = fromFloat32("i", {2, 3}, values, DType::I8);
  std::vector<float> back = toFloat32(i8);
  EXPECT_EQ(back, (std::vector<float>{127, -128, 0, 2, -2, 0}));
  HostTensor u8 = fromFloat32("u", {6}, values, DType::U8);
  EXPECT_EQ(toFloat32(u8), (std::vector<float>{255, 0, 0, 2, 0, 0}));
  HostTensor boolean = fromFloat32("b", {6}, values, DType::Bool);
  EXPECT_EQ(boolean.bytes, (std::vector<uint8_t>{1, 1, 1, 1, 1, 0}));
  const float huge[] = {1e30f, -1e30f};
  HostTensor i64 = fromFloat32("l", {2}, huge, DType::I64);
  int64_t stored[2];
  std::memcpy(stored, i64.bytes.data(), sizeof(stored));
  EXPECT_EQ(stored[0], std::numeric_limits<int64_t>::max());
  EXPECT_EQ(stored[1], std::numeric_limits<int64_t>::min());
}

TEST(HostTensorTest, MalformedTensorsAreSafe) {
  HostTensor invalid = fromFloat32("bad", {-2}, nullptr, DType::F32);
  EXPECT_TRUE(invalid.bytes.empty());
  // Three bytes of F32: no whole element, and no out-of-bounds read.
  EXPECT_TRUE(
      toFloat32(makeRawTensor("t", DType::F32, {1}, {1, 2, 3})).empty());
}

//===----------------------------------------------------------------------===//
// Round trip and corpus
//===----------------------------------------------------------------------===//

TEST(SafeTensorsTest, WriteReadRoundTrip) {
  ScratchDir dir;
  const float weights[] = {0.5f, -1.25f, 3.0f, 1.0f / 3.0f, 1e-3f, -7.0f};
  std::vector<HostTensor> tensors;
  tensors.push_back(fromFloat32("w.f32", {2, 3}, weights, DType::F32));
  tensors.push_back(fromFloat32("w.bf16", {3, 2}, weights, DType::BF16));
  tensors.push_back(fromFloat32("w.f16", {6}, weights, DType::F16));
  tensors.push_back(fromFloat32("scalar", {}, weights, DType::F64));
  tensors.push_back(makeRawTensor("tokens", DType::I64, {2},
                                  {7, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF,
                                   0xFF, 0xFF, 0xFF, 0xFF, 0xFF}));
  tensors.push_back(makeRawTensor("mask", DType::Bool, {3}, {1, 0, 1}));
  tensors.push_back(
      makeRawTensor("bytes", DType::U8, {1, 1, 5}, {1, 2, 3, 4, 5}));
  tensors.push_back(makeRawTensor("empty", DType::I32, {0, 4}, {}));
  std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                 {"step", "7"}};
  std::string path = dir.file("round.safetensors");
  std::string error;
  ASSERT_TRUE(writeSafeTensors(path, tensors, metadata, error)) << error;
  EXPECT_FALSE(dir.hasTemporaryFile());

  SafeTensorsFile file;
  ASSERT_TRUE(SafeTensorsFile::read(path, file, error)) << error;
  EXPECT_EQ(file.metadata(), metadata);
  EXPECT_EQ(file.names(),
            (std::vector<std::string>{"bytes", "empty", "mask", "scalar",
                                      "tokens", "w.bf16", "w.f16", "w.f32"}));
  for (const HostTensor &expected : tensors) {
    const HostTensor *actual = file.find(expected.name);
    ASSERT_NE(actual, nullptr) << expected.name;
    EXPECT_EQ(actual->name, expected.name);
    EXPECT_EQ(actual->dtype, expected.dtype) << expected.name;
    EXPECT_EQ(actual->shape, expected.shape) << expected.name;
    EXPECT_EQ(actual->bytes, expected.bytes) << expected.name;
  }
  EXPECT_EQ(file.find("missing"), nullptr);
  EXPECT_EQ(toFloat32(*file.find("w.bf16"))[3], 0.333984375f);
  EXPECT_EQ(toFloat32(*file.find("tokens"))[1], -1.0f);

  // The header is padded with spaces so the data starts 8-byte aligned, and
  // the metadata comes first.
  std::vector<uint8_t> raw = readBytes(path);
  uint64_t headerLength = 0;
  for (int i = 7; i >= 0; --i)
    headerLength = (headerLength << 8) | raw[i];
  EXPECT_EQ(headerLength % 8, 0u);
  std::string header(raw.begin() + 8, raw.begin() + 8 + headerLength);
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"format\":\"pt\"", 0), 0u)
      << header;
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));
}

/// A filtered read loads only the chosen tensors' data (a checkpoint rank's
/// own ranges) and still describes every tensor.
TEST(SafeTensorsTest, FilteredReadLoadsOnlyChosenData) {
  ScratchDir dir;
  const float values[] = {1, 2, 3, 4};
  std::vector<HostTensor> tensors = {
      fromFloat32("param/w", {4}, values, DType::F32),
      fromFloat32("master/w", {2}, values + 2, DType::F32)};
  std::string path = dir.file("filtered.safetensors");
  std::string error;
  ASSERT_TRUE(writeSafeTensors(path, tensors, {{"ranges", "{}"}}, error))
      << error;
  SafeTensorsFile file;
  std::vector<std::string> asked;
  ASSERT_TRUE(SafeTensorsFile::read(
      path, file, error,
      [&](const std::string &name,
          const std::map<std::string, std::string> &metadata) {
        asked.push_back(name);
        EXPECT_EQ(metadata.at("ranges"), "{}");
        return name == "param/w";
      }))
      << error;
  EXPECT_EQ(asked.size(), 2u);
  EXPECT_EQ(file.find("param/w")->bytes, tensors[0].bytes);
  ASSERT_NE(file.find("master/w"), nullptr);
  EXPECT_TRUE(file.find("master/w")->bytes.empty());
  EXPECT_EQ(file.find("master/w")->shape, (std::vector<int64_t>{2}));
}

TEST(SafeTensorsTest, KeepsFileOrderOfNames) {
  std::string header = "{\"b\":{\"dtype\":\"U8\",\"shape\":[1],"
                       "\"data_offsets\":[0,1]},"
                       "\"a\":{\"dtype\":\"U8\",\"shape\":[2],"
                       "\"data_offsets\":[1,3]}}";
  std::vector<uint8_t> image = makeImage(header, 3);
  SafeTensorsFile file;
  std::string error;
  ASSERT_TRUE(SafeTensorsFile::parse(image.data(), image.size(), "ordered",
                                     file, error))
      << error;
  EXPECT_EQ(file.names(), (std::vector<std::string>{"b", "a"}));
  EXPECT_EQ(file.tensors()[1].bytes, (std::vector<uint8_t>{1, 2}));
  EXPECT_TRUE(file.metadata().empty());
}

/// Many names, in reverse order: order is kept, and parsing stays fast (a
/// quadratic key lookup would take seconds here).
TEST(SafeTensorsTest, ManyTensors) {
  constexpr int kCount = 20000;
  std::string header = "{";
  for (int i = kCount - 1; i >= 0; --i) {
    header += "\"t" + std::to_string(i) +
              "\":{\"dtype\":\"U8\",\"shape\":[1],"
              "\"data_offsets\":[" +
              std::to_string(i) + "," + std::to_string(i + 1) + "]}";
    header += i ? "," : "}";
  }
  std::vector<uint8_t> image = makeImage(header, kCount);
  SafeTensorsFile file;
  std::string error;
  ASSERT_TRUE(
      SafeTensorsFile::parse(image.data(), image.size(), "many", file, error))
      << error;
  ASSERT_EQ(file.size(), size_t(kCount));
  EXPECT_EQ(file.names().front(), "t19999");
  EXPECT_EQ(file.names().back(), "t0");
  EXPECT_EQ(file.find("t300")->bytes, (std::vector<uint8_t>{300 % 256}));
}

TEST(SafeTensorsTest, ReadsCorpusGradients) {
  std::string path = corpusPath("mlp.grads.safetensors");
  SafeTensorsFile file;
  std::string error;
  ASSERT_TRUE(SafeTensorsFile::read(path, file, error)) << error;
  EXPECT_EQ(file.size(), 5u);
  const HostTensor *loss = file.find("loss");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->dtype, DType::F32);
  EXPECT_EQ(loss->shape, (std::vector<int64_t>{1}));
  // The same number as step 0 of the fp32 arm in mlp.traj.json.
  EXPECT_FLOAT_EQ(toFloat32(*loss)[0], 0.689609169960022f);

  const HostTensor *weightGrad = file.find("grad.fc1.weight");
  ASSERT_NE(weightGrad, nullptr);
  EXPECT_EQ(weightGrad->shape, (std::vector<int64_t>{32, 16}));
  EXPECT_EQ(file.find("grad.fc2.weight")->shape, (std::vector<int64_t>{8, 32}));
  std::vector<float> values = toFloat32(*weightGrad);
  ASSERT_EQ(values.size(), 512u);
  bool anyNonZero = false;
  for (float value : values) {
    EXPECT_TRUE(std::isfinite(value));
    anyNonZero |= value != 0.0f;
  }
  EXPECT_TRUE(anyNonZero);
}

/// Our writer lays files out exactly as torch's safetensors does (for
/// single-dtype files), so rewriting a corpus file reproduces it byte for byte.
TEST(SafeTensorsTest, RewritesCorpusFileIdentically) {
  std::string path = corpusPath("mlp.grads.safetensors");
  SafeTensorsFile file;
  std::string error;
  ASSERT_TRUE(SafeTensorsFile::read(path, file, error)) << error;
  ScratchDir dir;
  std::string copy = dir.file("copy.safetensors");
  ASSERT_TRUE(writeSafeTensors(copy, file.tensors(), file.metadata(), error))
      << error;
  EXPECT_EQ(readBytes(copy), readBytes(path));
}

TEST(SafeTensorsTest, ReadsCorpusIntegerInputs) {
  SafeTensorsFile file;
  std::string error;
  ASSERT_TRUE(SafeTensorsFile::read(corpusPath("llama.inputs.safetensors"),
                                    file, error))
      << error;
  const HostTensor *tokens = file.find("input.0");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->dtype, DType::I64);
  EXPECT_EQ(tokens->shape, (std::vector<int64_t>{2, 8}));
  for (float token : toFloat32(*tokens)) {
    EXPECT_GE(token, 0.0f);
    EXPECT_LT(token, 64.0f); // vocabulary of the llama model
  }
}

//===----------------------------------------------------------------------===//
// Corrupt input
//===----------------------------------------------------------------------===//

TEST(SafeTensorsCorruptTest, MissingFileNamesPath) {
  SafeTensorsFile file;
  std::string error;
  EXPECT_FALSE(
      SafeTensorsFile::read("/nonexistent/x.safetensors", file, error));
  EXPECT_CONTAINS(error, "/nonexistent/x.safetensors: cannot open");
}

TEST(SafeTensorsCorruptTest, ShorterThanLengthField) {
  std::vector<uint8_t> image = {1, 2, 3, 4, 5};
  EXPECT_CONTAINS(parseError(image), "shorter than the 8-byte header length");
  // Through the file path too, so the message names the real file.
  ScratchDir dir;
  std::string path = dir.file("short.safetensors");
  writeBytes(path, image);
  SafeTensorsFile file;
  std::string error;
  EXPECT_FALSE(SafeTensorsFile::read(path, file, error));
  EXPECT_CONTAINS(error, path + ": file is 5 bytes");
}

TEST(SafeTensorsCorruptTest, HeaderLengthBeyondFile) {
  EXPECT_CONTAINS(parseError(makeImage("{}", 0, 100)),
                  "header length 100 is larger than the 2 bytes");
}

TEST(SafeTensorsCorruptTest, HeaderLengthOverLimit) {
  EXPECT_CONTAINS(parseError(makeImage("{}", 0, 200'000'000)),
                  "exceeds the limit of 100000000 bytes");
  EXPECT_CONTAINS(parseError(makeImage("{}", 0, UINT64_MAX)),
                  "exceeds the limit");
}

TEST(SafeTensorsCorruptTest, HeaderNotJson) {
  EXPECT_CONTAINS(parseError(makeImage("{\"a\":", 0)),
                  "header is not valid JSON");
  EXPECT_CONTAINS(parseError(makeImage("", 0)), "header is not valid JSON");
  EXPECT_CONTAINS(parseError(makeImage("{\"\xff\":1}", 0)),
                  "header is not valid JSON");
}

TEST(SafeTensorsCorruptTest, HeaderNotObject) {
  EXPECT_CONTAINS(parseError(makeImage("[1, 2]  ", 0)),
                  "header is not a JSON object");
  EXPECT_CONTAINS(parseError(makeImage("\"text\"", 0)),
                  "header is not a JSON object");
}

TEST(SafeTensorsCorruptTest, DeepNesting) {
  std::string header = "{\"__metadata__\":" + std::string(100000, '[');
  EXPECT_CONTAINS(parseError(makeImage(header, 0)), "nests deeper");
}

std::string entry(const std::string &name, const std::string &dtype,
                  const std::string &shape, const std::string &offsets) {
  return "\"" + name + "\":{\"dtype\":" + dtype + ",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

TEST(SafeTensorsCorruptTest, UnknownDType) {
  std::string error = parseError(
      makeImage("{" + entry("w", "\"F8\"", "[2]", "[0,2]") + "}", 2));
  EXPECT_CONTAINS(error, "tensor 'w': unknown dtype 'F8'");
  error = parseError(makeImage("{" + entry("w", "7", "[2]", "[0,2]") + "}", 2));
  EXPECT_CONTAINS(error, "tensor 'w': dtype is not a string");
}

TEST(SafeTensorsCorruptTest, BadShape) {
  for (const char *shape : {"3", "[-1]", "[2.5]", "[\"2\"]", "[[2]]",
                            "[18446744073709551615]", "null"}) {
    std::string error = parseError(
        makeImage("{" + entry("w", "\"U8\"", shape, "[0,2]") + "}", 2));
    EXPECT_CONTAINS(error,
                    "tensor 'w': shape is not a list of non-negative integers");
  }
}

TEST(SafeTensorsCorruptTest, ShapeOverflow) {
  std::string error = parseError(makeImage(
      "{" + entry("w", "\"F32\"", "[4611686018427387904, 4]", "[0,4]") + "}",
      4));
  EXPECT_CONTAINS(error, "tensor 'w': shape [4611686018427387904, 4] of F32 "
                         "overflows");
  // numel fits int64 but numel * 8 does not.
  error = parseError(makeImage(
      "{" + entry("w", "\"F64\"", "[4611686018427387904]", "[0,4]") + "}", 4));
  EXPECT_CONTAINS(error, "tensor 'w': shape [4611686018427387904] of F64 "
                         "overflows");
}

TEST(SafeTensorsCorruptTest, BadDataOffsets) {
  auto errorFor = [](const std::string &offsets, size_t dataSize) {
    return parseError(
        makeImage("{" + entry("w", "\"F32\"", "[2]", offsets) + "}", dataSize));
  };
  EXPECT_CONTAINS(errorFor("8", 8), "tensor 'w': data_offsets is not a list");
  EXPECT_CONTAINS(errorFor("[0]", 8), "tensor 'w': data_offsets is not a list");
  EXPECT_CONTAINS(errorFor("[0,8,9]", 8),
                  "tensor 'w': data_offsets is not a list");
  EXPECT_CONTAINS(errorFor("[-1,7]", 8),
                  "tensor 'w': data_offsets is not a list");
  EXPECT_CONTAINS(errorFor("[0,16]", 8),
                  "tensor 'w': data_offsets [0, 16] are not within the data "
                  "section of 8 bytes");
  EXPECT_CONTAINS(errorFor("[8,0]", 8), "tensor 'w': data_offsets [8, 0] are "
                                        "not within");
  EXPECT_CONTAINS(errorFor("[18446744073709551615,7]", 8),
                  "are not within the data section");
  EXPECT_CONTAINS(errorFor("[0,4]", 4),
                  "tensor 'w': data_offsets span 4 bytes but shape [2] of F32 "
                  "needs 8");
}

TEST(SafeTensorsCorruptTest, OverlappingTensors) {
  std::string header = "{" + entry("a", "\"U8\"", "[4]", "[0,4]") + "," +
                       entry("b", "\"U8\"", "[4]", "[2,6]") + "}";
  EXPECT_CONTAINS(parseError(makeImage(header, 6)),
                  "tensor 'b': data_offsets overlap those of tensor 'a'");
  // Both tensors on the same bytes.
  header = "{" + entry("a", "\"U8\"", "[4]", "[0,4]") + "," +
           entry("b", "\"U8\"", "[4]", "[0,4]") + "}";
  EXPECT_CONTAINS(parseError(makeImage(header, 4)), "overlap");
}

TEST(SafeTensorsCorruptTest, UnownedBytes) {
  std::string header = "{" + entry("a", "\"U8\"", "[2]", "[2,4]") + "}";
  EXPECT_CONTAINS(parseError(makeImage(header, 4)),
                  "tensor 'a': data section bytes [0, 2) before it belong to "
                  "no tensor");
  header = "{" + entry("a", "\"U8\"", "[2]", "[0,2]") + "}";
  EXPECT_CONTAINS(parseError(makeImage(header, 5)),
                  "data section bytes [2, 5) belong to no tensor");
}

TEST(SafeTensorsCorruptTest, DuplicateNames) {
  std::string header = "{" + entry("w", "\"U8\"", "[1]", "[0,1]") + "," +
                       entry("w", "\"U8\"", "[1]", "[1,2]") + "}";
  EXPECT_CONTAINS(parseError(makeImage(header, 2)),
                  "duplicate tensor name 'w'");
  header = "{\"w\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],"
           "\"data_offsets\":[0,1]}}";
  EXPECT_CONTAINS(parseError(makeImage(header, 1)),
                  "duplicate key 'dtype' in entry of 'w'");
}

TEST(SafeTensorsCorruptTest, BadEntries) {
  EXPECT_CONTAINS(parseError(makeImage("{\"w\":[1]}", 0)),
                  "tensor 'w': entry is not a JSON object");
  EXPECT_CONTAINS(
      parseError(makeImage("{\"w\":{\"dtype\":\"U8\",\"shape\":[0]}}", 0)),
      "tensor 'w': entry needs");
  EXPECT_CONTAINS(parseError(makeImage("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],"
                                       "\"data_offsets\":[0,0],\"extra\":1}}",
                                       0)),
                  "tensor 'w': unknown field 'extra'");
}

TEST(SafeTensorsCorruptTest, BadMetadata) {
  EXPECT_CONTAINS(parseError(makeImage("{\"__metadata__\":[]}", 0)),
                  "__metadata__ is not a JSON object");
  EXPECT_CONTAINS(parseError(makeImage("{\"__metadata__\":{\"step\":7}}", 0)),
                  "__metadata__ value of 'step' is not a string");
}

/// Every prefix of a valid file, and every single-byte change to its header,
/// is either rejected with a message or accepted; nothing crashes.
TEST(SafeTensorsCorruptTest, MutationsNeverCrash) {
  std::vector<uint8_t> valid = readBytes(corpusPath("mlp.grads.safetensors"));
  ASSERT_GT(valid.size(), 400u);
  for (size_t length = 0; length < valid.size(); length += 7) {
    SafeTensorsFile file;
    std::string error;
    EXPECT_FALSE(
        SafeTensorsFile::parse(valid.data(), length, "prefix", file, error));
    EXPECT_FALSE(error.empty());
  }
  for (size_t position = 0; position < 8 + 360; ++position) {
    for (int replacement : {int('0'), int('9'), int('['), int(','), int('"'),
                            int('-'), 0x00, 0xFF}) {
      std::vector<uint8_t> mutated = valid;
      mutated[position] = static_cast<uint8_t>(replacement);
      SafeTensorsFile file;
      std::string error;
      if (!SafeTensorsFile::parse(mutated.data(), mutated.size(), "mutated",
                                  file, error)) {
        EXPECT_FALSE(error.empty());
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// Atomic writing
//===----------------------------------------------------------------------===//

class AtomicWriteTest : public ::testing::Test {
protected:
  void SetUp() override {
    target = dir.file("state.safetensors");
    writeBytes(target, oldContent);
  }
  ScratchDir dir;
  std::string target;
  const std::vector<uint8_t> oldContent = {'o', 'l', 'd'};
};

TEST_F(AtomicWriteTest, SizeMismatchTouchesNothing) {
  std::vector<HostTensor> tensors = {
      makeRawTensor("good", DType::U8, {2}, {1, 2}),
      makeRawTensor("bad", DType::F32, {2, 2}, std::vector<uint8_t>(12))};
  std::string error;
  EXPECT_FALSE(writeSafeTensors(target, tensors, {}, error));
  EXPECT_CONTAINS(error, target + ": tensor 'bad': has 12 bytes but shape "
                                  "[2, 2] of F32 needs 16");
  EXPECT_EQ(readBytes(target), oldContent);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"state.safetensors"}));
}

TEST_F(AtomicWriteTest, InvalidTensorsAreRejected) {
  std::string error;
  HostTensor one = makeRawTensor("x", DType::U8, {1}, {1});
  EXPECT_FALSE(writeSafeTensors(target, {one, one}, {}, error));
  EXPECT_CONTAINS(error, "duplicate tensor name 'x'");
  EXPECT_FALSE(writeSafeTensors(
      target, {makeRawTensor("__metadata__", DType::U8, {1}, {1})}, {}, error));
  EXPECT_CONTAINS(error, "tensor '__metadata__': the name is reserved");
  EXPECT_FALSE(writeSafeTensors(
      target, {makeRawTensor("n", DType::U8, {-1}, {})}, {}, error));
  EXPECT_CONTAINS(error, "tensor 'n': shape [-1] has a negative dimension");
  EXPECT_FALSE(writeSafeTensors(
      target, std::vector<const HostTensor *>{nullptr}, {}, error));
  EXPECT_CONTAINS(error, "tensor #0 is null");
  EXPECT_FALSE(writeSafeTensors(
      target, {makeRawTensor("bad\xff", DType::U8, {1}, {1})}, {}, error));
  EXPECT_CONTAINS(error, "not valid UTF-8");
  EXPECT_EQ(readBytes(target), oldContent);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"state.safetensors"}));
}

/// The rename fails after the temporary file was fully written: it must be
/// removed and the target left alone.
TEST_F(AtomicWriteTest, FailedRenameRemovesTemporary) {
  std::string directoryTarget = dir.file("occupied");
  ASSERT_EQ(::mkdir(directoryTarget.c_str(), 0755), 0);
  writeBytes(directoryTarget + "/keep", oldContent);
  std::string error;
  EXPECT_FALSE(writeSafeTensors(
      directoryTarget, {makeRawTensor("x", DType::U8, {1}, {1})}, {}, error));
  EXPECT_CONTAINS(error, directoryTarget + ": cannot rename");
  EXPECT_EQ(readBytes(directoryTarget + "/keep"), oldContent);
  EXPECT_FALSE(dir.hasTemporaryFile());
  EXPECT_EQ(dir.entries(),
            (std::vector<std::string>{"occupied", "state.safetensors"}));
}

TEST_F(AtomicWriteTest, UnwritableDirectoryTouchesNothing) {
  if (::geteuid() == 0)
    GTEST_SKIP() << "root ignores directory permissions";
  ASSERT_EQ(::chmod(dir.path.c_str(), 0555), 0);
  std::string error;
  EXPECT_FALSE(writeSafeTensors(
      target, {makeRawTensor("x", DType::U8, {1}, {1})}, {}, error));
  ::chmod(dir.path.c_str(), 0755);
  EXPECT_CONTAINS(error, "cannot create");
  EXPECT_EQ(readBytes(target), oldContent);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"state.safetensors"}));
}

TEST_F(AtomicWriteTest, MissingDirectory) {
  std::string error;
  EXPECT_FALSE(writeSafeTensors(dir.file("no/such/dir.safetensors"),
                                {makeRawTensor("x", DType::U8, {1}, {1})}, {},
                                error));
  EXPECT_CONTAINS(error, "cannot create");
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"state.safetensors"}));
}

TEST_F(AtomicWriteTest, SuccessReplacesFile) {
  std::string error;
  ASSERT_TRUE(writeSafeTensors(
      target, {makeRawTensor("x", DType::U8, {1}, {42})}, {{"k", "v"}}, error))
      << error;
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"state.safetensors"}));
  SafeTensorsFile file;
  ASSERT_TRUE(SafeTensorsFile::read(target, file, error)) << error;
  EXPECT_EQ(file.find("x")->bytes, (std::vector<uint8_t>{42}));
  EXPECT_EQ(file.metadata().at("k"), "v");
}

} // namespace
