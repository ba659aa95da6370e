//===- Artifact.h - Loading a compiled Mantissa artifact --------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// A compiled artifact is a directory written by the compiler
// (mantissa/Driver/ArtifactWriter.h):
//
//   manifest.json          format "mantissa-artifact", version 1: the plan of
//                          every tensor, the shard groups with each member's
//                          layout, the buffers, the kernel symbols, and the
//                          size and FNV-1a 64 checksum of every other file
//   kernels.so             one AdamW update function per group (CPU)
//   kernels.<g>.ptx        the same for sm_90, one per group (absent when
//                          PTX generation failed or was not asked for)
//   weights.safetensors    initial parameters (exported dtype) and buffers
//   step.mlir              the planned step program
//
// The loader validates the manifest against the files and refuses an unknown
// version or a missing or damaged piece with a message naming the file.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_ARTIFACT_H
#define MANTISSA_RUNTIME_ARTIFACT_H

#include "mantissa/Format/DType.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

/// The format version this runtime reads and the compiler writes. Version
/// 2: the update kernels take a gradient scale, and the GPU kernels a tile
/// range (sharded updates on GPUs). Version 3: a tensor's master may be
/// "fp32_split" (members of kind "remainder": the bf16 parameter plus a
/// 16-bit remainder), which the runtime trains, checkpoints and resumes.
constexpr int kArtifactVersion = 3;

/// The roles of a group's flat buffers, in the order of the kernel's
/// arguments (the same order as mlir::mantissa::AdamWBuffer).
enum class Role { Grad, Param, Master, ExpAvg, ExpAvgSq, MaxExpAvgSq };
constexpr unsigned kNumRoles = 6;
const char *roleName(Role role);

/// The C ABI of a group's generated CPU update (AdamWKernels.h). The kernel
/// multiplies the gradients by `gradScale` (clipping) and updates tiles
/// [part * T / parts, (part + 1) * T / parts) of the group's T tiles; the
/// runtime's shard of rank r of W is exactly part r of W.
using AdamWKernelFn = void (*)(void *grad, void *param, void *master,
                               void *expAvg, void *expAvgSq, void *maxExpAvgSq,
                               double lr, double beta1, double beta2,
                               double eps, double weightDecay, int64_t step,
                               float gradScale, int64_t part, int64_t parts);

/// How a member keeps its master weights.
enum class MasterKind { None, FP32, Remainder };

/// One member of a group: its place in the group's element space and tiles,
/// and its byte offset in each role's buffer.
struct ArtifactMember {
  std::string fqn;
  std::vector<int64_t> shape;
  int64_t count = 0;
  int64_t firstElement = 0;
  int64_t firstTile = 0;
  int64_t numTiles = 0;
  DType grad = DType::F32, param = DType::F32, moments = DType::F32;
  MasterKind master = MasterKind::None;
  int64_t gradOffset = 0, paramOffset = 0, masterOffset = 0, momentsOffset = 0;

  /// Bytes per element in `role`'s buffer (0 when the member has none).
  int64_t elementBytes(Role role, bool amsgrad) const;
  /// Byte offset of the member's first element in `role`'s buffer.
  int64_t byteOffset(Role role) const;
};

/// One shard group: one flat buffer per role, one kernel.
struct ArtifactGroup {
  std::string name, unit;
  DType gather = DType::F32;
  std::string nestedIn; // empty for a top-level group
  bool reshardAfterForward = true;
  bool amsgrad = false, maximize = false;
  std::string kernelSymbol;
  /// The PTX entry of the group's GPU kernel (kernels.<index>.ptx).
  std::string gpuKernelSymbol;
  int64_t numTiles = 0;
  std::array<int64_t, kNumRoles> bufferBytes{};
  std::vector<ArtifactMember> members;
  AdamWKernelFn kernel = nullptr; // resolved by Artifact::load
};

/// A parameter's or buffer's plan as the manifest records it.
struct ArtifactTensor {
  std::string fqn;
  bool isParameter = true;
  std::vector<int64_t> shape;
  DType exported = DType::F32, master = DType::F32, gather = DType::F32;
  DType reduce = DType::F32, moments = DType::F32; // parameters only
  std::string group;                               // parameters only
  /// "master": "fp32_split": `master` is F32, kept as the bf16 parameter
  /// plus a 16-bit remainder.
  bool masterSplit = false;
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

private:
  std::string dir;
  int64_t tile = 0;
  bool withPtx = false;
  std::vector<ArtifactGroup> groupList;
  std::vector<ArtifactTensor> tensorList;
  void *library = nullptr;
};

/// FNV-1a 64-bit checksum of `size` bytes, as the manifest records it.
uint64_t fnv1a64(const uint8_t *data, size_t size);
/// A checksum as the manifest spells it: lowercase hex without padding.
std::string manifestChecksumText(uint64_t checksum);
/// A checksum as a checkpoint's metadata spells it: 16 lowercase hex digits.
std::string checkpointChecksumText(uint64_t checksum);

/// The byte range [begin, end) of `role` that tiles [firstTile, endTile) of
/// `group` touch, or an empty range {0, 0}.
struct ByteRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
ByteRange tileRangeBytes(const ArtifactGroup &group, int64_t tileSize,
                         Role role, int64_t firstTile, int64_t endTile);

/// The tiles rank `rank` of `world` owns: the kernel's slice part=rank,
/// parts=world, i.e. [rank * T / world, (rank + 1) * T / world).
std::pair<int64_t, int64_t> shardTiles(const ArtifactGroup &group, int rank,
                                       int world);

/// Reads the whole file at `path` into `bytes`; false if it cannot.
bool readWholeFile(const std::string &path, std::vector<uint8_t> &bytes);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_ARTIFACT_H
