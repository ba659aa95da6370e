//===- CpuStep.cpp - A training step compiled for the CPU -----------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/CpuStep.h"
#include "mantissa/Format/CpuProgram.h"
#include "mantissa/Format/StepTensorJson.h"
#include "mantissa/Runtime/Artifact.h"
#include "mantissa/Runtime/CpuGemm.h"
#include "mantissa/Runtime/HostCpu.h"
#include "mantissa/Runtime/StepInputs.h"

#include <dlfcn.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <cmath>
#include <cstring>
#include <map>

using namespace mlir::mantissa::rt;
using detail::ProgramError;
using TensorRole = StepTensor::Role;

bool mlir::mantissa::rt::bindCpuGemm(void *library) {
  auto *hook = static_cast<MantissaCpuGemmFunction *>(
      dlsym(library, kCpuGemmHookSymbol));
  if (!hook)
    return false;
  *hook = &mantissa_rt_cpu_gemm;
  return true;
}

bool mlir::mantissa::rt::environmentTunesMalloc(
    const char *const *environment) {
  for (; environment && *environment; ++environment) {
    std::string entry = *environment;
    std::string name = entry.substr(0, entry.find('='));
    if (name.size() > 8 && name.compare(0, 7, "MALLOC_") == 0 &&
        name.back() == '_')
      return true;
    if (name == "GLIBC_TUNABLES" &&
        entry.find("glibc.malloc.") != std::string::npos)
      return true;
  }
  return false;
}

/// The compiled step allocates its temporaries with malloc and frees them
/// before it returns, every step, so the next step page-faults back in
/// (zeroed) whatever glibc gave back to the kernel. glibc's defaults adapt
/// only part of the way: a temporary above the mmap threshold (128 KiB at
/// first) is a fresh mapping each step until one is freed and the threshold
/// rises to its size (at most 32 MiB), and a freed heap top above the trim
/// threshold (twice that) is returned. The step's peak is the same every
/// step, so the process keeps it from the first step: temporaries up to
/// glibc's largest mmap threshold come from the heap, a freed heap top up
/// to 1 GiB stays mapped, and the heap grows 64 MiB at a time. A user who
/// tunes malloc in the environment keeps those settings.
bool mlir::mantissa::rt::keepFreedStepMemory() {
#ifdef __GLIBC__
  if (environmentTunesMalloc(::environ))
    return false;
  constexpr int kMiB = 1 << 20;
  bool set = mallopt(M_MMAP_THRESHOLD, 32 * kMiB) == 1;
  set &= mallopt(M_TRIM_THRESHOLD, 1024 * kMiB) == 1;
  set &= mallopt(M_TOP_PAD, 64 * kMiB) == 1;
  return set;
#else
  return false;
#endif
}

namespace {
/// Loads one library of the program: `entry` of `directory/library`, its
/// matrix products bound to the runtime's (CpuGemm.h) when it calls them;
/// `gemmAbi` is the program's cpu_gemm_abi (0: a version 1 program, whose
/// libraries have no products to bind).
CpuStep::Library loadLibrary(const CpuProgramLibrary &program,
                             const std::string &directory,
                             const std::string &what, int64_t gemmAbi) {
  CpuStep::Library library;
  std::string path = directory + "/" + program.library;
  // Never unmapped: the OpenMP runtime the code pulls in keeps worker
  // threads that must not outlive it.
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!handle)
    throw ProgramError{what + ": cannot load " + path + ": " + dlerror()};
  bool callsProducts = bindCpuGemm(handle);
  if (callsProducts && !cpuGemmAvailable())
    throw ProgramError{what + ": " + path + ": " + kCpuGemmUnavailableMessage};
  if (callsProducts && gemmAbi != kCpuGemmAbi)
    throw ProgramError{what + ": " + path +
                       " calls the runtime's matrix products with version " +
                       std::to_string(gemmAbi) +
                       " descriptors; this runtime "
                       "reads version " +
                       std::to_string(kCpuGemmAbi)};
  library.entry =
      reinterpret_cast<void (*)(void **)>(dlsym(handle, program.entry.c_str()));
  if (!library.entry)
    throw ProgramError{what + ": " + path + " has no entry '" + program.entry +
                       "'"};
  library.results = program.results;
  return library;
}

} // namespace

std::unique_ptr<CpuStep> CpuStep::load(const std::string &jsonPath,
                                       std::string &error) {
  std::vector<uint8_t> bytes;
  if (!readWholeFile(jsonPath, bytes)) {
    error = jsonPath + ": cannot read the CPU step program";
    return nullptr;
  }
  std::string directory = ".";
  if (size_t slash = jsonPath.find_last_of('/'); slash != std::string::npos)
    directory = jsonPath.substr(0, slash);
  CpuProgram program;
  if (!parseCpuProgram(std::string(bytes.begin(), bytes.end()), program,
                       error)) {
    error = jsonPath + ": " + error;
    return nullptr;
  }
  auto step = std::unique_ptr<CpuStep>(new CpuStep());
  step->cpu = program.targetCpu;
  step->argumentList = std::move(program.arguments);
  try {
    // The libraries are compiled for the compiling machine (-march=native):
    // refuse them here, before dlopen, rather than die of SIGILL mid-step.
    if (program.targetFeatures)
      if (std::string refusal = checkCompiledFor(
              *program.targetFeatures, program.targetCpu, "the CPU step");
          !refusal.empty())
        throw ProgramError{refusal};
    keepFreedStepMemory();
    step->jointStep =
        loadLibrary(program.step, directory, "the step", program.cpuGemmAbi);
    if (!program.widenedBf16Products.empty())
      warnOfWidenedProductsOnce(program.widenedBf16Products);
    if (program.forward)
      step->forwardStep =
          loadLibrary(*program.forward, directory, "the forward-only step",
                      program.cpuGemmAbi);
  } catch (const ProgramError &problem) {
    error = jsonPath + ": " + problem.message;
    return nullptr;
  }
  return step;
}

std::unique_ptr<TokenBatches> CpuStepGradients::openTokenData(
    const CpuStep &step, const TrainerOptions &options, std::string &error) {
  return openTokenData(step.arguments(), options, error);
}

std::unique_ptr<TokenBatches>
CpuStepGradients::openTokenData(const std::vector<StepTensor> &arguments,
                                const TrainerOptions &options,
                                std::string &error) {
  std::vector<size_t> inputs;
  for (size_t i = 0; i < arguments.size(); ++i)
    if (arguments[i].role == TensorRole::UserInput)
      inputs.push_back(i);
  auto isIds = [&](size_t index) {
    const StepTensor &tensor = arguments[index];
    return (tensor.dtype == DType::I64 || tensor.dtype == DType::I32) &&
           tensor.shape.size() == 2;
  };
  if (inputs.size() != 2 || !isIds(inputs[0]) || !isIds(inputs[1]) ||
      arguments[inputs[0]].shape != arguments[inputs[1]].shape) {
    std::string list;
    for (size_t index : inputs) {
      const StepTensor &tensor = arguments[index];
      list += (list.empty() ? "" : ", ") + tensor.name + " " +
              std::string(safeTensorsDTypeName(tensor.dtype)) + " [";
      for (size_t d = 0; d < tensor.shape.size(); ++d)
        list += (d ? ", " : "") + std::to_string(tensor.shape[d]);
      list += "]";
    }
    error = "--data trains a step whose two user inputs are integer tensors "
            "of one shape [B, T] (tokens, targets); this step's user inputs "
            "are " +
            (list.empty() ? std::string("none") : list);
    return nullptr;
  }
  TokenBatches::Options data;
  data.train = options.data.paths;
  data.validation = options.data.validationPaths;
  data.format = options.data.format;
  data.shuffleSeed = options.data.shuffleSeed;
  data.batch = arguments[inputs[0]].shape[0];
  data.seqLen = arguments[inputs[0]].shape[1];
  data.evalBatches = options.eval.batches;
  auto boundOf = [&](size_t index) {
    IndexBound bound = arguments[index].indexBound;
    if (bound.bound < 1) {
      // Nothing indexes it: the ids still have to fit its integer type.
      bound.bound = arguments[index].dtype == DType::I64 ? int64_t(1) << 62
                                                         : int64_t(1) << 31;
      bound.what = "the input's integer type";
    }
    return bound;
  };
  data.tokens = boundOf(inputs[0]);
  data.targets = boundOf(inputs[1]);
  data.tokensName = arguments[inputs[0]].name;
  data.targetsName = arguments[inputs[1]].name;
  return TokenBatches::open(data, error);
}

std::unique_ptr<CpuStepGradients>
CpuStepGradients::create(std::unique_ptr<CpuStep> step,
                         std::vector<std::vector<uint8_t>> arguments,
                         std::unique_ptr<BatchSource> batches,
                         std::string &error, const std::string &inputsOrigin) {
  auto source = std::unique_ptr<CpuStepGradients>(new CpuStepGradients());
  const std::vector<StepTensor> &list = step->arguments();
  if (arguments.size() != list.size()) {
    error = "the CPU step takes " + std::to_string(list.size()) +
            " arguments, " + std::to_string(arguments.size()) + " were given";
    return nullptr;
  }
  bool firstInput = true;
  for (size_t i = 0; i < list.size(); ++i) {
    arguments[i].resize(size_t(list[i].bytes), 0);
    if (list[i].role != TensorRole::UserInput)
      continue;
    if (!batches &&
        !checkIndexIds(
            arguments[i].data(), list[i].numElements(), list[i].dtype,
            step->indexBound(i),
            (inputsOrigin.empty() ? std::string() : inputsOrigin + ": ") +
                "user input '" + list[i].name + "'",
            error))
      return nullptr;
    // Tokens per micro-batch: the first integer user input's elements.
    if (firstInput && !isFloatingPoint(list[i].dtype))
      source->tokens = list[i].numElements();
    firstInput = false;
  }
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].role == TensorRole::Parameter)
      source->parameterIndex[list[i].name] = i;
    else if (list[i].role == TensorRole::Buffer)
      source->bufferIndex[list[i].name] = i;
  for (const StepTensor &result : step->joint().results)
    source->resultBytes.emplace_back(size_t(result.bytes), 0);
  if (const CpuStep::Library *forward = step->forward())
    for (const StepTensor &result : forward->results)
      source->forwardBytes.emplace_back(size_t(result.bytes), 0);
  source->argumentBytes = std::move(arguments);
  source->batches = std::move(batches);
  source->step = std::move(step);
  return source;
}

bool CpuStepGradients::selectMicroBatch(const MicroBatch &microBatch,
                                        std::string &error) {
  if (batches && !loadInputs(DataSplit::Training, microBatch.global, error))
    return false;
  storeRandomInputs(microBatch.global, microBatch.step);
  return true;
}

void CpuStepGradients::storeRandomInputs(int64_t globalMicroBatch,
                                         int64_t stepNumber) {
  const std::vector<StepTensor> &list = step->arguments();
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].role == TensorRole::Random)
      storeRandomInput(list[i], randomSeed, globalMicroBatch, stepNumber,
                       argumentBytes[i].data());
}

bool CpuStepGradients::loadInputs(DataSplit split, int64_t index,
                                  std::string &error) {
  if (!batches->loadMicroBatch(split, batches->firstSample(index), batchTensors,
                               error))
    return false;
  const std::vector<StepTensor> &list = step->arguments();
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].role == TensorRole::UserInput &&
        !storeStepInput(batchTensors, list[i], argumentBytes[i].data(), error))
      return false;
  return true;
}

int64_t CpuStepGradients::validationMicroBatches() const {
  return batches ? batches->validationMicroBatches() : 0;
}

bool CpuStepGradients::bindArguments(const std::vector<Member> &members,
                                     std::vector<void *> &pointers,
                                     std::string &error) {
  const std::vector<StepTensor> &list = step->arguments();
  pointers.clear();
  for (std::vector<uint8_t> &bytes : argumentBytes)
    pointers.push_back(bytes.data());
  for (const Member &member : members) {
    auto found = parameterIndex.find(*member.fqn);
    if (found == parameterIndex.end()) {
      error = "the CPU step has no parameter '" + *member.fqn + "'";
      return false;
    }
    size_t i = found->second;
    if (list[i].dtype == member.paramDtype)
      // The step only reads its arguments.
      pointers[i] = const_cast<uint8_t *>(member.param);
    else
      convertFloatElements(member.param, member.paramDtype,
                           argumentBytes[i].data(), list[i].dtype,
                           list[i].numElements());
  }
  return true;
}

bool CpuStepGradients::computeGradients(int64_t stepNumber,
                                        const std::vector<Member> &members,
                                        std::string &error) {
  std::vector<void *> pointers;
  if (!bindArguments(members, pointers, error))
    return false;
  std::map<std::string, const Member *> memberByFqn;
  for (const Member &member : members)
    memberByFqn[*member.fqn] = &member;
  const std::vector<StepTensor> &results = step->joint().results;
  for (size_t i = 0; i < results.size(); ++i) {
    void *target = resultBytes[i].data();
    if (results[i].role == TensorRole::Gradient) {
      auto found = memberByFqn.find(results[i].name);
      // Gradients are written where the runner combines them.
      if (found != memberByFqn.end() &&
          found->second->gradDtype == results[i].dtype)
        target = found->second->grad;
    }
    pointers.push_back(target);
  }
  step->joint().entry(pointers.data());
  size_t numArguments = argumentBytes.size();
  for (size_t i = 0; i < results.size(); ++i) {
    const StepTensor &result = results[i];
    const uint8_t *value =
        static_cast<const uint8_t *>(pointers[numArguments + i]);
    switch (result.role) {
    case TensorRole::Loss:
      loss = loadFloatElement(value, 0, result.dtype);
      break;
    case TensorRole::Gradient: {
      auto found = memberByFqn.find(result.name);
      if (found == memberByFqn.end()) {
        error = "step " + std::to_string(stepNumber) +
                ": the runner holds "
                "no parameter '" +
                result.name + "'";
        return false;
      }
      if (value != found->second->grad)
        convertFloatElements(value, result.dtype, found->second->grad,
                             found->second->gradDtype, result.numElements());
      break;
    }
    case TensorRole::BufferMutation: {
      // The next step reads the buffer's new value.
      auto found = bufferIndex.find(result.name);
      if (found == bufferIndex.end() ||
          argumentBytes[found->second].size() != resultBytes[i].size()) {
        error = "buffer '" + result.name + "' changes size in the step";
        return false;
      }
      std::memcpy(argumentBytes[found->second].data(), value,
                  resultBytes[i].size());
      break;
    }
    default:
      break;
    }
  }
  return true;
}

bool CpuStepGradients::evaluateValidation(int64_t index,
                                          const std::vector<Member> &members,
                                          double &value, std::string &error) {
  if (!batches) {
    error = "no validation data (--val-data)";
    return false;
  }
  if (!loadInputs(DataSplit::Validation, index, error))
    return false;
  storeRandomInputs(index, 0);
  std::vector<void *> pointers;
  if (!bindArguments(members, pointers, error))
    return false;
  // The forward-only step when there is one; else the joint step, its
  // gradients and buffer mutations discarded.
  const CpuStep::Library *forward = step->forward();
  const CpuStep::Library &library = forward ? *forward : step->joint();
  std::vector<std::vector<uint8_t>> scratch;
  std::vector<std::vector<uint8_t>> &outputs = forward ? forwardBytes : scratch;
  if (!forward)
    for (const StepTensor &result : library.results)
      scratch.emplace_back(size_t(result.bytes), 0);
  for (std::vector<uint8_t> &bytes : outputs)
    pointers.push_back(bytes.data());
  library.entry(pointers.data());
  for (size_t i = 0; i < library.results.size(); ++i)
    if (library.results[i].role == TensorRole::Loss)
      value = loadFloatElement(outputs[i].data(), 0, library.results[i].dtype);
  return true;
}
