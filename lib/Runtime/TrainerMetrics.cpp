//===- TrainerMetrics.cpp - What a training run reports -------------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/TrainerMetrics.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

using namespace mlir::mantissa::rt;

std::string mlir::mantissa::rt::jsonNumber(double value) {
  if (!std::isfinite(value))
    return "null";
  char text[64];
  // The shortest form that reads back as the same double.
  for (int digits = 15; digits <= 17; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value)
      break;
  }
  return text;
}

namespace {

const char *nonFiniteName(double value) {
  return std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf";
}

void addNumber(std::string &line, const char *key, double value) {
  line += std::string(",\"") + key + "\":" + jsonNumber(value);
  if (!std::isfinite(value))
    line += std::string(",\"") + key + "_nonfinite\":\"" +
            nonFiniteName(value) + "\"";
}

} // namespace

std::string mlir::mantissa::rt::metricsLine(const StepRecord &record) {
  std::string line = "{\"step\":" + std::to_string(record.step);
  line += ",\"seed\":" + std::to_string(record.seed);
  addNumber(line, "loss", record.loss);
  addNumber(line, "lr", record.lr);
  addNumber(line, "grad_norm", record.gradNorm);
  line += ",\"tokens\":" + std::to_string(record.tokens);
  addNumber(line, "tokens_per_s", record.tokensPerSecond);
  addNumber(line, "seconds", record.seconds);
  line += std::string(",\"skipped\":") + (record.skipped ? "true" : "false");
  if (record.evaluated)
    addNumber(line, "eval_loss", record.evalLoss);
  return line + "}";
}

std::string mlir::mantissa::rt::lossesJson(const std::vector<double> &losses) {
  std::string text = "{\n  \"losses\": [";
  for (size_t i = 0; i < losses.size(); ++i)
    text += std::string(i ? ",\n    " : "\n    ") + jsonNumber(losses[i]);
  return text + (losses.empty() ? "]\n}\n" : "\n  ]\n}\n");
}

std::vector<double> mlir::mantissa::rt::niceTicks(double low, double high,
                                                  int target, bool integers) {
  if (!(high > low))
    high = low + (integers ? 1 : std::max(std::fabs(low) * 0.1, 1e-3));
  double rough = (high - low) / std::max(1, target - 1);
  double magnitude = std::pow(10.0, std::floor(std::log10(rough)));
  double fraction = rough / magnitude;
  double step = (fraction < 1.5 ? 1
                 : fraction < 3 ? 2
                 : fraction < 7 ? 5
                                : 10) *
                magnitude;
  if (integers)
    step = std::max(1.0, std::round(step));
  // Ends within a millionth of a step count as on the tick (rounding).
  double first = std::floor(low / step + 1e-6),
         last = std::ceil(high / step - 1e-6);
  std::vector<double> ticks;
  for (double k = first; k <= last; ++k)
    ticks.push_back(k * step == 0 ? 0.0 : k * step);
  if (ticks.size() < 2)
    ticks.push_back(ticks.back() + step);
  return ticks;
}

namespace {

/// A tick's label with as many decimals as the ticks' step needs.
std::string tickLabel(double value, double step) {
  int decimals = std::max(0, int(-std::floor(std::log10(step) + 1e-9)));
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  return text;
}

} // namespace

std::string mlir::mantissa::rt::lossPlotSvg(
    const std::vector<double> &losses,
    const std::vector<std::pair<int64_t, double>> &evals) {
  constexpr double kWidth = 640, kHeight = 400, kLeft = 80, kRight = 20,
                   kTop = 40, kBottom = 55;
  double low = 0, high = 1;
  bool any = false;
  auto widen = [&](double loss) {
    if (!std::isfinite(loss))
      return;
    low = any ? std::min(low, loss) : loss;
    high = any ? std::max(high, loss) : loss;
    any = true;
  };
  for (double loss : losses)
    widen(loss);
  for (const auto &eval : evals)
    widen(eval.second);
  // The y axis runs between round values around the losses; the x axis
  // from step 1 to the last step, ticked at round step numbers inside it.
  std::vector<double> yTicks = niceTicks(low, high, 6);
  low = yTicks.front();
  high = yTicks.back();
  double steps = double(std::max<size_t>(losses.size(), 1));
  std::vector<double> xTicks = niceTicks(1, std::max(steps, 2.0), 7, true);
  // Step k (1-based) sits at x(k - 1).
  auto x = [&](double index) {
    return kLeft + (kWidth - kLeft - kRight) * index /
                       std::max<double>(1, double(losses.size()) - 1);
  };
  auto y = [&](double loss) {
    return kTop + (kHeight - kTop - kBottom) * (high - loss) / (high - low);
  };
  std::string svg;
  char line[512];
  auto add = [&](int length) {
    if (length > 0)
      svg.append(line, std::min<size_t>(size_t(length), sizeof(line) - 1));
  };
  add(std::snprintf(line, sizeof(line),
                    "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" "
                    "height=\"%g\" font-family=\"sans-serif\" "
                    "font-size=\"12\">\n",
                    kWidth, kHeight));
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  add(std::snprintf(line, sizeof(line),
                    "<text x=\"%g\" y=\"22\" font-size=\"15\">Training loss%s, "
                    "%zu steps</text>\n",
                    kLeft,
                    evals.empty() ? ""
                                  : " (blue) and validation loss "
                                    "(orange)",
                    losses.size()));
  double yStep = yTicks.size() > 1 ? yTicks[1] - yTicks[0] : 1;
  for (double tick : yTicks) {
    add(std::snprintf(line, sizeof(line),
                      "<path d=\"M%g,%.1f H%g\" stroke=\"#dddddd\"/>\n", kLeft,
                      y(tick), kWidth - kRight));
    add(std::snprintf(line, sizeof(line),
                      "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%s"
                      "</text>\n",
                      kLeft - 6, y(tick) + 4, tickLabel(tick, yStep).c_str()));
  }
  for (double tick : xTicks) {
    if (tick < 1 || tick > steps)
      continue;
    add(std::snprintf(line, sizeof(line),
                      "<path d=\"M%.1f,%g V%g\" stroke=\"#dddddd\"/>\n",
                      x(tick - 1), kTop, kHeight - kBottom));
    add(std::snprintf(line, sizeof(line),
                      "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%.0f"
                      "</text>\n",
                      x(tick - 1), kHeight - kBottom + 18, tick));
  }
  add(std::snprintf(line, sizeof(line),
                    "<path d=\"M%g,%g V%g H%g\" stroke=\"black\" "
                    "fill=\"none\"/>\n",
                    kLeft, kTop, kHeight - kBottom, kWidth - kRight));
  add(std::snprintf(line, sizeof(line),
                    "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">step"
                    "</text>\n",
                    (kWidth + kLeft) / 2, kHeight - 12));
  add(std::snprintf(line, sizeof(line),
                    "<text x=\"18\" y=\"%g\" text-anchor=\"middle\" "
                    "transform=\"rotate(-90 18 %g)\">loss</text>\n",
                    (kTop + kHeight - kBottom) / 2,
                    (kTop + kHeight - kBottom) / 2));
  svg += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" "
         "points=\"";
  for (size_t index = 0; index < losses.size(); ++index)
    if (std::isfinite(losses[index]))
      add(std::snprintf(line, sizeof(line), "%.1f,%.1f ", x(double(index)),
                        y(losses[index])));
  svg += "\"/>\n";
  if (!evals.empty()) {
    svg += "<polyline fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"2\" "
           "points=\"";
    for (const auto &[step, loss] : evals)
      if (std::isfinite(loss))
        add(std::snprintf(line, sizeof(line), "%.1f,%.1f ", x(double(step - 1)),
                          y(loss)));
    svg += "\"/>\n";
  }
  return svg + "</svg>\n";
}

std::string mlir::mantissa::rt::replaceExtension(const std::string &path,
                                                 const std::string &extension) {
  size_t slash = path.find_last_of('/');
  size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) ||
      dot == slash + 1)
    return path + extension;
  return path.substr(0, dot) + extension;
}

MetricsFile::~MetricsFile() {
  if (file)
    std::fclose(file);
}

bool MetricsFile::open(const std::string &target, std::string &error) {
  path = target;
  file = std::fopen(path.c_str(), "w");
  if (!file) {
    error = "--metrics: cannot write " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

bool MetricsFile::write(const StepRecord &record, std::string &error) {
  std::string line = metricsLine(record) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file) != line.size() ||
      std::fflush(file) != 0) {
    error = "--metrics: cannot write " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

void mlir::mantissa::rt::printStepLine(const StepRecord &record,
                                       int64_t totalSteps,
                                       double stepsPerSecond,
                                       int64_t tokensPerStep,
                                       int64_t consecutiveSkips) {
  double rate = stepsPerSecond;
  // A non-finite loss reads "nan" or "inf", never "-nan".
  char loss[32];
  if (std::isfinite(record.loss))
    std::snprintf(loss, sizeof(loss), "%.6f", record.loss);
  else
    std::snprintf(loss, sizeof(loss), "%s",
                  std::isnan(record.loss) ? "nan"
                  : record.loss > 0       ? "inf"
                                          : "-inf");
  std::printf("step %lld/%lld  loss %s  lr %.3e", (long long)record.step,
              (long long)totalSteps, loss, record.lr);
  if (std::isfinite(record.gradNorm))
    std::printf("  grad-norm %.4f", record.gradNorm);
  std::printf("  %.2f steps/s", rate);
  if (tokensPerStep)
    std::printf(", %.0f tokens/s", rate * double(tokensPerStep));
  std::printf("  %.1f s left", double(totalSteps - record.step) / rate);
  if (record.evaluated)
    std::printf("  eval-loss %.6f", record.evalLoss);
  if (record.skipped)
    std::printf("  SKIPPED (non-finite %s; %lld in a row)",
                std::isfinite(record.loss) ? "gradient norm" : "loss",
                (long long)consecutiveSkips);
  std::printf("\n");
  std::fflush(stdout);
}

void mlir::mantissa::rt::printRunSummary(const StepTimes &times,
                                         int64_t skipped,
                                         const LossHistory &history) {
  std::printf("trained %lld steps", (long long)times.steps);
  if (skipped)
    std::printf(" (%lld skipped)", (long long)skipped);
  if (!history.losses.empty())
    std::printf(", final loss %.6f", history.losses.back());
  if (!history.evals.empty())
    std::printf(", final eval loss %.6f", history.evals.back().second);
  if (times.steadySteps)
    std::printf("; %.2f ms per step (mean of steps after the first two)",
                1e3 * times.steadySeconds / double(times.steadySteps));
  std::printf("\n");
  std::fflush(stdout);
}
