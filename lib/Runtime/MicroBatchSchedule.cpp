//===- MicroBatchSchedule.cpp - Micro-batches per step and rank -----------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// MicroBatchSchedule.h: the split of a step's (or an evaluation's)
// micro-batches over the ranks.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/MicroBatchSchedule.h"

using namespace mlir::mantissa::rt;

std::vector<SumNode> MicroBatchSchedule::partition(int64_t total) const {
  int64_t share = (total + world - 1) / world;
  std::vector<SumNode> ranges;
  for (int r = 0; r < world; ++r)
    ranges.push_back(microBatchesOfRank(r, share, total));
  return ranges;
}

bool mlir::mantissa::rt::allGatherValues(Communicator &comm,
                                         std::vector<double> &values,
                                         const std::vector<SumNode> &ranges,
                                         std::string &error) {
  std::vector<int64_t> displacements, counts;
  for (const SumNode &range : ranges) {
    displacements.push_back(range.begin * 8);
    counts.push_back((range.end - range.begin) * 8);
  }
  return comm.allGather(reinterpret_cast<uint8_t *>(values.data()),
                        displacements, counts, error);
}
