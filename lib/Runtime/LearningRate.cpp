//===- LearningRate.cpp - Learning-rate schedules -------------------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/LearningRate.h"

#include <cmath>

using namespace mlir::mantissa::rt;

const char *mlir::mantissa::rt::lrScheduleName(LrScheduleKind kind) {
  switch (kind) {
  case LrScheduleKind::Constant:
    return "constant";
  case LrScheduleKind::Cosine:
    return "cosine";
  case LrScheduleKind::Linear:
    return "linear";
  case LrScheduleKind::Wsd:
    return "wsd";
  }
  return "constant";
}

bool mlir::mantissa::rt::parseLrScheduleKind(const std::string &text,
                                             LrScheduleKind &out,
                                             std::string &error) {
  for (LrScheduleKind kind : {LrScheduleKind::Constant, LrScheduleKind::Cosine,
                              LrScheduleKind::Linear, LrScheduleKind::Wsd})
    if (text == lrScheduleName(kind)) {
      out = kind;
      return true;
    }
  error = "--lr-schedule: unknown schedule '" + text +
          "' (expected constant, cosine, linear or wsd)";
  return false;
}

bool mlir::mantissa::rt::validateLrSchedule(const LrSchedule &schedule,
                                            std::string &error) {
  const LrSchedule &s = schedule;
  if (!std::isfinite(s.lr) || s.lr <= 0) {
    error = "--lr: expected a finite learning rate > 0, got " +
            std::to_string(s.lr);
    return false;
  }
  if (!std::isfinite(s.minLrRatio) || s.minLrRatio < 0 || s.minLrRatio > 1) {
    error = "--min-lr-ratio: expected a ratio in [0, 1], got " +
            std::to_string(s.minLrRatio);
    return false;
  }
  if (s.warmupSteps < 0 || s.warmupSteps > s.totalSteps) {
    error = "--warmup-steps: expected 0 <= W <= --steps (" +
            std::to_string(s.totalSteps) + "), got " +
            std::to_string(s.warmupSteps);
    return false;
  }
  if (s.kind == LrScheduleKind::Wsd &&
      (s.decaySteps <= 0 || s.decaySteps > s.totalSteps - s.warmupSteps)) {
    error = "--decay-steps: the wsd schedule needs 0 < D <= --steps - "
            "--warmup-steps (" +
            std::to_string(s.totalSteps - s.warmupSteps) + "), got " +
            std::to_string(s.decaySteps);
    return false;
  }
  if (s.kind != LrScheduleKind::Wsd && s.decaySteps != 0) {
    error = "--decay-steps applies to --lr-schedule wsd only";
    return false;
  }
  return true;
}

double mlir::mantissa::rt::learningRate(const LrSchedule &schedule,
                                        int64_t step) {
  const LrSchedule &s = schedule;
  double stepValue = double(step);
  if (step < s.warmupSteps)
    return s.lr * (stepValue + 1) / double(s.warmupSteps);
  double lrMin = s.minLrRatio * s.lr;
  double span = double(s.totalSteps - s.warmupSteps);
  double since = stepValue - double(s.warmupSteps);
  switch (s.kind) {
  case LrScheduleKind::Constant:
    return s.lr;
  case LrScheduleKind::Cosine:
    return lrMin + 0.5 * (1 + std::cos(M_PI * since / span)) * (s.lr - lrMin);
  case LrScheduleKind::Linear:
    return s.lr - since / span * (s.lr - lrMin);
  case LrScheduleKind::Wsd: {
    int64_t decayStart = s.totalSteps - s.decaySteps;
    if (step < decayStart)
      return s.lr;
    return s.lr -
           double(step - decayStart) / double(s.decaySteps) * (s.lr - lrMin);
  }
  }
  return s.lr;
}
