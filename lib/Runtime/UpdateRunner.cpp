//===- UpdateRunner.cpp - The update path across ranks --------------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// Checkpoint layout (format "mantissa-checkpoint", version 1): one folder
// per checkpoint, CKPT/step-<K>, written as CKPT/step-<K>.tmp and renamed
// into place once complete (the commit point: a kill before it leaves the
// earlier folders intact and a .tmp folder the next save removes). In it:
//
//   step-<k>.rank-<r>-of-<W>.safetensors   one per rank, each written under a
//       temporary name, fsynced and renamed. Keys `<state>/<fqn>` with state
//       param (gather dtype), master (fp32), exp_avg, exp_avg_sq,
//       max_exp_avg_sq (moments dtype): the rank's contiguous element range
//       of the tensor, flat. Metadata: format, step, rank, world_size,
//       `ranges` (JSON: key -> [begin, end) elements) and `plan` (JSON: fqn ->
//       master/gather/reduce/moments).
//   index.json   written last, by rank 0 once every rank has written: step,
//       world_size, plan, shapes, per file its size and ranges, and the
//       trainer's state (`trainer`: AdamW step count, skips, data position,
//       hyperparameters).
//
// `--keep-checkpoints N` removes all but the newest N folders after each
// commit. `--resume CKPT` takes the newest complete step-<K> folder,
// `--resume CKPT/step-<K>` that one; a folder holding index.json itself (the
// flat layout of earlier versions) is read as it is.
//
// Loading keys state by FQN and element range, never by position, so a
// checkpoint of any world size is resharded on load.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/UpdateRunner.h"
#include "mantissa/Conversion/AdamWScalars.h"
#include "mantissa/Runtime/Artifact.h"
#include "mantissa/Runtime/CommunicatorNCCL.h"
#include "mantissa/Runtime/CudaDriver.h"
#include "mantissa/Runtime/GradientCombination.h"
#include "mantissa/Runtime/SafeTensors.h"
#include "mantissa/Runtime/TrainerMetrics.h"
#include "mantissa/Runtime/Tripwire.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cmath>
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
using mlir::mantissa::AdamWStepScalars;
using mlir::mantissa::computeAdamWStepScalars;
using json = nlohmann::json;

namespace {

//===----------------------------------------------------------------------===//
// Memory accounting
//===----------------------------------------------------------------------===//

int64_t currentBytes = 0, peakBytes = 0;

/// A 64-byte aligned, zero-initialised byte buffer that counts towards the
/// rank's resident memory.
class Buffer {
public:
  Buffer() = default;
  explicit Buffer(int64_t bytes) { allocate(bytes); }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  Buffer(Buffer &&other) noexcept { *this = std::move(other); }
  Buffer &operator=(Buffer &&other) noexcept {
    release();
    storage = other.storage;
    length = other.length;
    other.storage = nullptr;
    other.length = 0;
    return *this;
  }
  ~Buffer() { release(); }
  void allocate(int64_t bytes) {
    release();
    length = bytes;
    storage = static_cast<uint8_t *>(std::aligned_alloc(
        64, size_t((std::max<int64_t>(bytes, 1) + 63) / 64 * 64)));
    std::memset(storage, 0, size_t(std::max<int64_t>(bytes, 1)));
    currentBytes += bytes;
    peakBytes = std::max(peakBytes, currentBytes);
  }
  uint8_t *data() { return storage; }
  const uint8_t *data() const { return storage; }
  int64_t size() const { return length; }

private:
  void release() {
    if (storage) {
      std::free(storage);
      currentBytes -= length;
    }
    storage = nullptr;
    length = 0;
  }
  uint8_t *storage = nullptr;
  int64_t length = 0;
};

//===----------------------------------------------------------------------===//
// Element conversions
//===----------------------------------------------------------------------===//

/// Converts `count` elements of a stored tensor (any float dtype) starting at
/// element `first` into `out` as `target`. F64 is read through float.
void convertElements(const HostTensor &tensor, int64_t first, int64_t count,
                     uint8_t *out, DType target) {
  convertFloatElements(tensor.bytes.data() +
                           first * int64_t(elementSize(tensor.dtype)),
                       tensor.dtype, out, target, count);
}

std::string dtypeName(DType dtype) {
  return std::string(projectDTypeName(dtype));
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

//===----------------------------------------------------------------------===//
// Per-group resident state
//===----------------------------------------------------------------------===//

/// A member's slice on this rank: elements [begin, end) of the member.
struct MemberSlice {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

struct GroupState {
  const ArtifactGroup *group = nullptr;
  int64_t firstTile = 0, endTile = 0;
  std::array<ByteRange, kNumRoles> shard{};
  /// Reduce-scatter partition of the grad buffer: rank r receives
  /// [gradCuts[r], gradCuts[r + 1]).
  std::vector<int64_t> gradCuts;
  /// Every rank's param byte range, for the all-gather.
  std::vector<ByteRange> paramRanges, masterRanges;
  /// Runs of consecutive members that reduce in one dtype: each is
  /// reduce-scattered on its own, in its dtype (see setUp).
  struct GradSegment {
    DType dtype = DType::F32;
    int64_t begin = 0, end = 0; // bytes of the grad buffer
  };
  std::vector<GradSegment> gradSegments;
  Buffer fullGrad, shardGrad, fullParam;
  std::array<Buffer, kNumRoles> shardState; // master and moments roles
  std::vector<MemberSlice> slices;          // per member

  /// The pointer the kernel gets for `role`: this rank's bytes, biased so
  /// that the group's byte offsets address them.
  void *kernelPointer(Role role) {
    alignas(64) static uint8_t unused[64];
    uint8_t *base = nullptr;
    int64_t first = 0;
    switch (role) {
    case Role::Grad:
      base = shardGrad.data();
      first = gradCuts.empty() ? 0 : gradCutBegin;
      break;
    case Role::Param:
      return fullParam.data();
    default:
      if (!shard[unsigned(role)].size())
        return unused;
      base = shardState[unsigned(role)].data();
      first = shard[unsigned(role)].begin;
      break;
    }
    return reinterpret_cast<void *>(reinterpret_cast<uintptr_t>(base) -
                                    uintptr_t(first));
  }
  int64_t gradCutBegin = 0;
};

/// Where member `m`'s element `e` of role `role` sits in this rank's shard
/// buffer of that role.
uint8_t *shardAddress(GroupState &state, const ArtifactMember &member,
                      Role role, int64_t element) {
  int64_t bytes = member.elementBytes(role, state.group->amsgrad);
  return state.shardState[unsigned(role)].data() +
         (member.byteOffset(role) + element * bytes -
          state.shard[unsigned(role)].begin);
}

class Runner {
public:
  Runner(const UpdateOptions &options, Communicator &comm)
      : options(options), comm(comm), rank(comm.rank()),
        world(comm.worldSize()) {}
  ~Runner() {
    // What the source put on the device goes before the device does.
    if (sourceAttached)
      options.gradientSource->detachDevice();
  }
  int run();

private:
  bool fail(const std::string &message) {
    if (error.empty())
      error = message;
    return false;
  }
  bool setUp();
  /// Sets every member's parameter and master from `initial` (FQN -> its
  /// validated initial value).
  void initialiseFromWeights(
      const std::map<std::string, const HostTensor *> &initial);
  bool loadGrads();
  /// Every member's current parameter and gradient slot, as the gradient
  /// source sees them.
  bool sourceMembers(std::vector<GradientSource::Member> &members);
  bool computeGradients(int64_t stepNumber);
  /// One step: the micro-batch gradients, their exact mean, its norm,
  /// clipping, and the update (unless the step is skipped).
  bool step(int64_t stepNumber, StepRecord &record);
  /// The old single-batch path of the GPU: rank 0's gradient, reduce-
  /// scattered on the device.
  bool deviceStep(int64_t stepNumber, double lr);
  /// Adds `bytes` bytes of gradient that start at byte `first` of group
  /// `state`'s buffer, member segment by segment in each reduce dtype.
  static void addGradients(const GroupState &state, uint8_t *accumulate,
                           const uint8_t *value, int64_t first, int64_t bytes);
  /// Divides this rank's gradient shard by `divisor` (when it is not 1) and
  /// returns the global L2 norm, summed tile by tile in a fixed order.
  bool meanAndNorm(int64_t divisor, double &norm);
  /// Multiplies this rank's gradient shard by `scale`.
  void scaleGradients(float scale);
  /// The validation loss: the mean over --eval-batches micro-batches,
  /// spread over the ranks.
  bool evaluate(double &loss);
  /// Calls `visit(element pointer, dtype, count)` for every run of this
  /// rank's gradient shard, tile by tile in tile order, with the tile index.
  template <typename Visit>
  void forEachShardTile(GroupState &state, Visit visit);
  bool tripwire();
  bool saveCheckpoint(int64_t stepNumber);
  bool loadCheckpoint(const std::string &dir, int64_t &stepOut,
                      std::vector<std::string> &warnings);
  bool writeFinalParams();
  /// What an exact resume needs besides the state: counters, the data
  /// position and the hyperparameters (to warn when they change).
  json trainerJson() const;
  void reportMemory();
  /// Bytes of `role`'s shard buffer resident on this rank (on the device
  /// when the state lives there).
  int64_t residentBytes(GroupState &state, Role role) {
    if (cuda)
      return deviceGroups[size_t(&state - groups.data())]
          .stateBytes[unsigned(role)];
    return state.shardState[unsigned(role)].size();
  }

  // The GPU path (--device cuda): the device, NCCL over it, and per group
  // the device buffers that mirror GroupState's host ones. Master, moments
  // and parameters stay resident on the device between steps; the host
  // copies are refreshed only to write checkpoints and final parameters.
  struct DeviceGroup {
    DevicePtr fullGrad = 0, shardGrad = 0, fullParam = 0;
    std::array<DevicePtr, kNumRoles> shardState{};
    std::array<int64_t, kNumRoles> stateBytes{};
    void *kernel = nullptr;
    unsigned grid = 0, block = 0;
  };
  bool openDevice();
  bool prepareDevice();
  bool attachSource();
  /// True when rank 0's gradients come from a source on the device: the
  /// source writes them into the device's full gradient buffers.
  bool gradientsOnDevice() const {
    return cuda && options.gradientSource && rank == 0 &&
           options.gradientSource->runsOnDevice();
  }
  bool uploadState();
  bool downloadState();
  bool launchOnDevice(GroupState &state, DeviceGroup &device, double lr,
                      int64_t stepNumber);
  static uint8_t *pointer(DevicePtr base, int64_t offset = 0) {
    return reinterpret_cast<uint8_t *>(uintptr_t(base + uint64_t(offset)));
  }

  const UpdateOptions &options;
  Communicator &comm;
  int rank, world;
  Artifact artifact;
  std::vector<GroupState> groups;
  std::unique_ptr<CudaDevice> cuda;
  std::unique_ptr<Communicator> deviceComm;
  std::vector<DeviceGroup> deviceGroups;
  bool sourceAttached = false;
  int64_t stepsRun = 0;
  double stepSeconds = 0, kernelSeconds = 0;
  std::string error;

  // The trainer's state, saved in checkpoints: updates applied (the AdamW
  // step count, which skipped steps do not advance), skips, and the data
  // position in micro-batches.
  int64_t optimizerStep = 0, consecutiveSkips = 0, skippedSteps = 0,
          microBatchesDone = 0;
  /// Per group, the tree sum of this rank's micro-batch gradients.
  std::vector<TreeSum> sums;
  std::vector<double> losses;
  std::vector<std::pair<int64_t, double>> evalLosses;
  MetricsFile metrics;
  /// Seconds of steps after the first two (the summary's per-step time).
  double steadySeconds = 0;
  int64_t steadySteps = 0;
};

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
      // The kernels can keep an fp32 master as the bf16 parameter plus a
      // 16-bit remainder, but the compiler never plans one yet, and this
      // runner would initialise, checkpoint and report such a master as if
      // it were absent: refuse rather than lose the low bits.
      if (member.master == MasterKind::Remainder)
        return fail("group '" + group.name + "': member '" + member.fqn +
                    "' keeps a remainder master, which the runtime does not "
                    "support (plan an fp32 master instead)");
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
void fillNegativeZero(uint8_t *data, int64_t bytes, DType dtype) {
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
  if (!SafeTensorsFile::read(options.gradsPath, grads, readError))
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
        return fail(options.gradsPath + ": no gradient '" + key + "'");
      if (tensor->shape != member.shape)
        return fail(options.gradsPath + ": gradient '" + key + "' has shape " +
                    shapeText(tensor->shape) + ", expected " +
                    shapeText(member.shape));
      if (!isFloatingPoint(tensor->dtype))
        return fail(options.gradsPath + ": gradient '" + key +
                    "' is not a floating-point tensor");
      if (rank == 0)
        convertElements(*tensor, 0, member.count,
                        state.fullGrad.data() + member.gradOffset, member.grad);
    }
  }
  return true;
}

bool Runner::computeGradients(int64_t stepNumber) {
  if (rank != 0 && cuda) {
    for (GroupState &state : groups)
      for (const ArtifactMember &member : state.group->members)
        fillNegativeZero(state.fullGrad.data() + member.gradOffset,
                         member.count * int64_t(elementSize(member.grad)),
                         member.grad);
    return true;
  }
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

bool Runner::deviceStep(int64_t stepNumber, double lr) {
  std::string collectiveError;
  if (options.gradientSource && !comm.allAgree(computeGradients(stepNumber)))
    return error.empty() ? fail("another rank failed") : false;
  for (size_t index = 0; index < groups.size(); ++index) {
    GroupState &state = groups[index];
    const ArtifactGroup &group = *state.group;
    // The same collectives as on the host, on device memory over NCCL.
    DeviceGroup *device = &deviceGroups[index];
    Communicator &collectives = *deviceComm;
    uint8_t *fullGrad = pointer(device->fullGrad);
    uint8_t *shardGrad = pointer(device->shardGrad);
    uint8_t *fullParam = pointer(device->fullParam);
    // The step's gradients arrive in host memory, as a backward pass on
    // another device would deliver them, unless the step itself ran on this
    // device and wrote them in place.
    if (!gradientsOnDevice() &&
        !cuda->upload(device->fullGrad, state.fullGrad.data(),
                      state.fullGrad.size(), collectiveError))
      return fail("group '" + group.name + "': " + collectiveError);
    // Reduce-scatter each segment in its reduce dtype; the sums are exact
    // (see the header).
    for (const GroupState::GradSegment &segment : state.gradSegments) {
      auto clamp = [&](int64_t cut) {
        return std::min(std::max(cut, segment.begin), segment.end);
      };
      std::vector<int64_t> counts;
      int64_t width = int64_t(elementSize(segment.dtype));
      for (int r = 0; r < world; ++r)
        counts.push_back(
            (clamp(state.gradCuts[r + 1]) - clamp(state.gradCuts[r])) / width);
      int64_t into = clamp(state.gradCuts[rank]) - state.gradCuts[rank];
      if (!collectives.reduceScatterSum(fullGrad + segment.begin,
                                        shardGrad + into, counts, segment.dtype,
                                        collectiveError))
        return fail("group '" + group.name + "': " + collectiveError);
    }
    {
      // Timed on its own (between synchronisations) so that the report
      // separates the kernels from the gradient copies and collectives.
      if (!cuda->synchronize(collectiveError))
        return fail("group '" + group.name + "': " + collectiveError);
      auto begin = std::chrono::steady_clock::now();
      if (!launchOnDevice(state, *device, lr, stepNumber))
        return false;
      if (!cuda->synchronize(collectiveError))
        return fail("group '" + group.name + "': " + collectiveError);
      kernelSeconds += std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - begin)
                           .count();
    }
    std::vector<int64_t> displacements, byteCounts;
    for (const ByteRange &range : state.paramRanges) {
      displacements.push_back(range.begin);
      byteCounts.push_back(range.size());
    }
    if (!collectives.allGather(fullParam, displacements, byteCounts,
                               collectiveError))
      return fail("group '" + group.name + "': " + collectiveError);
  }
  // Device faults surface at the next synchronisation: make it this step's.
  if (cuda && !cuda->synchronize(collectiveError))
    return fail("step " + std::to_string(stepNumber) + ": " + collectiveError);
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
    std::vector<int64_t> displacements, counts;
    for (int r = 0; r < world; ++r) {
      auto [a, b] = shardTiles(*state.group, r, world);
      displacements.push_back(a * 8);
      counts.push_back((b - a) * 8);
    }
    std::string collectiveError;
    if (!comm.allGather(reinterpret_cast<uint8_t *>(tileSums.data()),
                        displacements, counts, collectiveError))
      return fail("gradient norm: " + collectiveError);
    for (double sum : tileSums)
      total += sum;
  }
  norm = std::sqrt(total);
  return true;
}

void Runner::scaleGradients(float scale) {
  for (GroupState &state : groups)
    forEachShardTile(
        state, [&](int64_t, uint8_t *data, DType dtype, int64_t count) {
          for (int64_t i = 0; i < count; ++i)
            storeFloatElement(data, i, dtype,
                              loadFloatElement(data, i, dtype) * scale);
        });
}

bool Runner::evaluate(double &loss) {
  GradientSource &source = *options.gradientSource;
  int64_t total = options.evalBatches;
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
  std::vector<int64_t> displacements, counts;
  for (int r = 0; r < world; ++r) {
    SumNode range = microBatchesOfRank(r, perRank, total);
    displacements.push_back(range.begin * 8);
    counts.push_back((range.end - range.begin) * 8);
  }
  std::string collectiveError;
  if (!comm.allGather(reinterpret_cast<uint8_t *>(values.data()), displacements,
                      counts, collectiveError))
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
  if (cuda) {
    if (!deviceStep(stepNumber, lr))
      return false;
    record.loss = source ? source->lastLoss() : std::nan("");
    optimizerStep = stepNumber;
    return true;
  }
  // Rank r evaluates micro-batches [rK, rK + K) of the step's M = W * K; a
  // fixed batch (or --grads) is one micro-batch, on rank 0.
  bool split = source && source->splitsSteps();
  int64_t perRank = split ? options.gradAccum : 1;
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
      ok = ok && computeGradients(stepNumber);
      stepLosses[size_t(m)] = source->lastLoss();
    }
    // Otherwise (--grads) fullGrad holds the file's gradient.
    for (size_t g = 0; ok && g < groups.size(); ++g)
      sums[g].push({m, m + 1}, groups[g].fullGrad.data());
  }
  if (!comm.allAgree(ok))
    return error.empty() ? fail("another rank failed") : false;
  microBatchesDone += total;

  std::string collectiveError;
  {
    std::vector<int64_t> displacements, counts;
    for (const SumNode &range : ranges) {
      displacements.push_back(range.begin * 8);
      counts.push_back((range.end - range.begin) * 8);
    }
    if (!comm.allGather(reinterpret_cast<uint8_t *>(stepLosses.data()),
                        displacements, counts, collectiveError))
      return fail("losses: " + collectiveError);
    double sum = 0;
    for (double loss : stepLosses)
      sum += loss;
    record.loss = sum / double(total);
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    GroupState &state = groups[g];
    auto add = [&state](uint8_t *acc, const uint8_t *value, int64_t first,
                        int64_t bytes) {
      addGradients(state, acc, value, first, bytes);
    };
    if (!combineAcrossRanks(comm, sums[g], ranges, total, state.gradCuts, add,
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
  if (options.clipGradNorm > 0) {
    // torch.nn.utils.clip_grad_norm_: the coefficient in fp32, clamped at 1.
    float coefficient =
        float(options.clipGradNorm) / (float(norm) + float(1e-6));
    if (coefficient < 1.0f)
      scaleGradients(coefficient);
  }
  ++optimizerStep;
  for (GroupState &state : groups) {
    const ArtifactGroup &group = *state.group;
    group.kernel(
        state.kernelPointer(Role::Grad), state.kernelPointer(Role::Param),
        state.kernelPointer(Role::Master), state.kernelPointer(Role::ExpAvg),
        state.kernelPointer(Role::ExpAvgSq),
        state.kernelPointer(Role::MaxExpAvgSq), lr, options.beta1,
        options.beta2, options.eps, options.weightDecay, optimizerStep, rank,
        world);
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

//===----------------------------------------------------------------------===//
// The GPU path
//===----------------------------------------------------------------------===//

/// This rank's GPU: the local rank (mpirun's or torchrun's) modulo the
/// visible devices.
int localRank() {
  for (const char *name :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (const char *value = std::getenv(name))
      return std::atoi(value);
  return 0;
}

/// Threads per block the PTX kernel was compiled for (.reqntid / .maxntid);
/// 0 when the PTX does not say.
unsigned ptxBlockSize(const std::string &ptx) {
  for (const char *directive : {".reqntid", ".maxntid"}) {
    size_t at = ptx.find(directive);
    if (at != std::string::npos)
      return unsigned(
          std::strtoul(ptx.c_str() + at + std::strlen(directive), nullptr, 10));
  }
  return 0;
}

/// Opens this rank's GPU and NCCL. Called before the artifact is read, so a
/// machine without a GPU fails before anything is loaded or written.
bool Runner::openDevice() {
  std::string deviceError;
  int ordinal = localRank();
  // Probe first so that the message for "no driver" is the driver's, not the
  // device index's.
  cuda = CudaDevice::open(0, deviceError);
  if (cuda && ordinal != 0) {
    int count = cuda->deviceCount();
    cuda.reset();
    cuda = CudaDevice::open(ordinal % count, deviceError);
  }
  if (!comm.allAgree(cuda != nullptr)) {
    cuda.reset();
    return fail("--device cuda: " + (deviceError.empty()
                                         ? "another rank has no GPU"
                                         : deviceError));
  }
  if (world > 1) {
    cuda.reset();
    return fail("--device cuda: world size " + std::to_string(world) +
                " is not supported yet: the artifact's GPU kernels update "
                "whole groups, so sharded state cannot be updated on the GPU; "
                "run one rank per job or use --device cpu");
  }
  deviceComm = createNCCLCommunicator(comm, *cuda, deviceError);
  if (!deviceComm) {
    cuda.reset();
    return fail("--device cuda: " + deviceError);
  }
  return true;
}

/// Loads each group's PTX and allocates its device buffers (zero-filled).
bool Runner::prepareDevice() {
  std::string deviceError;
  if (!artifact.hasPtx())
    return fail(artifact.directory() +
                ": the artifact has no GPU kernels (kernels.<group>.ptx); "
                "compile it with PTX for --device cuda");
  for (size_t index = 0; index < groups.size(); ++index) {
    GroupState &state = groups[index];
    const ArtifactGroup &group = *state.group;
    DeviceGroup device;
    std::string path =
        artifact.directory() + "/kernels." + std::to_string(index) + ".ptx";
    std::ifstream in(path);
    if (!in)
      return fail(path + ": missing GPU kernel of group '" + group.name + "'");
    std::stringstream text;
    text << in.rdbuf();
    std::string ptx = text.str();
    device.block = ptxBlockSize(ptx);
    if (device.block == 0 || device.block > 1024)
      return fail(path + ": no block size (.reqntid) in the PTX");
    std::string entry = group.gpuKernelSymbol.empty()
                            ? group.kernelSymbol + "_kernel"
                            : group.gpuKernelSymbol;
    if (!cuda->loadKernel(ptx, entry, path, device.kernel, deviceError))
      return fail(deviceError);
    // One block per tile of block * 8 elements of one member (the kernel
    // strides over the grid, so this is the natural size, not a limit).
    int64_t tile = int64_t(device.block) * 8, tiles = 0;
    for (const ArtifactMember &member : group.members)
      tiles += (member.count + tile - 1) / tile;
    device.grid = unsigned(std::max<int64_t>(1, tiles));
    if (!cuda->allocate(state.fullGrad.size(), device.fullGrad, deviceError) ||
        !cuda->allocate(state.shardGrad.size(), device.shardGrad,
                        deviceError) ||
        !cuda->allocate(state.fullParam.size(), device.fullParam, deviceError))
      return fail(deviceError);
    for (Role role :
         {Role::Master, Role::ExpAvg, Role::ExpAvgSq, Role::MaxExpAvgSq}) {
      int64_t bytes = state.shardState[unsigned(role)].size();
      if (!cuda->allocate(bytes, device.shardState[unsigned(role)],
                          deviceError))
        return fail(deviceError);
      device.stateBytes[unsigned(role)] = bytes;
    }
    deviceGroups.push_back(device);
  }
  return true;
}

/// Hands the device to the gradient source (rank 0 computes the
/// gradients), once the resident state is in place.
bool Runner::attachSource() {
  if (!options.gradientSource || rank != 0)
    return true;
  std::string sourceError;
  // Detached again whatever happens: a failed attach may have left some of
  // its resources on the device.
  sourceAttached = true;
  if (!options.gradientSource->attachDevice(*cuda, sourceError))
    return fail(sourceError);
  return true;
}

bool Runner::uploadState() {
  std::string deviceError;
  for (size_t index = 0; index < groups.size(); ++index) {
    GroupState &state = groups[index];
    DeviceGroup &device = deviceGroups[index];
    if (!cuda->upload(device.fullParam, state.fullParam.data(),
                      state.fullParam.size(), deviceError))
      return fail(deviceError);
    for (Role role :
         {Role::Master, Role::ExpAvg, Role::ExpAvgSq, Role::MaxExpAvgSq})
      if (!cuda->upload(device.shardState[unsigned(role)],
                        state.shardState[unsigned(role)].data(),
                        state.shardState[unsigned(role)].size(), deviceError))
        return fail(deviceError);
  }
  return true;
}

bool Runner::downloadState() {
  std::string deviceError;
  for (size_t index = 0; index < groups.size(); ++index) {
    GroupState &state = groups[index];
    DeviceGroup &device = deviceGroups[index];
    if (!cuda->download(state.fullParam.data(), device.fullParam,
                        state.fullParam.size(), deviceError))
      return fail(deviceError);
    for (Role role :
         {Role::Master, Role::ExpAvg, Role::ExpAvgSq, Role::MaxExpAvgSq})
      if (!cuda->download(state.shardState[unsigned(role)].data(),
                          device.shardState[unsigned(role)],
                          state.shardState[unsigned(role)].size(), deviceError))
        return fail(deviceError);
  }
  return true;
}

/// The PTX kernel's ABI (AdamWToLoops, bare pointers): the group's present
/// buffers in role order (grad, param, master if any member keeps one,
/// exp_avg, exp_avg_sq, max_exp_avg_sq with AMSGrad), then the step's fp32
/// scalars (AdamWStepScalars). It updates the whole group, which at world
/// size 1 is this rank's shard; each pointer is biased like the CPU
/// kernel's so that the group's byte offsets address the rank's bytes.
bool Runner::launchOnDevice(GroupState &state, DeviceGroup &device, double lr,
                            int64_t stepNumber) {
  const ArtifactGroup &group = *state.group;
  bool hasMaster = false;
  for (const ArtifactMember &member : group.members)
    hasMaster |= member.master != MasterKind::None;
  auto biased = [&](DevicePtr base, int64_t first) -> DevicePtr {
    return base - uint64_t(first);
  };
  std::vector<DevicePtr> buffers = {
      biased(device.shardGrad, state.gradCutBegin), device.fullParam};
  if (hasMaster)
    buffers.push_back(biased(device.shardState[unsigned(Role::Master)],
                             state.shard[unsigned(Role::Master)].begin));
  for (Role role : {Role::ExpAvg, Role::ExpAvgSq})
    buffers.push_back(biased(device.shardState[unsigned(role)],
                             state.shard[unsigned(role)].begin));
  if (group.amsgrad)
    buffers.push_back(biased(device.shardState[unsigned(Role::MaxExpAvgSq)],
                             state.shard[unsigned(Role::MaxExpAvgSq)].begin));
  AdamWStepScalars scalars =
      computeAdamWStepScalars(lr, options.beta1, options.beta2, options.eps,
                              options.weightDecay, stepNumber);
  float values[] = {
      scalars.decay,         scalars.lerpWeight,          scalars.beta2,
      scalars.oneMinusBeta2, scalars.biasCorrection2Sqrt, scalars.eps,
      scalars.negStepSize};
  std::vector<void *> arguments;
  for (DevicePtr &buffer : buffers)
    arguments.push_back(&buffer);
  for (float &value : values)
    arguments.push_back(&value);
  std::string deviceError;
  if (!cuda->launch(device.kernel, device.grid, device.block, arguments.data(),
                    deviceError))
    return fail("group '" + group.name + "': " + deviceError);
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

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

json planJson(const Artifact &artifact) {
  json plan = json::object();
  for (const ArtifactTensor &tensor : artifact.tensors()) {
    if (!tensor.isParameter)
      continue;
    plan[tensor.fqn] = {{"master", dtypeName(tensor.master)},
                        {"gather", dtypeName(tensor.gather)},
                        {"reduce", dtypeName(tensor.reduce)},
                        {"moments", dtypeName(tensor.moments)}};
  }
  return plan;
}

bool fsyncDirectory(const std::string &dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0)
    return false;
  bool ok = fsync(fd) == 0;
  close(fd);
  return ok;
}

} // namespace

bool mlir::mantissa::rt::writeFileAtomically(const std::string &path,
                                             const std::string &text,
                                             std::string &error) {
  std::string temporary = path + ".tmp." + std::to_string(getpid());
  int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    error = temporary + ": cannot create: " + std::strerror(errno);
    return false;
  }
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      error = temporary + ": write failed: " + std::strerror(errno);
      close(fd);
      unlink(temporary.c_str());
      return false;
    }
    done += size_t(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0 ||
      rename(temporary.c_str(), path.c_str()) != 0) {
    error = path + ": cannot commit: " + std::strerror(errno);
    unlink(temporary.c_str());
    return false;
  }
  size_t slash = path.find_last_of('/');
  fsyncDirectory(slash == std::string::npos ? "." : path.substr(0, slash));
  return true;
}

namespace {

std::string rankFileName(int64_t stepNumber, int r, int w) {
  char name[96];
  std::snprintf(name, sizeof(name), "step-%08lld.rank-%d-of-%d.safetensors",
                (long long)stepNumber, r, w);
  return name;
}

/// Removes `path` and everything below it.
void removeTree(const std::string &path) {
  if (DIR *handle = opendir(path.c_str())) {
    while (dirent *entry = readdir(handle)) {
      std::string name = entry->d_name;
      if (name == "." || name == "..")
        continue;
      std::string child = path + "/" + name;
      struct stat info;
      if (lstat(child.c_str(), &info) == 0 && S_ISDIR(info.st_mode))
        removeTree(child);
      else
        unlink(child.c_str());
    }
    closedir(handle);
  }
  rmdir(path.c_str());
}

/// The step of a checkpoint folder name `step-K`, or -1.
int64_t checkpointFolderStep(const std::string &name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5)
    return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (int64_t(1) << 58))
      return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

/// The complete checkpoint folders `step-K` in `dir` (those holding an
/// index), by step.
std::map<int64_t, std::string> checkpointFolders(const std::string &dir) {
  std::map<int64_t, std::string> folders;
  if (DIR *handle = opendir(dir.c_str())) {
    while (dirent *entry = readdir(handle)) {
      std::string name = entry->d_name;
      int64_t step = checkpointFolderStep(name);
      struct stat info;
      if (step >= 0 &&
          stat((dir + "/" + name + "/index.json").c_str(), &info) == 0)
        folders[step] = dir + "/" + name;
    }
    closedir(handle);
  }
  return folders;
}

/// The checkpoint `--resume DIR` means: the newest complete `DIR/step-K`,
/// else DIR itself (a step folder, or the flat layout of earlier versions).
std::string resolveCheckpoint(const std::string &dir) {
  std::map<int64_t, std::string> folders = checkpointFolders(dir);
  return folders.empty() ? dir : folders.rbegin()->second;
}

bool Runner::saveCheckpoint(int64_t stepNumber) {
  // Each checkpoint is a folder of its own, DIR/step-K, written as
  // DIR/step-K.tmp and renamed into place once complete (the commit point).
  const std::string &root = options.saveCheckpointDir;
  std::string finalDir = root + "/step-" + std::to_string(stepNumber);
  std::string dir = finalDir + ".tmp";
  if (rank == 0) {
    mkdir(root.c_str(), 0755);
    removeTree(dir); // a writer killed earlier
    mkdir(dir.c_str(), 0755);
  }
  comm.allAgree(true); // the directory exists before any rank writes
  std::vector<HostTensor> tensors;
  json ranges = json::object();
  auto add = [&](const std::string &state, const ArtifactMember &member,
                 const MemberSlice &slice, const uint8_t *data, DType dtype) {
    HostTensor tensor;
    tensor.name = state + "/" + member.fqn;
    tensor.dtype = dtype;
    tensor.shape = {slice.size()};
    tensor.bytes.assign(data, data + slice.size() * elementSize(dtype));
    ranges[tensor.name] = {slice.begin, slice.end};
    tensors.push_back(std::move(tensor));
  };
  for (GroupState &state : groups)
    for (size_t m = 0; m < state.group->members.size(); ++m) {
      const ArtifactMember &member = state.group->members[m];
      const MemberSlice &slice = state.slices[m];
      if (!slice.size())
        continue;
      add("param", member, slice,
          state.fullParam.data() + member.paramOffset +
              slice.begin * elementSize(member.param),
          member.param);
      if (member.master == MasterKind::FP32)
        add("master", member, slice,
            shardAddress(state, member, Role::Master, slice.begin), DType::F32);
      add("exp_avg", member, slice,
          shardAddress(state, member, Role::ExpAvg, slice.begin),
          member.moments);
      add("exp_avg_sq", member, slice,
          shardAddress(state, member, Role::ExpAvgSq, slice.begin),
          member.moments);
      if (state.group->amsgrad)
        add("max_exp_avg_sq", member, slice,
            shardAddress(state, member, Role::MaxExpAvgSq, slice.begin),
            member.moments);
    }
  std::string fileName = rankFileName(stepNumber, rank, world);
  std::map<std::string, std::string> metadata = {
      {"format", "mantissa-checkpoint"},     {"version", "1"},
      {"step", std::to_string(stepNumber)},  {"rank", std::to_string(rank)},
      {"world_size", std::to_string(world)}, {"ranges", ranges.dump()},
      {"plan", planJson(artifact).dump()}};
  std::string writeError;
  bool ok =
      writeSafeTensors(dir + "/" + fileName, tensors, metadata, writeError);
  if (!comm.allAgree(ok))
    return fail(ok ? "checkpoint at step " + std::to_string(stepNumber) +
                         ": another rank failed to write its file"
                   : writeError);
  if (rank != 0)
    return comm.allAgree(true);

  json index = {{"format", "mantissa-checkpoint"},
                {"version", 1},
                {"step", stepNumber},
                {"world_size", world},
                {"plan", planJson(artifact)},
                {"trainer", trainerJson()}};
  json shapes = json::object();
  for (const ArtifactTensor &tensor : artifact.tensors())
    if (tensor.isParameter)
      shapes[tensor.fqn] = tensor.shape;
  index["shapes"] = shapes;
  json files = json::array();
  for (int r = 0; r < world; ++r) {
    std::string name = rankFileName(stepNumber, r, world);
    struct stat info;
    if (stat((dir + "/" + name).c_str(), &info) != 0)
      ok = fail(dir + "/" + name + ": missing after it was written");
    files.push_back(
        {{"file", name}, {"rank", r}, {"bytes", int64_t(info.st_size)}});
  }
  index["files"] = files;
  if (ok)
    ok = writeFileAtomically(dir + "/index.json", index.dump(1), writeError) ||
         fail(writeError);
  if (ok) {
    // A checkpoint of the same step (written by a run resumed from an
    // earlier one) is replaced: moved aside first, since rename cannot
    // replace a folder that is not empty.
    std::string aside = finalDir + ".old";
    struct stat info;
    bool replacing = stat(finalDir.c_str(), &info) == 0;
    if (replacing) {
      removeTree(aside);
      if (rename(finalDir.c_str(), aside.c_str()) != 0)
        ok = fail(finalDir + ": cannot move the older checkpoint aside: " +
                  std::strerror(errno));
    }
    if (ok && rename(dir.c_str(), finalDir.c_str()) != 0)
      ok = fail(finalDir +
                ": cannot commit the checkpoint: " + std::strerror(errno));
    fsyncDirectory(root);
    if (ok && replacing)
      removeTree(aside);
  }
  if (ok && options.keepCheckpoints > 0) {
    std::map<int64_t, std::string> folders = checkpointFolders(root);
    int64_t excess = int64_t(folders.size()) - options.keepCheckpoints;
    for (auto it = folders.begin(); excess > 0 && it != folders.end();
         ++it, --excess)
      removeTree(it->second);
  }
  return comm.allAgree(ok);
}

/// Reads a checkpoint and installs this rank's shard. Nothing is changed
/// unless everything loads.
bool Runner::loadCheckpoint(const std::string &given, int64_t &stepOut,
                            std::vector<std::string> &warnings) {
  std::string dir = resolveCheckpoint(given);
  std::string indexPath = dir + "/index.json";
  std::ifstream in(indexPath);
  if (!in)
    return fail(indexPath + ": cannot read the checkpoint index (and " + given +
                " holds no complete step-K checkpoint folder)");
  std::stringstream text;
  text << in.rdbuf();
  json index = json::parse(text.str(), nullptr, false);
  if (index.is_discarded() || !index.is_object() ||
      index.value("format", "") != "mantissa-checkpoint")
    return fail(indexPath + ": damaged checkpoint index");
  if (index.value("version", 0) != 1)
    return fail(indexPath + ": unknown checkpoint version");
  if (!index.contains("step") || !index["step"].is_number_integer() ||
      !index.contains("files") || !index["files"].is_array())
    return fail(indexPath + ": damaged checkpoint index (no step or files)");
  stepOut = index["step"].get<int64_t>();

  // Every file, validated (size against the index, then the format).
  std::vector<SafeTensorsFile> files;
  struct Piece {
    const HostTensor *tensor;
    int64_t begin, end;
    std::string file;
  };
  std::map<std::string, std::vector<Piece>> pieces; // "state/fqn" -> pieces
  files.reserve(index["files"].size());
  for (const json &entry : index["files"]) {
    std::string name = entry.value("file", "");
    std::string path = dir + "/" + name;
    struct stat info;
    if (name.empty() || stat(path.c_str(), &info) != 0)
      return fail(path + ": checkpoint file is missing");
    if (int64_t(info.st_size) != entry.value("bytes", int64_t(-1)))
      return fail(path + ": checkpoint file is truncated or damaged (" +
                  std::to_string(info.st_size) + " bytes, the index says " +
                  std::to_string(entry.value("bytes", int64_t(-1))) + ")");
    files.emplace_back();
    std::string readError;
    if (!SafeTensorsFile::read(path, files.back(), readError))
      return fail("checkpoint: " + readError);
    const SafeTensorsFile &file = files.back();
    json ranges = json::parse(
        file.metadata().count("ranges") ? file.metadata().at("ranges") : "",
        nullptr, false);
    if (!ranges.is_object())
      return fail(path + ": damaged checkpoint file (no element ranges)");
    for (const HostTensor &tensor : file.tensors()) {
      const json &range =
          ranges.contains(tensor.name) ? ranges[tensor.name] : json();
      if (!range.is_array() || range.size() != 2 ||
          !range[0].is_number_integer() || !range[1].is_number_integer())
        return fail(path + ": tensor '" + tensor.name +
                    "' has no element range");
      int64_t begin = range[0].get<int64_t>(), end = range[1].get<int64_t>();
      if (begin < 0 || end - begin != tensor.numElements())
        return fail(path + ": tensor '" + tensor.name +
                    "' does not match its element range");
      pieces[tensor.name].push_back({&tensor, begin, end, path});
    }
  }
  json shapes = index.value("shapes", json::object());

  // Assemble elements [from, to) of `key` as `target` into `out`.
  auto assemble = [&](const std::string &key, int64_t count, int64_t from,
                      int64_t to, uint8_t *out, DType target) -> bool {
    int64_t covered = from;
    std::vector<Piece> &list = pieces[key];
    std::sort(list.begin(), list.end(),
              [](const Piece &a, const Piece &b) { return a.begin < b.begin; });
    for (const Piece &piece : list) {
      if (piece.end > count)
        return fail(piece.file + ": tensor '" + key + "' has elements up to " +
                    std::to_string(piece.end) + ", the parameter has " +
                    std::to_string(count));
      int64_t a = std::max(covered, piece.begin), b = std::min(to, piece.end);
      if (a > covered)
        break;
      if (a >= b)
        continue;
      convertElements(*piece.tensor, a - piece.begin, b - a,
                      out + (a - from) * elementSize(target), target);
      covered = b;
    }
    if (covered < to)
      return fail(dir + ": checkpoint tensor '" + key +
                  "' is missing elements [" + std::to_string(covered) + ", " +
                  std::to_string(to) + ")");
    return true;
  };
  auto storedDType = [&](const std::string &key) -> std::optional<DType> {
    auto it = pieces.find(key);
    if (it == pieces.end() || it->second.empty())
      return std::nullopt;
    return it->second.front().tensor->dtype;
  };

  // Stage every buffer first; install only when all of it loaded.
  struct Staged {
    uint8_t *target;
    std::vector<uint8_t> bytes;
  };
  std::vector<Staged> staged;
  std::set<std::string> used;
  for (GroupState &state : groups)
    for (size_t m = 0; m < state.group->members.size(); ++m) {
      const ArtifactMember &member = state.group->members[m];
      const std::string &fqn = member.fqn;
      if (!shapes.contains(fqn) && !storedDType("param/" + fqn))
        return fail(dir + ": the checkpoint has no tensor '" + fqn + "'");
      if (shapes.contains(fqn) && shapes[fqn] != json(member.shape))
        return fail(dir + ": tensor '" + fqn + "' has shape " +
                    shapes[fqn].dump() + " in the checkpoint, expected " +
                    shapeText(member.shape));
      // Parameters: the whole tensor (every rank holds the gathered copy).
      std::optional<DType> paramType = storedDType("param/" + fqn);
      if (!paramType)
        return fail(dir + ": the checkpoint has no tensor 'param/" + fqn + "'");
      if (!isFloatingPoint(*paramType))
        return fail(dir + ": tensor 'param/" + fqn + "' has dtype " +
                    std::string(safeTensorsDTypeName(*paramType)) +
                    ", expected a floating-point dtype");
      std::optional<DType> masterType = storedDType("master/" + fqn);
      if (masterType && *masterType != DType::F32)
        return fail(dir + ": tensor 'master/" + fqn + "' has dtype " +
                    dtypeName(*masterType) + ", expected fp32");
      // A master saved for a parameter that now has none: the parameter
      // takes the master's (exact) value and the master is dropped.
      std::string paramSource = "param/" + fqn;
      if (masterType && member.master == MasterKind::None) {
        warnings.push_back("'" + fqn +
                           "': dropping the saved fp32 master (the "
                           "plan keeps no master now); the parameter takes "
                           "its value");
        paramSource = "master/" + fqn;
      }
      used.insert("param/" + fqn);
      used.insert("master/" + fqn);
      Staged param{state.fullParam.data() + member.paramOffset, {}};
      param.bytes.resize(member.count * elementSize(member.param));
      if (!assemble(paramSource, member.count, 0, member.count,
                    param.bytes.data(), member.param))
        return false;
      staged.push_back(std::move(param));

      const MemberSlice &slice = state.slices[m];
      if (member.master == MasterKind::FP32 && slice.size()) {
        // No master saved (plain AdamW, or the parameter was fp32): the
        // master is created from the parameter.
        std::string source = masterType ? "master/" + fqn : "param/" + fqn;
        if (!masterType && *paramType != DType::F32 && rank == 0)
          warnings.push_back("'" + fqn +
                             "': no master in the checkpoint; "
                             "created from the " +
                             dtypeName(*paramType) + " parameter");
        Staged master{shardAddress(state, member, Role::Master, slice.begin),
                      std::vector<uint8_t>(slice.size() * 4)};
        if (!assemble(source, member.count, slice.begin, slice.end,
                      master.bytes.data(), DType::F32))
          return false;
        staged.push_back(std::move(master));
      }
      std::vector<std::pair<const char *, Role>> moments = {
          {"exp_avg", Role::ExpAvg}, {"exp_avg_sq", Role::ExpAvgSq}};
      if (state.group->amsgrad)
        moments.push_back({"max_exp_avg_sq", Role::MaxExpAvgSq});
      for (auto [name, role] : moments) {
        std::string key = std::string(name) + "/" + fqn;
        used.insert(key);
        std::optional<DType> type = storedDType(key);
        if (!type)
          return fail(dir + ": the checkpoint has no tensor '" + key + "'");
        if (*type != member.moments) {
          bool widen = member.moments == DType::F32 &&
                       (*type == DType::BF16 || *type == DType::F16);
          if (!widen)
            return fail(dir + ": tensor '" + key + "' has dtype " +
                        dtypeName(*type) + ", expected " +
                        dtypeName(member.moments));
          if (rank == 0)
            warnings.push_back("'" + key + "': moments saved in " +
                               dtypeName(*type) + ", widened to fp32");
        }
        if (!slice.size())
          continue;
        Staged moment{
            shardAddress(state, member, role, slice.begin),
            std::vector<uint8_t>(slice.size() * elementSize(member.moments))};
        if (!assemble(key, member.count, slice.begin, slice.end,
                      moment.bytes.data(), member.moments))
          return false;
        staged.push_back(std::move(moment));
      }
    }
  for (Staged &entry : staged)
    std::memcpy(entry.target, entry.bytes.data(), entry.bytes.size());
  // The trainer's state: checkpoints written before it was saved resume as
  // runs without skips whose steps each had one micro-batch.
  optimizerStep = stepOut;
  microBatchesDone = stepOut;
  if (index.contains("trainer") && index["trainer"].is_object()) {
    const json &trainer = index["trainer"];
    optimizerStep = trainer.value("optimizer_step", stepOut);
    consecutiveSkips = trainer.value("consecutive_skips", int64_t(0));
    skippedSteps = trainer.value("skipped_steps", int64_t(0));
    microBatchesDone = trainer.value("micro_batches_done", stepOut);
    if (rank == 0 && trainer.contains("hyperparameters") &&
        trainer["hyperparameters"].is_object()) {
      json now = trainerJson()["hyperparameters"];
      for (auto &[key, saved] : trainer["hyperparameters"].items())
        if (now.contains(key) && now[key] != saved)
          warnings.push_back("resuming with " + key + " " + now[key].dump() +
                             " (the checkpoint was trained with " +
                             saved.dump() + ")");
    }
  }
  return true;
}

json Runner::trainerJson() const {
  int64_t microBatches =
      options.gradientSource && options.gradientSource->splitsSteps()
          ? options.gradAccum * world
          : 1;
  json hyperparameters = {
      {"lr", options.lr},
      {"lr_schedule", lrScheduleName(options.schedule)},
      {"warmup_steps", options.warmupSteps},
      {"min_lr_ratio", options.minLrRatio},
      {"decay_steps", options.decaySteps},
      {"betas", {options.beta1, options.beta2}},
      {"eps", options.eps},
      {"weight_decay", options.weightDecay},
      {"clip_grad_norm", options.clipGradNorm},
      {"micro_batches_per_step", microBatches},
      {"data", options.dataPaths},
      {"shuffle", options.shuffleSeed ? json(*options.shuffleSeed) : json()}};
  // The total only shapes a decaying schedule.
  if (options.schedule != LrScheduleKind::Constant)
    hyperparameters["steps"] = options.steps;
  return {{"optimizer_step", optimizerStep},
          {"consecutive_skips", consecutiveSkips},
          {"skipped_steps", skippedSteps},
          {"micro_batches_done", microBatchesDone},
          {"hyperparameters", hyperparameters}};
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
  if (!writeSafeTensors(options.finalParamsPath, out, {{"format", "pt"}},
                        writeError))
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
                "bytes, collectives over %s\n",
                rank, world, cuda->ordinal(), cuda->name().c_str(),
                (long long)cuda->peakBytes(), deviceComm->name().c_str());
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
      options.device == "cpu")
    return fail("the training step was compiled for the GPU; it needs "
                "--device cuda"),
           finish(false);
  if (options.device != "cpu") {
    // "gpu" is the spelling of earlier versions.
    if (options.device != "cuda" && options.device != "gpu")
      return fail("unknown --device '" + options.device +
                  "' (expected cpu or cuda)"),
             finish(false);
    if (!openDevice())
      return finish(false);
  }

  std::string loadError;
  if (!Artifact::load(options.artifactDir, artifact, loadError))
    return fail(loadError), finish(false);
  if (!comm.allAgree(setUp()))
    return finish(error.empty());

  // --weights replaces the artifact's initial values tensor by tensor (as
  // `mantissa-run MODEL.pt2 --weights` replaces the archive's), e.g. to
  // start from the same state as a reference run.
  SafeTensorsFile weights, given;
  if (!SafeTensorsFile::read(artifact.weightsPath(), weights, loadError))
    return fail(loadError), finish(false);
  if (!options.weightsPath.empty() &&
      !SafeTensorsFile::read(options.weightsPath, given, loadError))
    return fail(loadError), finish(false);
  std::map<std::string, const HostTensor *> initial;
  for (const ArtifactGroup &group : artifact.groups())
    for (const ArtifactMember &member : group.members) {
      const HostTensor *tensor = given.find(member.fqn);
      const std::string &file =
          tensor ? options.weightsPath : artifact.weightsPath();
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
  std::string resumeDir = !options.verifyCheckpointDir.empty()
                              ? options.verifyCheckpointDir
                              : options.resumeDir;
  if (!resumeDir.empty()) {
    std::vector<std::string> warnings;
    bool ok = loadCheckpoint(resumeDir, startStep, warnings);
    for (const std::string &warning : warnings)
      std::fprintf(stderr, "mantissa-run: warning: %s\n", warning.c_str());
    if (!comm.allAgree(ok))
      return finish(ok);
    if (!options.verifyCheckpointDir.empty()) {
      if (rank == 0)
        std::printf("checkpoint %s: step %lld loads\n", resumeDir.c_str(),
                    (long long)startStep);
      return finish(true);
    }
    if (startStep > options.steps)
      return fail(resumeDir + ": the checkpoint is at step " +
                  std::to_string(startStep) + ", past --steps " +
                  std::to_string(options.steps)),
             finish(false);
  }

  if (options.gradientSource) {
    // Gradients come from the step, each step.
  } else if (options.gradsPath.empty()) {
    return fail("--grads is required"), finish(false);
  } else if (!comm.allAgree(loadGrads())) {
    return finish(error.empty());
  }
  if (cuda &&
      !comm.allAgree(prepareDevice() && uploadState() && attachSource()))
    return finish(error.empty());

  if (rank == 0 && !options.metricsPath.empty() &&
      !metrics.open(options.metricsPath, loadError))
    return fail(loadError), finish(false);
  if (!comm.allAgree(error.empty()))
    return finish(false);

  using Clock = std::chrono::steady_clock;
  Clock::time_point runStart = Clock::now();
  int64_t tokensPerStep = 0;
  if (options.gradientSource) {
    int64_t microBatches =
        options.gradientSource->splitsSteps() ? options.gradAccum * world : 1;
    tokensPerStep =
        options.gradientSource->tokensPerMicroBatch() * microBatches;
  }
  bool evaluating = options.evalEvery > 0 && options.gradientSource &&
                    options.gradientSource->validationMicroBatches() > 0;
  bool first = true;
  for (int64_t stepNumber = startStep + 1; stepNumber <= options.steps;
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
    if (evaluating && stepNumber % options.evalEvery == 0) {
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
                  (long long)options.steps, loss, record.lr);
      if (std::isfinite(record.gradNorm))
        std::printf("  grad-norm %.4f", record.gradNorm);
      std::printf("  %.2f steps/s", rate);
      if (tokensPerStep)
        std::printf(", %.0f tokens/s", rate * double(tokensPerStep));
      std::printf("  %.1f s left", double(options.steps - stepNumber) / rate);
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
    if (consecutiveSkips >= options.maxSkips)
      return fail("step " + std::to_string(stepNumber) + ": " +
                  std::to_string(consecutiveSkips) +
                  " consecutive steps had a non-finite loss or gradient "
                  "norm (--max-skips " +
                  std::to_string(options.maxSkips) +
                  "); stopping with the last checkpoint intact"),
             finish(false);
    if (!options.saveCheckpointDir.empty() && options.saveEvery > 0 &&
        (stepNumber % options.saveEvery == 0 || stepNumber == options.steps)) {
      if (cuda && !comm.allAgree(downloadState()))
        return finish(error.empty());
      if (!saveCheckpoint(stepNumber))
        return finish(false);
    }
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
  if (options.memoryReport)
    reportMemory();
  if (cuda && !comm.allAgree(downloadState()))
    return finish(error.empty());
  if (!options.finalParamsPath.empty() && !comm.allAgree(writeFinalParams()))
    return finish(error.empty());
  // Only a complete run leaves losses behind.
  if (rank == 0 && !options.lossesPath.empty() &&
      (!writeFileAtomically(options.lossesPath, lossesJson(losses),
                            loadError) ||
       (!losses.empty() &&
        !writeFileAtomically(replaceExtension(options.lossesPath, ".svg"),
                             lossPlotSvg(losses, evalLosses), loadError))))
    return fail(loadError), finish(false);
  return finish(true);
}

} // namespace

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
                                          UpdateOptions &options,
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
    return path(options.lossesPath);
  if (flag == "--final-params")
    return path(options.finalParamsPath);
  if (flag == "--save-checkpoint")
    return path(options.saveCheckpointDir);
  if (flag == "--resume")
    return path(options.resumeDir);
  if (flag == "--device")
    return path(options.device);
  if (flag == "--metrics")
    return path(options.metricsPath);
  if (flag == "--data-format")
    return path(options.dataFormat);
  if (flag == "--no-memory-report") {
    options.memoryReport = false;
    return true;
  }
  if (flag == "--steps")
    return count(options.steps);
  if (flag == "--save-every")
    return count(options.saveEvery);
  if (flag == "--warmup-steps")
    return count(options.warmupSteps);
  if (flag == "--decay-steps")
    return count(options.decaySteps);
  if (flag == "--grad-accum")
    return count(options.gradAccum);
  if (flag == "--max-skips")
    return count(options.maxSkips);
  if (flag == "--keep-checkpoints")
    return count(options.keepCheckpoints);
  if (flag == "--eval-every")
    return count(options.evalEvery);
  if (flag == "--eval-batches")
    return count(options.evalBatches);
  if (flag == "--lr")
    return real(options.lr);
  if (flag == "--weight-decay")
    return real(options.weightDecay);
  if (flag == "--eps")
    return real(options.eps);
  if (flag == "--min-lr-ratio")
    return real(options.minLrRatio);
  if (flag == "--clip-grad-norm")
    return real(options.clipGradNorm);
  if (flag == "--data" || flag == "--val-data") {
    if (take()) {
      std::vector<std::string> paths = splitPaths(value);
      if (paths.empty())
        error = flag + ": expected PATH[,PATH...]";
      (flag == "--data" ? options.dataPaths : options.valDataPaths) = paths;
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
        options.shuffleSeed = uint64_t(seed);
    }
    return true;
  }
  if (flag == "--lr-schedule") {
    if (take())
      parseLrScheduleKind(value, options.schedule, error);
    return true;
  }
  if (flag == "--betas") {
    if (take()) {
      size_t comma = value.find(',');
      if (comma == std::string::npos ||
          !parseNumber(value.substr(0, comma), options.beta1) ||
          !parseNumber(value.substr(comma + 1), options.beta2))
        error = "--betas: expected B1,B2, got '" + value + "'";
    }
    return true;
  }
  return false;
}

bool mlir::mantissa::rt::validateTrainerOptions(const UpdateOptions &options,
                                                std::string &error) {
  auto bad = [&](const std::string &message) {
    error = message;
    return false;
  };
  if (!validateLrSchedule(options.lrSchedule(), error))
    return false;
  for (auto [flag, beta] :
       {std::pair<const char *, double>{"B1", options.beta1},
        {"B2", options.beta2}})
    if (!std::isfinite(beta) || beta < 0 || beta >= 1)
      return bad(std::string("--betas: ") + flag + " must be in [0, 1), got " +
                 std::to_string(beta));
  if (!std::isfinite(options.eps) || options.eps <= 0)
    return bad("--eps: expected a finite number > 0, got " +
               std::to_string(options.eps));
  if (!std::isfinite(options.weightDecay) || options.weightDecay < 0)
    return bad("--weight-decay: expected a finite number >= 0, got " +
               std::to_string(options.weightDecay));
  if (!std::isfinite(options.clipGradNorm) || options.clipGradNorm < 0)
    return bad("--clip-grad-norm: expected a finite norm >= 0 (0: no "
               "clipping), got " +
               std::to_string(options.clipGradNorm));
  if (options.gradAccum < 1)
    return bad("--grad-accum: expected K >= 1");
  if (options.gradAccum > 1 && options.dataPaths.empty())
    return bad("--grad-accum needs --data: a fixed batch has one micro-batch");
  if (options.maxSkips < 1)
    return bad("--max-skips: expected N >= 1");
  if (options.dataFormat != "llmc" && options.dataFormat != "raw-u16")
    return bad("--data-format: expected llmc or raw-u16, got '" +
               options.dataFormat + "'");
  if (options.shuffleSeed && options.dataPaths.empty())
    return bad("--shuffle needs --data");
  bool evaluating = options.evalEvery > 0 || options.evalBatches > 0 ||
                    !options.valDataPaths.empty();
  if (evaluating && (options.evalEvery <= 0 || options.evalBatches <= 0 ||
                     options.valDataPaths.empty()))
    return bad("evaluation needs all of --val-data PATH, --eval-every N and "
               "--eval-batches M (N, M > 0)");
  if (!options.saveCheckpointDir.empty() && options.saveEvery <= 0)
    return bad("--save-checkpoint needs --save-every K (K > 0)");
  if (options.saveEvery > 0 && options.saveCheckpointDir.empty())
    return bad("--save-every needs --save-checkpoint DIR");
  if (options.keepCheckpoints > 0 && options.saveCheckpointDir.empty())
    return bad("--keep-checkpoints needs --save-checkpoint DIR");
  bool onGpu = options.device == "cuda" || options.device == "gpu";
  if (onGpu &&
      (!options.dataPaths.empty() || options.clipGradNorm > 0 || evaluating))
    return bad("--device cuda trains on a fixed batch (--inputs) without "
               "--clip-grad-norm or evaluation for now; --data, "
               "--clip-grad-norm and --val-data run on the CPU");
  return true;
}

bool mlir::mantissa::rt::parseUpdateOptions(int argc, char **argv,
                                            UpdateOptions &options,
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
      (flag == "--grads"     ? options.gradsPath
       : flag == "--weights" ? options.weightsPath
       : flag == "--inputs"  ? options.inputsPath
                             : options.verifyCheckpointDir) = value;
    } else if (arg.rfind("-", 0) == 0) {
      error = "unknown option '" + arg + "'";
      return false;
    } else if (options.artifactDir.empty()) {
      options.artifactDir = arg;
    } else {
      error = "unexpected argument '" + arg + "'";
      return false;
    }
  }
  if (options.artifactDir.empty()) {
    error = "no artifact directory given";
    return false;
  }
  // Gradients are either given or computed by the step, never both.
  if (!options.inputsPath.empty() && !options.gradsPath.empty()) {
    error = "--inputs and --grads cannot be combined: --grads applies given "
            "gradients, --inputs computes them with the artifact's training "
            "step";
    return false;
  }
  if (!options.inputsPath.empty() && !options.verifyCheckpointDir.empty()) {
    error = "--verify-checkpoint only loads the checkpoint; it takes no "
            "--inputs";
    return false;
  }
  // Only a training step has losses; --grads runs none.
  bool training = !options.inputsPath.empty() || !options.dataPaths.empty();
  if (!options.lossesPath.empty() && !training) {
    error = "--losses needs --inputs INPUTS.safetensors or --data TOKENS.bin "
            "(the losses come from the artifact's training step)";
    return false;
  }
  if (!options.inputsPath.empty() && !options.dataPaths.empty()) {
    error = "--inputs and --data cannot be combined: --inputs trains on one "
            "fixed batch, --data on token data";
    return false;
  }
  if (!options.dataPaths.empty() && !options.gradsPath.empty()) {
    error = "--data and --grads cannot be combined";
    return false;
  }
  return validateTrainerOptions(options, error);
}

int mlir::mantissa::rt::runUpdate(const UpdateOptions &options,
                                  Communicator &communicator) {
  Runner runner(options, communicator);
  return runner.run();
}
