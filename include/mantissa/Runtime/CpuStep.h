//===- CpuStep.h - A training step compiled for the CPU ---------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The training step as mantissa-compile writes it into an artifact for the
// CPU (docs/training.md; its file's schema is mantissa/Format/CpuProgram.h):
// `step.cpu.json` names a shared library whose entry
// takes one pointer per argument, then one per result, each a dense
// row-major buffer in the step's dtype (the arguments are only read), and
// optionally the forward-only step (mantissa-forward-only) in a second
// library with the same arguments. Its arguments and results are the
// step's signature, which step.gpu.json lists too
// (mantissa/Format/StepTensor.h); an integer argument may carry the bound
// its ids must respect (`index_bound`, `index_bound_what`).
//
// CpuStepGradients runs it as the trainer's gradient source, on every rank:
// parameters are read where the runtime holds them, gradients written where
// it combines them (converted through scratch when the dtypes differ),
// buffer mutations carried to the next step, token data loaded before each
// micro-batch. Both `mantissa-run MODEL.pt2` and `mantissa-run DIR` train
// with it.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_CPUSTEP_H
#define MANTISSA_RUNTIME_CPUSTEP_H

#include "mantissa/Runtime/GpuStep.h"
#include "mantissa/Runtime/GradientSource.h"
#include "mantissa/Runtime/TokenData.h"
#include "mantissa/Runtime/TrainerOptions.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

class CpuStep {
public:
  /// One compiled step: its entry and its results.
  struct Library {
    void (*entry)(void **) = nullptr;
    std::vector<StepTensor> results;
  };
  /// Reads and validates `jsonPath` and loads the libraries it names
  /// (relative to its directory); null with `error` naming the file.
  static std::unique_ptr<CpuStep> load(const std::string &jsonPath,
                                       std::string &error);
  const std::vector<StepTensor> &arguments() const { return argumentList; }
  const Library &joint() const { return jointStep; }
  /// The forward-only step, or null when the program has none.
  const Library *forward() const {
    return forwardStep.entry ? &forwardStep : nullptr;
  }
  /// The bound of integer argument `index` (bound 0: none recorded).
  const IndexBound &indexBound(size_t index) const {
    return argumentList[index].indexBound;
  }
  /// The CPU the code was compiled for (-march=native on the compiling
  /// host).
  const std::string &targetCpu() const { return cpu; }

private:
  CpuStep() = default;
  std::vector<StepTensor> argumentList;
  Library jointStep, forwardStep;
  std::string cpu;
};

/// Whether `environment` (NAME=value entries, null-terminated, as `environ`
/// holds them) tunes glibc's malloc: a MALLOC_..._ variable
/// (MALLOC_TRIM_THRESHOLD_, MALLOC_TOP_PAD_, MALLOC_MMAP_THRESHOLD_, ...) or
/// GLIBC_TUNABLES with a glibc.malloc tunable.
bool environmentTunesMalloc(const char *const *environment);

/// Keeps the memory the compiled step frees in the process for the next
/// step (CpuStep.cpp says why), unless the environment tunes malloc itself
/// (environmentTunesMalloc); CpuStep::load calls it. Returns whether it
/// changed malloc's settings.
bool keepFreedStepMemory();

/// The CPU step in front of the trainer.
class CpuStepGradients : public GradientSource {
public:
  /// `arguments`: one buffer per step argument in its dtype (ignored for
  /// parameters, which the runner binds each step; user inputs are
  /// overwritten by `batches`' micro-batches when given, each tensor into
  /// the input of its name, StepInputs.h). `batches` null: one fixed batch,
  /// whose integer user inputs are checked against the tables they index
  /// (refused with `inputsOrigin`, the file they came from, in the
  /// message), so the compiled step never reads out of bounds.
  static std::unique_ptr<CpuStepGradients>
  create(std::unique_ptr<CpuStep> step,
         std::vector<std::vector<uint8_t>> arguments,
         std::unique_ptr<BatchSource> batches, std::string &error,
         const std::string &inputsOrigin = std::string());

  /// The token batches a run over `step` reads with `options` (--data,
  /// --val-data, --shuffle, --data-format, --eval-batches), or null with
  /// `error` when the step does not take [B, T] tokens and targets.
  static std::unique_ptr<TokenBatches>
  openTokenData(const CpuStep &step, const TrainerOptions &options,
                std::string &error);
  /// The same for any step's arguments (user inputs among them, with the
  /// bounds of their ids), e.g. the interpreter's.
  static std::unique_ptr<TokenBatches>
  openTokenData(const std::vector<StepTensor> &arguments,
                const TrainerOptions &options, std::string &error);

  bool splitsSteps() const override { return batches != nullptr; }
  bool selectMicroBatch(const MicroBatch &microBatch,
                        std::string &error) override;
  double lastLoss() const override { return loss; }
  int64_t tokensPerMicroBatch() const override { return tokens; }
  int64_t validationMicroBatches() const override;
  bool evaluateValidation(int64_t index, const std::vector<Member> &members,
                          double &loss, std::string &error) override;
  bool computeGradients(int64_t stepNumber, const std::vector<Member> &members,
                        std::string &error) override;

private:
  CpuStepGradients() = default;
  /// Points `pointers` at the arguments, the parameters where the runner
  /// holds them.
  bool bindArguments(const std::vector<Member> &members,
                     std::vector<void *> &pointers, std::string &error);
  /// Loads micro-batch `index` of `split` (a global micro-batch count for
  /// training) into the user inputs.
  bool loadInputs(DataSplit split, int64_t index, std::string &error);
  /// Fills the random arguments (StepInputs.h's storeRandomInput).
  void storeRandomInputs(int64_t globalMicroBatch, int64_t stepNumber);

  std::unique_ptr<CpuStep> step;
  std::vector<std::vector<uint8_t>> argumentBytes, resultBytes, forwardBytes;
  std::unique_ptr<BatchSource> batches;
  /// The last micro-batch read (BatchSource::loadMicroBatch).
  std::vector<HostTensor> batchTensors;
  /// The argument each parameter and each buffer is, by name.
  std::map<std::string, size_t> parameterIndex, bufferIndex;
  double loss = 0;
  int64_t tokens = 0;
};

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_CPUSTEP_H
