//===- UpdateRunner.h - The trainer's entry points --------------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// How a run reaches the runtime's trainer (docs/training.md):
//
// - runUpdate: one rank's training run over a compiled artifact, with FSDP
//   sharding of the optimizer state, with each step's gradients from a
//   gradient source (the step compiled for the CPU or the GPU, or the
//   reference interpreter: GradientSource.h) or given (`--grads`, the same
//   global gradient every step). `mantissa-run MODEL.pt2 --steps N` reaches
//   it through the driver (lib/Driver/TrainLoop.cpp), `mantissa-run DIR`
//   through runUpdateMain.
// - runArtifactTraining: `mantissa-run DIR --inputs ...` or `--data ...`:
//   the artifact's own step (CPU or GPU) as the gradient source, for a
//   machine with the runtime alone.
//
// The trainer's parts, each in a file named for it: the options by part
// (TrainerOptions.h, flags in TrainerFlags.cpp), the gradient and batch
// sources (GradientSource.h, BatchSource.h), the micro-batch schedule
// (MicroBatchSchedule.h), this rank's sharded state (lib/Runtime/
// ShardedState.h), the update backends on the host and the GPU
// (UpdateBackend.h), the checkpoint store (CheckpointStore.h), evaluation
// (Evaluation.h) and metrics (TrainerMetrics.h); lib/Runtime/Trainer.cpp
// joins them in a run.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_UPDATERUNNER_H
#define MANTISSA_RUNTIME_UPDATERUNNER_H

#include "mantissa/Runtime/Communicator.h"
#include "mantissa/Runtime/GradientSource.h"
#include "mantissa/Runtime/TrainerOptions.h"

#include <memory>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

/// Trains on this rank (Trainer.cpp); returns the process exit code.
int runUpdate(const TrainerOptions &options, Communicator &communicator);

/// `mantissa-run DIR --inputs INPUTS.safetensors ...` or `--data ...`:
/// trains with the step the artifact holds (step.cpu.json, or with --device
/// cuda step.gpu.json: docs/gpu-step.md) as the gradient source of
/// runUpdate, so that a machine with the runtime alone (no compiler) can
/// train. The step's user inputs come from `model.inputsPath` (by name, else
/// `input.<k>`) or the token data, its buffers from `model.weightsPath`,
/// else the artifact's weights.safetensors, else `model.inputsPath`.
/// Returns the process exit code (lib/Runtime/ArtifactTraining.cpp).
int runArtifactTraining(const TrainerOptions &options,
                        Communicator &communicator);

/// Writes `text` to `path` under a temporary name, fsyncs and renames it, so
/// that a reader sees the old file or the whole new one.
bool writeFileAtomically(const std::string &path, const std::string &text,
                         std::string &error);

/// The communicator this process was launched with: MPI when launched by
/// mpirun (and built with MPI), else a single rank; fails (explaining in
/// `error`) for a torchrun world of several ranks without MPI. It also sets
/// this rank's OpenMP threads (applyThreadSplit in OpenMPEnvironment.h),
/// describes the split in `threads` ("2 ranks on this machine, 1 OpenMP
/// thread each (2 CPUs)", which the trainer prints at start-up: set it as
/// DeviceOptions::threads) and, on rank 0, warns when OMP_NUM_THREADS
/// oversubscribes the CPUs.
std::unique_ptr<Communicator> createLaunchCommunicator(std::string &threads,
                                                       std::string &error);

/// Picks the communicator (createLaunchCommunicator), parses and runs.
int runUpdateMain(int argc, char **argv);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_UPDATERUNNER_H
