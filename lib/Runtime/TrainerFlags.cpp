//===- TrainerFlags.cpp - The trainer's flags, defined once ---------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// parseTrainerFlag (every flag both `mantissa-run MODEL.pt2` and
// `mantissa-run DIR` take), validateTrainerOptions and the artifact form's
// parseUpdateOptions (TrainerOptions.h).
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/UpdateRunner.h"

#include "mantissa/Runtime/TrainerMetrics.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace mlir::mantissa::rt;

namespace {

/// A flag's value: `--flag=value` or the next argument.
bool flagValue(int argc, char **argv, int &i, const std::string &flag,
               std::string &value, std::string &error) {
  std::string arg = argv[i];
  size_t equals = arg.find('=');
  if (equals != std::string::npos) {
    value = arg.substr(equals + 1);
    return true;
  }
  if (i + 1 >= argc) {
    error = flag + " needs a value";
    return false;
  }
  value = argv[++i];
  return true;
}

bool parseNumber(const std::string &text, double &out) {
  char *end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return end && *end == 0 && !text.empty();
}

/// A decimal integer of digits alone (no sign, blanks or exponent), exactly:
/// strtod would round 2^63 - 1 and strtoull saturate past 2^64 - 1.
/// `tooLarge`: the text is such a number, but above `max`.
bool parseDigits(const std::string &text, uint64_t max, uint64_t &out,
                 bool &tooLarge) {
  tooLarge = false;
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  out = 0;
  for (char c : text) {
    uint64_t digit = uint64_t(c - '0');
    if (out > (max - digit) / 10) {
      tooLarge = true;
      return false;
    }
    out = out * 10 + digit;
  }
  return true;
}

bool parseCount(const std::string &flag, const std::string &text, int64_t &out,
                std::string &error) {
  uint64_t parsed = 0;
  bool tooLarge = false;
  if (parseDigits(text, uint64_t(INT64_MAX), parsed, tooLarge)) {
    out = int64_t(parsed);
    return true;
  }
  error = tooLarge
              ? flag + ": " + text + " is too large (at most " +
                    std::to_string(INT64_MAX) + ")"
              : flag + ": expected a non-negative integer, got '" + text + "'";
  return false;
}

std::vector<std::string> splitPaths(const std::string &text) {
  std::vector<std::string> paths;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t comma = text.find(',', begin);
    if (comma == std::string::npos)
      comma = text.size();
    if (comma > begin)
      paths.push_back(text.substr(begin, comma - begin));
    begin = comma + 1;
  }
  return paths;
}

} // namespace

const char *mlir::mantissa::rt::trainerFlagsHelp() {
  return "Training flags (docs/training.md): --steps N, --data PATH[,PATH...] "
         "[--data-format llmc|raw-u16] or --dataset PATH[,PATH...] "
         "[--dataset-map INPUT=TENSOR,...] [--shuffle SEED] [--grad-accum K], "
         "--val-data PATH (or --val-dataset PATH) --eval-every N "
         "--eval-batches M, --lr LR "
         "[--lr-schedule constant|cosine|linear|wsd --warmup-steps W "
         "--min-lr-ratio R --decay-steps D], --betas B1,B2, --eps E, "
         "--weight-decay WD, --clip-grad-norm C, --max-skips N, --losses "
         "L.json, --metrics M.jsonl, --final-params F.safetensors, "
         "--save-checkpoint DIR --save-every K [--keep-checkpoints N], "
         "--resume DIR, --device cpu|cuda [--tf32] [--op-times T.json], "
         "--allow-partial-weights, --no-memory-report, --profile. Each flag is "
         "given "
         "once.\n";
}

namespace {

/// parseTrainerFlag without the check for repeats.
bool parseOneTrainerFlag(int argc, char **argv, int &i, TrainerOptions &options,
                         std::string &error) {
  std::string arg = argv[i];
  std::string flag = arg.substr(0, arg.find('='));
  std::string value;
  auto take = [&]() { return flagValue(argc, argv, i, flag, value, error); };
  auto path = [&](std::string &out) {
    if (!take())
      return true;
    out = value;
    return true;
  };
  auto count = [&](int64_t &out) {
    if (take())
      parseCount(flag, value, out, error);
    return true;
  };
  auto real = [&](double &out) {
    if (take() && !parseNumber(value, out))
      error = flag + ": expected a number, got '" + value + "'";
    return true;
  };
  if (flag == "--losses")
    return path(options.outputs.lossesPath);
  if (flag == "--final-params")
    return path(options.outputs.finalParamsPath);
  if (flag == "--save-checkpoint")
    return path(options.checkpoints.saveDir);
  if (flag == "--resume")
    return path(options.checkpoints.resumeDir);
  if (flag == "--device")
    return path(options.device.kind);
  if (flag == "--metrics")
    return path(options.outputs.metricsPath);
  if (flag == "--op-times")
    return path(options.device.opTimesPath);
  if (flag == "--data-format")
    return path(options.data.format);
  if (flag == "--no-memory-report") {
    options.outputs.memoryReport = false;
    return true;
  }
  if (flag == "--profile") {
    options.outputs.profile = true;
    return true;
  }
  if (flag == "--overwrite-checkpoints") {
    options.checkpoints.overwrite = true;
    return true;
  }
  if (flag == "--allow-partial-weights") {
    options.model.allowPartialWeights = true;
    return true;
  }
  // A run-time choice, as torch's allow_tf32: the same artifact runs both
  // ways, and only the GPU's fp32 products change (docs/gpu-step.md).
  if (flag == "--tf32") {
    options.device.tf32 = true;
    return true;
  }
  if (flag == "--steps")
    return count(options.schedule.steps);
  if (flag == "--save-every")
    return count(options.checkpoints.saveEvery);
  if (flag == "--warmup-steps")
    return count(options.optimizer.warmupSteps);
  if (flag == "--decay-steps")
    return count(options.optimizer.decaySteps);
  if (flag == "--grad-accum")
    return count(options.schedule.gradAccum);
  if (flag == "--max-skips")
    return count(options.optimizer.maxSkips);
  if (flag == "--keep-checkpoints")
    return count(options.checkpoints.keep);
  if (flag == "--eval-every")
    return count(options.eval.every);
  if (flag == "--eval-batches")
    return count(options.eval.batches);
  if (flag == "--lr")
    return real(options.optimizer.lr);
  if (flag == "--weight-decay")
    return real(options.optimizer.weightDecay);
  if (flag == "--eps")
    return real(options.optimizer.eps);
  if (flag == "--min-lr-ratio")
    return real(options.optimizer.minLrRatio);
  if (flag == "--clip-grad-norm")
    return real(options.optimizer.clipGradNorm);
  if (flag == "--data" || flag == "--val-data" || flag == "--dataset" ||
      flag == "--val-dataset") {
    if (take()) {
      std::vector<std::string> paths = splitPaths(value);
      if (paths.empty())
        error = flag + ": expected PATH[,PATH...]";
      // Token files and a tensor dataset are two kinds of data, not two
      // halves of one.
      bool tensors = flag == "--dataset" || flag == "--val-dataset";
      if ((!options.data.paths.empty() ||
           !options.data.validationPaths.empty()) &&
          options.data.tensors != tensors)
        error = flag + " cannot be combined with " +
                (tensors ? "--data or --val-data (token data)"
                         : "--dataset or --val-dataset (a tensor dataset)");
      options.data.tensors = tensors;
      (flag == "--data" || flag == "--dataset" ? options.data.paths
                                               : options.data.validationPaths) =
          paths;
    }
    return true;
  }
  if (flag == "--dataset-map") {
    if (take())
      for (const std::string &pair : splitPaths(value)) {
        size_t equals = pair.find('=');
        if (equals == std::string::npos || equals == 0 ||
            equals + 1 == pair.size()) {
          error = "--dataset-map: expected INPUT=TENSOR[,INPUT=TENSOR...], "
                  "got '" +
                  value + "'";
          break;
        }
        if (!options.data.tensorOfInput
                 .emplace(pair.substr(0, equals), pair.substr(equals + 1))
                 .second) {
          error = "--dataset-map: input '" + pair.substr(0, equals) +
                  "' is mapped twice";
          break;
        }
      }
    return true;
  }
  if (flag == "--shuffle") {
    if (take()) {
      uint64_t seed = 0;
      bool tooLarge = false;
      if (parseDigits(value, UINT64_MAX, seed, tooLarge))
        options.data.shuffleSeed = seed;
      else if (tooLarge)
        error = "--shuffle: " + value + " is too large (a seed is at most " +
                std::to_string(UINT64_MAX) + ")";
      else
        error = "--shuffle: expected a seed (a non-negative integer), got '" +
                value + "'";
    }
    return true;
  }
  if (flag == "--seed") {
    if (take()) {
      uint64_t seed = 0;
      bool tooLarge = false;
      if (parseDigits(value, UINT64_MAX, seed, tooLarge))
        options.random.seed = seed;
      else
        error = "--seed: expected an integer in [0, 2^64 - 1], got '" + value +
                "'" + (tooLarge ? " (too large)" : "");
    }
    return true;
  }
  if (flag == "--lr-schedule") {
    if (take())
      parseLrScheduleKind(value, options.optimizer.lrScheduleKind, error);
    return true;
  }
  if (flag == "--betas") {
    if (take()) {
      size_t comma = value.find(',');
      if (comma == std::string::npos ||
          !parseNumber(value.substr(0, comma), options.optimizer.beta1) ||
          !parseNumber(value.substr(comma + 1), options.optimizer.beta2))
        error = "--betas: expected B1,B2, got '" + value + "'";
    }
    return true;
  }
  return false;
}

} // namespace

bool mlir::mantissa::rt::parseTrainerFlag(int argc, char **argv, int &i,
                                          TrainerOptions &options,
                                          std::set<std::string> &given,
                                          std::string &error) {
  std::string arg = argv[i];
  std::string flag = arg.substr(0, arg.find('='));
  if (!parseOneTrainerFlag(argc, argv, i, options, error))
    return false;
  if (error.empty() && !given.insert(flag).second)
    error = flag + " is given more than once; give it once" +
            (flag == "--data" || flag == "--val-data"
                 ? " (several files: " + flag + " A,B)"
                 : std::string());
  return true;
}

bool mlir::mantissa::rt::validateTrainerOptions(const TrainerOptions &options,
                                                std::string &error) {
  auto bad = [&](const std::string &message) {
    error = message;
    return false;
  };
  if (options.schedule.steps < 1)
    return bad("--steps: expected N >= 1, got " +
               std::to_string(options.schedule.steps));
  if (options.device.tf32 && !options.device.onGpu())
    return bad("--tf32 lets the GPU step's fp32 matrix products use TF32; it "
               "needs --device cuda");
  if (!options.device.opTimesPath.empty() && !options.device.onGpu())
    return bad("--op-times times the GPU step's ops on the device; it needs "
               "--device cuda");
  if (!validateLrSchedule(options.lrSchedule(), error))
    return false;
  for (auto [flag, beta] :
       {std::pair<const char *, double>{"B1", options.optimizer.beta1},
        {"B2", options.optimizer.beta2}})
    if (!std::isfinite(beta) || beta < 0 || beta >= 1)
      return bad(std::string("--betas: ") + flag + " must be in [0, 1), got " +
                 std::to_string(beta));
  if (!std::isfinite(options.optimizer.eps) || options.optimizer.eps <= 0)
    return bad("--eps: expected a finite number > 0, got " +
               std::to_string(options.optimizer.eps));
  if (!std::isfinite(options.optimizer.weightDecay) ||
      options.optimizer.weightDecay < 0)
    return bad("--weight-decay: expected a finite number >= 0, got " +
               std::to_string(options.optimizer.weightDecay));
  if (!std::isfinite(options.optimizer.clipGradNorm) ||
      options.optimizer.clipGradNorm < 0)
    return bad("--clip-grad-norm: expected a finite norm >= 0 (0: no "
               "clipping), got " +
               std::to_string(options.optimizer.clipGradNorm));
  if (options.schedule.gradAccum < 1)
    return bad("--grad-accum: expected K >= 1");
  // The data position counts micro-batches from the start of the run
  // (MicroBatchSchedule.h): N * K of them per rank must be a position.
  if (int64_t total = 0; __builtin_mul_overflow(
          options.schedule.steps, options.schedule.gradAccum, &total))
    return bad("--steps " + std::to_string(options.schedule.steps) +
               " with --grad-accum " +
               std::to_string(options.schedule.gradAccum) +
               ": the run's N * K micro-batches are past 2^63 - 1, which no "
               "data position can count");
  if (options.schedule.gradAccum > 1 && options.data.paths.empty())
    return bad("--grad-accum needs --data or --dataset: a fixed batch has one "
               "micro-batch");
  if (options.optimizer.maxSkips < 1)
    return bad("--max-skips: expected N >= 1");
  if (options.data.format != "llmc" && options.data.format != "raw-u16")
    return bad("--data-format: expected llmc or raw-u16, got '" +
               options.data.format + "'");
  if (options.data.shuffleSeed && options.data.paths.empty())
    return bad("--shuffle needs --data or --dataset");
  if (!options.data.tensorOfInput.empty() && !options.data.tensors)
    return bad("--dataset-map needs --dataset");
  if (options.data.tensors && options.data.paths.empty())
    return bad("--val-dataset needs --dataset (the training data)");
  if (options.data.tensors && options.data.format != "llmc")
    return bad("--data-format is the format of token data (--data); a "
               "tensor dataset's files are safetensors");
  bool evaluating = options.eval.every > 0 || options.eval.batches > 0 ||
                    !options.data.validationPaths.empty();
  if (evaluating && (options.eval.every <= 0 || options.eval.batches <= 0 ||
                     options.data.validationPaths.empty()))
    return bad(std::string("evaluation needs all of ") +
               options.data.validationFlag() +
               " PATH, --eval-every N and --eval-batches M (N, M > 0)");
  if (!options.checkpoints.saveDir.empty() &&
      options.checkpoints.saveEvery <= 0)
    return bad("--save-checkpoint needs --save-every K (K > 0)");
  if (options.checkpoints.saveEvery > 0 && options.checkpoints.saveDir.empty())
    return bad("--save-every needs --save-checkpoint DIR");
  if (options.checkpoints.keep > 0 && options.checkpoints.saveDir.empty())
    return bad("--keep-checkpoints needs --save-checkpoint DIR");
  if (options.checkpoints.overwrite && options.checkpoints.saveDir.empty())
    return bad("--overwrite-checkpoints needs --save-checkpoint DIR");
  return true;
}

bool mlir::mantissa::rt::checkDataPositions(const TrainerOptions &options,
                                            int worldSize,
                                            int64_t samplesPerMicroBatch,
                                            std::string &error) {
  int64_t samples = 0;
  if (!__builtin_mul_overflow(options.schedule.steps,
                              options.schedule.gradAccum, &samples) &&
      !__builtin_mul_overflow(samples, int64_t(worldSize), &samples) &&
      !__builtin_mul_overflow(samples, samplesPerMicroBatch, &samples))
    return true;
  error = "--steps " + std::to_string(options.schedule.steps) +
          " with --grad-accum " + std::to_string(options.schedule.gradAccum) +
          " on " + std::to_string(worldSize) + " rank(s) of " +
          std::to_string(samplesPerMicroBatch) +
          "-sample micro-batches: the run would read past global sample "
          "2^63 - 1, which no data position can count";
  return false;
}

bool mlir::mantissa::rt::parseUpdateOptions(int argc, char **argv,
                                            TrainerOptions &options,
                                            std::string &error) {
  std::set<std::string> given;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string flag = arg.substr(0, arg.find('='));
    std::string value;
    if (parseTrainerFlag(argc, argv, i, options, given, error)) {
      if (!error.empty())
        return false;
      continue;
    }
    if (!error.empty())
      return false;
    if (flag == "--grads" || flag == "--weights" || flag == "--inputs" ||
        flag == "--verify-checkpoint") {
      if (!given.insert(flag).second) {
        error = flag + " is given more than once; give it once";
        return false;
      }
      if (!flagValue(argc, argv, i, flag, value, error))
        return false;
      (flag == "--grads"     ? options.model.gradsPath
       : flag == "--weights" ? options.model.weightsPath
       : flag == "--inputs"  ? options.model.inputsPath
                             : options.checkpoints.verifyDir) = value;
    } else if (flag == "--outputs") {
      // The runtime alone runs the artifact's forward step for validation
      // losses only; writing a step's user outputs is MODEL.pt2's.
      error = "--outputs runs the forward-only step of a model: give "
              "mantissa-run MODEL.pt2, not an artifact folder";
      return false;
    } else if (arg.rfind("-", 0) == 0) {
      error = "unknown option '" + arg + "'";
      return false;
    } else if (options.model.artifactDir.empty()) {
      options.model.artifactDir = arg;
    } else {
      error = "unexpected argument '" + arg + "'";
      return false;
    }
  }
  if (options.model.artifactDir.empty()) {
    error = "no artifact directory given";
    return false;
  }
  // Gradients are either given or computed by the step, never both.
  if (!options.model.inputsPath.empty() && !options.model.gradsPath.empty()) {
    error = "--inputs and --grads cannot be combined: --grads applies given "
            "gradients, --inputs computes them with the artifact's training "
            "step";
    return false;
  }
  if (!options.model.inputsPath.empty() &&
      !options.checkpoints.verifyDir.empty()) {
    error = "--verify-checkpoint only loads the checkpoint; it takes no "
            "--inputs";
    return false;
  }
  // Only a training step has losses; --grads runs none.
  bool training =
      !options.model.inputsPath.empty() || !options.data.paths.empty();
  if (!options.outputs.lossesPath.empty() && !training) {
    error = "--losses needs --inputs INPUTS.safetensors or --data TOKENS.bin "
            "(the losses come from the artifact's training step)";
    return false;
  }
  if (!options.model.inputsPath.empty() && !options.data.paths.empty()) {
    error = std::string("--inputs and ") + options.data.flag() +
            " cannot be combined: --inputs trains on one fixed batch, " +
            options.data.flag() + " on data";
    return false;
  }
  if (!options.data.paths.empty() && !options.model.gradsPath.empty()) {
    error =
        std::string(options.data.flag()) + " and --grads cannot be combined";
    return false;
  }
  return validateTrainerOptions(options, error);
}

namespace {

/// `path` made absolute with links resolved: the file itself when it
/// exists, else its resolved folder and its name (an output not written
/// yet). Empty when not even the folder exists.
std::string resolvedPath(const std::string &path) {
  char buffer[PATH_MAX];
  if (realpath(path.c_str(), buffer))
    return buffer;
  size_t slash = path.find_last_of('/');
  std::string folder = slash == std::string::npos ? "." : path.substr(0, slash);
  if (folder.empty())
    folder = "/";
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (!realpath(folder.c_str(), buffer))
    return "";
  return std::string(buffer) + "/" + name;
}

/// Whether a file at `path` could be created or replaced: its folder exists
/// and is writable, and `path` is not a folder (unless `folder`, for a
/// checkpoint directory, which must then be one).
bool writableLocation(const std::string &flag, const std::string &path,
                      bool folder, std::string &error) {
  struct stat info;
  bool exists = stat(path.c_str(), &info) == 0;
  if (exists && folder != S_ISDIR(info.st_mode)) {
    error = flag + " " + path + ": exists and is " +
            (folder ? "not a folder" : "a folder");
    return false;
  }
  size_t slash = path.find_last_of('/');
  std::string parent = slash == std::string::npos ? "." : path.substr(0, slash);
  if (parent.empty())
    parent = "/";
  const std::string &target = exists && folder ? path : parent;
  if (access(target.c_str(), W_OK) != 0) {
    error = flag + " " + path + ": cannot write in " + target + ": " +
            std::strerror(errno) + " (checked before the run starts)";
    return false;
  }
  return true;
}

} // namespace

bool mlir::mantissa::rt::checkOutputLocations(
    const TrainerOptions &options, const std::vector<std::string> &otherInputs,
    std::string &error,
    const std::vector<std::pair<std::string, std::string>> &otherOutputs) {
  // flag, path
  std::vector<std::pair<std::string, std::string>> outputs = otherOutputs;
  if (!options.outputs.lossesPath.empty()) {
    outputs.push_back({"--losses", options.outputs.lossesPath});
    outputs.push_back({"--losses (its plot)",
                       replaceExtension(options.outputs.lossesPath, ".svg")});
  }
  if (!options.outputs.metricsPath.empty())
    outputs.push_back({"--metrics", options.outputs.metricsPath});
  if (!options.device.opTimesPath.empty())
    outputs.push_back({"--op-times", options.device.opTimesPath});
  if (!options.outputs.finalParamsPath.empty())
    outputs.push_back({"--final-params", options.outputs.finalParamsPath});
  std::vector<std::pair<std::string, std::string>> inputs = {
      {"--inputs", options.model.inputsPath},
      {"--weights", options.model.weightsPath},
      {"--grads", options.model.gradsPath},
      {"the artifact", options.model.artifactDir}};
  for (const std::string &path : options.data.paths)
    inputs.push_back({options.data.flag(), path});
  for (const std::string &path : options.data.validationPaths)
    inputs.push_back({options.data.validationFlag(), path});
  for (const std::string &path : otherInputs)
    inputs.push_back({"the model", path});
  // Resolved path -> what claims it, and whether that is an input.
  std::map<std::string, std::pair<std::string, bool>> claimed;
  for (const auto &[flag, path] : inputs)
    if (!path.empty())
      if (std::string resolved = resolvedPath(path); !resolved.empty())
        claimed.emplace(resolved, std::make_pair(flag + " " + path, true));
  std::string artifact = options.model.artifactDir.empty()
                             ? ""
                             : resolvedPath(options.model.artifactDir);
  for (const auto &[flag, path] : outputs) {
    if (!writableLocation(flag, path, /*folder=*/false, error))
      return false;
    std::string resolved = resolvedPath(path);
    if (!artifact.empty() && resolved.rfind(artifact + "/", 0) == 0) {
      error = flag + " " + path + " is inside the artifact " +
              options.model.artifactDir +
              "; writing it would change the artifact";
      return false;
    }
    auto [at, fresh] =
        claimed.emplace(resolved, std::make_pair(flag + " " + path, false));
    if (!fresh) {
      error = flag + " " + path + " is also " + at->second.first +
              "; writing it would overwrite " +
              (at->second.second ? "an input" : "another output");
      return false;
    }
  }
  if (!options.checkpoints.saveDir.empty()) {
    struct stat info;
    const std::string &dir = options.checkpoints.saveDir;
    if (stat(dir.c_str(), &info) == 0 || errno != ENOENT) {
      if (!writableLocation("--save-checkpoint", dir, /*folder=*/true, error))
        return false;
    } else if (!writableLocation("--save-checkpoint", dir, /*folder=*/false,
                                 error)) {
      return false;
    }
    std::string resolved = resolvedPath(dir);
    for (const auto &[path, what] : claimed)
      if (path == resolved || path.rfind(resolved + "/", 0) == 0) {
        error = "--save-checkpoint " + dir + " holds " + what.first +
                "; checkpoints would be written among them";
        return false;
      }
    return checkCheckpointFolderOwner(options.checkpoints, error);
  }
  return true;
}
