//===- ArenaPlacement.cpp - First-fit offsets of temporaries --------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/ArenaPlacement.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>
#include <vector>

int64_t mlir::mantissa::placeInArena(llvm::ArrayRef<ArenaInterval> intervals,
                                     llvm::SmallVectorImpl<int64_t> &offsets) {
  std::vector<size_t> order(intervals.size());
  std::iota(order.begin(), order.end(), 0);
  llvm::stable_sort(order, [&](size_t a, size_t b) {
    return intervals[a].begin < intervals[b].begin;
  });
  offsets.assign(intervals.size(), 0);
  // Placed intervals alive at the current start, by index: [offset, end).
  std::map<size_t, std::pair<int64_t, int64_t>> placed;
  int64_t arenaBytes = 0;
  for (size_t index : order) {
    const ArenaInterval &interval = intervals[index];
    // Free every interval that ended before this one begins.
    for (auto it = placed.begin(); it != placed.end();) {
      if (intervals[it->first].end < interval.begin)
        it = placed.erase(it);
      else
        ++it;
    }
    llvm::SmallVector<std::pair<int64_t, int64_t>> ranges;
    for (auto &entry : placed)
      ranges.push_back(entry.second);
    llvm::sort(ranges);
    int64_t offset = 0;
    for (auto [begin, end] : ranges) {
      if (begin - offset >= interval.bytes)
        break;
      offset = std::max(offset, end);
    }
    placed[index] = {offset, offset + interval.bytes};
    offsets[index] = offset;
    arenaBytes = std::max(arenaBytes, offset + interval.bytes);
  }
  return arenaBytes;
}
