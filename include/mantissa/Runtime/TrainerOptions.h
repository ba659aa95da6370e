//===- TrainerOptions.h - The trainer's options, one struct a part -*- C++ -*-//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// What `mantissa-run` is asked to do, grouped by the part of the trainer that
// reads it (docs/training.md): the model and where its gradients come from,
// the data (BatchSource.h), the micro-batch schedule (MicroBatchSchedule.h),
// the optimizer, the device (the update backend), checkpoints, evaluation
// and the outputs (TrainerMetrics.h). A part takes its own struct, so that a
// reader sees what each part depends on, and a new input (issue 40's tensor
// datasets and random state) has one obvious place.
//
// The flags that fill these structs are defined once, in TrainerFlags.cpp
// (parseTrainerFlag), for both `mantissa-run MODEL.pt2` and `mantissa-run
// DIR`; their spellings are the structs' comments.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_TRAINEROPTIONS_H
#define MANTISSA_RUNTIME_TRAINEROPTIONS_H

#include "mantissa/Runtime/LearningRate.h"

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace mlir::mantissa::rt {

class GradientSource;

/// The model: the artifact, its initial state and where each step's
/// gradients come from (given, --grads, or the artifact's step, --inputs or
/// --data).
struct ModelOptions {
  std::string artifactDir;
  /// `--grads`: apply these (global, already averaged) gradients every step.
  std::string gradsPath;
  /// `--inputs`: train on the artifact's step with this fixed batch
  /// (runArtifactTraining) instead of applying given gradients.
  std::string inputsPath;
  /// `--weights`: initial parameters (and, with --inputs, buffers) by FQN,
  /// replacing those of the artifact's weights.safetensors; it must hold
  /// every parameter unless allowPartialWeights.
  std::string weightsPath;
  /// --allow-partial-weights: --weights may hold only some of the model's
  /// parameters (the rest start from the model's own values); without it
  /// the file must hold every parameter. Tensors that are neither a
  /// parameter nor a buffer are always refused (checkStateCoverage).
  bool allowPartialWeights = false;
};

/// `--data`, `--data-format`, `--val-data`, `--shuffle`: the training and
/// validation data a batch source reads (TokenData.h, docs/data.md); or,
/// with `--dataset`, `--val-dataset` and `--dataset-map`, a tensor dataset
/// (TensorDataset.h).
struct DataOptions {
  std::vector<std::string> paths, validationPaths;
  std::string format = "llmc";
  std::optional<uint64_t> shuffleSeed;
  /// The paths are a tensor dataset's safetensors files (--dataset,
  /// --val-dataset), not token files.
  bool tensors = false;
  /// `--dataset-map INPUT=TENSOR,...`.
  std::map<std::string, std::string> tensorOfInput;
  /// The flag that gave the training data, for messages.
  const char *flag() const { return tensors ? "--dataset" : "--data"; }
  const char *validationFlag() const {
    return tensors ? "--val-dataset" : "--val-data";
  }
};

/// How long the run is and how each step is cut into micro-batches
/// (MicroBatchSchedule.h).
struct ScheduleOptions {
  /// `--steps N`: the step the run ends at.
  int64_t steps = 1;
  /// `--grad-accum K`: micro-batches per rank and step (data only).
  int64_t gradAccum = 1;
  /// The samples of one micro-batch, B (`mantissa-run --micro-batch`, the
  /// step's batch size); 0 where unknown (a run on --grads).
  int64_t microBatch = 0;
};

/// AdamW's hyperparameters, the learning-rate schedule and what the trainer
/// does with each step's gradient before the update.
struct OptimizerOptions {
  /// `--lr`, `--betas B1,B2`, `--eps`, `--weight-decay`.
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.01;
  /// `--lr-schedule`, `--warmup-steps`, `--min-lr-ratio`, `--decay-steps`
  /// (the peak rate is `lr`, the total ScheduleOptions::steps).
  LrScheduleKind lrScheduleKind = LrScheduleKind::Constant;
  int64_t warmupSteps = 0, decaySteps = 0;
  double minLrRatio = 0;
  /// `--clip-grad-norm C` (0: no clipping).
  double clipGradNorm = 0;
  /// `--max-skips N`: consecutive skipped (non-finite) steps that stop the
  /// run.
  int64_t maxSkips = 5;
};

/// Where the update (and the step, when it is compiled for it) runs.
struct DeviceOptions {
  /// `--device`: "cpu" or "cuda" ("gpu" is accepted for "cuda").
  std::string kind = "cpu";
  /// The OpenMP threads of each rank, as rank 0's start-up line says them
  /// (createLaunchCommunicator in UpdateRunner.h; empty: not said).
  std::string threads;
  /// --tf32: the GPU step's fp32 matrix products may use TF32
  /// (GpuStep::setTf32); off, they stay fp32.
  bool tf32 = false;
  /// --op-times: where to write the GPU step's per-op device times
  /// (GpuStepGradients::writeOpTimes); empty: the step is not timed.
  std::string opTimesPath;
  /// True for --device cuda (or its old spelling, gpu).
  bool onGpu() const { return kind == "cuda" || kind == "gpu"; }
};

/// The checkpoint store (docs/training.md, CheckpointStore.h).
struct CheckpointOptions {
  /// `--save-checkpoint DIR --save-every K`.
  std::string saveDir;
  int64_t saveEvery = 0;
  /// `--keep-checkpoints N`: keep the newest N checkpoint folders (0: all).
  int64_t keep = 0;
  /// `--resume DIR`.
  std::string resumeDir;
  /// `--verify-checkpoint DIR`: load and validate a checkpoint, print its
  /// step, and stop.
  std::string verifyDir;
  /// `--overwrite-checkpoints`: a run that does not resume the run whose
  /// checkpoints --save-checkpoint DIR holds takes the folder over, removing
  /// that run's checkpoint folders (and nothing else) before training;
  /// without it such a run is refused.
  bool overwrite = false;
};

/// `--eval-every N --eval-batches M`: the validation loss every N steps,
/// over M micro-batches of --val-data.
struct EvalOptions {
  int64_t every = 0, batches = 0;
};

/// What the run writes besides checkpoints.
struct OutputOptions {
  /// `--losses L.json` (and its plot L.svg).
  std::string lossesPath;
  /// `--metrics FILE.jsonl`: one JSON object per step.
  std::string metricsPath;
  /// `--final-params F.safetensors`.
  std::string finalParamsPath;
  /// Print the per-rank peak memory report (off: --no-memory-report).
  bool memoryReport = true;
  /// `--profile`: each rank prints where its steps' time went
  /// (StepProfile.h).
  bool profile = false;
};

/// `--seed S`: the seed of every random number the step draws
/// (mantissa/Format/RandomDraw.h, docs/randomness.md); recorded in
/// checkpoints and metrics.
struct RandomOptions {
  uint64_t seed = 0;
};

/// Everything a run is asked to do, by part.
struct TrainerOptions {
  ModelOptions model;
  DataOptions data;
  ScheduleOptions schedule;
  OptimizerOptions optimizer;
  DeviceOptions device;
  CheckpointOptions checkpoints;
  EvalOptions eval;
  OutputOptions outputs;
  RandomOptions random;

  /// Where gradients come from instead of `model.gradsPath` (not owned).
  GradientSource *gradientSource = nullptr;

  /// The learning-rate schedule these options describe.
  LrSchedule lrSchedule() const {
    LrSchedule s;
    s.kind = optimizer.lrScheduleKind;
    s.lr = optimizer.lr;
    s.warmupSteps = optimizer.warmupSteps;
    s.minLrRatio = optimizer.minLrRatio;
    s.decaySteps = optimizer.decaySteps;
    s.totalSteps = schedule.steps;
    return s;
  }
};

/// Parses mantissa-run's flags for an artifact (argv[1] is the artifact).
bool parseUpdateOptions(int argc, char **argv, TrainerOptions &options,
                        std::string &error);

/// Parses one of the trainer's flags (the definition both `mantissa-run
/// DIR` and `mantissa-run MODEL.pt2` use): at argv[i] (advancing `i` past
/// its value). Returns false without touching `error` when argv[i] is not a
/// trainer flag; sets `error` when it is one with a bad value, or one already
/// in `given` (a repeated flag is refused rather than the last one silently
/// winning), which collects the flags seen so far.
bool parseTrainerFlag(int argc, char **argv, int &i, TrainerOptions &options,
                      std::set<std::string> &given, std::string &error);

/// The trainer's flags as `--help` lists them (both forms of mantissa-run).
const char *trainerFlagsHelp();

/// Checks the trainer's options against each other and their ranges, naming
/// the flag: run before any work starts.
bool validateTrainerOptions(const TrainerOptions &options, std::string &error);

/// Checks that the run's data positions fit in int64_t: `steps` steps of
/// --grad-accum K micro-batches on each of `worldSize` ranks, each of
/// `samplesPerMicroBatch` samples, read global samples up to N * K * W * B
/// (MicroBatchSchedule.h). Run before compiling, once B is known.
bool checkDataPositions(const TrainerOptions &options, int worldSize,
                        int64_t samplesPerMicroBatch, std::string &error);

/// Checks, before any work, that every output of the run (--losses and its
/// .svg, --metrics, --final-params, --save-checkpoint) can be written where
/// it is asked for and is none of its inputs (--inputs, --weights, --data,
/// --val-data, --grads, the artifact or `otherInputs`, e.g. the .pt2) nor
/// another output: paths are compared after resolving links and relative
/// parts. `otherOutputs` are outputs of the caller's own flags (flag,
/// path), checked as these are. On failure `error` names the flag and the
/// path.
bool checkOutputLocations(
    const TrainerOptions &options, const std::vector<std::string> &otherInputs,
    std::string &error,
    const std::vector<std::pair<std::string, std::string>> &otherOutputs = {});

/// Checks, before any work, that `--save-checkpoint DIR` holds no other
/// run's checkpoints: every checkpoint there must be of the run `--resume`
/// continues (a run without --resume is a new run, which owns none), unless
/// `--overwrite-checkpoints`. On failure `error` names the folder, the
/// checkpoint and how to go on (CheckpointStore.cpp).
bool checkCheckpointFolderOwner(const CheckpointOptions &options,
                                std::string &error);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_TRAINEROPTIONS_H
