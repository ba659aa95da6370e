//===- Trainer.h - The trainer's runner, shared by its files ----*- C++ -*-===//
//
// Part of the Mantissa project. Internal to libmantissa_rt.
//
//===----------------------------------------------------------------------===//
//
// The per-rank runner behind runUpdate (UpdateRunner.h), split by concern:
// the step, the exact combination and the run loop (UpdateRunner.cpp), the
// update on the GPU (DeviceUpdate.cpp), checkpoints (Checkpoint.cpp) and the
// flags (TrainerFlags.cpp). This header holds the state they share: resident
// buffers, per-group shard state and the Runner class.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_TRAINER_H
#define MANTISSA_RUNTIME_TRAINER_H

#include "mantissa/Runtime/Artifact.h"
#include "mantissa/Runtime/Communicator.h"
#include "mantissa/Runtime/CudaDriver.h"
#include "mantissa/Runtime/GradientCombination.h"
#include "mantissa/Runtime/SafeTensors.h"
#include "mantissa/Runtime/TrainerMetrics.h"
#include "mantissa/Runtime/UpdateRunner.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mlir::mantissa::rt::detail {

using json = nlohmann::json;

//===----------------------------------------------------------------------===//
// Memory accounting
//===----------------------------------------------------------------------===//

inline int64_t currentBytes = 0, peakBytes = 0;

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
inline void convertElements(const HostTensor &tensor, int64_t first,
                            int64_t count, uint8_t *out, DType target) {
  convertFloatElements(tensor.bytes.data() +
                           first * int64_t(elementSize(tensor.dtype)),
                       tensor.dtype, out, target, count);
}

inline std::string dtypeName(DType dtype) {
  return std::string(projectDTypeName(dtype));
}

inline std::string shapeText(const std::vector<int64_t> &shape) {
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
inline uint8_t *shardAddress(GroupState &state, const ArtifactMember &member,
                             Role role, int64_t element) {
  int64_t bytes = member.elementBytes(role, state.group->amsgrad);
  return state.shardState[unsigned(role)].data() +
         (member.byteOffset(role) + element * bytes -
          state.shard[unsigned(role)].begin);
}

/// Sets (or clears) the sign bit of element `i` of a moments buffer of
/// `dtype`: a remainder member's exp_avg_sq keeps its masters' tie marks
/// there (splitFp32Master).
inline void setSignBit(uint8_t *data, int64_t i, DType dtype, bool set) {
  int64_t width = int64_t(elementSize(dtype));
  uint8_t &top = data[i * width + width - 1]; // little-endian
  top = set ? uint8_t(top | 0x80u) : uint8_t(top & 0x7Fu);
}
inline bool hasSignBit(const uint8_t *data, int64_t i, DType dtype) {
  int64_t width = int64_t(elementSize(dtype));
  return (data[i * width + width - 1] & 0x80u) != 0;
}

/// Splits `count` fp32 masters of a remainder member (`master:
/// fp32_split`): every element's bf16 parameter into `high` (the gathered
/// parameter, which each rank holds whole); for the elements of `slice`, the
/// remainders into `low` and the tie marks into the sign bits of
/// `expAvgSq` (in `moments`), both laid out from element `slice.begin`.
inline void splitMasters(const float *masters, int64_t count, uint8_t *high,
                         const MemberSlice &slice, uint8_t *low,
                         uint8_t *expAvgSq, DType moments) {
  for (int64_t i = 0; i < count; ++i) {
    uint16_t top, remainder;
    bool upperTie;
    splitFp32Master(masters[i], top, remainder, upperTie);
    std::memcpy(high + 2 * i, &top, 2);
    if (i < slice.begin || i >= slice.end)
      continue;
    std::memcpy(low + 2 * (i - slice.begin), &remainder, 2);
    setSignBit(expAvgSq, i - slice.begin, moments, upperTie);
  }
}

/// The fp32 masters of elements [begin, end) of a remainder member, joined
/// from the gathered bf16 parameter, the remainders `low` and the marks in
/// `expAvgSq` (both laid out from element `begin`).
inline void joinSplitMasters(const ArtifactMember &member,
                             const uint8_t *fullParam, const uint8_t *low,
                             const uint8_t *expAvgSq, int64_t begin,
                             int64_t end, float *out) {
  const uint8_t *param = fullParam + member.paramOffset;
  for (int64_t i = begin; i < end; ++i) {
    uint16_t high, remainder;
    std::memcpy(&high, param + 2 * i, 2);
    std::memcpy(&remainder, low + 2 * (i - begin), 2);
    out[i - begin] = joinFp32Master(
        high, remainder, hasSignBit(expAvgSq, i - begin, member.moments));
  }
}

class Runner {
public:
  Runner(const TrainerOptions &options, Communicator &comm)
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
  /// The update on the GPU: this rank's combined gradient shard uploaded,
  /// each group's kernel over the rank's tiles, the parameters all-gathered
  /// over NCCL.
  bool updateOnDevice(double lr, float gradScale);
  /// When the step ran on the device, copies its gradients into the host
  /// buffers the exact combination reads.
  bool fetchDeviceGradients();
  /// Adds `bytes` bytes of gradient that start at byte `first` of group
  /// `state`'s buffer, member segment by segment in each reduce dtype.
  static void addGradients(const GroupState &state, uint8_t *accumulate,
                           const uint8_t *value, int64_t first, int64_t bytes);
  /// Divides this rank's gradient shard by `divisor` (when it is not 1) and
  /// returns the global L2 norm, summed tile by tile in a fixed order.
  bool meanAndNorm(int64_t divisor, double &norm);
  /// The validation loss: the mean over --eval-batches micro-batches,
  /// spread over the ranks.
  bool evaluate(double &loss);
  /// Calls `visit(element pointer, dtype, count)` for every run of this
  /// rank's gradient shard, tile by tile in tile order, with the tile index.
  template <typename Visit>
  void forEachShardTile(GroupState &state, Visit visit);
  bool tripwire();
  bool saveCheckpoint(int64_t stepNumber);
  /// Refuses a --save-checkpoint folder whose checkpoints are another
  /// model's (checked before training).
  bool checkCheckpointFolder();
  bool loadCheckpoint(const std::string &dir, int64_t &stepOut,
                      std::vector<std::string> &warnings);
  bool writeFinalParams();
  /// Ends the run after a SIGINT or SIGTERM (`signal`) at step
  /// `stepNumber`, the checkpoint already saved if one is configured:
  /// writes the losses so far, says what it wrote, and returns the exit
  /// status 128 + signal.
  int stopAfterSignal(int64_t signal, int64_t stepNumber);
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
    unsigned block = 0;
  };
  bool openDevice();
  bool prepareDevice();
  bool attachSource();
  /// True when the gradients come from a source on the device: the source
  /// writes them into the device's full gradient buffers.
  bool gradientsOnDevice() const {
    return cuda && options.gradientSource &&
           options.gradientSource->runsOnDevice();
  }
  bool uploadState();
  bool downloadState();
  bool launchOnDevice(GroupState &state, DeviceGroup &device, double lr,
                      float gradScale);
  static uint8_t *pointer(DevicePtr base, int64_t offset = 0) {
    return reinterpret_cast<uint8_t *>(uintptr_t(base + uint64_t(offset)));
  }

  const TrainerOptions &options;
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

} // namespace mlir::mantissa::rt::detail

#endif // MANTISSA_RUNTIME_TRAINER_H
