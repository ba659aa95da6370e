//===- ShardedState.cpp - This rank's shard of the optimizer state --------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// ShardedState.h: cutting the groups over the ranks, the initial state, given
// gradients, the gradient's mean and norm, the tripwire and the final
// parameters.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#include "ShardedState.h"
#include "mantissa/Runtime/GradientNorm.h"
#include "mantissa/Runtime/MicroBatchSchedule.h"
#include "mantissa/Runtime/Tripwire.h"

#include <cmath>

using namespace mlir::mantissa::rt;
using namespace mlir::mantissa::rt::detail;

bool ShardedState::setUp(bool gradInPlace) {
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
    // With one rank the cut is the whole buffer.
    state.gradInPlace = gradInPlace && world == 1;
    if (!state.gradInPlace)
      state.combinedGrad.allocate(state.gradCuts[rank + 1] -
                                  state.gradCuts[rank]);
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
  return true;
}

void ShardedState::initialiseFromWeights(
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

bool ShardedState::loadGrads(const std::string &path) {
  // Every rank validates the file (so all report the same error); only rank
  // 0 contributes it to the reduction.
  SafeTensorsFile grads;
  std::string readError;
  if (!SafeTensorsFile::read(path, grads, readError))
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
        return fail(path + ": no gradient '" + key + "'");
      if (tensor->shape != member.shape)
        return fail(path + ": gradient '" + key + "' has shape " +
                    shapeText(tensor->shape) + ", expected " +
                    shapeText(member.shape));
      if (!isFloatingPoint(tensor->dtype))
        return fail(path + ": gradient '" + key +
                    "' is not a floating-point tensor");
      if (rank == 0)
        convertElements(*tensor, 0, member.count,
                        state.fullGrad.data() + member.gradOffset, member.grad);
    }
  }
  return true;
}

void ShardedState::addGradients(const GroupState &state, uint8_t *accumulate,
                                const uint8_t *value, int64_t first,
                                int64_t bytes) {
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
void ShardedState::forEachShardTile(GroupState &state, Visit visit) {
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
    uint8_t *shard = state.shardGrad() + member.gradOffset -
                     state.gradCutBegin +
                     begin * int64_t(elementSize(member.grad));
    visit(tile, shard, member.grad, end - begin);
  }
}

bool ShardedState::meanAndNorm(Communicator &comm, int64_t divisor,
                               double &norm) {
  double total = 0;
  for (GroupState &state : groups) {
    // One sum of squares per tile: tiles are the same whatever the world
    // size, so the norm is too.
    std::vector<double> tileSums(size_t(state.group->numTiles), 0.0);
    forEachShardTile(state, [&](int64_t tile, uint8_t *data, DType dtype,
                                int64_t count) {
      // torch's p.grad.div_(M), rounded to the gradient's dtype, and
      // the squares in the same pass.
      tileSums[size_t(tile)] = divideAndSumSquares(data, count, dtype, divisor);
    });
    std::vector<SumNode> tilesOf;
    for (int r = 0; r < world; ++r) {
      auto [a, b] = shardTiles(*state.group, r, world);
      tilesOf.push_back({a, b});
    }
    std::string collectiveError;
    if (!allGatherValues(comm, tileSums, tilesOf, collectiveError))
      return fail("gradient norm: " + collectiveError);
    for (double sum : tileSums)
      total += sum;
  }
  norm = std::sqrt(total);
  return true;
}

bool ShardedState::tripwire(
    const std::function<int64_t(size_t, Role)> &residentBytes) {
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
        int64_t held = residentBytes(size_t(&state - groups.data()), role);
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

bool ShardedState::writeFinalParams(Communicator &comm,
                                    const std::string &path) {
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
  if (!writeSafeTensors(path, out, {{"format", "pt"}}, writeError))
    return fail(writeError);
  return true;
}

int64_t ShardedState::optimizerStateBytes() const {
  int64_t bytes = 0;
  for (const GroupState &group : groups)
    for (const Buffer &buffer : group.shardState)
      bytes += buffer.size();
  return bytes;
}
