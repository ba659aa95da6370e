//===- StepProfile.cpp - Where a training step's time goes ----------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// StepProfile.h says what is timed. Part of libmantissa_rt: no LLVM or MLIR
// headers here.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/StepProfile.h"

#include <algorithm>
#include <cstdio>

using namespace mlir::mantissa::rt;

namespace {
using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point begin) {
  return std::chrono::duration<double>(Clock::now() - begin).count();
}
} // namespace

const char *mlir::mantissa::rt::stepPhaseName(StepPhase phase) {
  switch (phase) {
  case StepPhase::MicroBatches:
    return "micro-batches";
  case StepPhase::LocalSums:
    return "local sums";
  case StepPhase::Waiting:
    return "waiting for ranks";
  case StepPhase::Combination:
    return "combination";
  case StepPhase::MeanAndNorm:
    return "mean and norm";
  case StepPhase::Update:
    return "update";
  }
  return "?";
}

StepProfile::Section::Section(StepProfile *profile, StepPhase phase)
    : profile(profile), phase(phase), begin(Clock::now()) {
  if (profile)
    profile->current = size_t(phase);
}

StepProfile::Section::~Section() {
  if (!profile)
    return;
  profile->step[size_t(phase)].seconds += secondsSince(begin);
  profile->current = kStepPhaseCount;
}

void StepProfile::addCollective(double seconds) {
  step[current].collectives += seconds;
}

void StepProfile::endStep(double seconds) {
  double phases = 0;
  for (size_t p = 0; p < kStepPhaseCount; ++p)
    phases += step[p].seconds;
  // What no phase covers: the agreement that the step succeeded, the stop
  // signal's, the progress line.
  step[kStepPhaseCount].seconds = std::max(0.0, seconds - phases);
  // Like the summary's time per step: the first two steps load code and
  // touch memory for the first time.
  if (++steps > 2) {
    for (size_t p = 0; p <= kStepPhaseCount; ++p) {
      total[p].seconds += step[p].seconds;
      total[p].collectives += step[p].collectives;
    }
    totalSeconds += seconds;
    ++countedSteps;
  }
  step = {};
}

std::string StepProfile::report(int rank, int world) const {
  if (!countedSteps)
    return "";
  double scale = 1e3 / double(countedSteps);
  char text[160];
  std::snprintf(text, sizeof(text),
                "profile: rank %d/%d, ms per step (mean of steps after the "
                "first two):",
                rank, world);
  std::string line = text;
  for (size_t p = 0; p <= kStepPhaseCount; ++p) {
    const char *name =
        p == kStepPhaseCount ? "other" : stepPhaseName(StepPhase(p));
    std::snprintf(text, sizeof(text), "%s %s %.1f", p ? "," : "", name,
                  total[p].seconds * scale);
    line += text;
    // Waiting is a collective through and through.
    if (total[p].collectives > 0 && p != size_t(StepPhase::Waiting) &&
        p != kStepPhaseCount) {
      std::snprintf(text, sizeof(text), " (communication %.1f)",
                    total[p].collectives * scale);
      line += text;
    }
  }
  std::snprintf(text, sizeof(text), "; step %.1f", totalSeconds * scale);
  return line + text;
}

template <typename Call> auto TimedCommunicator::timed(Call call) {
  auto begin = Clock::now();
  auto result = call();
  profile.addCollective(secondsSince(begin));
  return result;
}

bool TimedCommunicator::allGather(uint8_t *buffer,
                                  const std::vector<int64_t> &displacements,
                                  const std::vector<int64_t> &counts,
                                  std::string &error) {
  return timed(
      [&] { return inner.allGather(buffer, displacements, counts, error); });
}

bool TimedCommunicator::reduceScatterSum(const void *send, void *recv,
                                         const std::vector<int64_t> &counts,
                                         DType dtype, std::string &error) {
  return timed(
      [&] { return inner.reduceScatterSum(send, recv, counts, dtype, error); });
}

bool TimedCommunicator::allToAll(const uint8_t *send,
                                 const std::vector<int64_t> &sendCounts,
                                 const std::vector<int64_t> &sendDispls,
                                 uint8_t *recv,
                                 const std::vector<int64_t> &recvCounts,
                                 const std::vector<int64_t> &recvDispls,
                                 std::string &error) {
  return timed([&] {
    return inner.allToAll(send, sendCounts, sendDispls, recv, recvCounts,
                          recvDispls, error);
  });
}

bool TimedCommunicator::allAgree(bool ok) {
  return timed([&] { return inner.allAgree(ok); });
}

int64_t TimedCommunicator::allMax(int64_t value) {
  return timed([&] { return inner.allMax(value); });
}

bool TimedCommunicator::broadcast(void *data, int64_t bytes, int root,
                                  std::string &error) {
  return timed([&] { return inner.broadcast(data, bytes, root, error); });
}

bool TimedCommunicator::shareMachine(const std::vector<uint64_t> &cpus,
                                     std::vector<uint64_t> &machineCpus,
                                     int &ranksHere, std::string &error) {
  return inner.shareMachine(cpus, machineCpus, ranksHere, error);
}
