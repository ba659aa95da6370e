//===- ArtifactTraining.cpp - Training from a compiled artifact -----------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// `mantissa-run DIR --inputs INPUTS.safetensors --steps N ...` (or `--data
// TOKENS.bin`): the training step mantissa-compile wrote into the artifact,
// for the CPU (step.cpu.json, CpuStep.h) or with `--device cuda` for the GPU
// (step.gpu.json and step.ptx, docs/gpu-step.md), as the gradient source of
// the runtime's trainer (runUpdate, Trainer.cpp), with token data as its
// batch source (TokenData.h), so that a machine with only the runtime built
// trains as `mantissa-run MODEL.pt2` does. The step's host arguments are
// collected as the compiler driver collects them (collectArguments in
// lib/Driver/RunMain.cpp): parameters come from the trainer (which starts
// them from --weights, else the artifact's weights.safetensors), user inputs
// from INPUTS by name or as `input.<k>`, buffers from --weights, else the
// artifact's weights.safetensors, else INPUTS. Everything is checked before the
// device is opened, so a bad artifact or batch is refused with its file and
// tensor and nothing is written.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/Artifact.h"
#include "mantissa/Runtime/CpuStep.h"
#include "mantissa/Runtime/GpuStep.h"
#include "mantissa/Runtime/SafeTensors.h"
#include "mantissa/Runtime/TensorDataset.h"
#include "mantissa/Runtime/UpdateRunner.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace mlir::mantissa::rt;
using json = nlohmann::json;

namespace {

std::string dtypeText(DType dtype) {
  return std::string(safeTensorsDTypeName(dtype));
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

/// The path of the loaded `artifact`'s step program for `device` ("gpu":
/// its manifest's kernels.gpu_step.program, "cpu": kernels.cpu_step.program),
/// or "" with `error` saying why there is none: the compiler's note when it
/// recorded one, else how to get one.
std::string stepProgram(const Artifact &artifact, const std::string &device,
                        std::string &error) {
  const std::string &dir = artifact.directory();
  std::string key = device + "_step";
  const std::optional<ManifestKernels> &kernels = artifact.kernels();
  std::optional<std::string> program;
  if (kernels && device == "gpu" && kernels->gpuStep)
    program = kernels->gpuStep->program;
  if (kernels && device == "cpu" && kernels->cpuStep)
    program = kernels->cpuStep->program;
  if (program) {
    if (!program->empty())
      return dir + "/" + *program;
    error = dir + "/manifest.json: kernels." + key + " names no program";
    return "";
  }
  error = dir + ": the artifact holds no training step for the " +
          (device == "gpu" ? std::string("GPU") : std::string("CPU")) +
          " (no kernels." + key +
          " in its manifest.json), so it cannot train with it";
  if (kernels && device == "gpu" && !kernels->gpuStepNote.empty())
    error += "; the compiler noted: \"" + kernels->gpuStepNote +
             "\"; fix that and recompile it with mantissa-compile "
             "MODEL.pt2 -o " +
             dir;
  else
    error += "; recompile it with mantissa-compile MODEL.pt2 -o " + dir;
  return "";
}

/// The other names of tied weights, from the `tied` map the compiler writes
/// into the artifact's weights file (empty when it has none or it is not a
/// map of names).
std::map<std::string, std::string> tiedAliases(const SafeTensorsFile &weights) {
  std::map<std::string, std::string> tied;
  auto entry = weights.metadata().find("tied");
  if (entry == weights.metadata().end())
    return tied;
  nlohmann::json map = nlohmann::json::parse(entry->second, nullptr, false);
  if (!map.is_object())
    return tied;
  for (const auto &[alias, kept] : map.items())
    if (kept.is_string())
      tied[alias] = kept.get<std::string>();
  return tied;
}

/// The value of step argument `argument` taken from `tensor` (read from
/// `file`): its dense bytes in the step's dtype. Shapes must agree exactly;
/// dtypes too, except that a floating-point buffer may change width (rounded
/// to nearest even), as the compiler driver allows for model state, since
/// weights.safetensors keeps the exported dtype.
bool argumentBytes(const StepTensor &argument, const HostTensor &tensor,
                   const std::string &file, std::vector<uint8_t> &out,
                   std::string &error) {
  std::string what = file + ": tensor '" + tensor.name + "' (" +
                     stepTensorRoleName(argument.role) + " '" + argument.name +
                     "' of the step)";
  bool convertible = argument.role == StepTensor::Role::Buffer &&
                     isFloatingPoint(tensor.dtype) &&
                     isFloatingPoint(argument.dtype);
  if (tensor.dtype != argument.dtype && !convertible) {
    error = what + " has dtype " + dtypeText(tensor.dtype) +
            ", the step takes " + dtypeText(argument.dtype);
    return false;
  }
  if (tensor.shape != argument.shape) {
    error = what + " has shape " + shapeText(tensor.shape) +
            ", the step takes " + shapeText(argument.shape);
    return false;
  }
  int64_t count = argument.numElements();
  if (tensor.dtype == argument.dtype) {
    out = tensor.bytes;
  } else {
    out.assign(size_t(count) * elementSize(argument.dtype), 0);
    convertFloatElements(tensor.bytes.data(), tensor.dtype, out.data(),
                         argument.dtype, count);
  }
  // Empty tensors still take one byte (docs/gpu-step.md).
  if (int64_t(out.size()) < argument.bytes)
    out.resize(size_t(argument.bytes), 0);
  return true;
}

/// The step's host arguments, one per program argument in order (empty for
/// parameters, which the runner binds each step).
/// Buffers are looked up in `stateFiles` in order (--weights, the artifact's
/// weights.safetensors, INPUTS).
bool collectArguments(
    const TrainerOptions &options, const std::vector<StepTensor> &program,
    const SafeTensorsFile *inputs, const std::string &inputsPath,
    const std::vector<std::pair<const SafeTensorsFile *, std::string>>
        &stateFiles,
    std::vector<std::vector<uint8_t>> &arguments, int64_t &tokensPerStep,
    std::string &error) {
  // --weights, when given, is the first state file.
  const SafeTensorsFile *given = nullptr;
  std::string givenPath;
  if (!options.model.weightsPath.empty()) {
    given = stateFiles.front().first;
    givenPath = stateFiles.front().second;
  }
  int64_t userInput = 0;
  for (const StepTensor &argument : program) {
    arguments.emplace_back();
    switch (argument.role) {
    case StepTensor::Role::Parameter: {
      // The runner starts parameters from --weights; a tensor there that
      // does not fit is refused now, before the device is opened.
      const HostTensor *tensor = given ? given->find(argument.name) : nullptr;
      if (tensor && (!isFloatingPoint(tensor->dtype) ||
                     tensor->shape != argument.shape)) {
        error = givenPath + ": tensor '" + tensor->name +
                "' (parameter of the step) has dtype " +
                dtypeText(tensor->dtype) + " and shape " +
                shapeText(tensor->shape) +
                ", the step takes a floating-point tensor of shape " +
                shapeText(argument.shape);
        return false;
      }
      continue;
    }
    case StepTensor::Role::Random:
      // Filled before every micro-batch (StepInputs.h's storeRandomInput).
      arguments.back().assign(size_t(argument.bytes), 0);
      continue;
    case StepTensor::Role::UserInput: {
      // torch's reference files store the batch positionally.
      std::string positional = "input." + std::to_string(userInput++);
      if (!inputs) {
        // Token data (--data) fills it before every micro-batch.
        arguments.back().assign(size_t(argument.bytes), 0);
        if (!tokensPerStep && !isFloatingPoint(argument.dtype))
          tokensPerStep = argument.numElements();
        continue;
      }
      const HostTensor *tensor = inputs->find(argument.name);
      if (!tensor)
        tensor = inputs->find(positional);
      if (!tensor) {
        error = inputsPath + ": no tensor for user input '" + argument.name +
                "' (looked for '" + argument.name + "' and '" + positional +
                "')";
        return false;
      }
      if (!argumentBytes(argument, *tensor, inputsPath, arguments.back(),
                         error))
        return false;
      // Tokens per step: the first integer (or boolean, as the compiler
      // driver counts them) user input: a language model's token ids.
      if (!tokensPerStep && !isFloatingPoint(argument.dtype))
        tokensPerStep = argument.numElements();
      continue;
    }
    default: {
      // Buffers: model state first (--weights, then the artifact's own, as
      // the compiler driver takes --weights, then the archive's), then the
      // batch.
      const HostTensor *tensor = nullptr;
      std::string files;
      for (const auto &[file, path] : stateFiles) {
        tensor = file->find(argument.name);
        if (tensor) {
          files = path;
          break;
        }
        files += (files.empty() ? "" : ", ") + path;
      }
      if (!tensor) {
        error = std::string("no value for ") +
                stepTensorRoleName(argument.role) + " '" + argument.name +
                "' of the step: none of " + files +
                " has a tensor of that name";
        return false;
      }
      if (!argumentBytes(argument, *tensor, files, arguments.back(), error))
        return false;
      continue;
    }
    }
  }
  return true;
}

/// Everything the run needs from the files, checked before the device is
/// opened: the step's source with its host arguments, or null with `error`
/// naming the file and tensor. `gpu` is set when the source is the GPU
/// step.
std::unique_ptr<GradientSource> prepare(const TrainerOptions &options,
                                        GpuStepGradients *&gpu,
                                        std::string &error) {
  const std::string &dir = options.model.artifactDir;
  if (options.device.kind != "cpu" && !options.device.onGpu()) {
    error =
        "unknown --device '" + options.device.kind + "' (expected cpu or cuda)";
    return nullptr;
  }
  // The whole artifact is validated (every file's size and checksum, the
  // steps' included) before its step is read.
  bool onCpu = options.device.kind == "cpu";
  std::string programPath;
  {
    Artifact artifact;
    if (!Artifact::load(dir, artifact, error))
      return nullptr;
    programPath = stepProgram(artifact, onCpu ? "cpu" : "gpu", error);
  }
  if (programPath.empty())
    return nullptr;
  std::unique_ptr<GpuStep> gpuProgram;
  std::unique_ptr<CpuStep> cpuProgram;
  if (onCpu)
    cpuProgram = CpuStep::load(programPath, error);
  else
    gpuProgram = GpuStep::load(programPath, error);
  if (!cpuProgram && !gpuProgram)
    return nullptr;
  std::vector<StepTensor> list =
      onCpu ? cpuProgram->arguments() : gpuProgram->arguments();
  // GpuStepGradients loads the GPU program again, with its arguments.
  gpuProgram.reset();

  std::vector<std::vector<uint8_t>> arguments;
  int64_t tokensPerStep = 0;
  SafeTensorsFile inputs, weights, given;
  bool haveInputs = !options.model.inputsPath.empty();
  std::string weightsPath = dir + "/weights.safetensors";
  if (haveInputs &&
      !SafeTensorsFile::read(options.model.inputsPath, inputs, error)) {
    error = "--inputs: " + error;
    return nullptr;
  }
  if (!SafeTensorsFile::read(weightsPath, weights, error))
    return nullptr;
  if (!options.model.weightsPath.empty() &&
      !SafeTensorsFile::read(options.model.weightsPath, given, error)) {
    error = "--weights: " + error;
    return nullptr;
  }
  if (!options.model.weightsPath.empty()) {
    std::vector<std::string> parameters, buffers;
    for (const StepTensor &argument : list)
      if (argument.role == StepTensor::Role::Parameter)
        parameters.push_back(argument.name);
      else if (argument.role == StepTensor::Role::Buffer)
        buffers.push_back(argument.name);
    if (!checkStateCoverage(given, options.model.weightsPath, parameters,
                            buffers, options.model.allowPartialWeights, error,
                            tiedAliases(weights)))
      return nullptr;
  }
  std::vector<std::pair<const SafeTensorsFile *, std::string>> stateFiles;
  if (!options.model.weightsPath.empty())
    stateFiles.push_back({&given, options.model.weightsPath});
  stateFiles.push_back({&weights, weightsPath});
  if (haveInputs)
    stateFiles.push_back({&inputs, options.model.inputsPath});
  if (!collectArguments(options, list, haveInputs ? &inputs : nullptr,
                        options.model.inputsPath, stateFiles, arguments,
                        tokensPerStep, error))
    return nullptr;
  if (onCpu) {
    std::unique_ptr<BatchSource> batches;
    if (!options.data.paths.empty() &&
        !(batches = openBatchSource(cpuProgram->arguments(), options, error)))
      return nullptr;
    return CpuStepGradients::create(std::move(cpuProgram), std::move(arguments),
                                    std::move(batches), error,
                                    options.model.inputsPath);
  }
  std::unique_ptr<GpuStepGradients> source = GpuStepGradients::load(
      programPath, std::move(arguments), error, options.model.inputsPath);
  if (!source)
    return nullptr;
  source->setTf32(options.device.tf32);
  source->setTimeOps(!options.device.opTimesPath.empty());
  source->setTokensPerMicroBatch(tokensPerStep);
  if (!options.data.paths.empty()) {
    std::unique_ptr<BatchSource> batches =
        openBatchSource(source->program().arguments(), options, error);
    if (!batches)
      return nullptr;
    source->setBatchSource(std::move(batches));
  }
  gpu = source.get();
  return source;
}

} // namespace

int mlir::mantissa::rt::runArtifactTraining(const TrainerOptions &options,
                                            Communicator &communicator) {
  int rank = communicator.rank(), world = communicator.worldSize();
  std::string error;
  GpuStepGradients *gpu = nullptr;
  std::unique_ptr<GradientSource> source = prepare(options, gpu, error);
  // Every rank checks the same files; all stop together, and each rank that
  // failed says why (as the runner does).
  bool all = communicator.allAgree(source != nullptr);
  if (!source)
    std::fprintf(stderr, "mantissa-run: error: %s%s\n",
                 world > 1 ? ("rank " + std::to_string(rank) + ": ").c_str()
                           : "",
                 error.c_str());
  else if (!all && rank == 0)
    std::fprintf(stderr, "mantissa-run: error: another rank failed\n");
  if (!all)
    return 1;

  if (rank == 0 && gpu) {
    int64_t kernels = 0, gemms = 0;
    for (const GpuStepOp &op : gpu->program().ops())
      ++(op.kind == GpuStepOp::Kind::Gemm ? gemms : kernels);
    std::fprintf(stderr,
                 "mantissa-run: loaded the GPU step of %s: %lld kernels, "
                 "%lld cuBLAS GEMMs, %.1f MiB of temporaries\n",
                 options.model.artifactDir.c_str(), (long long)kernels,
                 (long long)gemms,
                 double(gpu->program().arenaBytes()) / 1048576.0);
  } else if (rank == 0) {
    std::fprintf(stderr, "mantissa-run: loaded the CPU step of %s\n",
                 options.model.artifactDir.c_str());
  }
  if (rank == 0 && gpu && gpu->forwardProgram() &&
      !options.data.validationPaths.empty())
    std::fprintf(stderr,
                 "mantissa-run: evaluation runs the forward-only GPU step "
                 "(%zu of %zu results: the loss without its backward)\n",
                 gpu->forwardProgram()->results().size(),
                 gpu->program().results().size());

  TrainerOptions update = options;
  update.gradientSource = source.get();
  int status = runUpdate(update, communicator);
  if (status == 0 && rank == 0 && gpu)
    if (std::string use = gpu->describeGraphUse(); !use.empty())
      std::fprintf(stderr, "mantissa-run: %s\n", use.c_str());
  std::string timesError;
  if (status == 0 && rank == 0 && gpu && !options.device.opTimesPath.empty() &&
      !gpu->writeOpTimes(options.device.opTimesPath, timesError)) {
    std::fprintf(stderr, "mantissa-run: error: %s\n", timesError.c_str());
    status = 1;
  }
  return status;
}
