//===- mantissa-bench-combine.cpp - Exact combination vs reduce-scatter ---===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// `mpirun -np W mantissa-bench-combine [ELEMENTS...] [--accum K] [--reps R]`
// times, in one invocation and on the same fp32 buffers, the two ways of
// turning W*K micro-batch gradients into each rank's shard of their sum:
//
//   exact   the trainer's: each rank sums its K micro-batches in the fixed
//           tree, then one all-to-all of its partial sums' slices and the
//           owner's finish of the tree (GradientCombination.h);
//   plain   each rank sums its K micro-batches in order, then MPI's
//           reduce-scatter (whose summation order MPI does not fix).
//
// It prints the median of R repetitions of each, and their ratio, per size.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/GradientCombination.h"
#include "mantissa/Runtime/UpdateRunner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace mlir::mantissa::rt;

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  std::string error, threads;
  std::unique_ptr<Communicator> comm = createLaunchCommunicator(threads, error);
  if (!comm) {
    std::fprintf(stderr, "mantissa-bench-combine: %s\n", error.c_str());
    return 1;
  }
  std::vector<int64_t> sizes;
  int64_t accum = 1, reps = 20;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--accum" && i + 1 < argc)
      accum = std::atoll(argv[++i]);
    else if (arg == "--reps" && i + 1 < argc)
      reps = std::atoll(argv[++i]);
    else
      sizes.push_back(std::atoll(argv[i]));
  }
  if (sizes.empty())
    sizes = {24736, 922752, 16 << 20};
  int world = comm->worldSize(), rank = comm->rank();
  int64_t total = accum * world;
  if (rank == 0)
    std::printf("world %d, %lld micro-batches per rank, fp32, median of %lld\n"
                "%12s %12s %12s %8s\n",
                world, (long long)accum, (long long)reps, "elements",
                "exact ms", "plain ms", "ratio");
  for (int64_t elements : sizes) {
    int64_t bytes = elements * 4;
    std::vector<std::vector<float>> leaves(
        static_cast<size_t>(accum),
        std::vector<float>(static_cast<size_t>(elements)));
    for (int64_t k = 0; k < accum; ++k)
      for (int64_t e = 0; e < elements; ++e)
        leaves[k][e] = float((e * 7 + k * 13 + rank * 31) % 1000) * 1e-3f;
    // Rank r owns elements [r*n/W, (r+1)*n/W).
    std::vector<int64_t> cuts, counts;
    for (int r = 0; r <= world; ++r)
      cuts.push_back(elements * r / world * 4);
    for (int r = 0; r < world; ++r)
      counts.push_back((cuts[r + 1] - cuts[r]) / 4);
    std::vector<SumNode> ranges;
    for (int r = 0; r < world; ++r)
      ranges.push_back(microBatchesOfRank(r, accum, total));
    auto addFloats = [](uint8_t *acc, const uint8_t *value, int64_t,
                        int64_t count) {
      accumulateSum(acc, value, count / 4, DType::F32);
    };
    std::vector<uint8_t> out(static_cast<size_t>(cuts[rank + 1] - cuts[rank]) +
                             1);
    TreeSum local(total, bytes, [&](uint8_t *acc, const uint8_t *value) {
      addFloats(acc, value, 0, bytes);
    });
    std::vector<double> exact, plain;
    std::vector<float> sum(static_cast<size_t>(elements));
    for (int64_t rep = 0; rep < reps; ++rep) {
      comm->allAgree(true);
      auto begin = std::chrono::steady_clock::now();
      local.reset(total);
      SumNode mine = ranges[rank];
      for (int64_t m = mine.begin; m < mine.end; ++m)
        local.push({m, m + 1}, reinterpret_cast<const uint8_t *>(
                                   leaves[m - mine.begin].data()));
      if (!combineAcrossRanks(*comm, local, ranges, total, cuts, addFloats,
                              out.data(), error)) {
        std::fprintf(stderr, "mantissa-bench-combine: %s\n", error.c_str());
        return 1;
      }
      comm->allAgree(true);
      exact.push_back(std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - begin)
                          .count());

      begin = std::chrono::steady_clock::now();
      std::memcpy(sum.data(), leaves[0].data(), size_t(bytes));
      for (int64_t k = 1; k < accum; ++k)
        accumulateSum(sum.data(), leaves[k].data(), elements, DType::F32);
      if (!comm->reduceScatterSum(sum.data(), out.data(), counts, DType::F32,
                                  error)) {
        std::fprintf(stderr, "mantissa-bench-combine: %s\n", error.c_str());
        return 1;
      }
      comm->allAgree(true);
      plain.push_back(std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - begin)
                          .count());
    }
    if (rank == 0)
      std::printf("%12lld %12.3f %12.3f %8.2f\n", (long long)elements,
                  1e3 * median(exact), 1e3 * median(plain),
                  median(exact) / median(plain));
  }
  return 0;
}
