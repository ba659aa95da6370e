//===- UpdateRunner.h - The update path across ranks ------------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// `mantissa-run DIR --grads GRADS.safetensors --steps N ...`: runs optimizer
// steps of a compiled artifact with given gradients, with FSDP sharding
// (`--inputs INPUTS.safetensors` instead trains with the artifact's GPU
// step: runArtifactTraining):
//
// - Shards. Each group's kernel splits the group's T tiles (tile_size
//   elements of one member each) into slices [p*T/n, (p+1)*T/n); rank r of W
//   owns slice p=r, n=W. In every role's flat buffer the bytes of a slice are
//   contiguous, so the rank keeps only those bytes of the master, moments and
//   reduced gradient, and calls the kernel with part=r, parts=W and each
//   pointer biased by its slice's first byte (the generated kernel's ABI is
//   unchanged). Groups are thus split evenly at tile granularity.
// - Gradients. The grads file is the global (already averaged) gradient.
//   Rank 0 contributes it, cast to each member's reduce dtype, every other
//   rank contributes -0.0 (the exact additive identity), and a real
//   reduce-scatter sums them in the reduce dtype: every world size sees
//   exactly the file's gradient, so results are bit-identical across world
//   sizes. Members of one group may reduce in different dtypes: each run of
//   consecutive members with one reduce dtype is reduce-scattered on its
//   own, in that dtype, into the rank's part of the grad buffer.
// - Parameters. After the update each rank's gather-dtype slice is
//   all-gathered, so every rank holds the full gather-dtype parameters.
// - Checkpoints: see Checkpoint layout in UpdateRunner.cpp / docs.
// - Tripwire: after the first step of every run the resident state is
//   checked against the plan (Tripwire.h).
// - Devices: `--device cpu` (default) runs the CPU kernels (kernels.so);
//   `--device cuda` keeps parameters, masters and moments resident on the
//   GPU (CudaDriver.h), copies each step's gradients in (unless the training
//   step itself runs on the GPU and writes them in place: GpuStep.h), runs
//   the PTX kernels over each rank's tiles and the parameter all-gather over
//   NCCL (CommunicatorNCCL.h); the micro-batch gradients are combined on
//   the host, exactly as on the CPU. Checkpoints are the same files either
//   way.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_UPDATERUNNER_H
#define MANTISSA_RUNTIME_UPDATERUNNER_H

#include "mantissa/Runtime/Communicator.h"
#include "mantissa/Runtime/GradientSource.h"
#include "mantissa/Runtime/TrainerOptions.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

/// Runs the update path on this rank; returns the process exit code.
int runUpdate(const TrainerOptions &options, Communicator &communicator);

/// `mantissa-run DIR --inputs INPUTS.safetensors --device cuda ...`: trains
/// with the step the artifact holds for the GPU (manifest.json
/// kernels.gpu_step, docs/gpu-step.md) in front of the update path, so that
/// a machine with the runtime alone (no compiler) can train. The step's
/// user inputs come from `inputsPath` (by name, else `input.<k>`), its
/// buffers from `weightsPath`, else the artifact's weights.safetensors, else
/// `inputsPath`.
/// Prints each step's loss on rank 0 and writes `lossesPath` on success.
/// Returns the process exit code (lib/Runtime/ArtifactTraining.cpp).
int runArtifactTraining(const TrainerOptions &options,
                        Communicator &communicator);

/// Writes `text` to `path` under a temporary name, fsyncs and renames it, so
/// that a reader sees the old file or the whole new one.
bool writeFileAtomically(const std::string &path, const std::string &text,
                         std::string &error);

/// The communicator this process was launched with: MPI when launched by
/// mpirun (and built with MPI), else a single rank; fails (explaining in
/// `error`) for a torchrun world of several ranks without MPI.
std::unique_ptr<Communicator> createLaunchCommunicator(std::string &error);

/// Picks the communicator (createLaunchCommunicator), parses and runs.
int runUpdateMain(int argc, char **argv);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_UPDATERUNNER_H
