//===- MicroBatchSchedule.h - Micro-batches per step and rank ---*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The one definition of how a step is cut into micro-batches, which rank
// evaluates which, and where each sits in the run's data (docs/training.md,
// docs/data.md). A step over data has M = K * W micro-batches (K =
// --grad-accum per rank, W ranks); rank r evaluates [r * K, (r + 1) * K), and
// the step's gradient is their mean, summed in a fixed tree
// (GradientCombination.h), so any (W, K) with the same M gives the same bits.
// A step over one fixed batch (or --grads) is one micro-batch, on rank 0.
//
// The run's data position counts micro-batches from the start of training:
// micro-batch m of a step starts at global micro-batch G + m, where G is the
// count of every earlier step's micro-batches (saved in checkpoints), and a
// batch source of B samples a micro-batch reads global samples [(G + m) * B,
// (G + m + 1) * B) of its order (BatchSource.h). Evaluation splits its
// micro-batches over the ranks by the same rule (partition).
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_MICROBATCHSCHEDULE_H
#define MANTISSA_RUNTIME_MICROBATCHSCHEDULE_H

#include "mantissa/Runtime/Communicator.h"
#include "mantissa/Runtime/GradientCombination.h"
#include "mantissa/Runtime/GradientSource.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

class MicroBatchSchedule {
public:
  /// `splitsSteps`: the step reads data (every rank evaluates `gradAccum`
  /// micro-batches of its own); otherwise one micro-batch a step, on rank 0.
  MicroBatchSchedule(int rank, int world, int64_t gradAccum, bool splitsSteps)
      : rank(rank), world(world), perStep(splitsSteps ? gradAccum * world : 1) {
  }

  /// M: the micro-batches of one step, over all ranks.
  int64_t microBatchesPerStep() const { return perStep; }

  /// Every rank's share of `total` micro-batches: rank r takes ceil(total /
  /// W) consecutive ones from r * ceil(total / W), cut at `total`. A step's
  /// M = K * W gives each rank its K; evaluation's micro-batches are split
  /// the same way.
  std::vector<SumNode> partition(int64_t total) const;

  /// The step's micro-batches of every rank (partition of M) and this
  /// rank's.
  std::vector<SumNode> stepRanges() const { return partition(perStep); }
  SumNode ownStepRange() const { return stepRanges()[size_t(rank)]; }

  /// Micro-batch `index` (of the step's M) of step `step` (1-based), with
  /// its global position.
  GradientSource::MicroBatch microBatch(int64_t step, int64_t index) const {
    return {step, index, perStep, done + index};
  }

  /// Micro-batches of every step so far (the data position).
  int64_t microBatchesDone() const { return done; }
  /// Called once a step's micro-batches are evaluated.
  void finishStep() { done += perStep; }
  /// Sets the data position (from a checkpoint).
  void restore(int64_t microBatchesDone) { done = microBatchesDone; }

private:
  int rank, world;
  int64_t perStep;
  int64_t done = 0;
};

/// The most partial sums of the gradient a rank holds at once while it sums
/// its K micro-batches in the tree and sends them (GradientCombination.h):
/// floor(log2 K) + 2 for K > 1, none for K = 1 (the one gradient is combined
/// where it was computed). The only per-step memory that grows with K.
int64_t gradientPartialSums(int64_t gradAccum);

/// Refuses --grad-accum K when its partial sums of this rank's
/// `gradientBytes`-byte gradient cannot fit in `availableBytes` (the
/// machine's memory or the process's limit), before anything is allocated.
bool checkGradAccumMemory(int64_t gradAccum, int64_t gradientBytes,
                          uint64_t availableBytes, std::string &error);

/// The bytes this process can allocate at most: physical memory, or less
/// under an address-space or data limit (setrlimit).
uint64_t availableMemoryBytes();

/// All-gathers one double per item in place (a micro-batch's loss, a tile's
/// sum of squares): rank r contributes values [ranges[r].begin,
/// ranges[r].end).
bool allGatherValues(Communicator &comm, std::vector<double> &values,
                     const std::vector<SumNode> &ranges, std::string &error);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_MICROBATCHSCHEDULE_H
