//===- Trainer.cpp - The trainer: its parts, run step by step -------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// runUpdate (UpdateRunner.h): one rank's training run, assembled from the
// parts a reader can name, each in its own file:
//
//   the options by part         TrainerOptions.h (flags: TrainerFlags.cpp)
//   the gradients               GradientSource.h, reading a BatchSource.h
//   the micro-batch schedule    MicroBatchSchedule.h: K * W, the data position
//   this rank's state           ShardedState.h
//   the update                  UpdateBackend.h: HostUpdate.cpp,
//   DeviceUpdate.cpp checkpoints                 CheckpointStore.h evaluation
//   Evaluation.h metrics and progress lines  TrainerMetrics.h
//
// This file holds what joins them: each step's micro-batch gradients, their
// exact combination (GradientCombination.h), mean, norm, clipping and the
// skip of non-finite steps, and run(), the run in named steps.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#include "CheckpointStore.h"
#include "Evaluation.h"
#include "ShardedState.h"
#include "UpdateBackend.h"
#include "mantissa/Runtime/MicroBatchSchedule.h"
#include "mantissa/Runtime/StepProfile.h"
#include "mantissa/Runtime/StopSignals.h"
#include "mantissa/Runtime/TrainerMetrics.h"
#include "mantissa/Runtime/UpdateRunner.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <map>
#include <memory>
#include <sys/resource.h>

using namespace mlir::mantissa::rt;
using namespace mlir::mantissa::rt::detail;

namespace {

const char *signalName(int64_t signal) {
  return signal == SIGINT    ? "SIGINT"
         : signal == SIGTERM ? "SIGTERM"
                             : "a signal";
}

using Clock = std::chrono::steady_clock;

/// One rank's run. run() calls the steps below in order; a step returns
/// false when the run ends there, every rank together, with `exitCode` set.
class Trainer {
public:
  /// `profile`: --profile's times (null without it); `comm` then times its
  /// collectives into it.
  Trainer(const TrainerOptions &options, Communicator &comm,
          StepProfile *profile)
      : options(options), source(options.gradientSource), comm(comm),
        profile(profile), rank(comm.rank()), world(comm.worldSize()),
        state(rank, world, errors),
        checkpoints(options.checkpoints, state, comm, errors),
        schedule(rank, world, options.schedule.gradAccum,
                 source && source->splitsSteps()) {
    if (source)
      source->setRandomSeed(options.random.seed);
  }
  int run();

private:
  // The run's steps, in order.
  bool openBackend();
  bool loadModel();
  bool initialiseState();
  bool resume();
  bool claimCheckpointFolder();
  bool prepareGradients();
  bool openMetrics();
  bool trainStep(int64_t stepNumber);
  int finishRun();

  // One step.
  /// The micro-batch gradients, their exact mean, its norm, clipping, and
  /// the update (unless the step is skipped).
  bool step(int64_t stepNumber, StepRecord &record);
  /// This rank's micro-batches of the step: each one's gradients (summed in
  /// the tree when there are several) and the step's mean loss.
  bool microBatchGradients(int64_t stepNumber, double &loss);
  bool computeGradients(int64_t stepNumber);
  /// The exact sum of every rank's micro-batch gradients into this rank's
  /// gradient shard (GradientCombination.h).
  bool combineGradients();
  /// The validation loss at the current parameters.
  bool evaluate(double &loss);
  /// What an exact resume needs besides the state: counters, the data
  /// position and the hyperparameters (to warn when they change).
  json trainerJson() const;
  json hyperparametersJson() const;
  void reportMemory();

  /// Ends the run here: every rank stops together; the first rank with an
  /// error reports it. Returns false, for the run's steps to return.
  bool stop(bool ok);
  /// Ends the run after a SIGINT or SIGTERM (`signal`) at step
  /// `stepNumber`, the checkpoint already saved if one is configured:
  /// writes the losses so far, says what it wrote, and returns the exit
  /// status 128 + signal.
  int stopAfterSignal(int64_t signal, int64_t stepNumber);
  bool fail(const std::string &message) { return errors.fail(message); }

  const TrainerOptions &options;
  GradientSource *source;
  Communicator &comm;
  StepProfile *profile;
  int rank, world;
  RunError errors;
  ShardedState state;
  std::unique_ptr<UpdateBackend> backend;
  CheckpointStore checkpoints;
  MicroBatchSchedule schedule;
  /// Per group, the tree sum of this rank's micro-batch gradients.
  std::vector<TreeSum> sums;
  /// The step's micro-batch losses, summed in the same tree.
  ValueTreeSum stepLosses;
  TrainerCounters counters;
  int exitCode = 0;

  // What the run has done and reports.
  int64_t startStep = 0, tokensPerStep = 0;
  /// The step of the last checkpoint this run saved (0: none yet).
  int64_t lastSavedStep = 0;
  bool evaluating = false;
  Clock::time_point runStart;
  StepTimes times;
  LossHistory history;
  MetricsFile metrics;
};

} // namespace

int Trainer::run() {
  if (!openBackend() || !loadModel() || !initialiseState() || !resume() ||
      !claimCheckpointFolder() || !prepareGradients() || !openMetrics())
    return exitCode;
  // From here a SIGINT or SIGTERM ends the run after the step in progress,
  // with what it has written so far (stopAfterSignal).
  StopSignals signals;
  runStart = Clock::now();
  for (int64_t stepNumber = startStep + 1; stepNumber <= options.schedule.steps;
       ++stepNumber)
    if (!trainStep(stepNumber))
      return exitCode;
  return finishRun();
}

bool Trainer::stop(bool ok) {
  bool all = comm.allAgree(ok);
  if (!ok)
    std::fprintf(stderr, "mantissa-run: error: %s%s\n",
                 world > 1 ? ("rank " + std::to_string(rank) + ": ").c_str()
                           : "",
                 errors.message().c_str());
  else if (!all && rank == 0 && errors.empty())
    std::fprintf(stderr, "mantissa-run: error: another rank failed\n");
  exitCode = all ? 0 : 1;
  return false;
}

/// The update runs on the host, or on this rank's GPU, opened before the
/// artifact is read so that a machine without one fails first.
bool Trainer::openBackend() {
  if (source && source->runsOnDevice() && options.device.kind == "cpu")
    return stop(fail("the training step was compiled for the GPU; it needs "
                     "--device cuda"));
  if (options.device.kind == "cpu") {
    backend = createHostUpdate(state, options.optimizer, comm, errors);
    return true;
  }
  // "gpu" is the spelling of earlier versions.
  if (!options.device.onGpu())
    return stop(fail("unknown --device '" + options.device.kind +
                     "' (expected cpu or cuda)"));
  backend = openDeviceUpdate(state, options.optimizer, comm, errors);
  return backend ? true : stop(false);
}

/// The artifact, cut over the ranks, and a --save-checkpoint folder that
/// holds no other model's checkpoints.
bool Trainer::loadModel() {
  std::string loadError;
  if (!Artifact::load(options.model.artifactDir, state.artifact, loadError))
    return stop(fail(loadError));
  if (!comm.allAgree(
          state.setUp(world == 1 && schedule.microBatchesPerStep() == 1)))
    return stop(errors.empty());
  // The one per-step memory that grows with --grad-accum, checked before
  // the first step allocates it.
  int64_t gradientBytes = 0;
  for (const GroupState &group : state.groups)
    gradientBytes += group.fullGrad.size();
  std::string memoryError;
  if (!comm.allAgree(!source || !source->splitsSteps() ||
                     checkGradAccumMemory(options.schedule.gradAccum,
                                          gradientBytes, availableMemoryBytes(),
                                          memoryError) ||
                     fail(memoryError)))
    return stop(errors.empty());
  for (GroupState &group : state.groups) {
    GroupState *target = &group;
    sums.emplace_back(1, group.fullGrad.size(),
                      [target](uint8_t *accumulate, const uint8_t *value) {
                        ShardedState::addGradients(*target, accumulate, value,
                                                   0, target->fullGrad.size());
                      });
  }
  // The folder is locked before any checkpoint in it is read.
  if (!comm.allAgree(checkpoints.lockFolder() && checkpoints.checkFolder()))
    return stop(errors.empty());
  return true;
}

/// Every member's parameter and master from --weights, where it holds the
/// member (as `mantissa-run MODEL.pt2 --weights` replaces the archive's,
/// e.g. to start from the same state as a reference run), else from the
/// artifact's weights.safetensors.
bool Trainer::initialiseState() {
  std::string loadError;
  const std::string &weightsPath = options.model.weightsPath;
  SafeTensorsFile weights, given;
  if (!SafeTensorsFile::read(state.artifact.weightsPath(), weights, loadError))
    return stop(fail(loadError));
  if (!weightsPath.empty() &&
      !SafeTensorsFile::read(weightsPath, given, loadError))
    return stop(fail("--weights: " + loadError));
  if (!weightsPath.empty() && !source) {
    // With a step, its source checked the file against the step's
    // parameters and buffers; with --grads the state is the members.
    std::vector<std::string> members;
    for (const ArtifactGroup &group : state.artifact.groups())
      for (const ArtifactMember &member : group.members)
        members.push_back(member.fqn);
    if (!checkStateCoverage(given, weightsPath, members, {},
                            options.model.allowPartialWeights, loadError))
      return stop(fail(loadError));
  }
  // A NaN or Inf would be noticed only after --max-skips skipped steps.
  for (const HostTensor &tensor : given.tensors())
    if (!checkFiniteTensor(tensor, weightsPath, loadError))
      return stop(fail(loadError));
  std::map<std::string, const HostTensor *> initial;
  for (const ArtifactGroup &group : state.artifact.groups())
    for (const ArtifactMember &member : group.members) {
      const HostTensor *tensor = given.find(member.fqn);
      const std::string &file =
          tensor ? weightsPath : state.artifact.weightsPath();
      if (!tensor)
        tensor = weights.find(member.fqn);
      if (!tensor)
        return stop(fail(file + ": no initial value for '" + member.fqn + "'"));
      if (tensor->shape != member.shape || !isFloatingPoint(tensor->dtype))
        return stop(fail(file + ": the initial value of '" + member.fqn +
                         "' has dtype " +
                         std::string(safeTensorsDTypeName(tensor->dtype)) +
                         " and shape " + shapeText(tensor->shape) +
                         ", expected a floating-point tensor of shape " +
                         shapeText(member.shape)));
      if (!checkFiniteTensor(*tensor, file, loadError))
        return stop(fail(loadError));
      initial[member.fqn] = tensor;
    }
  state.initialiseFromWeights(initial);
  return true;
}

/// `--resume` (or `--verify-checkpoint`, which stops here): the state,
/// counters and data position of a checkpoint.
bool Trainer::resume() {
  const CheckpointOptions &given = options.checkpoints;
  std::string dir =
      !given.verifyDir.empty() ? given.verifyDir : given.resumeDir;
  if (dir.empty())
    return true;
  std::vector<std::string> warnings;
  bool ok = checkpoints.load(dir, hyperparametersJson(), startStep, counters,
                             warnings);
  schedule.restore(counters.microBatchesDone);
  for (const std::string &warning : warnings)
    std::fprintf(stderr, "mantissa-run: warning: %s\n", warning.c_str());
  if (!comm.allAgree(ok))
    return stop(ok);
  if (!given.verifyDir.empty()) {
    if (rank == 0)
      std::printf("checkpoint %s: step %lld loads\n", dir.c_str(),
                  (long long)startStep);
    return stop(true);
  }
  if (startStep > options.schedule.steps)
    return stop(fail(dir + ": the checkpoint is at step " +
                     std::to_string(startStep) + ", past --steps " +
                     std::to_string(options.schedule.steps)));
  return true;
}

/// The --save-checkpoint folder becomes this run's (CheckpointStore.h): a
/// new run draws an identity, a resumed one continues the checkpoint's.
bool Trainer::claimCheckpointFolder() {
  if (options.checkpoints.saveDir.empty())
    return true;
  if (options.checkpoints.resumeDir.empty())
    counters.runId = CheckpointStore::newRunId();
  std::vector<std::string> warnings;
  bool ok = checkpoints.claimFolder(counters.runId, warnings);
  for (const std::string &warning : warnings)
    std::fprintf(stderr, "mantissa-run: warning: %s\n", warning.c_str());
  if (!comm.allAgree(ok))
    return stop(ok);
  return true;
}

/// Where each step's gradients come from: the source, or the --grads file
/// loaded once; then the state moves where the update runs.
bool Trainer::prepareGradients() {
  if (source) {
    // Gradients come from the step, each step.
  } else if (options.model.gradsPath.empty()) {
    return stop(fail("--grads is required"));
  } else if (!comm.allAgree(state.loadGrads(options.model.gradsPath))) {
    return stop(errors.empty());
  }
  if (options.device.onGpu() && !comm.allAgree(backend->prepare(source)))
    return stop(errors.empty());
  return true;
}

bool Trainer::openMetrics() {
  std::string openError;
  if (rank == 0 && !options.outputs.metricsPath.empty() &&
      !metrics.open(options.outputs.metricsPath, openError))
    return stop(fail(openError));
  if (!comm.allAgree(errors.empty()))
    return stop(false);
  if (source)
    tokensPerStep =
        source->tokensPerMicroBatch() * schedule.microBatchesPerStep();
  if (rank == 0 && !options.device.threads.empty())
    std::printf("threads: %s\n", options.device.threads.c_str());
  if (source && rank == 0 && options.schedule.microBatch > 0)
    std::printf("batch: micro-batch %lld x grad-accum %lld x world %d = "
                "global batch %lld\n",
                (long long)options.schedule.microBatch,
                (long long)options.schedule.gradAccum, world,
                (long long)(options.schedule.microBatch *
                            schedule.microBatchesPerStep()));
  evaluating =
      options.eval.every > 0 && source && source->validationMicroBatches() > 0;
  return true;
}

/// One step, with what follows it: the tripwire after the first,
/// evaluation, the progress line and metrics, the stop after too many
/// skips or a signal, and the checkpoint.
bool Trainer::trainStep(int64_t stepNumber) {
  auto begin = Clock::now();
  StepRecord record;
  if (!comm.allAgree(step(stepNumber, record)))
    return stop(errors.empty());
  double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  times.add(seconds);
  if (profile)
    profile->endStep(seconds);
  if (times.steps == 1 &&
      !comm.allAgree(state.tripwire([&](size_t group, Role role) {
        return backend->residentBytes(group, role);
      })))
    return stop(errors.empty());
  if (evaluating && stepNumber % options.eval.every == 0) {
    record.evaluated = true;
    if (!evaluate(record.evalLoss))
      return stop(false);
    history.evals.push_back({stepNumber, record.evalLoss});
  }
  record.seconds = seconds;
  record.tokens = tokensPerStep;
  record.tokensPerSecond = double(tokensPerStep) / std::max(seconds, 1e-9);
  history.losses.push_back(record.loss);
  if (rank == 0) {
    double elapsed =
        std::chrono::duration<double>(Clock::now() - runStart).count();
    printStepLine(record, options.schedule.steps,
                  double(times.steps) / std::max(elapsed, 1e-9), tokensPerStep,
                  counters.consecutiveSkips);
    std::string writeError;
    if (metrics.isOpen() && !metrics.write(record, writeError))
      return stop(fail(writeError));
  }
  if (counters.consecutiveSkips >= options.optimizer.maxSkips)
    return stop(
        fail("step " + std::to_string(stepNumber) + ": " +
             std::to_string(counters.consecutiveSkips) +
             " consecutive steps had a non-finite loss or gradient norm "
             "(--max-skips " +
             std::to_string(options.optimizer.maxSkips) + "); stopping " +
             (options.checkpoints.saveDir.empty()
                  ? std::string("(no --save-checkpoint: nothing was saved)")
              : lastSavedStep ? "with the last checkpoint, step " +
                                    std::to_string(lastSavedStep) + " in " +
                                    options.checkpoints.saveDir + ", intact"
                              : "before the first checkpoint of " +
                                    options.checkpoints.saveDir + " was due")));
  // Every rank stops at the same step: the first rank's signal counts.
  int64_t signal = comm.allMax(int64_t(StopSignals::pending()));
  const CheckpointOptions &saving = options.checkpoints;
  bool saveNow = !saving.saveDir.empty() && saving.saveEvery > 0 &&
                 (stepNumber % saving.saveEvery == 0 ||
                  stepNumber == options.schedule.steps || signal);
  if (saveNow) {
    if (options.device.onGpu() && !comm.allAgree(backend->copyStateToHost()))
      return stop(errors.empty());
    if (!checkpoints.save(stepNumber, trainerJson()))
      return stop(false);
    lastSavedStep = stepNumber;
  }
  if (signal) {
    exitCode = stopAfterSignal(signal, stepNumber);
    return false;
  }
  return true;
}

/// The summary, the report, the final parameters and the losses (only a
/// complete run leaves losses behind).
int Trainer::finishRun() {
  if (rank == 0 && times.steps > 0)
    printRunSummary(times, counters.skippedSteps, history);
  if (profile) {
    std::string line = profile->report(rank, world);
    if (!line.empty())
      std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  if (options.outputs.memoryReport)
    reportMemory();
  if (options.device.onGpu() && !comm.allAgree(backend->copyStateToHost()))
    return stop(errors.empty()), exitCode;
  if (!options.outputs.finalParamsPath.empty() &&
      !comm.allAgree(
          state.writeFinalParams(comm, options.outputs.finalParamsPath)))
    return stop(errors.empty()), exitCode;
  std::string writeError;
  const std::string &lossesPath = options.outputs.lossesPath;
  if (rank == 0 && !lossesPath.empty() &&
      (!writeFileAtomically(lossesPath, lossesJson(history.losses),
                            writeError) ||
       (!history.losses.empty() &&
        !writeFileAtomically(replaceExtension(lossesPath, ".svg"),
                             lossPlotSvg(history.losses, history.evals),
                             writeError))))
    return stop(fail(writeError)), exitCode;
  return stop(true), exitCode;
}

bool Trainer::computeGradients(int64_t stepNumber) {
  std::vector<GradientSource::Member> members;
  if (!backend->sourceMembers(source, members))
    return false;
  std::string sourceError;
  if (!source->computeGradients(stepNumber, members, sourceError))
    return fail(sourceError);
  return true;
}

bool Trainer::step(int64_t stepNumber, StepRecord &record) {
  record.step = stepNumber;
  record.seed = options.random.seed;
  record.lr = learningRate(options.lrSchedule(), stepNumber - 1);
  record.gradNorm = std::nan("");
  if (!microBatchGradients(stepNumber, record.loss) || !combineGradients())
    return false;
  {
    StepProfile::Section timing(profile, StepPhase::MeanAndNorm);
    if (!state.meanAndNorm(comm, schedule.microBatchesPerStep(),
                           record.gradNorm))
      return false;
  }
  // Given gradients (--grads) come without a loss.
  bool lossKnown = source != nullptr;
  if ((lossKnown && !std::isfinite(record.loss)) ||
      !std::isfinite(record.gradNorm)) {
    // Every rank sees the same loss and norm, so all skip together.
    record.skipped = true;
    ++counters.skippedSteps;
    ++counters.consecutiveSkips;
    return true;
  }
  counters.consecutiveSkips = 0;
  // torch.nn.utils.clip_grad_norm_: the coefficient in fp32, clamped at 1;
  // the kernels multiply each gradient by it as they read it.
  UpdateStep update;
  update.lr = record.lr;
  if (options.optimizer.clipGradNorm > 0)
    update.gradScale =
        std::min(1.0f, float(options.optimizer.clipGradNorm) /
                           (float(record.gradNorm) + float(1e-6)));
  update.optimizerStep = ++counters.optimizerStep;
  StepProfile::Section timing(profile, StepPhase::Update);
  return backend->update(update);
}

bool Trainer::microBatchGradients(int64_t stepNumber, double &loss) {
  // Rank r evaluates its micro-batches of the step's M (MicroBatchSchedule);
  // a fixed batch (or --grads) is one micro-batch, on rank 0.
  std::vector<SumNode> ranges = schedule.stepRanges();
  SumNode mine = ranges[size_t(rank)];
  int64_t total = schedule.microBatchesPerStep();
  // The losses are summed in the gradients' tree: O(log K) doubles, where a
  // vector of the step's M losses grew with --grad-accum (8 GB at 10^9).
  stepLosses.reset(total);
  for (TreeSum &sum : sums)
    sum.reset(total);
  std::vector<GroupState> &groups = state.groups;
  bool ok = true;
  std::string sourceError;
  for (int64_t m = mine.begin; ok && m < mine.end; ++m) {
    if (source) {
      StepProfile::Section timing(profile, StepPhase::MicroBatches);
      ok = source->selectMicroBatch(schedule.microBatch(stepNumber, m),
                                    sourceError) ||
           fail(sourceError);
      ok =
          ok && computeGradients(stepNumber) && backend->fetchGradients(source);
      stepLosses.push(m, ok ? source->lastLoss() : std::nan(""));
    } else {
      // Given gradients (--grads) come without a loss.
      stepLosses.push(m, std::nan(""));
    }
    // Otherwise (--grads) fullGrad holds the file's gradient. A rank's one
    // micro-batch is combined from there; several are summed first.
    if (mine.end - mine.begin > 1) {
      StepProfile::Section summing(profile, StepPhase::LocalSums);
      for (size_t g = 0; ok && g < groups.size(); ++g)
        sums[g].push({m, m + 1}, groups[g].fullGrad.data());
    }
  }
  bool all;
  {
    StepProfile::Section timing(profile, StepPhase::Waiting);
    all = comm.allAgree(ok);
  }
  if (!all)
    return errors.empty() ? fail("another rank failed") : false;
  schedule.finishStep();

  std::string collectiveError;
  double lossSum = 0;
  StepProfile::Section timing(profile, StepPhase::Combination);
  if (!stepLosses.finish(comm, ranges, lossSum, collectiveError))
    return fail("losses: " + collectiveError);
  loss = lossSum / double(total);
  return true;
}

bool Trainer::combineGradients() {
  std::vector<SumNode> ranges = schedule.stepRanges();
  SumNode mine = ranges[size_t(rank)];
  std::string collectiveError;
  StepProfile::Section timing(profile, StepPhase::Combination);
  for (size_t g = 0; g < state.groups.size(); ++g) {
    GroupState &group = state.groups[g];
    // One rank's one micro-batch is the sum, already where the optimizer
    // reads it (GroupState::gradInPlace).
    if (group.gradInPlace)
      continue;
    auto add = [&group](uint8_t *acc, const uint8_t *value, int64_t first,
                        int64_t bytes) {
      ShardedState::addGradients(group, acc, value, first, bytes);
    };
    std::vector<const uint8_t *> local;
    if (mine.end - mine.begin == 1)
      local.push_back(group.fullGrad.data());
    else
      for (size_t n = 0; n < sums[g].size(); ++n)
        local.push_back(sums[g].value(n));
    if (!combineAcrossRanks(comm, local, ranges, schedule.microBatchesPerStep(),
                            group.gradCuts, add, group.shardGrad(),
                            collectiveError))
      return fail("group '" + group.group->name + "': " + collectiveError);
  }
  return true;
}

bool Trainer::evaluate(double &loss) {
  std::vector<GradientSource::Member> members;
  bool ready = backend->sourceMembers(source, members);
  return evaluateValidationLoss(*source, members, ready, schedule,
                                options.eval.batches, comm, errors, loss);
}

json Trainer::hyperparametersJson() const {
  const OptimizerOptions &optimizer = options.optimizer;
  json hyperparameters = {
      {"lr", optimizer.lr},
      {"lr_schedule", lrScheduleName(optimizer.lrScheduleKind)},
      {"warmup_steps", optimizer.warmupSteps},
      {"min_lr_ratio", optimizer.minLrRatio},
      {"decay_steps", optimizer.decaySteps},
      {"betas", {optimizer.beta1, optimizer.beta2}},
      {"eps", optimizer.eps},
      {"weight_decay", optimizer.weightDecay},
      {"clip_grad_norm", optimizer.clipGradNorm},
      {"micro_batches_per_step", schedule.microBatchesPerStep()},
      {"data", options.data.paths},
      {"shuffle",
       options.data.shuffleSeed ? json(*options.data.shuffleSeed) : json()},
      {"seed", options.random.seed}};
  // A resume says when the global batch changes (CheckpointStore).
  if (options.schedule.microBatch > 0) {
    hyperparameters["micro_batch"] = options.schedule.microBatch;
    hyperparameters["global_batch"] =
        options.schedule.microBatch * schedule.microBatchesPerStep();
  }
  // The total only shapes a decaying schedule.
  if (optimizer.lrScheduleKind != LrScheduleKind::Constant)
    hyperparameters["steps"] = options.schedule.steps;
  return hyperparameters;
}

json Trainer::trainerJson() const {
  return {{"optimizer_step", counters.optimizerStep},
          {"consecutive_skips", counters.consecutiveSkips},
          {"skipped_steps", counters.skippedSteps},
          {"micro_batches_done", schedule.microBatchesDone()},
          {"hyperparameters", hyperparametersJson()}};
}

void Trainer::reportMemory() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf("memory: rank %d/%d peak resident %lld bytes (optimizer state "
              "shard %lld bytes), max RSS %lld KiB\n",
              rank, world, (long long)peakBytes,
              (long long)state.optimizerStateBytes(),
              (long long)usage.ru_maxrss);
  backend->reportDevice();
  if (times.steps)
    std::printf("time: rank %d/%d %lld %s steps on the %s in %.3f ms "
                "(%.3f ms per step)\n",
                rank, world, (long long)times.steps,
                source ? "training" : "update", backend->processor(),
                times.seconds * 1e3, times.seconds * 1e3 / double(times.steps));
  backend->reportKernels(times.steps);
  std::fflush(stdout);
}

int Trainer::stopAfterSignal(int64_t signal, int64_t stepNumber) {
  const OutputOptions &outputs = options.outputs;
  std::string writeError;
  bool ok = true;
  std::string wrote;
  if (rank == 0 && !outputs.lossesPath.empty()) {
    ok = writeFileAtomically(outputs.lossesPath, lossesJson(history.losses),
                             writeError) &&
         writeFileAtomically(replaceExtension(outputs.lossesPath, ".svg"),
                             lossPlotSvg(history.losses, history.evals),
                             writeError);
    if (ok)
      wrote += ", the losses so far in " + outputs.lossesPath;
  }
  if (!outputs.metricsPath.empty())
    wrote += ", the metrics in " + outputs.metricsPath;
  const std::string &saveDir = options.checkpoints.saveDir;
  if (!saveDir.empty())
    wrote += ", a checkpoint of step " + std::to_string(stepNumber) + " in " +
             saveDir + " (--resume " + saveDir + " continues)";
  if (rank == 0) {
    std::fflush(stdout);
    if (!ok)
      std::fprintf(stderr, "mantissa-run: error: %s\n", writeError.c_str());
    std::fprintf(stderr,
                 "mantissa-run: stopped by %s after step %lld of %lld%s; no "
                 "final parameters written\n",
                 signalName(signal), (long long)stepNumber,
                 (long long)options.schedule.steps, wrote.c_str());
  }
  comm.allAgree(ok);
  return 128 + int(signal);
}

int mlir::mantissa::rt::runUpdate(const TrainerOptions &options,
                                  Communicator &communicator) {
  if (!options.outputs.profile) {
    Trainer trainer(options, communicator, nullptr);
    return trainer.run();
  }
  StepProfile profile;
  TimedCommunicator timed(communicator, profile);
  Trainer trainer(options, timed, &profile);
  return trainer.run();
}
