//===- ArtifactManifest.h - The schema of an artifact's manifest -*- C++
//-*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The one definition of `manifest.json`, the index of a compiled artifact
// (docs/training.md): the compiler (Driver/ArtifactWriter.cpp) fills an
// ArtifactManifest and writes it with writeArtifactManifest; the runtime
// (Runtime/Artifact.h) reads it with parseArtifactManifest. The artifact's
// directory holds
//
//   manifest.json          format "mantissa-artifact", version
//                          kArtifactVersion: the plan of every tensor, the
//                          shard groups with each member's layout, the
//                          buffers, the kernel symbols, and the size and
//                          FNV-1a 64 checksum of every other file
//   kernels.so             one AdamW update function per group (CPU)
//   kernels.<g>.ptx        the same for sm_90, one per group (absent when
//                          PTX generation failed or was not asked for)
//   weights.safetensors    initial parameters (exported dtype) and buffers
//   step.mlir              the planned step program
//   step.cpu.json, ...     the compiled steps (CpuStep.h, GpuProgram.h)
//
// Everything the text alone determines (fields, dtypes, each member's
// layout against its group's buffers and tiles) is checked when it is
// parsed; what needs the files it lists (sizes, checksums, the kernels'
// symbols, this CPU's extensions) is checked by rt::Artifact::load.
//
// Part of mantissa_format: no LLVM, MLIR or runtime headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_FORMAT_ARTIFACTMANIFEST_H
#define MANTISSA_FORMAT_ARTIFACTMANIFEST_H

#include "mantissa/Format/DType.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlir::mantissa::rt {

/// The format version this runtime reads and the compiler writes. Version
/// 2: the update kernels take a gradient scale, and the GPU kernels a tile
/// range (sharded updates on GPUs). Version 3: a tensor's master may be
/// "fp32_split" (members of kind "remainder": the bf16 parameter plus a
/// 16-bit remainder), which the runtime trains, checkpoints and resumes.
constexpr int kArtifactVersion = 3;

/// The manifest's "format".
constexpr const char *kArtifactFormat = "mantissa-artifact";

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

/// AdamWKernelFn as the manifest's "kernel_abi" spells it for readers.
constexpr const char *kAdamWKernelAbiText =
    "void f(void *grad, void *param, void *master, void *exp_avg, void "
    "*exp_avg_sq, void *max_exp_avg_sq, double lr, double beta1, double "
    "beta2, double eps, double weight_decay, int64_t step, float grad_scale, "
    "int64_t part, int64_t parts)";

/// How a member keeps its master weights ("none", "fp32", "remainder").
enum class MasterKind { None, FP32, Remainder };
const char *masterKindName(MasterKind kind);

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

/// One shard group as the manifest records it: one flat buffer per role,
/// one kernel.
struct ManifestGroup {
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

/// One entry of "files": a piece of the artifact, by its name in the
/// artifact's directory, with its size and FNV-1a 64 checksum.
struct ManifestFile {
  std::string name;
  int64_t bytes = 0;
  /// As the manifest spells it (manifestChecksumText).
  std::string checksum;
};

/// "kernels": what the compiled code is and what it was compiled for.
struct ManifestKernels {
  /// "cpu": the CPU update kernels' library (absent in hand-made
  /// manifests).
  std::string cpuLibrary;
  int64_t tileSize = 0;
  /// The compiling CPU and the extensions the CPU code may use, by their
  /// /proc/cpuinfo names (rt::checkCompiledFor).
  std::string targetCpu;
  std::optional<std::vector<std::string>> targetFeatures;
  /// "gpu" (where the PTX is) or "gpu_note" (why there is none).
  std::string gpu, gpuNote;
  /// The compiled CPU training step ("cpu_step"), when there is one.
  struct CpuStep {
    std::string program, targetCpu;
  };
  std::optional<CpuStep> cpuStep;
  /// The compiled GPU training step ("gpu_step") and its counts, when there
  /// is one; "gpu_step_note" says why there is none.
  struct GpuStep {
    std::string program;
    int64_t kernels = 0, gemms = 0, arenaBytes = 0;
  };
  std::optional<GpuStep> gpuStep;
  std::string gpuStepNote;
};

/// The whole manifest.
struct ArtifactManifest {
  /// The step's symbol ("step"; absent in hand-made manifests).
  std::string step;
  int64_t tileSize = 0;
  std::optional<ManifestKernels> kernels;
  /// In the order written (the manifest lists them by name).
  std::vector<ManifestFile> files;
  std::vector<ArtifactTensor> tensors;
  /// FQNs of the non-parameter tensors, planned ones first, then the
  /// opaque ones (masks, indices) that are stored as they are.
  std::vector<std::string> buffers;
  std::vector<ManifestGroup> groups;

  /// Whether the manifest lists GPU update kernels (kernels.<g>.ptx).
  bool hasPtx() const;
};

/// manifest.json's text for `manifest` (2-space indented JSON, keys sorted,
/// with a final newline).
std::string writeArtifactManifest(const ArtifactManifest &manifest);

/// Parses and checks manifest.json's `text` into `out`; on failure returns
/// false with `error` saying what and where (without the file's path).
bool parseArtifactManifest(const std::string &text, ArtifactManifest &out,
                           std::string &error);

/// Whether `text` is a JSON object of format "mantissa-artifact" (of any
/// version): a folder holding one may be replaced by a new artifact.
bool isArtifactManifestText(const std::string &text);

/// FNV-1a 64-bit checksum of `size` bytes, as the manifest records it.
uint64_t fnv1a64(const uint8_t *data, size_t size);
/// A checksum as the manifest spells it: lowercase hex without padding.
std::string manifestChecksumText(uint64_t checksum);

/// The byte range [begin, end) of `role` that tiles [firstTile, endTile) of
/// `group` touch, or an empty range {0, 0}.
struct ByteRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
ByteRange tileRangeBytes(const ManifestGroup &group, int64_t tileSize,
                         Role role, int64_t firstTile, int64_t endTile);

/// The tiles rank `rank` of `world` owns: the kernel's slice part=rank,
/// parts=world, i.e. [rank * T / world, (rank + 1) * T / world).
std::pair<int64_t, int64_t> shardTiles(const ManifestGroup &group, int rank,
                                       int world);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_FORMAT_ARTIFACTMANIFEST_H
