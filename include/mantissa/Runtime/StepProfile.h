//===- StepProfile.h - Where a training step's time goes --------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// `mantissa-run --profile`: each rank times the phases of its steps (its
// micro-batches, summing them, waiting for the other ranks, the exact
// combination, the mean and norm, the update) and, inside each, the time its
// collectives took (TimedCommunicator), and prints one line at the end:
//
//   profile: rank 0/2, ms per step (mean of steps after the first two):
//   micro-batches 88.1, local sums 0.0, waiting for ranks 2.3, combination
//   3.5 (communication 2.0), mean and norm 0.9 (communication 0.1), update
//   1.2 (communication 0.4), other 0.3; step 96.3
//
// "Waiting for ranks" is the agreement that every rank's micro-batches
// succeeded: the time this rank waits for the slowest, so the ranks' lines
// show the imbalance and the rest of the step what data parallelism costs.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_STEPPROFILE_H
#define MANTISSA_RUNTIME_STEPPROFILE_H

#include "mantissa/Runtime/Communicator.h"

#include <array>
#include <chrono>
#include <string>

namespace mlir::mantissa::rt {

/// The phases of a training step, in the order they run.
enum class StepPhase {
  MicroBatches,
  LocalSums,
  Waiting,
  Combination,
  MeanAndNorm,
  Update,
};
constexpr size_t kStepPhaseCount = 6;

/// The words the report uses for `phase`.
const char *stepPhaseName(StepPhase phase);

/// Seconds per phase of a rank's steps, and the collectives' seconds inside
/// each; like the summary's time per step, the mean of the steps after the
/// first two.
class StepProfile {
public:
  /// Adds the time of a collective to the phase that runs it (or to "other"
  /// outside one).
  void addCollective(double seconds);
  /// Ends a step of `seconds` in all.
  void endStep(double seconds);
  /// The line above, for `rank` of `world` (empty before a third step).
  std::string report(int rank, int world) const;

  /// Times `phase` from construction to destruction (nothing without a
  /// profile).
  class Section {
  public:
    Section(StepProfile *profile, StepPhase phase);
    ~Section();
    Section(const Section &) = delete;
    Section &operator=(const Section &) = delete;

  private:
    StepProfile *profile;
    StepPhase phase;
    std::chrono::steady_clock::time_point begin;
  };

private:
  struct Times {
    double seconds = 0, collectives = 0;
  };
  /// The current step's phases, and the sums over the counted steps; the
  /// last entry is what no phase covers.
  std::array<Times, kStepPhaseCount + 1> step{}, total{};
  double totalSeconds = 0;
  int64_t steps = 0, countedSteps = 0;
  /// The phase running now (kStepPhaseCount: none).
  size_t current = kStepPhaseCount;
};

/// A communicator that forwards every call to `inner` and adds the time of
/// each collective to `profile`.
class TimedCommunicator final : public Communicator {
public:
  TimedCommunicator(Communicator &inner, StepProfile &profile)
      : inner(inner), profile(profile) {}
  int rank() const override { return inner.rank(); }
  int worldSize() const override { return inner.worldSize(); }
  std::string name() const override { return inner.name(); }
  bool allGather(uint8_t *buffer, const std::vector<int64_t> &displacements,
                 const std::vector<int64_t> &counts,
                 std::string &error) override;
  bool reduceScatterSum(const void *send, void *recv,
                        const std::vector<int64_t> &counts, DType dtype,
                        std::string &error) override;
  bool allToAll(const uint8_t *send, const std::vector<int64_t> &sendCounts,
                const std::vector<int64_t> &sendDispls, uint8_t *recv,
                const std::vector<int64_t> &recvCounts,
                const std::vector<int64_t> &recvDispls,
                std::string &error) override;
  bool allAgree(bool ok) override;
  int64_t allMax(int64_t value) override;
  bool broadcast(void *data, int64_t bytes, int root,
                 std::string &error) override;
  bool shareMachine(const std::vector<uint64_t> &cpus,
                    std::vector<uint64_t> &machineCpus, int &ranksHere,
                    std::string &error) override;

private:
  template <typename Call> auto timed(Call call);
  Communicator &inner;
  StepProfile &profile;
};

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_STEPPROFILE_H
