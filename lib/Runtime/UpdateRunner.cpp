//===- UpdateRunner.cpp - The trainer: steps across ranks
//------------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The runner's set-up, each step (micro-batch gradients, their exact
// combination, mean, norm, clipping, the CPU update), evaluation, the
// tripwire, final parameters and the run loop. The GPU update, checkpoints
// and the flags live beside it (Trainer.h).
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#include "Trainer.h"
#include "mantissa/Format/AdamWScalars.h"
#include "mantissa/Runtime/CommunicatorNCCL.h"
#include "mantissa/Runtime/StopSignals.h"
#include "mantissa/Runtime/Tripwire.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace mlir::mantissa::rt;
using namespace mlir::mantissa::rt::detail;
using mlir::mantissa::AdamWStepScalars;
using mlir::mantissa::computeAdamWStepScalars;

namespace {
const char *signalName(int64_t signal) {
  return signal == SIGINT    ? "SIGINT"
         : signal == SIGTERM ? "SIGTERM"
                             : "a signal";
}
} // namespace

bool Runner::setUp() {
  for (const ArtifactGroup &group : artifact.groups()) {
    GroupState state;
    state.group = &group;
    std::tie(state.firstTile, state.endTile) = shardTiles(group, rank, world);
    for (unsigned role = 0; role < kNumRoles; ++role)
      state.shard[role] = tileRangeBytes(group, artifact.tileSize(), Role(role),
                                         state.firstTile, state.endTile);
    for (int r = 0; r < world; ++r) {
      auto [a, b] = shardTiles(group, r, world);
      state.paramRanges.push_back(
          tileRangeBytes(group, artifact.tileSize(), Role::Param, a, b));
      state.masterRanges.push_back(
          tileRangeBytes(group, artifact.tileSize(), Role::Master, a, b));
      // Rank r receives from the first grad byte of its tiles (or of any
      // later tile) up to the next rank's cut: a partition of the buffer.
      ByteRange rest = tileRangeBytes(group, artifact.tileSize(), Role::Grad, a,
                                      group.numTiles);
      state.gradCuts.push_back(r == 0 ? 0
                               : rest.size()
                                   ? rest.begin
                                   : group.bufferBytes[unsigned(Role::Grad)]);
    }
    state.gradCuts.push_back(group.bufferBytes[unsigned(Role::Grad)]);
    state.gradCutBegin = state.gradCuts[rank];
    // Members may reduce in different dtypes. Consecutive members with one
    // reduce dtype form a segment of the grad buffer, reduce-scattered in
    // that dtype; rank r receives the part of each segment inside its cut
    // [gradCuts[r], gradCuts[r + 1]). Cuts fall on tile starts inside
    // members, and members start 16-byte aligned, so every part is a whole
    // number of the segment's elements.
    for (const ArtifactMember &member : group.members) {
      // A remainder master in the layout but not in the plan, or the other
      // way round, is refused before any kernel runs: the runner would
      // initialise and checkpoint the wrong encoding (the tripwire checks
      // the other master kinds after the first step).
      const ArtifactTensor *plan = artifact.findTensor(member.fqn);
      std::string problem =
          member.master == MasterKind::Remainder || (plan && plan->masterSplit)
              ? checkPlannedMaster(plan, member.master)
              : std::string();
      if (!problem.empty())
        return fail("group '" + group.name + "': member " + problem);
      int64_t begin = member.gradOffset;
      int64_t end = begin + member.count * int64_t(elementSize(member.grad));
      if (!state.gradSegments.empty() && begin < state.gradSegments.back().end)
        return fail("group '" + group.name + "': member '" + member.fqn +
                    "' overlaps the gradient of the member before it");
      if (state.gradSegments.empty() ||
          state.gradSegments.back().dtype != member.grad)
        state.gradSegments.push_back({member.grad, begin, end});
      else
        state.gradSegments.back().end = end;
    }
    state.fullGrad.allocate(group.bufferBytes[unsigned(Role::Grad)]);
    state.shardGrad.allocate(state.gradCuts[rank + 1] - state.gradCuts[rank]);
    state.fullParam.allocate(group.bufferBytes[unsigned(Role::Param)]);
    for (Role role :
         {Role::Master, Role::ExpAvg, Role::ExpAvgSq, Role::MaxExpAvgSq})
      state.shardState[unsigned(role)].allocate(
          state.shard[unsigned(role)].size());
    for (const ArtifactMember &member : group.members) {
      int64_t from = std::max(state.firstTile, member.firstTile);
      int64_t to = std::min(state.endTile, member.firstTile + member.numTiles);
      MemberSlice slice;
      if (from < to) {
        slice.begin = (from - member.firstTile) * artifact.tileSize();
        slice.end = std::min((to - member.firstTile) * artifact.tileSize(),
                             member.count);
      }
      state.slices.push_back(slice);
    }
    groups.push_back(std::move(state));
  }
  for (GroupState &state : groups) {
    GroupState *target = &state;
    sums.emplace_back(1, state.fullGrad.size(),
                      [target](uint8_t *accumulate, const uint8_t *value) {
                        addGradients(*target, accumulate, value, 0,
                                     target->fullGrad.size());
                      });
  }
  return true;
}

void Runner::initialiseFromWeights(
    const std::map<std::string, const HostTensor *> &initial) {
  for (GroupState &state : groups)
    for (size_t m = 0; m < state.group->members.size(); ++m) {
      const ArtifactMember &member = state.group->members[m];
      const HostTensor *tensor = initial.at(member.fqn);
      if (member.master == MasterKind::Remainder) {
        // The initial value is the master; the parameter its high half.
        std::vector<float> masters(size_t(member.count));
        convertElements(*tensor, 0, member.count,
                        reinterpret_cast<uint8_t *>(masters.data()),
                        DType::F32);
        const MemberSlice &slice = state.slices[m];
        bool held = slice.size() > 0;
        splitMasters(
            masters.data(), member.count,
            state.fullParam.data() + member.paramOffset, slice,
            held ? shardAddress(state, member, Role::Master, slice.begin)
                 : nullptr,
            held ? shardAddress(state, member, Role::ExpAvgSq, slice.begin)
                 : nullptr,
            member.moments);
        continue;
      }
      convertElements(*tensor, 0, member.count,
                      state.fullParam.data() + member.paramOffset,
                      member.param);
      const MemberSlice &slice = state.slices[m];
      if (member.master == MasterKind::FP32 && slice.size())
        convertElements(*tensor, slice.begin, slice.size(),
                        shardAddress(state, member, Role::Master, slice.begin),
                        DType::F32);
    }
}

/// The -0.0 bit pattern of `dtype`: the additive identity that keeps a sum
/// exact (x + -0 == x for every x, including +0).
static void fillNegativeZero(uint8_t *data, int64_t bytes, DType dtype) {
  if (dtype == DType::F32) {
    uint32_t bits = 0x80000000u;
    for (int64_t i = 0; i + 4 <= bytes; i += 4)
      std::memcpy(data + i, &bits, 4);
  } else {
    uint16_t bits = 0x8000u;
    for (int64_t i = 0; i + 2 <= bytes; i += 2)
      std::memcpy(data + i, &bits, 2);
  }
}

bool Runner::loadGrads() {
  // Every rank validates the file (so all report the same error); only rank
  // 0 contributes it to the reduction.
  SafeTensorsFile grads;
  std::string readError;
  if (!SafeTensorsFile::read(options.model.gradsPath, grads, readError))
    return fail(readError);
  for (GroupState &state : groups) {
    for (const ArtifactMember &member : state.group->members)
      fillNegativeZero(state.fullGrad.data() + member.gradOffset,
                       member.count * int64_t(elementSize(member.grad)),
                       member.grad);
    for (const ArtifactMember &member : state.group->members) {
      std::string key = "grad." + member.fqn;
      const HostTensor *tensor = grads.find(key);
      if (!tensor)
        return fail(options.model.gradsPath + ": no gradient '" + key + "'");
      if (tensor->shape != member.shape)
        return fail(options.model.gradsPath + ": gradient '" + key +
                    "' has shape " + shapeText(tensor->shape) + ", expected " +
                    shapeText(member.shape));
      if (!isFloatingPoint(tensor->dtype))
        return fail(options.model.gradsPath + ": gradient '" + key +
                    "' is not a floating-point tensor");
      if (rank == 0)
        convertElements(*tensor, 0, member.count,
                        state.fullGrad.data() + member.gradOffset, member.grad);
    }
  }
  return true;
}

bool Runner::computeGradients(int64_t stepNumber) {
  std::vector<GradientSource::Member> members;
  if (!sourceMembers(members))
    return false;
  std::string sourceError;
  if (!options.gradientSource->computeGradients(stepNumber, members,
                                                sourceError))
    return fail(sourceError);
  return true;
}

bool Runner::sourceMembers(std::vector<GradientSource::Member> &members) {
  bool onDevice = gradientsOnDevice();
  std::string deviceError;
  for (size_t index = 0; index < groups.size(); ++index) {
    GroupState &state = groups[index];
    const uint8_t *fullParam = state.fullParam.data();
    uint8_t *fullGrad = state.fullGrad.data();
    if (onDevice) {
      // The source reads and writes the device's resident buffers.
      fullParam = pointer(deviceGroups[index].fullParam);
      fullGrad = pointer(deviceGroups[index].fullGrad);
    } else if (cuda) {
      // The current parameters live on the device; the host copy is only
      // refreshed for checkpoints, so a host source needs them fetched.
      if (!cuda->download(state.fullParam.data(), deviceGroups[index].fullParam,
                          state.fullParam.size(), deviceError))
        return fail("group '" + state.group->name + "': " + deviceError);
    }
    for (const ArtifactMember &member : state.group->members)
      members.push_back({&member.fqn, &member.shape, member.param,
                         fullParam + member.paramOffset, member.grad,
                         fullGrad + member.gradOffset});
  }
  return true;
}

void Runner::addGradients(const GroupState &state, uint8_t *accumulate,
                          const uint8_t *value, int64_t first, int64_t bytes) {
  for (const GroupState::GradSegment &segment : state.gradSegments) {
    int64_t begin = std::max(segment.begin, first);
    int64_t end = std::min(segment.end, first + bytes);
    if (begin >= end)
      continue;
    accumulateSum(accumulate + (begin - first), value + (begin - first),
                  (end - begin) / int64_t(elementSize(segment.dtype)),
                  segment.dtype);
  }
}

template <typename Visit>
void Runner::forEachShardTile(GroupState &state, Visit visit) {
  const ArtifactGroup &group = *state.group;
  int64_t tileSize = artifact.tileSize();
  size_t m = 0;
  for (int64_t tile = state.firstTile; tile < state.endTile; ++tile) {
    while (m < group.members.size() &&
           tile >= group.members[m].firstTile + group.members[m].numTiles)
      ++m;
    if (m == group.members.size())
      break;
    const ArtifactMember &member = group.members[m];
    int64_t begin = (tile - member.firstTile) * tileSize;
    int64_t end = std::min(begin + tileSize, member.count);
    if (begin >= end)
      continue;
    uint8_t *shard = state.shardGrad.data() + member.gradOffset -
                     state.gradCutBegin +
                     begin * int64_t(elementSize(member.grad));
    visit(tile, shard, member.grad, end - begin);
  }
}

/// All-gathers `values` in place, rank r contributing elements
/// [parts[r].begin, parts[r].end).
static bool allGatherDoubles(Communicator &comm, std::vector<double> &values,
                             const std::vector<SumNode> &parts,
                             std::string &error) {
  std::vector<int64_t> displacements, counts;
  for (const SumNode &part : parts) {
    displacements.push_back(part.begin * 8);
    counts.push_back((part.end - part.begin) * 8);
  }
  return comm.allGather(reinterpret_cast<uint8_t *>(values.data()),
                        displacements, counts, error);
}

bool Runner::meanAndNorm(int64_t divisor, double &norm) {
  double total = 0;
  float divide = float(divisor);
  for (GroupState &state : groups) {
    // One sum of squares per tile: tiles are the same whatever the world
    // size, so the norm is too.
    std::vector<double> tileSums(size_t(state.group->numTiles), 0.0);
    forEachShardTile(
        state, [&](int64_t tile, uint8_t *data, DType dtype, int64_t count) {
          double sum = 0;
          for (int64_t i = 0; i < count; ++i) {
            float value = loadFloatElement(data, i, dtype);
            if (divisor != 1) {
              // torch's p.grad.div_(M), rounded to the gradient's dtype.
              storeFloatElement(data, i, dtype, value / divide);
              value = loadFloatElement(data, i, dtype);
            }
            sum += double(value) * double(value);
          }
          tileSums[size_t(tile)] = sum;
        });
    std::vector<SumNode> tilesOf;
    for (int r = 0; r < world; ++r) {
      auto [a, b] = shardTiles(*state.group, r, world);
      tilesOf.push_back({a, b});
    }
    std::string collectiveError;
    if (!allGatherDoubles(comm, tileSums, tilesOf, collectiveError))
      return fail("gradient norm: " + collectiveError);
    for (double sum : tileSums)
      total += sum;
  }
  norm = std::sqrt(total);
  return true;
}

bool Runner::evaluate(double &loss) {
  GradientSource &source = *options.gradientSource;
  int64_t total = options.eval.batches;
  int64_t perRank = (total + world - 1) / world;
  std::vector<double> values(size_t(total), 0.0);
  SumNode mine = microBatchesOfRank(rank, perRank, total);
  std::vector<GradientSource::Member> members;
  bool ok = sourceMembers(members);
  std::string sourceError;
  for (int64_t m = mine.begin; ok && m < mine.end; ++m)
    ok =
        source.evaluateValidation(m, members, values[size_t(m)], sourceError) ||
        fail("evaluation: " + sourceError);
  if (!comm.allAgree(ok))
    return error.empty() ? fail("another rank failed") : false;
  std::vector<SumNode> parts;
  for (int r = 0; r < world; ++r)
    parts.push_back(microBatchesOfRank(r, perRank, total));
  std::string collectiveError;
  if (!allGatherDoubles(comm, values, parts, collectiveError))
    return fail("evaluation: " + collectiveError);
  double sum = 0;
  for (double value : values)
    sum += value;
  loss = sum / double(total);
  return true;
}

bool Runner::step(int64_t stepNumber, StepRecord &record) {
  double lr = learningRate(options.lrSchedule(), stepNumber - 1);
  record.step = stepNumber;
  record.lr = lr;
  GradientSource *source = options.gradientSource;
  record.gradNorm = std::nan("");
  // Rank r evaluates micro-batches [rK, rK + K) of the step's M = W * K; a
  // fixed batch (or --grads) is one micro-batch, on rank 0.
  bool split = source && source->splitsSteps();
  int64_t perRank = split ? options.schedule.gradAccum : 1;
  int64_t total = split ? perRank * world : 1;
  std::vector<SumNode> ranges;
  for (int r = 0; r < world; ++r)
    ranges.push_back(microBatchesOfRank(r, perRank, total));
  std::vector<double> stepLosses(size_t(total), std::nan(""));
  for (TreeSum &sum : sums)
    sum.reset(total);
  bool ok = true;
  std::string sourceError;
  for (int64_t m = ranges[rank].begin; ok && m < ranges[rank].end; ++m) {
    if (source) {
      ok = source->selectMicroBatch(
               {stepNumber, m, total, microBatchesDone + m}, sourceError) ||
           fail(sourceError);
      ok = ok && computeGradients(stepNumber) && fetchDeviceGradients();
      stepLosses[size_t(m)] = source->lastLoss();
    }
    // Otherwise (--grads) fullGrad holds the file's gradient. A rank's one
    // micro-batch is combined from there; several are summed first.
    if (ranges[rank].end - ranges[rank].begin > 1)
      for (size_t g = 0; ok && g < groups.size(); ++g)
        sums[g].push({m, m + 1}, groups[g].fullGrad.data());
  }
  if (!comm.allAgree(ok))
    return error.empty() ? fail("another rank failed") : false;
  microBatchesDone += total;

  std::string collectiveError;
  if (!allGatherDoubles(comm, stepLosses, ranges, collectiveError))
    return fail("losses: " + collectiveError);
  double lossSum = 0;
  for (double loss : stepLosses)
    lossSum += loss;
  record.loss = lossSum / double(total);
  for (size_t g = 0; g < groups.size(); ++g) {
    GroupState &state = groups[g];
    auto add = [&state](uint8_t *acc, const uint8_t *value, int64_t first,
                        int64_t bytes) {
      addGradients(state, acc, value, first, bytes);
    };
    std::vector<const uint8_t *> local;
    if (ranges[rank].end - ranges[rank].begin == 1)
      local.push_back(state.fullGrad.data());
    else
      for (size_t n = 0; n < sums[g].size(); ++n)
        local.push_back(sums[g].value(n));
    if (!combineAcrossRanks(comm, local, ranges, total, state.gradCuts, add,
                            state.shardGrad.data(), collectiveError))
      return fail("group '" + state.group->name + "': " + collectiveError);
  }
  double norm = 0;
  if (!meanAndNorm(total, norm))
    return false;
  record.gradNorm = norm;
  // Given gradients (--grads) come without a loss.
  bool lossKnown = source != nullptr;
  if ((lossKnown && !std::isfinite(record.loss)) || !std::isfinite(norm)) {
    // Every rank sees the same loss and norm, so all skip together.
    record.skipped = true;
    ++skippedSteps;
    ++consecutiveSkips;
    return true;
  }
  consecutiveSkips = 0;
  // torch.nn.utils.clip_grad_norm_: the coefficient in fp32, clamped at 1;
  // the kernels multiply each gradient by it as they read it.
  float gradScale = 1.0f;
  if (options.optimizer.clipGradNorm > 0)
    gradScale = std::min(1.0f, float(options.optimizer.clipGradNorm) /
                                   (float(norm) + float(1e-6)));
  ++optimizerStep;
  if (cuda)
    return updateOnDevice(lr, gradScale);
  for (GroupState &state : groups) {
    const ArtifactGroup &group = *state.group;
    group.kernel(
        state.kernelPointer(Role::Grad), state.kernelPointer(Role::Param),
        state.kernelPointer(Role::Master), state.kernelPointer(Role::ExpAvg),
        state.kernelPointer(Role::ExpAvgSq),
        state.kernelPointer(Role::MaxExpAvgSq), lr, options.optimizer.beta1,
        options.optimizer.beta2, options.optimizer.eps,
        options.optimizer.weightDecay, optimizerStep, gradScale, rank, world);
    std::vector<int64_t> displacements, byteCounts;
    for (const ByteRange &range : state.paramRanges) {
      displacements.push_back(range.begin);
      byteCounts.push_back(range.size());
    }
    if (!comm.allGather(state.fullParam.data(), displacements, byteCounts,
                        collectiveError))
      return fail("group '" + group.name + "': " + collectiveError);
  }
  return true;
}

bool Runner::tripwire() {
  for (GroupState &state : groups)
    for (size_t m = 0; m < state.group->members.size(); ++m) {
      const ArtifactMember &member = state.group->members[m];
      ResidentState resident;
      resident.fqn = member.fqn;
      resident.shape = member.shape;
      resident.count = member.count;
      resident.param = member.param;
      resident.grad = member.grad;
      resident.moments = member.moments;
      resident.master = member.master;
      resident.amsgrad = state.group->amsgrad;
      const MemberSlice &slice = state.slices[m];
      resident.sliceBegin = slice.begin;
      resident.sliceEnd = slice.end;
      // The bytes of the slice that the buffer of each state role really
      // covers on this rank (on the device when the state lives there).
      for (Role role :
           {Role::Master, Role::ExpAvg, Role::ExpAvgSq, Role::MaxExpAvgSq}) {
        int64_t width = member.elementBytes(role, state.group->amsgrad);
        int64_t first = member.byteOffset(role) + slice.begin * width;
        int64_t last = member.byteOffset(role) + slice.end * width;
        int64_t held = residentBytes(state, role);
        int64_t begin = state.shard[unsigned(role)].begin;
        resident.heldBytes[unsigned(role)] = std::max<int64_t>(
            0, std::min(last, begin + held) - std::max(first, begin));
      }
      std::string problem =
          checkResidentState(artifact.findTensor(member.fqn), resident);
      if (!problem.empty())
        return fail("tripwire after the first step: " + problem);
    }
  return true;
}

bool Runner::writeFinalParams() {
  std::vector<HostTensor> out;
  std::string collectiveError;
  for (GroupState &state : groups) {
    // The masters, gathered (into a full-size buffer) for the fp32 values.
    Buffer fullMaster(state.group->bufferBytes[unsigned(Role::Master)]);
    const ByteRange &mine = state.shard[unsigned(Role::Master)];
    if (mine.size())
      std::memcpy(fullMaster.data() + mine.begin,
                  state.shardState[unsigned(Role::Master)].data(), mine.size());
    std::vector<int64_t> displacements, counts;
    for (const ByteRange &range : state.masterRanges) {
      displacements.push_back(range.begin);
      counts.push_back(range.size());
    }
    if (!comm.allGather(fullMaster.data(), displacements, counts,
                        collectiveError))
      return fail(collectiveError);
    // Remainder masters keep their tie marks in exp_avg_sq: gathered too.
    bool anyRemainder = false;
    for (const ArtifactMember &member : state.group->members)
      anyRemainder |= member.master == MasterKind::Remainder;
    Buffer fullExpAvgSq(
        anyRemainder ? state.group->bufferBytes[unsigned(Role::ExpAvgSq)] : 0);
    if (anyRemainder) {
      const ByteRange &held = state.shard[unsigned(Role::ExpAvgSq)];
      if (held.size())
        std::memcpy(fullExpAvgSq.data() + held.begin,
                    state.shardState[unsigned(Role::ExpAvgSq)].data(),
                    held.size());
      std::vector<int64_t> begins, sizes;
      for (int r = 0; r < world; ++r) {
        auto [a, b] = shardTiles(*state.group, r, world);
        ByteRange range = tileRangeBytes(*state.group, artifact.tileSize(),
                                         Role::ExpAvgSq, a, b);
        begins.push_back(range.begin);
        sizes.push_back(range.size());
      }
      if (!comm.allGather(fullExpAvgSq.data(), begins, sizes, collectiveError))
        return fail(collectiveError);
    }
    for (const ArtifactMember &member : state.group->members) {
      HostTensor tensor;
      tensor.name = member.fqn;
      tensor.dtype = DType::F32;
      tensor.shape = member.shape;
      tensor.bytes.resize(member.count * 4);
      if (member.master == MasterKind::FP32)
        std::memcpy(tensor.bytes.data(),
                    fullMaster.data() + member.masterOffset,
                    tensor.bytes.size());
      else if (member.master == MasterKind::Remainder)
        joinSplitMasters(member, state.fullParam.data(),
                         fullMaster.data() + member.masterOffset,
                         fullExpAvgSq.data() + member.momentsOffset, 0,
                         member.count,
                         reinterpret_cast<float *>(tensor.bytes.data()));
      else
        for (int64_t i = 0; i < member.count; ++i)
          storeFloatElement(
              tensor.bytes.data(), i, DType::F32,
              loadFloatElement(state.fullParam.data() + member.paramOffset, i,
                               member.param));
      out.push_back(std::move(tensor));
    }
  }
  if (rank != 0)
    return true;
  std::string writeError;
  if (!writeSafeTensors(options.outputs.finalParamsPath, out,
                        {{"format", "pt"}}, writeError))
    return fail(writeError);
  return true;
}

void Runner::reportMemory() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  int64_t state = 0;
  for (GroupState &group : groups)
    for (const Buffer &buffer : group.shardState)
      state += buffer.size();
  std::printf("memory: rank %d/%d peak resident %lld bytes (optimizer state "
              "shard %lld bytes), max RSS %lld KiB\n",
              rank, world, (long long)peakBytes, (long long)state,
              (long long)usage.ru_maxrss);
  if (cuda)
    std::printf("device: rank %d/%d cuda:%d %s, peak device memory %lld "
                "bytes, %s\n",
                rank, world, cuda->ordinal(), cuda->name().c_str(),
                (long long)cuda->peakBytes(),
                world == 1
                    ? "no collectives (one rank)"
                    : ("collectives over " + deviceComm->name()).c_str());
  if (stepsRun)
    std::printf("time: rank %d/%d %lld %s steps on the %s in %.3f ms "
                "(%.3f ms per step)\n",
                rank, world, (long long)stepsRun,
                options.gradientSource ? "training" : "update",
                cuda ? "GPU" : "CPU", stepSeconds * 1e3,
                stepSeconds * 1e3 / double(stepsRun));
  if (stepsRun && cuda) {
    // Bytes the kernels must move per step: every member's gradient read,
    // parameter written, master and moments read and written.
    int64_t bytes = 0;
    for (GroupState &state : groups)
      for (const ArtifactMember &member : state.group->members) {
        bool amsgrad = state.group->amsgrad;
        bytes += member.count *
                 (member.elementBytes(Role::Grad, amsgrad) +
                  member.elementBytes(Role::Param, amsgrad) +
                  2 * (member.elementBytes(Role::Master, amsgrad) +
                       member.elementBytes(Role::ExpAvg, amsgrad) +
                       member.elementBytes(Role::ExpAvgSq, amsgrad) +
                       member.elementBytes(Role::MaxExpAvgSq, amsgrad)));
        if (member.master == MasterKind::None)
          bytes += member.count * member.elementBytes(Role::Param, amsgrad);
      }
    double perStep = kernelSeconds / double(stepsRun);
    std::printf("kernels: rank %d/%d %.3f ms per step, %lld bytes moved per "
                "step, %.1f GB/s\n",
                rank, world, perStep * 1e3, (long long)bytes,
                perStep > 0 ? double(bytes) / perStep / 1e9 : 0.0);
  }
  std::fflush(stdout);
}

int Runner::run() {
  auto finish = [&](bool ok) {
    // Every rank stops together; the first rank with an error reports it.
    bool all = comm.allAgree(ok);
    if (!ok)
      std::fprintf(stderr, "mantissa-run: error: %s%s\n",
                   world > 1 ? ("rank " + std::to_string(rank) + ": ").c_str()
                             : "",
                   error.c_str());
    else if (!all && rank == 0 && error.empty())
      std::fprintf(stderr, "mantissa-run: error: another rank failed\n");
    return all ? 0 : 1;
  };

  if (options.gradientSource && options.gradientSource->runsOnDevice() &&
      options.device.kind == "cpu")
    return fail("the training step was compiled for the GPU; it needs "
                "--device cuda"),
           finish(false);
  if (options.device.kind != "cpu") {
    // "gpu" is the spelling of earlier versions.
    if (options.device.kind != "cuda" && options.device.kind != "gpu")
      return fail("unknown --device '" + options.device.kind +
                  "' (expected cpu or cuda)"),
             finish(false);
    if (!openDevice())
      return finish(false);
  }

  std::string loadError;
  if (!Artifact::load(options.model.artifactDir, artifact, loadError))
    return fail(loadError), finish(false);
  if (!comm.allAgree(setUp()))
    return finish(error.empty());
  if (!comm.allAgree(checkCheckpointFolder()))
    return finish(error.empty());

  // --weights replaces the artifact's initial values tensor by tensor (as
  // `mantissa-run MODEL.pt2 --weights` replaces the archive's), e.g. to
  // start from the same state as a reference run.
  SafeTensorsFile weights, given;
  if (!SafeTensorsFile::read(artifact.weightsPath(), weights, loadError))
    return fail(loadError), finish(false);
  if (!options.model.weightsPath.empty() &&
      !SafeTensorsFile::read(options.model.weightsPath, given, loadError))
    return fail(loadError), finish(false);
  if (!options.model.weightsPath.empty() && !options.gradientSource) {
    // With a step, its source checked the file against the step's
    // parameters and buffers; with --grads the state is the members.
    std::vector<std::string> state;
    for (const ArtifactGroup &group : artifact.groups())
      for (const ArtifactMember &member : group.members)
        state.push_back(member.fqn);
    if (!checkStateCoverage(given, options.model.weightsPath, state, {},
                            options.model.allowPartialWeights, loadError))
      return fail(loadError), finish(false);
  }
  std::map<std::string, const HostTensor *> initial;
  for (const ArtifactGroup &group : artifact.groups())
    for (const ArtifactMember &member : group.members) {
      const HostTensor *tensor = given.find(member.fqn);
      const std::string &file =
          tensor ? options.model.weightsPath : artifact.weightsPath();
      if (!tensor)
        tensor = weights.find(member.fqn);
      if (!tensor)
        return fail(file + ": no initial value for '" + member.fqn + "'"),
               finish(false);
      if (tensor->shape != member.shape || !isFloatingPoint(tensor->dtype))
        return fail(file + ": the initial value of '" + member.fqn +
                    "' has dtype " +
                    std::string(safeTensorsDTypeName(tensor->dtype)) +
                    " and shape " + shapeText(tensor->shape) +
                    ", expected a floating-point tensor of shape " +
                    shapeText(member.shape)),
               finish(false);
      initial[member.fqn] = tensor;
    }
  initialiseFromWeights(initial);

  int64_t startStep = 0;
  std::string resumeDir = !options.checkpoints.verifyDir.empty()
                              ? options.checkpoints.verifyDir
                              : options.checkpoints.resumeDir;
  if (!resumeDir.empty()) {
    std::vector<std::string> warnings;
    bool ok = loadCheckpoint(resumeDir, startStep, warnings);
    for (const std::string &warning : warnings)
      std::fprintf(stderr, "mantissa-run: warning: %s\n", warning.c_str());
    if (!comm.allAgree(ok))
      return finish(ok);
    if (!options.checkpoints.verifyDir.empty()) {
      if (rank == 0)
        std::printf("checkpoint %s: step %lld loads\n", resumeDir.c_str(),
                    (long long)startStep);
      return finish(true);
    }
    if (startStep > options.schedule.steps)
      return fail(resumeDir + ": the checkpoint is at step " +
                  std::to_string(startStep) + ", past --steps " +
                  std::to_string(options.schedule.steps)),
             finish(false);
  }

  if (options.gradientSource) {
    // Gradients come from the step, each step.
  } else if (options.model.gradsPath.empty()) {
    return fail("--grads is required"), finish(false);
  } else if (!comm.allAgree(loadGrads())) {
    return finish(error.empty());
  }
  if (cuda &&
      !comm.allAgree(prepareDevice() && uploadState() && attachSource()))
    return finish(error.empty());

  if (rank == 0 && !options.outputs.metricsPath.empty() &&
      !metrics.open(options.outputs.metricsPath, loadError))
    return fail(loadError), finish(false);
  if (!comm.allAgree(error.empty()))
    return finish(false);

  // From here a SIGINT or SIGTERM ends the run after the step in progress,
  // with what it has written so far (see stopAfterSignal below).
  StopSignals signals;
  using Clock = std::chrono::steady_clock;
  Clock::time_point runStart = Clock::now();
  int64_t tokensPerStep = 0;
  if (options.gradientSource) {
    int64_t microBatches = options.gradientSource->splitsSteps()
                               ? options.schedule.gradAccum * world
                               : 1;
    tokensPerStep =
        options.gradientSource->tokensPerMicroBatch() * microBatches;
  }
  bool evaluating = options.eval.every > 0 && options.gradientSource &&
                    options.gradientSource->validationMicroBatches() > 0;
  bool first = true;
  for (int64_t stepNumber = startStep + 1; stepNumber <= options.schedule.steps;
       ++stepNumber) {
    auto begin = Clock::now();
    StepRecord record;
    if (!comm.allAgree(step(stepNumber, record)))
      return finish(error.empty());
    double seconds =
        std::chrono::duration<double>(Clock::now() - begin).count();
    stepSeconds += seconds;
    ++stepsRun;
    if (stepsRun > 2) {
      steadySeconds += seconds;
      ++steadySteps;
    }
    if (first && !comm.allAgree(tripwire()))
      return finish(error.empty());
    first = false;
    if (evaluating && stepNumber % options.eval.every == 0) {
      record.evaluated = true;
      if (!evaluate(record.evalLoss))
        return finish(false);
      evalLosses.push_back({stepNumber, record.evalLoss});
    }
    record.seconds = seconds;
    record.tokens = tokensPerStep;
    record.tokensPerSecond = double(tokensPerStep) / std::max(seconds, 1e-9);
    losses.push_back(record.loss);
    if (rank == 0) {
      double elapsed =
          std::chrono::duration<double>(Clock::now() - runStart).count();
      double rate = double(stepsRun) / std::max(elapsed, 1e-9);
      // A non-finite loss reads "nan" or "inf", never "-nan".
      char loss[32];
      if (std::isfinite(record.loss))
        std::snprintf(loss, sizeof(loss), "%.6f", record.loss);
      else
        std::snprintf(loss, sizeof(loss), "%s",
                      std::isnan(record.loss) ? "nan"
                      : record.loss > 0       ? "inf"
                                              : "-inf");
      std::printf("step %lld/%lld  loss %s  lr %.3e", (long long)stepNumber,
                  (long long)options.schedule.steps, loss, record.lr);
      if (std::isfinite(record.gradNorm))
        std::printf("  grad-norm %.4f", record.gradNorm);
      std::printf("  %.2f steps/s", rate);
      if (tokensPerStep)
        std::printf(", %.0f tokens/s", rate * double(tokensPerStep));
      std::printf("  %.1f s left",
                  double(options.schedule.steps - stepNumber) / rate);
      if (record.evaluated)
        std::printf("  eval-loss %.6f", record.evalLoss);
      if (record.skipped)
        std::printf("  SKIPPED (non-finite %s; %lld in a row)",
                    std::isfinite(record.loss) ? "gradient norm" : "loss",
                    (long long)consecutiveSkips);
      std::printf("\n");
      std::fflush(stdout);
      if (metrics.isOpen() && !metrics.write(record, loadError))
        return fail(loadError), finish(false);
    }
    if (consecutiveSkips >= options.optimizer.maxSkips)
      return fail("step " + std::to_string(stepNumber) + ": " +
                  std::to_string(consecutiveSkips) +
                  " consecutive steps had a non-finite loss or gradient "
                  "norm (--max-skips " +
                  std::to_string(options.optimizer.maxSkips) +
                  "); stopping with the last checkpoint intact"),
             finish(false);
    // Every rank stops at the same step: the first rank's signal counts.
    int64_t stop = comm.allMax(int64_t(StopSignals::pending()));
    bool saveNow = !options.checkpoints.saveDir.empty() &&
                   options.checkpoints.saveEvery > 0 &&
                   (stepNumber % options.checkpoints.saveEvery == 0 ||
                    stepNumber == options.schedule.steps || stop);
    if (saveNow) {
      if (cuda && !comm.allAgree(downloadState()))
        return finish(error.empty());
      if (!saveCheckpoint(stepNumber))
        return finish(false);
    }
    if (stop)
      return stopAfterSignal(stop, stepNumber);
  }
  if (rank == 0 && stepsRun > 0) {
    std::printf("trained %lld steps", (long long)stepsRun);
    if (skippedSteps)
      std::printf(" (%lld skipped)", (long long)skippedSteps);
    if (!losses.empty())
      std::printf(", final loss %.6f", losses.back());
    if (!evalLosses.empty())
      std::printf(", final eval loss %.6f", evalLosses.back().second);
    if (steadySteps)
      std::printf("; %.2f ms per step (mean of steps after the first two)",
                  1e3 * steadySeconds / double(steadySteps));
    std::printf("\n");
    std::fflush(stdout);
  }
  if (options.outputs.memoryReport)
    reportMemory();
  if (cuda && !comm.allAgree(downloadState()))
    return finish(error.empty());
  if (!options.outputs.finalParamsPath.empty() &&
      !comm.allAgree(writeFinalParams()))
    return finish(error.empty());
  // Only a complete run leaves losses behind.
  if (rank == 0 && !options.outputs.lossesPath.empty() &&
      (!writeFileAtomically(options.outputs.lossesPath, lossesJson(losses),
                            loadError) ||
       (!losses.empty() &&
        !writeFileAtomically(
            replaceExtension(options.outputs.lossesPath, ".svg"),
            lossPlotSvg(losses, evalLosses), loadError))))
    return fail(loadError), finish(false);
  return finish(true);
}

int Runner::stopAfterSignal(int64_t signal, int64_t stepNumber) {
  std::string writeError;
  bool ok = true;
  std::string wrote;
  if (rank == 0 && !options.outputs.lossesPath.empty()) {
    ok = writeFileAtomically(options.outputs.lossesPath, lossesJson(losses),
                             writeError) &&
         writeFileAtomically(
             replaceExtension(options.outputs.lossesPath, ".svg"),
             lossPlotSvg(losses, evalLosses), writeError);
    if (ok)
      wrote += ", the losses so far in " + options.outputs.lossesPath;
  }
  if (!options.outputs.metricsPath.empty())
    wrote += ", the metrics in " + options.outputs.metricsPath;
  if (!options.checkpoints.saveDir.empty())
    wrote += ", a checkpoint of step " + std::to_string(stepNumber) + " in " +
             options.checkpoints.saveDir + " (--resume " +
             options.checkpoints.saveDir + " continues)";
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
  Runner runner(options, communicator);
  return runner.run();
}
