//===- ArtifactManifestFuzzer.cpp - libFuzzer entry for manifest.json -----===//
//
// Writes each input as manifest.json into a scratch directory that already
// holds every other piece of an artifact, and loads it with Artifact::load:
// the JSON schema, the file checksums and the group layout checks. Any
// crash, sanitizer report or leak is a bug; an error is the expected outcome.
//
// The pieces are small fixed texts, so a manifest can only pass the
// checksums by naming exactly their sizes and FNV-1a hashes (the seeds in
// corpus/artifact_manifest do; kFixedPieces below must stay in step with
// them). kernels.so is not a shared object, so dlopen always refuses it:
// the fuzzer never loads code, and load never succeeds.
//
//===----------------------------------------------------------------------===//

#include "FuzzScratch.h"

#include "mantissa/Runtime/Artifact.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

/// The files of a compiled artifact (mlp.pt2's) beside its manifest.
const char *const kFixedPieces[] = {"kernels.0.ptx",
                                    "kernels.so",
                                    "step.cpu.forward.so",
                                    "step.cpu.json",
                                    "step.cpu.so",
                                    "step.forward.ptx",
                                    "step.gpu.forward.json",
                                    "step.gpu.json",
                                    "step.mlir",
                                    "step.ptx",
                                    "weights.safetensors"};

/// The directory with the fixed pieces written, once per process.
const std::string &artifactDirectory() {
  static const std::string directory = [] {
    const std::string &dir = mantissa_fuzz::scratchDirectory();
    for (const char *name : kFixedPieces)
      mantissa_fuzz::writeFileOrDie(
          dir + "/" + name, std::string("mantissa fuzz piece: ") + name + "\n");
    return dir;
  }();
  return directory;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace mlir::mantissa::rt;
  const std::string &dir = artifactDirectory();
  mantissa_fuzz::writeFileOrDie(dir + "/manifest.json", data, size);
  Artifact artifact;
  std::string error;
  bool loaded = Artifact::load(dir, artifact, error);
  mantissa_fuzz::noteError(error);
  // A failure must say why; a success would mean dlopen took a text file.
  if (loaded || error.empty())
    std::abort();
  return 0;
}
