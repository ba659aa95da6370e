//===- CheckpointStore.h - The trainer's checkpoints ------------*- C++ -*-===//
//
// Part of the Mantissa project. Internal to libmantissa_rt.
//
//===----------------------------------------------------------------------===//
//
// Saves this rank's ShardedState with the trainer's counters and loads it
// back, resharded for any world size (the layout, format
// "mantissa-checkpoint" version 2, is described in CheckpointStore.cpp and
// docs/training.md). `--save-checkpoint DIR --save-every K
// --keep-checkpoints N`, `--resume DIR`, `--verify-checkpoint DIR`.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_CHECKPOINTSTORE_H
#define MANTISSA_RUNTIME_CHECKPOINTSTORE_H

#include "ShardedState.h"
#include "mantissa/Runtime/TrainerOptions.h"

#include <string>
#include <vector>

namespace mlir::mantissa::rt::detail {

/// What an exact resume needs besides the state (the index's `trainer`):
/// updates applied (AdamW's step count, which skipped steps do not
/// advance), skips, and the data position in micro-batches.
struct TrainerCounters {
  int64_t optimizerStep = 0, consecutiveSkips = 0, skippedSteps = 0,
          microBatchesDone = 0;
};

class CheckpointStore {
public:
  CheckpointStore(const CheckpointOptions &options, ShardedState &state,
                  Communicator &comm, RunError &errors)
      : options(options), comm(comm), errors(errors), artifact(state.artifact),
        groups(state.groups), rank(state.rank), world(state.world) {}

  /// Refuses a --save-checkpoint folder whose checkpoints are another
  /// model's (checked before training).
  bool checkFolder();
  /// Writes the checkpoint of step `stepNumber` (every rank its file, rank 0
  /// the index with `trainer`, the trainer's record) and commits it.
  bool save(int64_t stepNumber, const json &trainer);
  /// Reads a checkpoint and installs this rank's shard and the counters;
  /// nothing is changed unless everything loads. `hyperparameters` are the
  /// run's, to warn where they differ from the checkpoint's.
  bool load(const std::string &dir, const json &hyperparameters,
            int64_t &stepOut, TrainerCounters &counters,
            std::vector<std::string> &warnings);

private:
  bool fail(const std::string &message) { return errors.fail(message); }

  const CheckpointOptions &options;
  Communicator &comm;
  RunError &errors;
  const Artifact &artifact;
  std::vector<GroupState> &groups;
  int rank, world;
};

} // namespace mlir::mantissa::rt::detail

#endif // MANTISSA_RUNTIME_CHECKPOINTSTORE_H
