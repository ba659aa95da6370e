//===- UpdateRunner.h - The update path across ranks ------------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// `mantissa-run DIR --grads GRADS.safetensors --steps N ...`: runs optimizer
// steps of a compiled artifact with given gradients, with FSDP sharding
// (`--inputs INPUTS.safetensors` instead trains with the artifact's GPU
// step: runArtifactTraining):
//
// - Shards. Each group's kernel splits the group's T tiles (tile_size
//   elements of one member each) into slices [p*T/n, (p+1)*T/n); rank r of W
//   owns slice p=r, n=W. In every role's flat buffer the bytes of a slice are
//   contiguous, so the rank keeps only those bytes of the master, moments and
//   reduced gradient, and calls the kernel with part=r, parts=W and each
//   pointer biased by its slice's first byte (the generated kernel's ABI is
//   unchanged). Groups are thus split evenly at tile granularity.
// - Gradients. The grads file is the global (already averaged) gradient.
//   Rank 0 contributes it, cast to each member's reduce dtype, every other
//   rank contributes -0.0 (the exact additive identity), and a real
//   reduce-scatter sums them in the reduce dtype: every world size sees
//   exactly the file's gradient, so results are bit-identical across world
//   sizes. Members of one group may reduce in different dtypes: each run of
//   consecutive members with one reduce dtype is reduce-scattered on its
//   own, in that dtype, into the rank's part of the grad buffer.
// - Parameters. After the update each rank's gather-dtype slice is
//   all-gathered, so every rank holds the full gather-dtype parameters.
// - Checkpoints: see Checkpoint layout in UpdateRunner.cpp / docs.
// - Tripwire: after the first step of every run the resident state is
//   checked against the plan (Tripwire.h).
// - Devices: `--device cpu` (default) runs the CPU kernels (kernels.so);
//   `--device cuda` keeps parameters, masters and moments resident on the
//   GPU (CudaDriver.h), copies each step's gradients in (unless the training
//   step itself runs on the GPU and writes them in place: GpuStep.h), runs
//   the PTX kernels over each rank's tiles and the parameter all-gather over
//   NCCL (CommunicatorNCCL.h); the micro-batch gradients are combined on
//   the host, exactly as on the CPU. Checkpoints are the same files either
//   way.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_UPDATERUNNER_H
#define MANTISSA_RUNTIME_UPDATERUNNER_H

#include "mantissa/Runtime/Communicator.h"

#include "mantissa/Format/DType.h"
#include "mantissa/Runtime/LearningRate.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

class CudaDevice;

/// Computes each step's gradients from the current parameters: the whole
/// training step (forward and backward) in front of the update path. A
/// source over token data (splitsSteps) splits each step into M = W * K
/// micro-batches and every rank evaluates its K; a source with one fixed
/// batch is evaluated on rank 0 only (M = 1), since every rank would
/// evaluate it alike. Either way the runner sums the micro-batch gradients in
/// a fixed tree (GradientCombination.h) and updates with their mean.
class GradientSource {
public:
  /// One parameter: its current value (all-gathered, in its gather dtype)
  /// and where its gradient goes (in its reduce dtype). Host addresses, or
  /// device addresses (DevicePtr values cast to pointers) for a source that
  /// runsOnDevice.
  struct Member {
    const std::string *fqn;
    const std::vector<int64_t> *shape;
    DType paramDtype;
    const uint8_t *param;
    DType gradDtype;
    uint8_t *grad;
  };
  /// Micro-batch `index` (0-based) of the `count` of step `step` (1-based);
  /// `global` counts micro-batches from the start of training (the data
  /// position: step i of a run whose steps all have M micro-batches starts
  /// at i * M).
  struct MicroBatch {
    int64_t step = 1, index = 0, count = 1, global = 0;
  };
  virtual ~GradientSource() = default;
  /// True when every rank evaluates micro-batches of its own (token data);
  /// false for one fixed batch, evaluated on rank 0.
  virtual bool splitsSteps() const { return false; }
  /// Chooses the micro-batch the next computeGradients evaluates.
  virtual bool selectMicroBatch(const MicroBatch &microBatch,
                                std::string &error) {
    (void)microBatch;
    (void)error;
    return true;
  }
  /// The loss of the last computeGradients (NaN when the source has none).
  virtual double lastLoss() const { return std::nan(""); }
  /// Tokens one micro-batch holds (0 when its inputs are not token ids).
  virtual int64_t tokensPerMicroBatch() const { return 0; }
  /// The number of validation micro-batches the source can evaluate (0: no
  /// validation data).
  virtual int64_t validationMicroBatches() const { return 0; }
  /// The loss of validation micro-batch `index` at the current parameters
  /// (`members` as for computeGradients; no gradient is written).
  virtual bool evaluateValidation(int64_t index,
                                  const std::vector<Member> &members,
                                  double &loss, std::string &error) {
    (void)index;
    (void)members;
    (void)loss;
    error = "this training step cannot evaluate validation data";
    return false;
  }
  /// Fills every member's gradient for step `stepNumber` (1-based), or
  /// explains in `error` why it cannot.
  virtual bool computeGradients(int64_t stepNumber,
                                const std::vector<Member> &members,
                                std::string &error) = 0;
  /// True when the source computes on the runner's GPU (--device cuda
  /// only): its members then address the runner's device parameters and
  /// gradients, and no gradient is copied from the host. A host source on a
  /// GPU run gets host copies of the current parameters instead.
  virtual bool runsOnDevice() const { return false; }
  /// With --device cuda: called on rank 0 once the device is open and its
  /// state uploaded, before step 1 (e.g. to load kernels and upload inputs).
  virtual bool attachDevice(CudaDevice &device, std::string &error) {
    (void)device;
    (void)error;
    return true;
  }
  /// Called before the device attached to closes: release what is on it.
  virtual void detachDevice() {}
};

struct UpdateOptions {
  std::string artifactDir;
  std::string gradsPath;
  /// `--inputs`: train on the artifact's GPU step with this batch
  /// (runArtifactTraining) instead of applying given gradients.
  std::string inputsPath;
  /// `--losses` (with --inputs): where {"losses": [...]} goes.
  std::string lossesPath;
  /// `--weights`: initial parameters (and, with --inputs, buffers) by FQN,
  /// replacing those of the artifact's weights.safetensors; it must hold
  /// every parameter unless allowPartialWeights.
  std::string weightsPath;
  /// --allow-partial-weights: --weights may hold only some of the model's
  /// parameters (the rest start from the model's own values); without it
  /// the file must hold every parameter. Tensors that are neither a
  /// parameter nor a buffer are always refused (checkStateCoverage).
  bool allowPartialWeights = false;
  std::string finalParamsPath;
  std::string saveCheckpointDir;
  std::string resumeDir;
  /// Load and validate a checkpoint, print its step, and stop.
  std::string verifyCheckpointDir;
  /// "cpu" or "cuda" ("gpu" is accepted for "cuda").
  std::string device = "cpu";
  /// --tf32: the GPU step's fp32 matrix products may use TF32
  /// (GpuStep::setTf32); off, they stay fp32.
  bool tf32 = false;
  /// --op-times: where to write the GPU step's per-op device times
  /// (GpuStepGradients::writeOpTimes); empty: the step is not timed.
  std::string opTimesPath;
  int64_t steps = 1;
  int64_t saveEvery = 0;
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.01;
  /// Print the per-rank peak memory report.
  bool memoryReport = true;

  // The trainer (docs/training.md).
  /// `--lr-schedule`, `--warmup-steps`, `--min-lr-ratio`, `--decay-steps`
  /// (the peak rate is `lr`, the total `steps`).
  LrScheduleKind schedule = LrScheduleKind::Constant;
  int64_t warmupSteps = 0, decaySteps = 0;
  double minLrRatio = 0;
  /// `--grad-accum K`: micro-batches per rank and step (token data only).
  int64_t gradAccum = 1;
  /// `--clip-grad-norm C` (0: no clipping).
  double clipGradNorm = 0;
  /// `--max-skips N`: consecutive skipped (non-finite) steps that stop the
  /// run.
  int64_t maxSkips = 5;
  /// `--metrics FILE.jsonl`: one JSON object per step.
  std::string metricsPath;
  /// `--data`, `--data-format`, `--val-data`, `--shuffle`: token data
  /// (TokenData.h), read by the gradient source.
  std::vector<std::string> dataPaths, valDataPaths;
  std::string dataFormat = "llmc";
  std::optional<uint64_t> shuffleSeed;
  /// `--keep-checkpoints N`: keep the newest N checkpoint folders (0: all).
  int64_t keepCheckpoints = 0;
  /// `--eval-every N --eval-batches M`.
  int64_t evalEvery = 0, evalBatches = 0;

  /// The schedule these options describe.
  LrSchedule lrSchedule() const {
    LrSchedule s;
    s.kind = schedule;
    s.lr = lr;
    s.warmupSteps = warmupSteps;
    s.minLrRatio = minLrRatio;
    s.decaySteps = decaySteps;
    s.totalSteps = steps;
    return s;
  }

  /// Where gradients come from instead of `gradsPath` (not owned).
  GradientSource *gradientSource = nullptr;
};

/// Parses mantissa-run's update-path flags (argv[1] is the artifact).
bool parseUpdateOptions(int argc, char **argv, UpdateOptions &options,
                        std::string &error);

/// Parses one of the trainer's flags (the definition both `mantissa-run
/// DIR` and `mantissa-run MODEL.pt2` use): at argv[i] (advancing `i` past
/// its value). Returns false without touching `error` when argv[i] is not a
/// trainer flag; sets `error` when it is one with a bad value.
bool parseTrainerFlag(int argc, char **argv, int &i, UpdateOptions &options,
                      std::string &error);

/// Checks the trainer's options against each other and their ranges, naming
/// the flag: run before any work starts.
bool validateTrainerOptions(const UpdateOptions &options, std::string &error);

/// Checks, before any work, that every output of the run (--losses and its
/// .svg, --metrics, --final-params, --save-checkpoint) can be written where
/// it is asked for and is none of its inputs (--inputs, --weights, --data,
/// --val-data, --grads, the artifact or `otherInputs`, e.g. the .pt2) nor
/// another output: paths are compared after resolving links and relative
/// parts. On failure `error` names the flag and the path.
bool checkOutputLocations(const UpdateOptions &options,
                          const std::vector<std::string> &otherInputs,
                          std::string &error);

/// Runs the update path on this rank; returns the process exit code.
int runUpdate(const UpdateOptions &options, Communicator &communicator);

/// `mantissa-run DIR --inputs INPUTS.safetensors --device cuda ...`: trains
/// with the step the artifact holds for the GPU (manifest.json
/// kernels.gpu_step, docs/gpu-step.md) in front of the update path, so that
/// a machine with the runtime alone (no compiler) can train. The step's
/// user inputs come from `inputsPath` (by name, else `input.<k>`), its
/// buffers from `weightsPath`, else the artifact's weights.safetensors, else
/// `inputsPath`.
/// Prints each step's loss on rank 0 and writes `lossesPath` on success.
/// Returns the process exit code (lib/Runtime/ArtifactTraining.cpp).
int runArtifactTraining(const UpdateOptions &options,
                        Communicator &communicator);

/// Writes `text` to `path` under a temporary name, fsyncs and renames it, so
/// that a reader sees the old file or the whole new one.
bool writeFileAtomically(const std::string &path, const std::string &text,
                         std::string &error);

/// The communicator this process was launched with: MPI when launched by
/// mpirun (and built with MPI), else a single rank; fails (explaining in
/// `error`) for a torchrun world of several ranks without MPI.
std::unique_ptr<Communicator> createLaunchCommunicator(std::string &error);

/// Picks the communicator (createLaunchCommunicator), parses and runs.
int runUpdateMain(int argc, char **argv);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_UPDATERUNNER_H
