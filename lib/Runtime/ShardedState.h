//===- ShardedState.h - This rank's shard of the optimizer state -*- C++
//-*-===//
//
// Part of the Mantissa project. Internal to libmantissa_rt.
//
//===----------------------------------------------------------------------===//
//
// The state every part of the trainer reads or writes: each shard group's
// parameters, masters, moments and gradients as this rank holds them. The
// update backends (UpdateBackend.h) update it, the checkpoint store
// (CheckpointStore.h) saves and loads it, the trainer (Trainer.cpp) fills
// the gradients and combines them.
//
// - Shards. Each group's kernel splits the group's T tiles (tile_size
//   elements of one member each) into slices [p*T/n, (p+1)*T/n); rank r of W
//   owns slice p=r, n=W. In every role's flat buffer the bytes of a slice are
//   contiguous, so the rank keeps only those bytes of the master, moments and
//   reduced gradient, and calls the kernel with part=r, parts=W and each
//   pointer biased by its slice's first byte (the generated kernel's ABI is
//   unchanged). Groups are thus split evenly at tile granularity.
// - Gradients. Members of one group may reduce in different dtypes: each
//   run of consecutive members with one reduce dtype is reduce-scattered on
//   its own, in that dtype, into the rank's part of the grad buffer. Given
//   gradients (`--grads`) are the global (already averaged) gradient: rank 0
//   contributes them, cast to each member's reduce dtype, every other rank
//   contributes -0.0 (the exact additive identity), so every world size sees
//   exactly the file's gradient.
// - Parameters. After the update each rank's gather-dtype slice is
//   all-gathered, so every rank holds the full gather-dtype parameters.
// - Tripwire: after the first step of every run the resident state is
//   checked against the plan (Tripwire.h).
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_SHARDEDSTATE_H
#define MANTISSA_RUNTIME_SHARDEDSTATE_H

#include "mantissa/Runtime/Artifact.h"
#include "mantissa/Runtime/Communicator.h"
#include "mantissa/Runtime/GradientCombination.h"
#include "mantissa/Runtime/SafeTensors.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdlib>
#include <cstring>
#include <functional>
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
  Buffer fullGrad, fullParam;
  /// One rank with one micro-batch a step: the combination is the identity,
  /// so the optimizer reads the step's gradient where the step wrote it
  /// (fullGrad) instead of a copy of every gradient byte made each step.
  bool gradInPlace = false;
  /// This rank's part [gradCuts[rank], gradCuts[rank + 1]) of the step's
  /// combined gradient, which the mean divides and the optimizer reads.
  uint8_t *shardGrad() {
    return gradInPlace ? fullGrad.data() : combinedGrad.data();
  }
  int64_t shardGradBytes() const {
    return gradInPlace ? fullGrad.size() : combinedGrad.size();
  }
  Buffer combinedGrad;                      // empty when gradInPlace
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
      base = shardGrad();
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

/// The first error of this rank's run: every part of the trainer reports
/// into one, and the trainer prints it when the ranks stop together.
class RunError {
public:
  /// Keeps `message` unless an error is already kept; returns false.
  bool fail(const std::string &message) {
    if (text.empty())
      text = message;
    return false;
  }
  bool empty() const { return text.empty(); }
  const std::string &message() const { return text; }

private:
  std::string text;
};

/// This rank's part of the optimizer state, by shard group: the gathered
/// parameters, this rank's tiles of masters and moments, the gradient
/// buffers, and how the groups are cut over the ranks (see the file
/// comment). The update backends (UpdateBackend.h) update it, the
/// checkpoint store (CheckpointStore.h) saves and loads it.
class ShardedState {
public:
  ShardedState(int rank, int world, RunError &errors)
      : rank(rank), world(world), errors(errors) {}

  /// Cuts every group of `artifact` (loaded) over the ranks and allocates
  /// this rank's buffers. `gradInPlace`: the run has one rank and one
  /// micro-batch a step, so the combined gradient is the step's own
  /// (GroupState::gradInPlace).
  bool setUp(bool gradInPlace);
  /// Sets every member's parameter and master from `initial` (FQN -> its
  /// validated initial value).
  void initialiseFromWeights(
      const std::map<std::string, const HostTensor *> &initial);
  /// `--grads`: every rank validates the file, rank 0 contributes it (the
  /// others -0.0) to the gradient buffers.
  bool loadGrads(const std::string &path);
  /// Adds `bytes` bytes of gradient that start at byte `first` of group
  /// `state`'s buffer, member segment by segment in each reduce dtype.
  static void addGradients(const GroupState &state, uint8_t *accumulate,
                           const uint8_t *value, int64_t first, int64_t bytes);
  /// Divides this rank's gradient shard by `divisor` (when it is not 1) and
  /// returns the global L2 norm, summed tile by tile in a fixed order.
  bool meanAndNorm(Communicator &comm, int64_t divisor, double &norm);
  /// Checks the resident state against the plan (Tripwire.h);
  /// `residentBytes(group, role)` says how many bytes of a state role this
  /// rank really holds (on the device when the state lives there).
  bool tripwire(const std::function<int64_t(size_t, Role)> &residentBytes);
  /// Gathers the fp32 values of every parameter and writes them (rank 0).
  bool writeFinalParams(Communicator &comm, const std::string &path);
  /// Bytes of master and moments this rank holds.
  int64_t optimizerStateBytes() const;

  int rank, world;
  Artifact artifact;
  std::vector<GroupState> groups;

private:
  bool fail(const std::string &message) { return errors.fail(message); }
  /// Calls `visit(tile, element pointer, dtype, count)` for every run of
  /// this rank's gradient shard, tile by tile in tile order.
  template <typename Visit>
  void forEachShardTile(GroupState &state, Visit visit);

  RunError &errors;
};

} // namespace mlir::mantissa::rt::detail

#endif // MANTISSA_RUNTIME_SHARDEDSTATE_H
