//===- mantissa-bench-adamw.cpp - CPU benchmark of the fused AdamW update -===//
//
// Measures the generated CPU kernel of one shard group (N parameters in M
// members) in three modes, next to a plain copy of the same number of bytes
// in the same run and with the same threads:
//
//   fp32       fp32 grad, fp32 param/exp_avg/exp_avg_sq        28 B/param
//   master     bf16 grad, fp32 master + moments, bf16 param out 28 B/param
//   remainder  bf16 grad, bf16 param + 16-bit remainder, fp32   26 B/param
//
// GB/s are counted at those ideal bytes (each byte read or written once).
// The copy moves half that many bytes from one buffer to another, so it too
// reads and writes 28 B per parameter; each sample is the faster of memcpy
// and a streaming-store copy. Kernel and copy runs alternate, and each
// figure is the best of K runs (as STREAM reports), since the cores may be
// shared with other work.
//
//   mantissa-bench-adamw [--n N] [--members M] [--json] [--threads T]
//                        [--iterations K]
//
//===----------------------------------------------------------------------===//

#include "AdamWModes.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>

using namespace mlir::mantissa;

namespace {

struct Options {
  int64_t n = int64_t(1) << 24;
  int64_t members = 1;
  bool json = false;
  int threads = 2;
  int iterations = 20;
};

bool parseOptions(int argc, char **argv, Options &options) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    size_t equals = arg.find('=');
    if (equals != std::string::npos) {
      value = arg.substr(equals + 1);
      arg = arg.substr(0, equals);
    }
    auto next = [&]() -> bool {
      if (!value.empty())
        return true;
      if (i + 1 >= argc)
        return false;
      value = argv[++i];
      return true;
    };
    if (arg == "--json") {
      options.json = true;
    } else if (arg == "--n" && next()) {
      options.n = std::strtoll(value.c_str(), nullptr, 0);
    } else if (arg == "--members" && next()) {
      options.members = std::strtoll(value.c_str(), nullptr, 0);
    } else if (arg == "--threads" && next()) {
      options.threads = std::atoi(value.c_str());
    } else if (arg == "--iterations" && next()) {
      options.iterations = std::atoi(value.c_str());
    } else {
      std::fprintf(stderr,
                   "usage: %s [--n N] [--members M] [--json] [--threads T] "
                   "[--iterations K]\n",
                   argv[0]);
      return false;
    }
  }
  return options.n > 0 && options.members > 0 && options.members <= options.n &&
         options.threads > 0 && options.iterations > 0;
}

/// Copies `bytes` (a multiple of 64, 64-byte aligned) with non-temporal
/// stores, which skip reading the destination into the cache.
void streamCopy(uint8_t *destination, const uint8_t *source, int64_t bytes) {
#if defined(__has_builtin) && __has_builtin(__builtin_nontemporal_store)
  using Chunk = long long __attribute__((vector_size(16)));
  auto *to = reinterpret_cast<Chunk *>(destination);
  auto *from = reinterpret_cast<const Chunk *>(source);
  for (int64_t i = 0; i < bytes / 16; ++i)
    __builtin_nontemporal_store(from[i], to + i);
  std::memcpy(destination + bytes / 16 * 16, source + bytes / 16 * 16,
              bytes % 16);
#else
  std::memcpy(destination, source, bytes);
#endif
}

/// Page-aligned memory, with transparent huge pages where the system allows.
struct Allocation {
  explicit Allocation(size_t bytes) : size(bytes) {
    size_t alignment = size_t(2) << 20;
    size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    data = static_cast<uint8_t *>(std::aligned_alloc(alignment, rounded));
    if (data)
      madvise(data, rounded, MADV_HUGEPAGE);
  }
  ~Allocation() { std::free(data); }
  uint8_t *data = nullptr;
  size_t size;
};

/// T threads (the caller is thread 0) that run one job together.
class ThreadTeam {
public:
  explicit ThreadTeam(int size) : size(size) {
    for (int t = 1; t < size; ++t)
      workers.emplace_back([this, t] { workerLoop(t); });
  }
  ~ThreadTeam() {
    stop = true;
    generation.fetch_add(1);
    for (std::thread &worker : workers)
      worker.join();
  }
  /// Runs job(t) on every thread; returns the wall time in seconds.
  double run(const std::function<void(int)> &work) {
    job = &work;
    remaining.store(size);
    auto start = std::chrono::steady_clock::now();
    generation.fetch_add(1);
    work(0);
    remaining.fetch_sub(1);
    while (remaining.load() != 0)
      std::this_thread::yield();
    auto stop = std::chrono::steady_clock::now();
    return std::chrono::duration<double>(stop - start).count();
  }

private:
  void workerLoop(int t) {
    uint64_t seen = 0;
    for (;;) {
      while (generation.load() == seen)
        std::this_thread::yield();
      seen = generation.load();
      if (stop)
        return;
      (*job)(t);
      remaining.fetch_sub(1);
    }
  }
  int size;
  std::vector<std::thread> workers;
  std::atomic<uint64_t> generation{0};
  std::atomic<int> remaining{0};
  std::atomic<bool> stop{false};
  const std::function<void(int)> *job = nullptr;
};

/// Best (minimum) seconds of `work` over `iterations` runs, interleaved with
/// runs of `reference` so that both see the same load on a shared machine
/// (after one warm-up run of each); reference samples are appended to
/// `referenceTimes`. Like STREAM, the best run measures what the machine can
/// do: other processes on the cores only ever make a run slower.
double timeInterleaved(ThreadTeam &team, int iterations,
                       const std::function<void(int)> &work,
                       const std::function<double()> &reference,
                       std::vector<double> &referenceTimes) {
  team.run(work);
  reference();
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    times.push_back(team.run(work));
    referenceTimes.push_back(reference());
  }
  return *std::min_element(times.begin(), times.end());
}

/// Fills the members' state with plausible values (normal numbers, so that
/// speed does not depend on them), each thread its share of every member:
/// the pages are first touched by the thread that updates them.
void initialize(ThreadTeam &team, int threads, const AdamWGroup &group,
                std::vector<std::unique_ptr<Allocation>> &buffers) {
  team.run([&](int t) {
    for (const AdamWMember &member : group.members) {
      int64_t begin = member.count * t / threads;
      int64_t end = member.count * (t + 1) / threads;
      auto fill = [&](AdamWBuffer buffer, int64_t offset, unsigned bytes,
                      float value) {
        uint8_t *base = buffers[unsigned(buffer)]->data + offset;
        if (bytes == 4) {
          std::fill(reinterpret_cast<float *>(base) + begin,
                    reinterpret_cast<float *>(base) + end, value);
          return;
        }
        uint32_t bits;
        std::memcpy(&bits, &value, 4);
        std::fill(reinterpret_cast<uint16_t *>(base) + begin,
                  reinterpret_cast<uint16_t *>(base) + end,
                  uint16_t((bits + 0x8000u) >> 16));
      };
      fill(AdamWBuffer::Grad, member.gradOffset,
           train::getByteWidth(member.grad), 1e-2f);
      fill(AdamWBuffer::Param, member.paramOffset,
           train::getByteWidth(member.param), 0.5f);
      if (member.master == AdamWMasterKind::FP32)
        fill(AdamWBuffer::Master, member.masterOffset, 4, 0.5f);
      if (member.master == AdamWMasterKind::Remainder)
        fill(AdamWBuffer::Master, member.masterOffset, 2, 0.0f);
      unsigned momentBytes = train::getByteWidth(member.moments);
      fill(AdamWBuffer::ExpAvg, member.momentsOffset, momentBytes, 1e-3f);
      fill(AdamWBuffer::ExpAvgSq, member.momentsOffset, momentBytes, 1e-4f);
    }
  });
}

struct ModeResult {
  std::string mode;
  double seconds = 0;
  double gbps = 0;
};

} // namespace

int main(int argc, char **argv) {
  Options options;
  if (!parseOptions(argc, argv, options))
    return 2;
  ThreadTeam team(options.threads);

  // The copy: 14 B/param from one buffer to another (28 B/param of traffic),
  // split over the threads. Each sample takes the faster of memcpy and a
  // copy with streaming stores, so that the reference is the best plain copy
  // this machine does, not one slowed by a memcpy strategy.
  int64_t copyBytes = options.n * 14;
  Allocation source(copyBytes), destination(copyBytes);
  if (!source.data || !destination.data) {
    std::fprintf(stderr, "out of memory\n");
    return 1;
  }
  auto sliceOf = [&](int t) {
    int64_t begin = copyBytes * t / options.threads / 64 * 64;
    int64_t end = t + 1 == options.threads
                      ? copyBytes
                      : copyBytes * (t + 1) / options.threads / 64 * 64;
    return std::make_pair(begin, end);
  };
  team.run([&](int t) {
    auto [begin, end] = sliceOf(t);
    std::memset(source.data + begin, 1, end - begin);
    std::memset(destination.data + begin, 0, end - begin);
  });
  std::function<void(int)> memcpySlice = [&](int t) {
    auto [begin, end] = sliceOf(t);
    std::memcpy(destination.data + begin, source.data + begin, end - begin);
  };
  std::function<void(int)> streamSlice = [&](int t) {
    auto [begin, end] = sliceOf(t);
    streamCopy(destination.data + begin, source.data + begin, end - begin);
  };
  auto copyOnce = [&]() {
    return std::min(team.run(memcpySlice), team.run(streamSlice));
  };
  std::vector<double> copyTimes;

  std::vector<ModeResult> results;
  for (const char *mode : {"fp32", "master", "remainder"}) {
    std::optional<AdamWGroup> group =
        bench::makeModeGroup(mode, options.n, options.members);
    if (!group) {
      std::fprintf(stderr, "cannot lay out %lld parameters in %lld members\n",
                   (long long)options.n, (long long)options.members);
      return 2;
    }
    std::string error;
    std::unique_ptr<AdamWCpuKernel> kernel =
        AdamWCpuKernel::compile(*group, error);
    if (!kernel) {
      std::fprintf(stderr, "%s: %s\n", mode, error.c_str());
      return 1;
    }
    std::vector<std::unique_ptr<Allocation>> buffers;
    for (unsigned buffer = 0; buffer < kNumAdamWBuffers; ++buffer) {
      buffers.push_back(std::make_unique<Allocation>(
          group->getBufferBytes(AdamWBuffer(buffer))));
      if (!buffers.back()->data) {
        std::fprintf(stderr, "out of memory\n");
        return 1;
      }
    }
    initialize(team, options.threads, *group, buffers);
    AdamWCpuKernel::Function function = kernel->getFunction();
    double seconds = timeInterleaved(
        team, options.iterations,
        [&](int t) {
          function(buffers[0]->data, buffers[1]->data, buffers[2]->data,
                   buffers[3]->data, buffers[4]->data, buffers[5]->data, 1e-3,
                   0.9, 0.999, 1e-8, 0.01, /*step=*/10, /*gradScale=*/1.0f, t,
                   options.threads);
        },
        copyOnce, copyTimes);
    ModeResult result;
    result.mode = mode;
    result.seconds = seconds;
    result.gbps =
        double(bench::getIdealBytesPerParam(mode)) * options.n / seconds / 1e9;
    results.push_back(result);
  }

  double copySeconds = *std::min_element(copyTimes.begin(), copyTimes.end());
  double copyGbps = 2.0 * copyBytes / copySeconds / 1e9;

  if (options.json) {
    std::printf("{\"n\": %lld, \"members\": %lld, \"copy_gbps\": %.3f, "
                "\"modes\": {",
                (long long)options.n, (long long)options.members, copyGbps);
    for (size_t i = 0; i < results.size(); ++i)
      std::printf("%s\"%s\": {\"ms\": %.4f, \"gbps\": %.3f}", i ? ", " : "",
                  results[i].mode.c_str(), results[i].seconds * 1e3,
                  results[i].gbps);
    std::printf("}}\n");
    return 0;
  }
  std::printf("fused AdamW, CPU, n = %lld in %lld member(s), %d thread(s), "
              "best of %d\n",
              (long long)options.n, (long long)options.members, options.threads,
              options.iterations);
  std::printf("  copy       %8.3f ms  %8.2f GB/s (read + write of 28 B/param, "
              "best of memcpy and streaming stores)\n",
              copySeconds * 1e3, copyGbps);
  for (const ModeResult &result : results)
    std::printf("  %-9s  %8.3f ms  %8.2f Mparam/s  %8.2f GB/s  %5.1f%% of "
                "copy\n",
                result.mode.c_str(), result.seconds * 1e3,
                options.n / result.seconds / 1e6, result.gbps,
                100.0 * result.gbps / copyGbps);
  return 0;
}
