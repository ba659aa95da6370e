//===- FuzzRegressionTest.cpp - Inputs the runtime's fuzzers exercised ----===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// Reproducers for what fuzzing the runtime's readers (fuzz/*Fuzzer.cpp)
// turned up, each reduced to the field that mattered: a step.cpu.json field
// of the wrong type escaped CpuStep::load as an exception (std::terminate),
// and sizes, offsets and strides near 2^63 in step.gpu.json and
// manifest.json overflowed int64_t (undefined behaviour; in a release build
// the wrapped value let a program or a layout through). Each must now be
// refused with an error naming the field.
//
//===----------------------------------------------------------------------===//

#include "RuntimeTestUtils.h"
#include "mantissa/Runtime/Artifact.h"
#include "mantissa/Runtime/CpuStep.h"
#include "mantissa/Runtime/GpuStep.h"

#include "gtest/gtest.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

using namespace mlir::mantissa::rt;

namespace {

void writeText(const std::string &path, const std::string &text) {
  std::ofstream stream(path, std::ios::binary);
  stream << text;
}

//===----------------------------------------------------------------------===//
// step.cpu.json
//===----------------------------------------------------------------------===//

/// Loads `text` as step.cpu.json; expects a refusal and returns its message.
std::string cpuStepError(const std::string &text) {
  ScratchDir dir;
  writeText(dir.file("step.cpu.json"), text);
  std::string error;
  std::unique_ptr<CpuStep> step =
      CpuStep::load(dir.file("step.cpu.json"), error);
  EXPECT_EQ(step, nullptr);
  return error;
}

TEST(CpuStepFuzzRegression, FieldsOfTheWrongTypeAreErrors) {
  // Each used to throw nlohmann::json::type_error out of CpuStep::load.
  EXPECT_CONTAINS(cpuStepError(R"({"format": 1})"), "damaged CPU step program");
  EXPECT_CONTAINS(
      cpuStepError(R"({"format": "mantissa-cpu-step", "version": "1"})"),
      "damaged CPU step program");
  EXPECT_CONTAINS(cpuStepError(R"({"format": "mantissa-cpu-step",
                                   "version": 1, "target_cpu": 7})"),
                  "damaged CPU step program");
  EXPECT_CONTAINS(cpuStepError(R"({"format": "mantissa-cpu-step",
      "version": 1, "arguments": [{"name": "tokens", "role": "user_input",
      "dtype": "I64", "shape": [2], "bytes": 16, "index_bound": 4,
      "index_bound_what": 5}]})"),
                  "damaged CPU step program");
}

//===----------------------------------------------------------------------===//
// step.gpu.json
//===----------------------------------------------------------------------===//

/// A step.ptx with the conversion kernels every program needs.
std::string conversionPtx() {
  std::string text = ".version 8.0\n.target sm_90\n.address_size 64\n\n";
  for (const char *from : {"f32", "bf16", "f16"})
    for (const char *to : {"f32", "bf16", "f16"})
      if (std::string(from) != to)
        text += std::string(".visible .entry mantissa_convert_") + from +
                "_to_" + to + "(.param .u64 a, .param .u64 b, .param .u64 c)" +
                "\n{\n\tret;\n}\n";
  return text;
}

/// A program of `arguments` and `buffers` (JSON lists) and `ops`, with a
/// 512-byte arena and 1024 bytes of constants.
std::string gpuProgram(const std::string &arguments, const std::string &buffers,
                       const std::string &ops = "[]") {
  return R"({"format": 1, "step": "fuzz", "block_size": 128,
             "arena_bytes": 512, "ptx": "step.ptx",
             "constants": "step.constants.bin", "results": [],
             "arguments": )" +
         arguments + R"(, "buffers": )" + buffers + R"(, "ops": )" + ops + "}";
}

/// Loads `text` as step.gpu.json; expects a refusal and returns its message.
std::string gpuStepError(const std::string &text) {
  ScratchDir dir;
  writeText(dir.file("step.gpu.json"), text);
  writeText(dir.file("step.ptx"), conversionPtx());
  writeText(dir.file("step.constants.bin"), std::string(1024, '\0'));
  std::string error;
  std::unique_ptr<GpuStep> step =
      GpuStep::load(dir.file("step.gpu.json"), error);
  EXPECT_EQ(step, nullptr);
  return error;
}

/// One F32 argument of 4 elements (16 bytes).
const char *const kOneArgument =
    R"([{"name": "x", "role": "user_input", "dtype": "F32", "shape": [4],
         "bytes": 16}])";

TEST(GpuStepFuzzRegression, ShapesThatOverflowAreErrors) {
  // 2^32 * 2^32 elements: wrapped to 0, which passed as 1 byte.
  EXPECT_CONTAINS(gpuStepError(gpuProgram(
                      R"([{"name": "x", "role": "user_input", "dtype": "F32",
                           "shape": [4294967296, 4294967296], "bytes": 1}])",
                      "[]")),
                  "argument 0 'x': 'shape' has more than 2^63 elements");
  // 2^62 elements fit, their 2^64 bytes do not.
  EXPECT_CONTAINS(gpuStepError(gpuProgram(
                      R"([{"name": "x", "role": "user_input", "dtype": "F32",
                           "shape": [4611686018427387904], "bytes": 1}])",
                      "[]")),
                  "argument 0 'x': 'shape' takes more than 2^63 bytes");
}

TEST(GpuStepFuzzRegression, BuffersEndingPast2To63AreErrors) {
  // offset + bytes wrapped negative, so the range seemed inside.
  EXPECT_CONTAINS(
      gpuStepError(gpuProgram(kOneArgument, R"([{"kind": "temporary",
                             "offset": 9223372036854775552, "bytes": 512}])")),
      "buffer 0: bytes [9223372036854775552, 9223372036854776064) lie past "
      "the arena of 512 bytes");
  EXPECT_CONTAINS(
      gpuStepError(gpuProgram(kOneArgument, R"([{"kind": "constant",
                             "offset": 9223372036854775552, "bytes": 512}])")),
      "buffer 0: bytes [9223372036854775552, 9223372036854776064) lie past "
      "the end of ");
}

TEST(GpuStepFuzzRegression, GemmOperandsReachingPast2To63AreErrors) {
  auto gemm = [](const std::string &a, int batch) {
    return R"([{"kind": "gemm", "source": "linalg.matmul", "transa": false,
                "transb": false, "m": 1, "n": 1, "k": 1, "batch": )" +
           std::to_string(batch) + R"(, "alpha": 1, "beta": 0, "a": )" + a +
           R"(, "b": {"buffer": 0, "offset": 0, "ld": 1, "stride": 1,
                      "dtype": "F32"},
                "c": {"buffer": 0, "offset": 0, "ld": 1, "stride": 1,
                      "dtype": "F32"}}])";
  };
  const char *buffers = R"([{"kind": "argument", "index": 0}])";
  // (offset + 1) * 4 wrapped to 0 bytes.
  EXPECT_CONTAINS(
      gpuStepError(gpuProgram(
          kOneArgument, buffers,
          gemm(R"({"buffer": 0, "offset": 9223372036854775807, "ld": 1,
                   "stride": 0, "dtype": "F32"})",
               1))),
      "operand a: reaches byte 2^63 or more of buffer 0, which has 16");
  // (batch - 1) * stride overflowed.
  EXPECT_CONTAINS(
      gpuStepError(gpuProgram(kOneArgument, buffers,
                              gemm(R"({"buffer": 0, "offset": 0, "ld": 1,
                   "stride": 9223372036854775807, "dtype": "F32"})",
                                   2))),
      "operand a: reaches byte 2^63 or more of buffer 0, which has 16");
}

//===----------------------------------------------------------------------===//
// manifest.json
//===----------------------------------------------------------------------===//

/// A member of a group whose every role's dtype is `dtype`.
std::string member(const std::string &fqn, int64_t count, int64_t first,
                   int64_t firstTile, int64_t numTiles,
                   const std::string &shape, const std::string &dtype,
                   int64_t gradOffset = 0) {
  return R"({"fqn": ")" + fqn + R"(", "shape": )" + shape + R"(, "count": )" +
         std::to_string(count) + R"(, "first_element": )" +
         std::to_string(first) + R"(, "first_tile": )" +
         std::to_string(firstTile) + R"(, "num_tiles": )" +
         std::to_string(numTiles) + R"(, "grad": ")" + dtype +
         R"(", "param": ")" + dtype + R"(", "moments": ")" + dtype +
         R"(", "master": "none", "offsets": {"grad": )" +
         std::to_string(gradOffset) +
         R"(, "param": 0, "master": 0, "moments": 0}})";
}

/// Loads an artifact whose group "g" has `members` (a JSON list) and
/// `numTiles` tiles of `tileSize`, its buffers of 2^63 - 1 bytes (so that
/// only the layout can be wrong), and whose other files are all there;
/// expects a refusal and returns its message.
std::string artifactError(const std::string &members, int64_t numTiles,
                          int64_t tileSize,
                          const std::vector<std::string> &parameters) {
  ScratchDir dir;
  std::string files;
  for (const char *name : {"kernels.so", "weights.safetensors", "step.mlir"}) {
    std::string text = std::string("not really ") + name + "\n";
    writeText(dir.file(name), text);
    std::ostringstream checksum;
    checksum << std::hex
             << fnv1a64(reinterpret_cast<const uint8_t *>(text.data()),
                        text.size());
    files += std::string(files.empty() ? "" : ", ") + "\"" + name +
             "\": {\"bytes\": " + std::to_string(text.size()) +
             ", \"fnv1a64\": \"" + checksum.str() + "\"}";
  }
  std::string tensors;
  for (const std::string &fqn : parameters)
    tensors += std::string(tensors.empty() ? "" : ", ") + R"({"fqn": ")" + fqn +
               R"(", "kind": "parameter", "shape": [1],
                 "exported": "fp32", "master": "fp32", "gather": "fp32",
                 "reduce": "fp32", "moments": "fp32", "group": "g"})";
  const std::string huge = "9223372036854775807";
  std::string manifest =
      R"({"format": "mantissa-artifact", "version": )" +
      std::to_string(kArtifactVersion) + R"(, "tile_size": )" +
      std::to_string(tileSize) + R"(, "files": {)" + files +
      R"(}, "tensors": [)" + tensors +
      R"(], "groups": [{"name": "g", "unit": "", "gather": "fp32",
        "kernel": "mantissa_adamw_0", "num_tiles": )" +
      std::to_string(numTiles) + R"(, "buffer_bytes": {"grad": )" + huge +
      R"(, "param": )" + huge + R"(, "master": )" + huge + R"(, "exp_avg": )" +
      huge + R"(, "exp_avg_sq": )" + huge + R"(, "max_exp_avg_sq": )" + huge +
      R"(}, "members": )" + members + "}]}";
  writeText(dir.file("manifest.json"), manifest);
  Artifact artifact;
  std::string error;
  EXPECT_FALSE(Artifact::load(dir.path, artifact, error));
  return error;
}

TEST(ArtifactFuzzRegression, ShapesThatOverflowAreErrors) {
  // 2^32 * 2^32 wrapped to 0 elements, the count given.
  EXPECT_CONTAINS(
      artifactError(
          "[" + member("w", 0, 0, 0, 0, "[4294967296, 4294967296]", "fp32") +
              "]",
          0, 2, {"w"}),
      "member 'w': inconsistent layout");
}

TEST(ArtifactFuzzRegression, ExtentsPast2To63AreErrors) {
  // count + tile_size - 1 overflowed; then count * 4 bytes does.
  EXPECT_CONTAINS(
      artifactError("[" +
                        member("w", INT64_MAX, 0, 0, INT64_MAX / 2 + 1,
                               "[9223372036854775807]", "fp32") +
                        "]",
                    INT64_MAX / 2 + 1, 2, {"w"}),
      "member 'w': lies outside the grad buffer");
  // offset + count * bytes wrapped negative.
  EXPECT_CONTAINS(
      artifactError("[" + member("w", 4, 0, 0, 2, "[4]", "fp32", INT64_MAX) +
                        "]",
                    2, 2, {"w"}),
      "member 'w': lies outside the grad buffer");
}

TEST(ArtifactFuzzRegression, GroupsPast2To63ElementsAreErrors) {
  // Three members of 2^62 - 1 bf16 elements each fit in their buffers, but
  // the third ends past element 2^63.
  const int64_t count = (int64_t(1) << 62) - 1;
  std::string shape = "[" + std::to_string(count) + "]";
  std::string members =
      "[" + member("a", count, 0, 0, 1, shape, "bf16") + ", " +
      member("b", count, count, 1, 1, shape, "bf16") + ", " +
      member("c", count, 2 * count, 2, 1, shape, "bf16") + "]";
  EXPECT_CONTAINS(artifactError(members, 3, count, {"a", "b", "c"}),
                  "member 'c': inconsistent layout");
}

} // namespace
