//===- Artifact.h - Loading a compiled Mantissa artifact --------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// A compiled artifact is a directory written by the compiler
// (mantissa/Driver/ArtifactWriter.h) and indexed by its manifest.json, whose
// schema and layout rules are defined once in mantissa/Format/
// ArtifactManifest.h. Loading one parses the manifest, checks every file it
// lists against its size and checksum, refuses CPU code compiled for
// extensions this CPU lacks, and resolves each group's update kernel in
// kernels.so; a missing or damaged piece is refused with a message naming
// the file.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_ARTIFACT_H
#define MANTISSA_RUNTIME_ARTIFACT_H

#include "mantissa/Format/ArtifactManifest.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

/// One shard group of a loaded artifact: its manifest entry and its CPU
/// update kernel.
struct ArtifactGroup : ManifestGroup {
  AdamWKernelFn kernel = nullptr; // resolved by Artifact::load
};

/// A loaded, validated artifact. Owns the dlopen handle of kernels.so.
class Artifact {
public:
  Artifact() = default;
  Artifact(const Artifact &) = delete;
  Artifact &operator=(const Artifact &) = delete;
  ~Artifact();

  /// Loads `directory`: parses and validates manifest.json, checks every
  /// listed file's size and checksum, dlopens kernels.so and resolves each
  /// group's kernel. On failure returns false with `error` naming the file.
  static bool load(const std::string &directory, Artifact &out,
                   std::string &error);

  const std::string &directory() const { return dir; }
  int64_t tileSize() const { return tile; }
  const std::vector<ArtifactGroup> &groups() const { return groupList; }
  const std::vector<ArtifactTensor> &tensors() const { return tensorList; }
  const ArtifactTensor *findTensor(const std::string &fqn) const;
  /// Path of weights.safetensors.
  std::string weightsPath() const { return dir + "/weights.safetensors"; }
  /// Whether the artifact carries GPU code (kernels.<group>.ptx).
  bool hasPtx() const { return withPtx; }
  /// The manifest's "kernels": what the code was compiled for and which
  /// compiled steps the artifact holds (absent in hand-made manifests).
  const std::optional<ManifestKernels> &kernels() const { return kernelsInfo; }

private:
  std::string dir;
  int64_t tile = 0;
  bool withPtx = false;
  std::optional<ManifestKernels> kernelsInfo;
  std::vector<ArtifactGroup> groupList;
  std::vector<ArtifactTensor> tensorList;
  void *library = nullptr;
};

/// A checksum as a checkpoint's metadata spells it: 16 lowercase hex digits.
std::string checkpointChecksumText(uint64_t checksum);

/// Reads the whole regular file at `path` into `bytes`; false if it cannot,
/// with the reason (without the path) in `why` when given. A FIFO or a
/// device is refused rather than read (mantissa/Format/InputFile.h).
bool readWholeFile(const std::string &path, std::vector<uint8_t> &bytes,
                   std::string *why = nullptr);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_ARTIFACT_H
