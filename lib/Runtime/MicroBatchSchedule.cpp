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

#include <algorithm>
#include <sys/resource.h>
#include <unistd.h>

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

int64_t mlir::mantissa::rt::gradientPartialSums(int64_t gradAccum) {
  if (gradAccum <= 1)
    return 0;
  int64_t levels = 0;
  for (int64_t k = gradAccum; k > 1; k >>= 1)
    ++levels;
  return levels + 2;
}

bool mlir::mantissa::rt::checkGradAccumMemory(int64_t gradAccum,
                                              int64_t gradientBytes,
                                              uint64_t availableBytes,
                                              std::string &error) {
  uint64_t sums = uint64_t(gradientPartialSums(gradAccum));
  uint64_t bytes = 0;
  if (!__builtin_mul_overflow(
          sums, uint64_t(std::max<int64_t>(gradientBytes, 0)), &bytes) &&
      bytes <= availableBytes)
    return true;
  error = "--grad-accum " + std::to_string(gradAccum) +
          ": summing this rank's micro-batch gradients exactly holds up to " +
          std::to_string(sums) + " partial sums of its " +
          std::to_string(gradientBytes) + "-byte gradient (" +
          (bytes ? std::to_string(bytes) : std::string("more than 2^64")) +
          " bytes), more than the " + std::to_string(availableBytes) +
          " bytes this process can allocate; use a smaller K (the partial "
          "sums grow with log2 K)";
  return false;
}

uint64_t mlir::mantissa::rt::availableMemoryBytes() {
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGE_SIZE);
  uint64_t available = pages > 0 && pageSize > 0
                           ? uint64_t(pages) * uint64_t(pageSize)
                           : UINT64_MAX;
  for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    rlimit limit{};
    if (getrlimit(resource, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
      available = std::min<uint64_t>(available, uint64_t(limit.rlim_cur));
  }
  return available;
}
