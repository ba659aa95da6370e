//===- CheckpointIndexFuzzer.cpp - libFuzzer entry for checkpoints --------===//
//
// Loads a checkpoint as `mantissa-run ART --verify-checkpoint CKPT` does
// (runUpdate with verifyCheckpointDir, on one rank): the index, every rank
// file's size and format, its step, rank and world size against the index,
// the per-tensor checksums and element ranges, and the assembly of the
// pieces into the model's state. Any crash, sanitizer report or leak is a
// bug; a refusal (exit code 1) is the expected outcome.
//
// At start it writes a small artifact (two parameters in one AMSGrad
// group: fc.weight bf16 with an fp32 master, fc.bias fp32 with no master
// and bf16 moments; tile size 8; its kernels.so is CheckpointKernelsStub's
// module), runs two steps of it to have the runtime save a checkpoint of
// step 2, and splits that checkpoint's rank file in two (each tensor's
// element range halved) to have a checkpoint of world size 2 in the same
// folder as well. Both must load, or the fuzzer stops: an input that the
// fixed files would refuse anyway fuzzes nothing.
//
// The first byte of an input selects what the rest replaces (byte % 4, so
// the seeds start with an ASCII digit):
//   0  index.json (the rank files as saved);
//   1  the world-size-1 rank file, with the index's size of it set to the
//      input's (or it would be refused before it is read);
//   2  bytes of the world-size-1 rank file: (offset low, offset high, value)
//      triples, offsets taken modulo its size, so that the file keeps its
//      size and mostly its structure and the metadata and checksum checks
//      are reached;
//   3  rank 1's file of the world-size-2 checkpoint (rank 0's as split),
//      with its size set in the two-rank index.
//
// Seeds: corpus/checkpoint_index; MANTISSA_FUZZ_CHECKPOINT_SEEDS=DIR makes
// the fuzzer write the generated ones (both indexes, both rank files) into
// DIR at start, to refresh them after a format change. runUpdate prints its
// errors itself: run with -close_fd_mask=3 (libFuzzer still reports
// crashes), or without it to see why an input is refused.
//
//===----------------------------------------------------------------------===//

#include "FuzzScratch.h"

#include "mantissa/Runtime/Artifact.h"
#include "mantissa/Runtime/Communicator.h"
#include "mantissa/Runtime/SafeTensors.h"
#include "mantissa/Runtime/UpdateRunner.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>

#ifndef MANTISSA_FUZZ_CHECKPOINT_KERNELS
#error "MANTISSA_FUZZ_CHECKPOINT_KERNELS must name the stub kernels module"
#endif

namespace {

using namespace mlir::mantissa::rt;
using json = nlohmann::json;

/// The rank files: the saved checkpoint's, and the two of its split.
const char *const kRankFile = "step-00000002.rank-0-of-1.safetensors";
const char *const kSplitFiles[2] = {"step-00000002.rank-0-of-2.safetensors",
                                    "step-00000002.rank-1-of-2.safetensors"};

/// The artifact's manifest but for `files` and `version` (filled in at
/// start): what `mantissa-artifact-gen --weights W --plan
/// master=fp32,gather=bf16,reduce=bf16,moments=fp32 --plan-rule
/// 'fc.bias:master=fp32,gather=fp32,reduce=fp32,moments=bf16' --amsgrad
/// --no-ptx --tile-size 8` writes for these two tensors.
const char *const kManifest = R"json({
  "format": "mantissa-artifact", "tile_size": 8, "buffers": [],
  "step": "synthetic",
  "groups": [{
    "name": "root", "unit": "root", "gather": "bf16", "nested_in": null,
    "amsgrad": true, "maximize": false, "reshard_after_forward": true,
    "kernel": "mantissa_adamw_0", "gpu_kernel": "mantissa_adamw_0_kernel",
    "num_tiles": 3,
    "buffer_bytes": {"grad": 64, "param": 64, "master": 64, "exp_avg": 80,
                     "exp_avg_sq": 80, "max_exp_avg_sq": 80},
    "members": [
      {"fqn": "fc.bias", "shape": [6], "count": 6, "first_element": 0,
       "first_tile": 0, "num_tiles": 1, "grad": "fp32", "param": "fp32",
       "master": "none", "moments": "bf16",
       "offsets": {"grad": 0, "param": 0, "master": 0, "moments": 0}},
      {"fqn": "fc.weight", "shape": [4, 4], "count": 16, "first_element": 6,
       "first_tile": 1, "num_tiles": 2, "grad": "bf16", "param": "bf16",
       "master": "fp32", "moments": "fp32",
       "offsets": {"grad": 32, "param": 32, "master": 0, "moments": 16}}]}],
  "tensors": [
    {"fqn": "fc.bias", "kind": "parameter", "shape": [6], "group": "root",
     "exported": "fp32", "master": "fp32", "gather": "fp32", "reduce": "fp32",
     "moments": "bf16"},
    {"fqn": "fc.weight", "kind": "parameter", "shape": [4, 4],
     "group": "root", "exported": "fp32", "master": "fp32", "gather": "bf16",
     "reduce": "bf16", "moments": "fp32"}]
})json";

[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "fuzzer: %s\n", message.c_str());
  std::abort();
}

std::string readFileOrDie(const std::string &path) {
  std::vector<uint8_t> bytes;
  if (!readWholeFile(path, bytes))
    die("cannot read " + path);
  return std::string(bytes.begin(), bytes.end());
}

void makeDirectoryOrDie(const std::string &path) {
  if (::mkdir(path.c_str(), 0755) != 0)
    die("cannot create " + path + ": " + std::strerror(errno));
}

void writeTensorsOrDie(const std::string &path,
                       const std::vector<HostTensor> &tensors,
                       const std::map<std::string, std::string> &metadata) {
  std::string error;
  if (!writeSafeTensors(path, tensors, metadata, error))
    die(error);
}

/// An F32 tensor of `shape` holding scale * (i - offset) at element i.
HostTensor f32Tensor(const std::string &name, std::vector<int64_t> shape,
                     float scale, float offset) {
  std::vector<float> values(size_t(*checkedNumElements(shape)));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = scale * (float(i) - offset);
  return fromFloat32(name, std::move(shape), values.data(), DType::F32);
}

/// A file's checksum as the manifest records it.
std::string manifestChecksum(const std::string &bytes) {
  return manifestChecksumText(
      fnv1a64(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()));
}

/// A tensor's checksum as a checkpoint's metadata records it.
std::string checkpointChecksum(const std::vector<uint8_t> &bytes) {
  return checkpointChecksumText(fnv1a64(bytes.data(), bytes.size()));
}

/// Writes the artifact into `dir`.
void writeArtifact(const std::string &dir) {
  makeDirectoryOrDie(dir);
  mantissa_fuzz::writeFileOrDie(
      dir + "/kernels.so", readFileOrDie(MANTISSA_FUZZ_CHECKPOINT_KERNELS));
  writeTensorsOrDie(dir + "/weights.safetensors",
                    {f32Tensor("fc.bias", {6}, 0.1f, 2.0f),
                     f32Tensor("fc.weight", {4, 4}, 0.01f, 0.0f)},
                    {{"format", "pt"}});
  mantissa_fuzz::writeFileOrDie(dir + "/step.mlir",
                                "// the checkpoint fuzzer's artifact\n");
  json manifest = json::parse(kManifest);
  manifest["version"] = kArtifactVersion;
  for (const char *name : {"kernels.so", "weights.safetensors", "step.mlir"}) {
    std::string bytes = readFileOrDie(dir + "/" + name);
    manifest["files"][name] = {{"bytes", bytes.size()},
                               {"fnv1a64", manifestChecksum(bytes)}};
  }
  mantissa_fuzz::writeFileOrDie(dir + "/manifest.json", manifest.dump(1));
}

/// Writes kSplitFiles into `dir`: the saved rank file's tensors, each
/// element range halved (rank 0 the lower half), with their own ranges,
/// checksums, rank and world size; returns the index of that checkpoint.
json splitCheckpoint(const std::string &dir, const json &index) {
  SafeTensorsFile saved;
  std::string error;
  if (!SafeTensorsFile::read(dir + "/" + kRankFile, saved, error))
    die(error);
  json ranges = json::parse(saved.metadata().at("ranges"));
  std::vector<HostTensor> parts[2];
  json partRanges[2] = {json::object(), json::object()};
  json partChecksums[2] = {json::object(), json::object()};
  for (const HostTensor &tensor : saved.tensors()) {
    int64_t begin = ranges.at(tensor.name).at(0).get<int64_t>();
    int64_t end = ranges.at(tensor.name).at(1).get<int64_t>();
    int64_t middle = begin + (end - begin) / 2;
    size_t bytes = elementSize(tensor.dtype);
    for (int r = 0; r < 2; ++r) {
      int64_t from = r ? middle : begin, to = r ? end : middle;
      HostTensor part;
      part.name = tensor.name;
      part.dtype = tensor.dtype;
      part.shape = {to - from};
      part.bytes.assign(tensor.bytes.begin() + (from - begin) * bytes,
                        tensor.bytes.begin() + (to - begin) * bytes);
      partRanges[r][part.name] = {from, to};
      partChecksums[r][part.name] = checkpointChecksum(part.bytes);
      parts[r].push_back(std::move(part));
    }
  }
  json split = index;
  split["world_size"] = 2;
  split["files"] = json::array();
  for (int r = 0; r < 2; ++r) {
    std::map<std::string, std::string> metadata = saved.metadata();
    metadata["rank"] = std::to_string(r);
    metadata["world_size"] = "2";
    metadata["ranges"] = partRanges[r].dump();
    metadata["checksums"] = partChecksums[r].dump();
    std::string path = dir + "/" + kSplitFiles[r];
    writeTensorsOrDie(path, parts[r], metadata);
    split["files"].push_back({{"file", kSplitFiles[r]},
                              {"rank", r},
                              {"bytes", readFileOrDie(path).size()}});
  }
  return split;
}

/// What every input starts from.
struct Fixture {
  std::string artifact, checkpoint;
  /// The saved index and its world-size-2 variant, as text and parsed.
  std::string index, splitIndex;
  json indexJson, splitIndexJson;
  /// The saved rank file and rank 1's of the split.
  std::string rankFile, splitRank1;
};

/// `mantissa-run ARTIFACT --verify-checkpoint CHECKPOINT` on one rank.
int verify(const Fixture &fixture) {
  TrainerOptions options;
  options.model.artifactDir = fixture.artifact;
  options.checkpoints.verifyDir = fixture.checkpoint;
  options.outputs.memoryReport = false;
  std::unique_ptr<Communicator> communicator = createSingleRankCommunicator();
  return runUpdate(options, *communicator);
}

void writeInputs(const Fixture &fixture, const std::string &index,
                 const std::string &rankFile, const std::string &splitRank1) {
  mantissa_fuzz::writeFileOrDie(fixture.checkpoint + "/index.json", index);
  mantissa_fuzz::writeFileOrDie(fixture.checkpoint + "/" + kRankFile, rankFile);
  mantissa_fuzz::writeFileOrDie(fixture.checkpoint + "/" + kSplitFiles[1],
                                splitRank1);
}

/// Writes the generated seeds into `dir` (MANTISSA_FUZZ_CHECKPOINT_SEEDS).
void writeSeeds(const Fixture &fixture, const std::string &dir) {
  mantissa_fuzz::writeFileOrDie(dir + "/index.json", "0" + fixture.index);
  mantissa_fuzz::writeFileOrDie(dir + "/index_world_2.json",
                                "0" + fixture.splitIndex);
  mantissa_fuzz::writeFileOrDie(dir + "/rank_file.safetensors",
                                "1" + fixture.rankFile);
  mantissa_fuzz::writeFileOrDie(dir + "/rank_1_of_2.safetensors",
                                "3" + fixture.splitRank1);
}

/// The artifact and both checkpoints, made and checked once per process.
const Fixture &fixture() {
  static const Fixture made = [] {
    const std::string &dir = mantissa_fuzz::scratchDirectory();
    Fixture fixture;
    fixture.artifact = dir + "/artifact";
    writeArtifact(fixture.artifact);

    // Two steps, saved at step 2, by the runtime itself.
    std::string grads = dir + "/grads.safetensors";
    writeTensorsOrDie(grads,
                      {f32Tensor("grad.fc.bias", {6}, 0.002f, 3.0f),
                       f32Tensor("grad.fc.weight", {4, 4}, 0.001f, 8.0f)},
                      {{"format", "pt"}});
    TrainerOptions options;
    options.model.artifactDir = fixture.artifact;
    options.model.gradsPath = grads;
    options.schedule.steps = 2;
    options.checkpoints.saveEvery = 2;
    options.checkpoints.saveDir = dir + "/saved";
    options.outputs.memoryReport = false;
    std::unique_ptr<Communicator> communicator = createSingleRankCommunicator();
    if (runUpdate(options, *communicator) != 0)
      die("cannot save the checkpoint to fuzz");
    fixture.checkpoint = options.checkpoints.saveDir + "/step-2";

    fixture.index = readFileOrDie(fixture.checkpoint + "/index.json");
    fixture.indexJson = json::parse(fixture.index);
    fixture.rankFile = readFileOrDie(fixture.checkpoint + "/" + kRankFile);
    fixture.splitIndexJson =
        splitCheckpoint(fixture.checkpoint, fixture.indexJson);
    fixture.splitIndex = fixture.splitIndexJson.dump(1);
    fixture.splitRank1 =
        readFileOrDie(fixture.checkpoint + "/" + kSplitFiles[1]);

    for (const std::string *index : {&fixture.splitIndex, &fixture.index}) {
      writeInputs(fixture, *index, fixture.rankFile, fixture.splitRank1);
      if (verify(fixture) != 0)
        die("the unchanged checkpoint does not load");
    }
    if (const char *seeds = std::getenv("MANTISSA_FUZZ_CHECKPOINT_SEEDS"))
      writeSeeds(fixture, seeds);
    return fixture;
  }();
  return made;
}

/// `index` with the size of its `files[entry]` set to `bytes`.
std::string withFileSize(json index, size_t entry, size_t bytes) {
  index["files"][entry]["bytes"] = bytes;
  return index.dump(1);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const Fixture &fixture = ::fixture();
  std::string index = fixture.index, rankFile = fixture.rankFile,
              splitRank1 = fixture.splitRank1;
  if (size) {
    std::string rest(reinterpret_cast<const char *>(data) + 1, size - 1);
    switch (data[0] % 4) {
    case 0:
      index = rest;
      break;
    case 1:
      rankFile = rest;
      index = withFileSize(fixture.indexJson, 0, rest.size());
      break;
    case 2:
      for (size_t i = 0; i + 3 <= rest.size(); i += 3) {
        size_t offset = (uint8_t(rest[i]) | size_t(uint8_t(rest[i + 1])) << 8) %
                        rankFile.size();
        rankFile[offset] = rest[i + 2];
      }
      break;
    default:
      splitRank1 = rest;
      index = withFileSize(fixture.splitIndexJson, 1, rest.size());
      break;
    }
  }
  writeInputs(fixture, index, rankFile, splitRank1);
  int status = verify(fixture);
  // runUpdate's exit codes: 0 loaded, 1 refused (and said why).
  if (status != 0 && status != 1)
    std::abort();
  return 0;
}
