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
  /// The run's identity (the index's `run`): a resumed run continues the
  /// one it resumes; empty for checkpoints written before runs had one.
  std::string runId;
};

class CheckpointStore {
public:
  CheckpointStore(const CheckpointOptions &options, ShardedState &state,
                  Communicator &comm, RunError &errors)
      : options(options), comm(comm), errors(errors), artifact(state.artifact),
        groups(state.groups), rank(state.rank), world(state.world) {}
  ~CheckpointStore();
  CheckpointStore(const CheckpointStore &) = delete;
  CheckpointStore &operator=(const CheckpointStore &) = delete;

  /// A new run's identity (random, 16 hex digits).
  static std::string newRunId();

  /// Refuses a --save-checkpoint folder whose checkpoints are another
  /// model's (checked before training).
  bool checkFolder();
  /// Takes the --save-checkpoint folder's lock (rank 0, before a checkpoint
  /// is read): `run.lock`, flock, held until the process ends, so that a
  /// killed run's is free again. A folder another live run holds is refused.
  bool lockFolder();
  /// Makes the locked folder the run `runId`'s (rank 0, before training):
  /// removes what a dead writer left (`step-K.tmp`, a `step-K.pruned` or
  /// `step-K.old` being removed, a step folder whose index is gone) and
  /// refuses checkpoints of another run (or removes them, with
  /// --overwrite-checkpoints).
  bool claimFolder(const std::string &runId,
                   std::vector<std::string> &warnings);
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
  /// The run whose checkpoints save() writes and prunes (claimFolder).
  std::string runId;
  /// The folder's lock, held while the run lives (-1: none).
  int lockDescriptor = -1;
  /// Whether lockFolder created the folder (removed again if the run
  /// writes no checkpoint into it).
  bool createdFolder = false;
  Communicator &comm;
  RunError &errors;
  const Artifact &artifact;
  std::vector<GroupState> &groups;
  int rank, world;
};

} // namespace mlir::mantissa::rt::detail

#endif // MANTISSA_RUNTIME_CHECKPOINTSTORE_H
