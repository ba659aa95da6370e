//===- UpdateRunner.h - The update path across ranks ------------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// `mantissa-run DIR --grads GRADS.safetensors --steps N ...`: runs optimizer
// steps of a compiled artifact with given gradients, with FSDP sharding:
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
//   sizes.
// - Parameters. After the update each rank's gather-dtype slice is
//   all-gathered, so every rank holds the full gather-dtype parameters.
// - Checkpoints: see Checkpoint layout in UpdateRunner.cpp / docs.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_UPDATERUNNER_H
#define MANTISSA_RUNTIME_UPDATERUNNER_H

#include "mantissa/Runtime/Communicator.h"

#include <cstdint>
#include <string>

namespace mlir::mantissa::rt {

struct UpdateOptions {
  std::string artifactDir;
  std::string gradsPath;
  std::string finalParamsPath;
  std::string saveCheckpointDir;
  std::string resumeDir;
  /// Load and validate a checkpoint, print its step, and stop.
  std::string verifyCheckpointDir;
  std::string device = "cpu";
  int64_t steps = 1;
  int64_t saveEvery = 0;
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.01;
  /// Print the per-rank peak memory report.
  bool memoryReport = true;
};

/// Parses mantissa-run's update-path flags (argv[1] is the artifact).
bool parseUpdateOptions(int argc, char **argv, UpdateOptions &options,
                        std::string &error);

/// Runs the update path on this rank; returns the process exit code.
int runUpdate(const UpdateOptions &options, Communicator &communicator);

/// Picks the communicator (MPI when launched by mpirun and built with MPI,
/// torchrun's environment, else a single rank), parses and runs.
int runUpdateMain(int argc, char **argv);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_UPDATERUNNER_H
