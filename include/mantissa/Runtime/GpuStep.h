//===- GpuStep.h - A whole training step on the GPU -------------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The runtime side of docs/gpu-step.md: `step.gpu.json` and `step.ptx`, a
// straight-line program of generated kernels and cuBLAS GEMMs over device
// buffers, replayed on one CUDA device (CudaDriver.h) on the default stream.
//
// - GpuStep loads and validates the program without a device (every buffer
//   id, offset, size, entry and dtype combination is checked when it loads,
//   so a bad file is refused with its name and the op before anything runs),
//   then, attached to a device, loads the PTX once, resolves every entry
//   once, allocates the arena and uploads the constants; each `run` binds
//   the arguments and results to caller storage and queues the ops.
// - GpuStepGradients puts it in front of the update path (UpdateRunner.h):
//   the step reads the parameters where the runner keeps them on the device
//   and writes the gradients where the runner reduces them, whenever the
//   dtypes agree (through a scratch buffer and a conversion kernel
//   otherwise), so a step moves no parameters or gradients through the host.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_GPUSTEP_H
#define MANTISSA_RUNTIME_GPUSTEP_H

#include "mantissa/Format/DType.h"
#include "mantissa/Format/GpuProgram.h"
#include "mantissa/Runtime/CudaDriver.h"
#include "mantissa/Runtime/TokenData.h"
#include "mantissa/Runtime/UpdateRunner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

/// A training step compiled for the GPU (docs/gpu-step.md).
class GpuStep {
public:
  /// Reads `jsonPath` (step.gpu.json), the PTX and the constants it names
  /// (relative to its directory) and validates all of it; needs no device.
  /// On failure returns null with `error` naming the file and, for an op,
  /// its index and source.
  static std::unique_ptr<GpuStep> load(const std::string &jsonPath,
                                       std::string &error);
  /// Releases the device resources (the device must still be open).
  ~GpuStep();
  GpuStep(const GpuStep &) = delete;
  GpuStep &operator=(const GpuStep &) = delete;

  /// Loads the PTX module once, resolves every entry the ops use and the
  /// conversion kernels, opens cuBLAS if there are GEMMs, allocates the
  /// arena and uploads the constants. `device` must outlive the step (or
  /// `detach` be called first).
  bool attach(CudaDevice &device, std::string &error);
  /// Releases what attach allocated and forgets the device.
  void detach();
  /// Lets the fp32 GEMMs use TF32 (CUBLAS_COMPUTE_32F_FAST_TF32, --tf32);
  /// bf16/fp16 GEMMs are unaffected. Off by default: fp32 products stay
  /// fp32. Set before the first run.
  void setTf32(bool enable) { tf32 = enable; }
  bool usesTf32() const { return tf32; }
  /// GEMMs by library, for reports: those cuBLASLt runs (bf16/fp16
  /// operands or an epilogue) and those with a bias epilogue.
  int64_t ltGemms() const;
  int64_t biasEpilogues() const;
  bool attached() const { return device != nullptr; }

  /// Runs the ops in order with argument buffer i bound to `arguments[i]`
  /// and result buffer j to `results[j]` (device addresses of dense storage
  /// in the tensor's dtype; 0 only for those no buffer names), then waits
  /// for the device. The first run queues the ops one by one; later runs
  /// replay them as one CUDA graph captured on the step's stream (captured
  /// again when an address changes), unless MANTISSA_GPU_STEP_GRAPH=0 or
  /// the driver cannot (graphNote says why). Errors name the op (index and
  /// source) and the driver's or cuBLAS's message. With
  /// MANTISSA_GPU_STEP_SYNC=1 in the environment every op is waited for, so
  /// that a fault on the device is blamed on its op (and no graph is used).
  bool run(const std::vector<DevicePtr> &arguments,
           const std::vector<DevicePtr> &results, std::string &error);

  /// Converts `count` elements from `source` (dtype `from`) into `target`
  /// (dtype `to`) with the PTX's mantissa_convert_<from>_to_<to> kernel,
  /// queued on the default stream (a device copy when the dtypes agree).
  /// F32, BF16 and F16 only.
  bool convert(DevicePtr source, DType from, DevicePtr target, DType to,
               int64_t count, std::string &error);

  /// Times every op on the device from the next run on (--op-times): the
  /// step then runs op by op, not as a graph, with an event recorded after
  /// each op, and each op's device time is summed over the runs after the
  /// first kUntimedRuns (lazy loading, cuBLAS's first choices). Fails when
  /// the driver lacks events. Set after attach.
  bool timeOps(std::string &error);
  static constexpr int64_t kUntimedRuns = 2;
  /// Per op, its device microseconds summed over timedRuns() runs.
  const std::vector<double> &opMicroseconds() const { return opTimes; }
  int64_t timedRuns() const {
    return std::max<int64_t>(0, timingRuns - kUntimedRuns);
  }

  /// How many runs since attach replayed the captured CUDA graph, and if
  /// graphs are not used, why not.
  int64_t graphReplays() const { return replays; }
  const std::string &getGraphNote() const { return graphNote; }

  const std::string &path() const { return jsonPath; }
  /// The forward-only program the file names (`forward`), or empty.
  const std::string &forwardProgramPath() const { return forwardPath; }
  /// The file as read.
  const GpuProgram &program() const { return file; }
  const std::string &stepName() const { return file.stepName; }
  int64_t blockSize() const { return file.blockSize; }
  int64_t arenaBytes() const { return file.arenaBytes; }
  const std::vector<StepTensor> &arguments() const { return file.arguments; }
  const std::vector<StepTensor> &results() const { return file.results; }
  const std::vector<GpuStepBuffer> &buffers() const { return file.buffers; }
  const std::vector<GpuStepOp> &ops() const { return file.ops; }
  /// The argument named `name`, or -1.
  int64_t findArgument(const std::string &name) const {
    return file.findArgument(name);
  }
  /// The bound of argument `index`'s ids (`index_bound`; 0 when none).
  const IndexBound &indexBound(size_t index) const {
    return file.arguments[index].indexBound;
  }
  /// "op 3 (linalg.matmul)": how messages name an op.
  std::string describeOp(size_t index) const;

private:
  GpuStep() = default;
  bool launch(void *function, int64_t grid, std::vector<DevicePtr> &params,
              std::string &error);
  /// Queues every op on `stream` with buffer i at addresses[i] (and, when
  /// ops are timed, events[0] before them and events[i + 1] after op i).
  bool enqueue(const std::vector<DevicePtr> &addresses, std::string &error);
  /// Adds the device time between consecutive events to opTimes.
  bool readOpTimes(std::string &error);
  /// The first two arguments or results whose storage at `addresses`
  /// overlaps ("argument 0 'x' and result 1 'y'"), or empty.
  std::string
  findOverlappingStorage(const std::vector<DevicePtr> &addresses) const;
  /// The first argument or result whose storage at `addresses` is not
  /// kGpuStorageAlignment-aligned ("argument 0 'x'"), or empty.
  std::string
  findMisalignedStorage(const std::vector<DevicePtr> &addresses) const;
  /// Buffer `buffer` (an argument or a result) as "argument 0 'x'".
  std::string describeBoundBuffer(size_t buffer) const;
  /// Captures enqueue's ops into `graph`.
  bool capture(const std::vector<DevicePtr> &addresses, std::string &error);

  GpuProgram file;
  std::string jsonPath, ptxPath, constantsPath, forwardPath, ptx;
  std::vector<uint8_t> constants;

  // Attached state.
  CudaDevice *device = nullptr;
  void *module = nullptr;
  DevicePtr arenaBase = 0, constantsBase = 0;
  std::map<std::string, void *> functions;
  /// Per op its resolved kernel (null for GEMMs).
  std::vector<void *> opFunctions;
  bool syncEachOp = false;
  /// The step's own stream (null: the default stream, no graphs), the
  /// captured graph and the buffer addresses it was captured with.
  void *stream = nullptr, *graph = nullptr;
  std::vector<DevicePtr> graphAddresses;
  /// The binding last found free of overlaps.
  std::vector<DevicePtr> checkedAddresses;
  int64_t runs = 0, replays = 0;
  std::string graphNote;
  bool tf32 = false;
  /// Timing (timeOps): one event before the ops and one after each, the
  /// summed microseconds per op, and the runs since timeOps.
  std::vector<void *> events;
  std::vector<double> opTimes;
  int64_t timingRuns = 0;
};

/// The training step on the GPU in front of the update path: a
/// GradientSource whose members are device addresses (runsOnDevice).
/// Parameters are read where the runner keeps them and gradients written
/// where it reduces them when the dtypes agree, else through a scratch
/// buffer and a conversion kernel; user inputs and buffers are uploaded
/// once, and each buffer_mutation result is copied over its buffer for the
/// next step; the loss is downloaded every step. With a batch source
/// (setBatchSource), each micro-batch's user inputs are uploaded before it
/// runs, and validation micro-batches run the same program with
/// its buffer mutations discarded.
class GpuStepGradients : public GradientSource {
public:
  /// Loads and validates the program (GpuStep::load) and checks `arguments`
  /// against it: one entry per step argument, in order, holding its dense
  /// bytes in its dtype; a parameter's entry may be empty (the runner's
  /// parameters are bound each step).
  /// Integer user inputs given here are checked against the tables they
  /// index (`index_bound`), `inputsOrigin` naming their file in messages.
  static std::unique_ptr<GpuStepGradients>
  load(const std::string &programPath,
       std::vector<std::vector<uint8_t>> arguments, std::string &error,
       const std::string &inputsOrigin = std::string());
  ~GpuStepGradients() override;

  bool runsOnDevice() const override { return true; }
  /// Attaches the program and uploads the arguments (once per object).
  bool attachDevice(CudaDevice &device, std::string &error) override;
  void detachDevice() override;
  bool computeGradients(int64_t stepNumber, const std::vector<Member> &members,
                        std::string &error) override;
  double lastLoss() const override {
    return lossList.empty() ? std::nan("") : lossList.back();
  }
  int64_t tokensPerMicroBatch() const override { return tokens; }
  /// The token ids one step's batch holds (for the runner's rates).
  void setTokensPerMicroBatch(int64_t count) { tokens = count; }
  /// Trains on `batches` (--data): each micro-batch's tensors are uploaded
  /// into the user inputs of their names (StepInputs.h).
  void setBatchSource(std::unique_ptr<BatchSource> batches);
  /// GpuStep::setTf32 for the joint and the forward program.
  void setTf32(bool enable);
  /// Times the joint program's ops (GpuStep::timeOps) from attachDevice
  /// on (--op-times); set before it.
  void setTimeOps(bool enable) { timeOps = enable; }
  /// Writes what was timed to `path` (atomically), as JSON: the program's
  /// path and step, how many runs were timed and how many were not, and
  /// per op in program order its index, kind (`kernel`, `gemm`), name (a
  /// kernel's entry, a GEMM's shape and dtypes, as --cost-report names
  /// them), source and mean `measured_us`. Fails when no run was timed.
  bool writeOpTimes(const std::string &path, std::string &error) const;
  bool splitsSteps() const override { return batches != nullptr; }
  bool selectMicroBatch(const MicroBatch &microBatch,
                        std::string &error) override;
  int64_t validationMicroBatches() const override;
  bool evaluateValidation(int64_t index, const std::vector<Member> &members,
                          double &loss, std::string &error) override;

  /// How the steps ran, for the run's report: "the GPU step ran as one
  /// CUDA graph in N of M steps (...)" or "the GPU step ran op by op: why";
  /// empty before any step.
  std::string describeGraphUse() const;
  /// Each step's loss, in order.
  const std::vector<double> &losses() const { return lossList; }
  /// The forward-only program evaluation runs, or null.
  const GpuStep *forwardProgram() const { return forward.get(); }
  /// Seconds spent in computeGradients (the step, conversions, the loss's
  /// download), waiting for the device included.
  double seconds() const { return totalSeconds; }
  /// Called after each step with its number and loss (e.g. for progress).
  void setStepCallback(std::function<void(int64_t, double)> callback) {
    onStep = std::move(callback);
  }
  const GpuStep &program() const { return *step; }

private:
  GpuStepGradients() = default;
  bool timeOps = false;
  bool scratch(std::vector<DevicePtr> &list, size_t index, int64_t bytes,
               std::string &error);
  /// The device addresses of the step's arguments: the parameters where
  /// the runner holds them (converted into scratch when the dtypes differ),
  /// everything else in the source's storage; `byName` maps each member's
  /// FQN to it.
  bool bindArguments(const std::vector<Member> &members,
                     std::map<std::string, const Member *> &byName,
                     std::vector<DevicePtr> &addresses, std::string &error);
  /// Runs the step once on the device; `training` keeps its buffer
  /// mutations (validation discards them).
  bool runOnce(int64_t stepNumber, const std::vector<Member> &members,
               bool training, double &loss, std::string &error);
  /// Reads a loss of `dtype` at `from` on the device.
  bool downloadLoss(DevicePtr from, DType dtype, double &loss,
                    std::string &error);
  /// Uploads micro-batch `index` of `split` (a global micro-batch count for
  /// training) into the user inputs.
  bool uploadInputs(DataSplit split, int64_t index, std::string &error);
  /// Computes the random arguments on the host (StepInputs.h's
  /// storeRandomInput) and uploads them.
  bool uploadRandomInputs(int64_t globalMicroBatch, int64_t stepNumber,
                          std::string &error);

  std::unique_ptr<GpuStep> step;
  /// The forward-only program for evaluation (null: the joint one runs),
  /// with storage for its results.
  std::unique_ptr<GpuStep> forward;
  std::vector<DevicePtr> forwardResults;
  std::vector<std::vector<uint8_t>> hostArguments;
  CudaDevice *device = nullptr;
  bool used = false;
  /// Device storage per argument (user inputs, buffers, parameters with a
  /// value of their own) and per result, and conversion scratch per
  /// parameter argument and gradient result; 0 where none.
  std::vector<DevicePtr> argumentStorage, resultStorage, parameterScratch,
      gradientScratch;
  std::vector<double> lossList;
  int64_t validationRuns = 0;
  std::unique_ptr<BatchSource> batches;
  /// The last micro-batch read (BatchSource::loadMicroBatch).
  std::vector<HostTensor> batchTensors;
  std::vector<uint8_t> inputBytes;
  int64_t tokens = 0;
  double totalSeconds = 0;
  std::function<void(int64_t, double)> onStep;
};

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_GPUSTEP_H
