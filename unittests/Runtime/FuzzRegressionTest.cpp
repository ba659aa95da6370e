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
// Checkpoints (fuzz/CheckpointIndexFuzzer.cpp): index fields of another
// type than the loader expected escaped it as exceptions (std::terminate),
// a float where an integer belongs converted beyond int64_t, and an element
// range ending far before it began overflowed its length; and, found while
// writing that fuzzer, a rank of a world of two that resumed a master saved
// for a parameter that now keeps none read the other rank's piece of that
// master, which it had skipped (a segfault).
//
//===----------------------------------------------------------------------===//

#include "RuntimeTestUtils.h"
#include "ThreadCommunicator.h"
#include "mantissa/Runtime/Artifact.h"
#include "mantissa/Runtime/Communicator.h"
#include "mantissa/Runtime/CpuStep.h"
#include "mantissa/Runtime/GpuStep.h"
#include "mantissa/Runtime/SafeTensors.h"
#include "mantissa/Runtime/UpdateRunner.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

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
/// only the layout can be wrong), and whose other files are all there
/// (`extraFiles`: more entries of 'files', each after a comma); expects a
/// refusal and returns its message.
std::string artifactError(const std::string &members, int64_t numTiles,
                          int64_t tileSize,
                          const std::vector<std::string> &parameters,
                          const std::string &extraFiles = "") {
  ScratchDir dir;
  std::string files;
  for (const char *name : {"kernels.so", "weights.safetensors", "step.mlir"}) {
    std::string text = std::string("not really ") + name + "\n";
    writeText(dir.file(name), text);
    files += std::string(files.empty() ? "" : ", ") + "\"" + name +
             "\": {\"bytes\": " + std::to_string(text.size()) +
             ", \"fnv1a64\": \"" +
             manifestChecksumText(fnv1a64(
                 reinterpret_cast<const uint8_t *>(text.data()), text.size())) +
             "\"}";
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
      std::to_string(tileSize) + R"(, "files": {)" + files + extraFiles +
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

TEST(ArtifactFuzzRegression, FileNamesOutsideTheArtifactAreErrors) {
  // 'files' named any path, read whole before its size was compared:
  // "../../dev/zero" read without end. Each name is listed as the empty
  // file (FNV-1a 64 of no bytes), which /dev/null is, so that without the
  // check none of them is read without end (and /dev/null loads).
  for (const char *name :
       {"", ".", "..", "/dev/null", "../../dev/null", "sub/kernels.so"}) {
    std::string quoted = std::string("\"") + name + "\"";
    EXPECT_CONTAINS(
        artifactError(
            "[" + member("w", 4, 0, 0, 2, "[4]", "fp32") + "]", 2, 2, {"w"},
            ", " + quoted + R"(: {"bytes": 0, "fnv1a64": "cbf29ce484222325"})"),
        "manifest.json: 'files' lists " + quoted +
            ", which is not a file name in the artifact's directory");
  }
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

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

std::string readText(const std::string &path) {
  std::ifstream stream(path, std::ios::binary);
  std::stringstream text;
  text << stream.rdbuf();
  return text.str();
}

/// The manifest's spelling of a file's checksum.
std::string manifestChecksum(const std::string &bytes) {
  return manifestChecksumText(
      fnv1a64(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()));
}

/// A checkpoint's spelling of a tensor's checksum.
std::string checkpointChecksum(const std::vector<uint8_t> &bytes) {
  return checkpointChecksumText(fnv1a64(bytes.data(), bytes.size()));
}

/// The path of the library `name` (e.g. "libgcc_s.so.1") this process has
/// loaded, from /proc/self/maps; empty when it has none of that name.
std::string loadedLibrary(const std::string &name) {
  std::ifstream maps("/proc/self/maps");
  std::string line, suffix = "/" + name;
  while (std::getline(maps, line)) {
    size_t slash = line.find('/');
    if (slash != std::string::npos && line.size() >= suffix.size() &&
        line.compare(line.size() - suffix.size(), suffix.size(), suffix) == 0)
      return line.substr(slash);
  }
  return "";
}

/// An F32 tensor `name` of elements [begin, end) of `w`, element i being
/// i / 2 + offset (exact in every dtype the tests use).
HostTensor wPiece(const std::string &name, int64_t begin, int64_t end,
                  float offset) {
  std::vector<float> values;
  for (int64_t i = begin; i < end; ++i)
    values.push_back(float(i) / 2 + offset);
  return fromFloat32(name, {end - begin}, values.data(), DType::F32);
}

/// An artifact of one fp32 parameter `w` of 8 elements in two tiles of 4,
/// planned without a master, and checkpoints of it at step 1. Its
/// kernels.so is a link to a library this process has loaded already, so
/// that dlopen returns that one and runs nothing new: libgcc_s (small, and
/// loaded wherever libstdc++ is), else libmantissa_rt.so (Artifact::load
/// reads and checksums all of kernels.so on every load: 25 MB take seconds
/// in a sanitized build). The update kernel is any symbol that resolves
/// (getpid, from libc below either), since verifying a checkpoint never
/// calls it.
class CheckpointFiles {
public:
  CheckpointFiles() {
    artifact = dir.file("artifact");
    checkpoint = dir.file("checkpoint");
    ::mkdir(artifact.c_str(), 0755);
    ::mkdir(checkpoint.c_str(), 0755);
    std::string library = loadedLibrary("libgcc_s.so.1");
    if (library.empty())
      library = loadedLibrary("libmantissa_rt.so");
    EXPECT_FALSE(library.empty())
        << "neither libgcc_s.so.1 nor libmantissa_rt.so is loaded";
    EXPECT_EQ(::symlink(library.c_str(), (artifact + "/kernels.so").c_str()),
              0);
    std::string error;
    EXPECT_TRUE(writeSafeTensors(artifact + "/weights.safetensors",
                                 {wPiece("w", 0, 8, 0)}, {{"format", "pt"}},
                                 error))
        << error;
    writeText(artifact + "/step.mlir", "// a checkpoint test\n");
    std::string files;
    for (const char *name :
         {"kernels.so", "weights.safetensors", "step.mlir"}) {
      std::string bytes = readText(artifact + "/" + name);
      files += std::string(files.empty() ? "" : ", ") + "\"" + name +
               "\": {\"bytes\": " + std::to_string(bytes.size()) +
               ", \"fnv1a64\": \"" + manifestChecksum(bytes) + "\"}";
    }
    writeText(artifact + "/manifest.json",
              R"({"format": "mantissa-artifact", "version": )" +
                  std::to_string(kArtifactVersion) +
                  R"(, "tile_size": 4, "files": {)" + files + R"(},
      "tensors": [{"fqn": "w", "kind": "parameter", "shape": [8],
                   "exported": "fp32", "master": "fp32", "gather": "fp32",
                   "reduce": "fp32", "moments": "fp32", "group": "g"}],
      "groups": [{"name": "g", "unit": "", "gather": "fp32",
        "kernel": "getpid", "num_tiles": 2,
        "buffer_bytes": {"grad": 32, "param": 32, "master": 0,
                         "exp_avg": 32, "exp_avg_sq": 32,
                         "max_exp_avg_sq": 0},
        "members": [{"fqn": "w", "shape": [8], "count": 8,
          "first_element": 0, "first_tile": 0, "num_tiles": 2,
          "grad": "fp32", "param": "fp32", "moments": "fp32",
          "master": "none",
          "offsets": {"grad": 0, "param": 0, "master": 0,
                      "moments": 0}}]}]})");
  }

  /// Writes rank `rank`'s file of a checkpoint of world size `world`
  /// holding elements [begin, end) of every state of `w`, with a master;
  /// `expAvgRange` replaces exp_avg/w's range when given. Returns its
  /// entry of the index's files.
  std::string writeRankFile(int rank, int world, int64_t begin, int64_t end,
                            const std::string &expAvgRange = "") {
    std::vector<HostTensor> tensors = {wPiece("param/w", begin, end, 0),
                                       wPiece("master/w", begin, end, 0.25),
                                       wPiece("exp_avg/w", begin, end, 1),
                                       wPiece("exp_avg_sq/w", begin, end, 2)};
    std::string ranges, checksums;
    for (const HostTensor &tensor : tensors) {
      std::string range =
          "[" + std::to_string(begin) + "," + std::to_string(end) + "]";
      if (tensor.name == "exp_avg/w" && !expAvgRange.empty())
        range = expAvgRange;
      ranges += std::string(ranges.empty() ? "" : ",") + "\"" + tensor.name +
                "\":" + range;
      checksums += std::string(checksums.empty() ? "" : ",") + "\"" +
                   tensor.name + "\":\"" + checkpointChecksum(tensor.bytes) +
                   "\"";
    }
    std::string name = "step-00000001.rank-" + std::to_string(rank) + "-of-" +
                       std::to_string(world) + ".safetensors";
    std::string error;
    EXPECT_TRUE(writeSafeTensors(
        checkpoint + "/" + name, tensors,
        {{"format", "mantissa-checkpoint"},
         {"version", "2"},
         {"step", "1"},
         {"rank", std::to_string(rank)},
         {"world_size", std::to_string(world)},
         {"ranges", "{" + ranges + "}"},
         {"checksums", "{" + checksums + "}"},
         {"plan", R"({"w":{"master":"fp32","gather":"fp32","reduce":"fp32",)"
                  R"("moments":"fp32"}})"}},
        error))
        << error;
    return R"({"file": ")" + name + R"(", "rank": )" + std::to_string(rank) +
           R"(, "bytes": )" +
           std::to_string(readText(checkpoint + "/" + name).size()) + "}";
  }

  /// An index of world size `world` listing `files`, with `trainer`.
  static std::string index(int world, const std::string &files,
                           const std::string &trainer =
                               R"({"optimizer_step": 1, "skipped_steps": 0,
                                   "consecutive_skips": 0,
                                   "micro_batches_done": 1})") {
    return R"({"format": "mantissa-checkpoint", "version": 2, "step": 1,
               "world_size": )" +
           std::to_string(world) + R"(, "shapes": {"w": [8]},
               "plan": {"w": {"master": "fp32", "gather": "fp32",
                              "reduce": "fp32", "moments": "fp32"}},
               "files": [)" +
           files + R"(], "trainer": )" + trainer + "}";
  }

  /// `mantissa-run ARTIFACT --verify-checkpoint CHECKPOINT` with `index` as
  /// the index, on one rank; returns the exit code and sets `message` to
  /// what it wrote to stderr.
  int verify(const std::string &indexText, std::string &message) {
    writeText(checkpoint + "/index.json", indexText);
    TrainerOptions options;
    options.model.artifactDir = artifact;
    options.checkpoints.verifyDir = checkpoint;
    options.outputs.memoryReport = false;
    std::unique_ptr<Communicator> communicator = createSingleRankCommunicator();
    ::testing::internal::CaptureStderr();
    int status = runUpdate(options, *communicator);
    message = ::testing::internal::GetCapturedStderr();
    return status;
  }

  /// Expects `indexText` to be refused with `expected` in the message.
  void expectRefused(const std::string &indexText,
                     const std::string &expected) {
    std::string message;
    EXPECT_EQ(verify(indexText, message), 1) << indexText;
    EXPECT_CONTAINS(message, expected);
  }

  ScratchDir dir;
  std::string artifact, checkpoint;
};

TEST(CheckpointFuzzRegression, IndexFieldsOfTheWrongTypeAreErrors) {
  CheckpointFiles files;
  std::string entry = files.writeRankFile(0, 1, 0, 8);
  std::string message;
  ASSERT_EQ(files.verify(CheckpointFiles::index(1, entry), message), 0)
      << message;
  // Each used to throw nlohmann::json::type_error out of the loader.
  files.expectRefused(R"({"format": 7})", "index.json: damaged checkpoint "
                                          "index");
  files.expectRefused(
      R"({"format": "mantissa-checkpoint", "version": "2"})",
      "unknown checkpoint version \"2\" (this runtime reads 1 and 2)");
  files.expectRefused(CheckpointFiles::index(1, "1"),
                      "damaged checkpoint index (a 'files' entry is not an "
                      "object)");
  files.expectRefused(CheckpointFiles::index(1, R"({"file": 1})"),
                      "checkpoint/: checkpoint file is missing");
  std::string textBytes = entry;
  textBytes.replace(textBytes.find("\"bytes\": ") + 9, std::string::npos,
                    "\"many\"}");
  files.expectRefused(CheckpointFiles::index(1, textBytes),
                      "bytes, the index says \"many\"");
  files.expectRefused(
      CheckpointFiles::index(1, entry, R"({"optimizer_step": "1"})"),
      "'trainer.optimizer_step' is \"1\": expected an integer");
  // A float beyond int64_t's range used to be converted to one (undefined
  // behaviour).
  files.expectRefused(
      CheckpointFiles::index(1, entry, R"({"skipped_steps": 1e300})"),
      "'trainer.skipped_steps' is 1e+300: expected an integer");
  files.expectRefused(R"({"format": "mantissa-checkpoint", "version": 1e300})",
                      "unknown checkpoint version 1e+300");
}

TEST(CheckpointFuzzRegression, RangesEndingBeforeTheyBeginAreErrors) {
  CheckpointFiles files;
  // end - begin overflowed int64_t.
  std::string entry =
      files.writeRankFile(0, 1, 0, 8, "[1,-9223372036854775808]");
  files.expectRefused(CheckpointFiles::index(1, entry),
                      "tensor 'exp_avg/w' does not match its element range");
}

TEST(CheckpointFuzzRegression, MastersThatBecomeParametersLoadOnEveryRank) {
  // A checkpoint of world size 2 (elements [0, 4) and [4, 8) of each state)
  // with a master for `w`, which the plan now keeps without one: the master
  // becomes the parameter, which each rank assembles whole. Rank 1 skipped
  // rank 0's piece of the master (outside its slice), then read it.
  CheckpointFiles files;
  std::string entries =
      files.writeRankFile(0, 2, 0, 4) + ", " + files.writeRankFile(1, 2, 4, 8);
  writeText(files.checkpoint + "/index.json",
            CheckpointFiles::index(2, entries));
  ThreadCommunicator::World world;
  int status[2] = {-1, -1};
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank)
    ranks.emplace_back([&, rank] {
      TrainerOptions options;
      options.model.artifactDir = files.artifact;
      options.checkpoints.verifyDir = files.checkpoint;
      options.outputs.memoryReport = false;
      ThreadCommunicator communicator(world, rank);
      status[rank] = runUpdate(options, communicator);
    });
  for (std::thread &rank : ranks)
    rank.join();
  EXPECT_EQ(status[0], 0);
  EXPECT_EQ(status[1], 0);
}

} // namespace
