//===- LearningRate.h - Learning-rate schedules -----------------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The learning rate of each step, as the trainer hands it to the fused AdamW
// kernels (a run-time argument: changing it never recompiles anything).
// With s the 0-based step, N the run's last step, W warm-up steps and
// lr_min = R * lr:
//
//   s < W                 lr * (s + 1) / W
//   constant              lr
//   cosine                lr_min + 0.5 * (1 + cos(pi * (s - W) / (N - W)))
//                                      * (lr - lr_min)
//   linear                lr - (s - W) / (N - W) * (lr - lr_min)
//   wsd (decay D steps)   lr while s < N - D, then
//                         lr - (s - (N - D)) / D * (lr - lr_min)
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_LEARNINGRATE_H
#define MANTISSA_RUNTIME_LEARNINGRATE_H

#include <cstdint>
#include <string>

namespace mlir::mantissa::rt {

enum class LrScheduleKind { Constant, Cosine, Linear, Wsd };

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::Constant;
  /// The peak learning rate (`--lr`).
  double lr = 1e-3;
  /// `--warmup-steps`, `--min-lr-ratio`, `--decay-steps` (wsd only).
  int64_t warmupSteps = 0;
  double minLrRatio = 0;
  int64_t decaySteps = 0;
  /// N: the run's total step count (`--steps`), the end of every decay.
  int64_t totalSteps = 1;
};

/// "constant", "cosine", "linear" or "wsd".
const char *lrScheduleName(LrScheduleKind kind);
/// Parses a schedule name; false with `error` listing the names otherwise.
bool parseLrScheduleKind(const std::string &text, LrScheduleKind &out,
                         std::string &error);
/// Checks the values against the ranges the formulas need (lr finite and
/// positive, 0 <= R <= 1, 0 <= W <= N, wsd with 0 < D <= N - W), naming the
/// flag that is out of range.
bool validateLrSchedule(const LrSchedule &schedule, std::string &error);
/// The learning rate of 0-based step `step`.
double learningRate(const LrSchedule &schedule, int64_t step);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_LEARNINGRATE_H
