//===- ArtifactWriter.h - Writing a compiled artifact -----------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// Writes the artifact directory the runtime loads (mantissa/Format/
// ArtifactManifest.h, the one definition of its manifest, lists its files;
// Runtime/Artifact.h loads it): manifest.json, kernels.so (one AdamW update per
// shard group, CPU), kernels.<g>.ptx (sm_90, one per group; skipped with a note
// in the manifest if PTX generation fails), weights.safetensors and step.mlir.
// Everything is written into a temporary directory beside the target and
// renamed into place, so a failed write leaves nothing behind.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DRIVER_ARTIFACTWRITER_H
#define MANTISSA_DRIVER_ARTIFACTWRITER_H

#include "mantissa/Dialect/Train/IR/TrainAttrs.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Driver/GpuStepWriter.h"
#include "mantissa/Import/Pt2Archive.h"
#include "mantissa/Runtime/SafeTensors.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir::mantissa {

struct ArtifactOptions {
  /// Also generate PTX for sm_90.
  bool emitPtx = true;
  /// Compile-time options of every group's kernel.
  bool amsgrad = false;
  bool maximize = false;
  /// Elements per tile of the CPU kernels: the granularity of sharding.
  int64_t tileSize = 4096;
  /// The planned step to compile for the GPU as well (docs/gpu-step.md),
  /// or null.
  train::StepOp gpuStep;
  /// Write the artifact without the GPU step, saying why in the manifest
  /// (`kernels.gpu_step_note`), when the step cannot be compiled for the
  /// GPU, rather than failing.
  bool gpuStepOptional = false;
  /// Receives what writing the GPU step did (files, counts, cache), if set.
  GpuStepFiles *gpuStepFiles = nullptr;
  /// The planned step to compile for this CPU as well (step.cpu.json,
  /// mantissa/Runtime/CpuStep.h), or null.
  train::StepOp cpuStep;
  /// With cpuStep: also its forward-only step, for evaluation.
  bool cpuForward = true;
  /// With gpuStep: also write the forward-only GPU program (evaluation).
  bool gpuForward = true;
  /// With gpuStep, test support: the host library of its kernels
  /// (GpuStepWriterOptions::hostKernels, --gpu-host-kernels); empty: none.
  GpuHostKernels gpuHostKernels;
};

/// The instruction-set extensions that code compiled for getCpuTarget()
/// (this CPU for `native`) may use, by their /proc/cpuinfo names
/// (rt::checkedCpuFeatures), for the runtime to check before it loads it.
std::vector<std::string> getTargetCpuFeatureFlags();

/// One parameter or buffer of an artifact, with its plan and initial value.
struct ArtifactTensorSpec {
  std::string fqn;
  bool isParameter = true;
  std::vector<int64_t> shape;
  train::DType exported = train::DType::fp32;
  train::DType master = train::DType::fp32, gather = train::DType::fp32;
  train::DType reduce = train::DType::fp32, moments = train::DType::fp32;
  /// `master = fp32_split`: the fp32 master kept as the bf16 parameter plus
  /// a 16-bit remainder (manifest "master": "fp32_split").
  bool masterSplit = false;
  /// Initial value in the exported dtype (named by the FQN).
  rt::HostTensor initial;
};

/// One shard group: members by FQN, in layout order.
struct ArtifactGroupSpec {
  std::string name, unit;
  train::DType gather = train::DType::fp32;
  std::string nestedIn;
  bool reshardAfterForward = true;
  std::vector<std::string> members;
};

/// Everything an artifact holds, independent of MLIR.
struct ArtifactSpec {
  std::string stepName;
  std::vector<ArtifactTensorSpec> tensors;
  std::vector<ArtifactGroupSpec> groups;
  /// Buffers of non-float dtypes (masks, indices): stored, never planned.
  std::vector<rt::HostTensor> opaqueBuffers;
  std::string programText;
};

/// Collects the spec of `plannedModule`'s train.step. A step without plans
/// (before the precision pass) treats every parameter as master = gather =
/// reduce = exported dtype, moments fp32, grouped in one root group per
/// exported dtype.
llvm::Expected<ArtifactSpec> collectArtifactSpec(ModuleOp plannedModule,
                                                 const pt2::Program &program);

/// Writes `spec` as an artifact at `directory` (replacing one already there).
/// Whether `directory` may receive an artifact: it does not exist yet, is an
/// empty directory, or holds a Mantissa artifact (its manifest.json says
/// format "mantissa-artifact"), which the new one replaces atomically.
/// Anything else (a file, a folder with other contents) is refused rather
/// than deleted. Called before any work, and again by writeArtifactSpec.
llvm::Error checkArtifactTarget(llvm::StringRef directory);

llvm::Error writeArtifactSpec(const ArtifactSpec &spec,
                              llvm::StringRef directory,
                              const ArtifactOptions &options);

/// collectArtifactSpec + writeArtifactSpec.
llvm::Error writeArtifact(ModuleOp plannedModule, const pt2::Program &program,
                          llvm::StringRef directory,
                          const ArtifactOptions &options);

} // namespace mlir::mantissa

#endif // MANTISSA_DRIVER_ARTIFACTWRITER_H
