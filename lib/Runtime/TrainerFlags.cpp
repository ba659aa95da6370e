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
#include <cstdlib>
#include <cstring>
#include <map>
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

bool parseCount(const std::string &flag, const std::string &text, int64_t &out,
                std::string &error) {
  double parsed = 0;
  if (!parseNumber(text, parsed) || parsed < 0 ||
      parsed != std::floor(parsed) || parsed > 9.0e15) {
    error = flag + ": expected a non-negative integer, got '" + text + "'";
    return false;
  }
  out = int64_t(parsed);
  return true;
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

bool mlir::mantissa::rt::parseTrainerFlag(int argc, char **argv, int &i,
                                          TrainerOptions &options,
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
  if (flag == "--data" || flag == "--val-data") {
    if (take()) {
      std::vector<std::string> paths = splitPaths(value);
      if (paths.empty())
        error = flag + ": expected PATH[,PATH...]";
      (flag == "--data" ? options.data.paths : options.data.validationPaths) =
          paths;
    }
    return true;
  }
  if (flag == "--shuffle") {
    if (take()) {
      char *end = nullptr;
      unsigned long long seed = std::strtoull(value.c_str(), &end, 10);
      if (value.empty() || !end || *end || value[0] == '-')
        error = "--shuffle: expected a seed (a non-negative integer), got '" +
                value + "'";
      else
        options.data.shuffleSeed = uint64_t(seed);
    }
    return true;
  }
  if (flag == "--seed") {
    if (take()) {
      // strtoull wraps a negative number and clamps one above 2^64 - 1
      // (ERANGE); both are refused.
      errno = 0;
      char *end = nullptr;
      unsigned long long seed = std::strtoull(value.c_str(), &end, 10);
      if (value.empty() || !end || *end || value[0] == '-' || value[0] == '+' ||
          value[0] == ' ' || errno == ERANGE)
        error =
            "--seed: expected an integer in [0, 2^64 - 1], got '" + value + "'";
      else
        options.random.seed = uint64_t(seed);
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
  if (options.schedule.gradAccum > 1 && options.data.paths.empty())
    return bad("--grad-accum needs --data: a fixed batch has one micro-batch");
  if (options.optimizer.maxSkips < 1)
    return bad("--max-skips: expected N >= 1");
  if (options.data.format != "llmc" && options.data.format != "raw-u16")
    return bad("--data-format: expected llmc or raw-u16, got '" +
               options.data.format + "'");
  if (options.data.shuffleSeed && options.data.paths.empty())
    return bad("--shuffle needs --data");
  bool evaluating = options.eval.every > 0 || options.eval.batches > 0 ||
                    !options.data.validationPaths.empty();
  if (evaluating && (options.eval.every <= 0 || options.eval.batches <= 0 ||
                     options.data.validationPaths.empty()))
    return bad("evaluation needs all of --val-data PATH, --eval-every N and "
               "--eval-batches M (N, M > 0)");
  if (!options.checkpoints.saveDir.empty() &&
      options.checkpoints.saveEvery <= 0)
    return bad("--save-checkpoint needs --save-every K (K > 0)");
  if (options.checkpoints.saveEvery > 0 && options.checkpoints.saveDir.empty())
    return bad("--save-every needs --save-checkpoint DIR");
  if (options.checkpoints.keep > 0 && options.checkpoints.saveDir.empty())
    return bad("--keep-checkpoints needs --save-checkpoint DIR");
  return true;
}

bool mlir::mantissa::rt::parseUpdateOptions(int argc, char **argv,
                                            TrainerOptions &options,
                                            std::string &error) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string flag = arg.substr(0, arg.find('='));
    std::string value;
    if (parseTrainerFlag(argc, argv, i, options, error)) {
      if (!error.empty())
        return false;
      continue;
    }
    if (!error.empty())
      return false;
    if (flag == "--grads" || flag == "--weights" || flag == "--inputs" ||
        flag == "--verify-checkpoint") {
      if (!flagValue(argc, argv, i, flag, value, error))
        return false;
      (flag == "--grads"     ? options.model.gradsPath
       : flag == "--weights" ? options.model.weightsPath
       : flag == "--inputs"  ? options.model.inputsPath
                             : options.checkpoints.verifyDir) = value;
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
    error = "--inputs and --data cannot be combined: --inputs trains on one "
            "fixed batch, --data on token data";
    return false;
  }
  if (!options.data.paths.empty() && !options.model.gradsPath.empty()) {
    error = "--data and --grads cannot be combined";
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
    std::string &error) {
  std::vector<std::pair<std::string, std::string>> outputs; // flag, path
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
    inputs.push_back({"--data", path});
  for (const std::string &path : options.data.validationPaths)
    inputs.push_back({"--val-data", path});
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
  }
  return true;
}
