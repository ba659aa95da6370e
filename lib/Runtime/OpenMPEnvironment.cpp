//===- OpenMPEnvironment.cpp - OpenMP settings checked at start-up --------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// OpenMPEnvironment.h says why. Part of libmantissa_rt: no LLVM or MLIR
// headers here.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/OpenMPEnvironment.h"

#include "mantissa/Runtime/Communicator.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

/// libomp's, when it is mapped (libmantissa_rt links it with oneDNN); a
/// runtime built without oneDNN maps it later, with the compiled step, and
/// then reads the OMP_NUM_THREADS that applyThreadSplit sets.
extern "C" void omp_set_num_threads(int) __attribute__((weak));
extern "C" void omp_set_dynamic(int) __attribute__((weak));

using namespace mlir::mantissa::rt;

bool mlir::mantissa::rt::checkOpenMPThreadCount(const std::string &value,
                                                std::string &error) {
  auto blank = [](char c) { return c == ' ' || c == '\t'; };
  size_t at = 0, levels = 0;
  while (true) {
    while (at < value.size() && blank(value[at]))
      ++at;
    size_t digits = at;
    long count = 0;
    while (at < value.size() && value[at] >= '0' && value[at] <= '9') {
      count = count * 10 + (value[at] - '0');
      if (count > kMaxOpenMPThreads) {
        error = "level " + std::to_string(levels + 1) + " asks for more than " +
                std::to_string(kMaxOpenMPThreads) + " threads";
        return false;
      }
      ++at;
    }
    if (at == digits) {
      error = value.empty() ? "it is empty"
                            : "expected a positive integer or a "
                              "comma-separated list of them (one per "
                              "nesting level), as OpenMP defines it";
      return false;
    }
    if (count == 0) {
      error = "level " + std::to_string(levels + 1) +
              " asks for 0 threads; each level needs at least 1";
      return false;
    }
    ++levels;
    while (at < value.size() && blank(value[at]))
      ++at;
    if (at == value.size())
      return true;
    if (value[at] != ',') {
      error = "expected a positive integer or a comma-separated list of them "
              "(one per nesting level), as OpenMP defines it";
      return false;
    }
    ++at;
  }
}

bool mlir::mantissa::rt::checkOpenMPEnvironment(std::string &error) {
  const char *value = std::getenv("OMP_NUM_THREADS");
  if (!value || checkOpenMPThreadCount(value, error))
    return true;
  error = "OMP_NUM_THREADS='" + std::string(value) + "': " + error +
          "; the OpenMP runtime (libomp) would misparse it. Set it to the "
          "number of threads, e.g. OMP_NUM_THREADS=8, or unset it";
  return false;
}

ThreadSplit mlir::mantissa::rt::splitThreads(int ranksHere, int rankCpus,
                                             int machineCpus, long requested) {
  ThreadSplit split;
  split.ranksHere = std::max(ranksHere, 1);
  split.rankCpus = std::max(rankCpus, 1);
  split.machineCpus = std::max(machineCpus, split.rankCpus);
  split.requested = requested;
  int share = split.machineCpus / split.ranksHere;
  split.threads = std::max(1, std::min(split.rankCpus, share));
  if (requested > 0) {
    split.threads = int(std::min<long>(requested, kMaxOpenMPThreads));
    split.oversubscribed =
        requested > split.rankCpus ||
        requested * split.ranksHere > long(split.machineCpus);
  }
  return split;
}

std::string mlir::mantissa::rt::describeThreadSplit(const ThreadSplit &split) {
  auto count = [](long n, const char *word) {
    return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
  };
  std::string text =
      split.ranksHere == 1
          ? "1 rank on this machine, " + count(split.threads, "OpenMP thread")
          : count(split.ranksHere, "rank") + " on this machine, " +
                count(split.threads, "OpenMP thread") + " each";
  text += " (" +
          (split.requested > 0 ? std::string("OMP_NUM_THREADS")
                               : count(split.machineCpus, "CPU")) +
          ")";
  if (split.dynamic && split.threads > 1)
    text += ", fewer while other processes keep the CPUs busy";
  return text;
}

std::string mlir::mantissa::rt::threadSplitWarning(const ThreadSplit &split) {
  if (!split.oversubscribed)
    return "";
  long total = split.requested * split.ranksHere;
  return "OMP_NUM_THREADS=" + std::to_string(split.requested) + " with " +
         std::to_string(split.ranksHere) + " rank" +
         (split.ranksHere == 1 ? "" : "s") + " on this machine runs " +
         std::to_string(total) + " OpenMP thread" + (total == 1 ? "" : "s") +
         " on " + std::to_string(split.machineCpus) + " CPU" +
         (split.machineCpus == 1 ? "" : "s") + " (this rank may use " +
         std::to_string(split.rankCpus) +
         "): threads wait on each other's descheduled threads. Unset it to "
         "run " +
         std::to_string(
             splitThreads(split.ranksHere, split.rankCpus, split.machineCpus, 0)
                 .threads) +
         " per rank";
}

std::vector<uint64_t> mlir::mantissa::rt::affinityMask() {
  // A mask as large as the kernel's: sched_getaffinity refuses a smaller
  // one with EINVAL.
  for (int cpus = 1024; cpus <= (1 << 20); cpus *= 2) {
    cpu_set_t *set = CPU_ALLOC(cpus);
    size_t bytes = CPU_ALLOC_SIZE(cpus);
    if (!set)
      break;
    if (sched_getaffinity(0, bytes, set) == 0) {
      std::vector<uint64_t> mask((size_t(cpus) + 63) / 64, 0);
      for (int cpu = 0; cpu < cpus; ++cpu)
        if (CPU_ISSET_S(cpu, bytes, set))
          mask[size_t(cpu) / 64] |= uint64_t(1) << (cpu % 64);
      CPU_FREE(set);
      return mask;
    }
    CPU_FREE(set);
    if (errno != EINVAL)
      break;
  }
  // No mask to read: one CPU, the least any process has.
  return {1};
}

namespace {
int countCpus(const std::vector<uint64_t> &mask) {
  int count = 0;
  for (uint64_t word : mask)
    count += __builtin_popcountll(word);
  return count;
}
} // namespace

bool mlir::mantissa::rt::applyThreadSplit(Communicator &comm,
                                          ThreadSplit &split,
                                          std::string &error) {
  std::vector<uint64_t> mine = affinityMask(), machine;
  int ranksHere = 1;
  if (!comm.shareMachine(mine, machine, ranksHere, error))
    return false;
  // checkOpenMPEnvironment has accepted the variable: a list of positive
  // integers, whose first level is the threads of a team.
  const char *value = std::getenv("OMP_NUM_THREADS");
  long requested = value ? std::strtol(value, nullptr, 10) : 0;
  split =
      splitThreads(ranksHere, countCpus(mine), countCpus(machine), requested);
  split.dynamic = !std::getenv("OMP_DYNAMIC");
  if (split.dynamic) {
    if (setenv("OMP_DYNAMIC", "true", 1)) {
      error = "cannot set OMP_DYNAMIC for this rank's OpenMP threads";
      return false;
    }
    if (omp_set_dynamic)
      omp_set_dynamic(1);
  }
  if (requested > 0)
    return true;
  if (setenv("OMP_NUM_THREADS", std::to_string(split.threads).c_str(), 1)) {
    error = "cannot set OMP_NUM_THREADS for this rank's OpenMP threads";
    return false;
  }
  if (omp_set_num_threads)
    omp_set_num_threads(split.threads);
  return true;
}
