//===- TrainerMetrics.h - What a training run reports -----------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The trainer's outputs besides the model: the progress line, `--metrics`
// (one JSON object per step), `--losses` ({"losses": [...]}) and the loss
// plot beside it. JSON never holds a bare NaN or infinity: a non-finite
// number is written as null, with a `<key>_nonfinite` string ("nan", "inf",
// "-inf") beside it in the metrics.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_TRAINERMETRICS_H
#define MANTISSA_RUNTIME_TRAINERMETRICS_H

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace mlir::mantissa::rt {

/// One step as the trainer saw it.
struct StepRecord {
  /// 1-based: the record of step 1 is made after the first update.
  int64_t step = 0;
  /// The run's --seed, which every random number of the step derives from.
  uint64_t seed = 0;
  /// The mean of the step's micro-batch losses.
  double loss = 0;
  /// The learning rate the step's update used.
  double lr = 0;
  /// The L2 norm of the step's mean gradient, before clipping (NaN when the
  /// run does not compute it).
  double gradNorm = 0;
  /// Tokens the step consumed (0 when the batch has no token ids).
  int64_t tokens = 0;
  double tokensPerSecond = 0;
  /// Seconds the step took.
  double seconds = 0;
  /// The update was skipped (non-finite loss or gradient norm).
  bool skipped = false;
  /// The validation loss after this step's update, on the steps that
  /// evaluate.
  bool evaluated = false;
  double evalLoss = 0;
};

/// `value` as a JSON number (shortest round-trip form), or "null".
std::string jsonNumber(double value);

/// The metrics object of one step, on one line (no newline).
std::string metricsLine(const StepRecord &record);

/// `{"losses": [...]}` of every step, as `--losses` has always written it.
std::string lossesJson(const std::vector<double> &losses);

/// Tick values for an axis over [low, high]: multiples of one step of 1, 2
/// or 5 times a power of ten, chosen so that about `target` of them cover
/// the range, from the last multiple at or below `low` to the first at or
/// above `high` (the axis's ends). At least two values; `integers` keeps
/// the step >= 1 (step numbers).
std::vector<double> niceTicks(double low, double high, int target,
                              bool integers = false);

/// The training loss curve (and the validation losses, as points joined by
/// a line, when there are any) as a self-contained SVG, with ticks at round
/// values (niceTicks) and grid lines on both axes, and the axes titled
/// "step" and "loss".
std::string lossPlotSvg(const std::vector<double> &losses,
                        const std::vector<std::pair<int64_t, double>> &evals);

/// `path` with its extension (after the last '/') replaced by `extension`.
std::string replaceExtension(const std::string &path,
                             const std::string &extension);

/// Prints a step's progress line on stdout (rank 0): its loss, rate, grad
/// norm, throughput (`stepsPerSecond` over the run so far; tokens when
/// `tokensPerStep`), time left to step `totalSteps`, evaluation and skip.
void printStepLine(const StepRecord &record, int64_t totalSteps,
                   double stepsPerSecond, int64_t tokensPerStep,
                   int64_t consecutiveSkips);

/// The training and validation losses of a run so far (--losses and its
/// plot).
struct LossHistory {
  std::vector<double> losses;
  /// (step, validation loss) of every evaluation.
  std::vector<std::pair<int64_t, double>> evals;
};

/// The run's step times, for the report and the summary.
struct StepTimes {
  int64_t steps = 0;
  double seconds = 0;
  /// Seconds of the steps after the first two (the summary's per-step time).
  double steadySeconds = 0;
  int64_t steadySteps = 0;
  void add(double stepSeconds) {
    seconds += stepSeconds;
    if (++steps > 2) {
      steadySeconds += stepSeconds;
      ++steadySteps;
    }
  }
};

/// Prints the run's last line: steps trained, skipped, the final losses and
/// the mean time of the steps after the first two.
void printRunSummary(const StepTimes &times, int64_t skipped,
                     const LossHistory &history);

/// Appends one line per step to `--metrics`, flushed at once so that a
/// crashed or interrupted run keeps every step it finished.
class MetricsFile {
public:
  MetricsFile() = default;
  MetricsFile(const MetricsFile &) = delete;
  MetricsFile &operator=(const MetricsFile &) = delete;
  ~MetricsFile();
  /// Creates (truncates) `path`.
  bool open(const std::string &path, std::string &error);
  bool write(const StepRecord &record, std::string &error);
  bool isOpen() const { return file != nullptr; }

private:
  std::FILE *file = nullptr;
  std::string path;
};

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_TRAINERMETRICS_H
