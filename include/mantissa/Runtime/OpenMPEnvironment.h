//===- OpenMPEnvironment.h - OpenMP settings checked at start-up -*- C++
//-*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The compiled CPU step, its products (CpuGemm.cpp) and the host update run
// on LLVM's OpenMP runtime (libomp), which reads OMP_NUM_THREADS when it
// first starts a thread team, in the middle of the first step. libomp 19
// misparses what is not a list of positive integers: "abc" and "" end in an
// assertion, "2,abc" and "0x10" allocate until the machine runs out of
// memory ("Out of heap memory" after 13 GB), numbers past its thread limit
// assert. The runners therefore check the variable before anything starts
// OpenMP, and refuse a value OpenMP does not define, naming the variable.
//
// One thread pool, although two OpenMP runtimes are mapped: oneDNN (Debian's
// libdnnl) was built with GNU OpenMP and needs libgomp.so.1, which the loader
// maps and initialises (its constructor only reads the environment, and
// warns about a bad OMP_NUM_THREADS before main runs). libmantissa_rt links
// libomp before oneDNN, and libomp defines every GOMP_* and omp_* symbol
// oneDNN imports (GOMP_parallel, GOMP_barrier, omp_get_max_threads,
// omp_get_num_threads, omp_get_thread_num, omp_in_parallel) under GNU's
// symbol versions, so the loader binds them all to libomp: no call ever
// reaches libgomp, which starts no thread. test/Runtime/openmp-environment.test
// checks those bindings with LD_DEBUG=bindings LD_BIND_NOW=1.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_OPENMPENVIRONMENT_H
#define MANTISSA_RUNTIME_OPENMPENVIRONMENT_H

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

class Communicator;

/// The most threads a level of OMP_NUM_THREADS may ask for: more than any
/// machine runs, and far below where libomp's own checks assert.
constexpr long kMaxOpenMPThreads = 65536;

/// Checks `value`, an OMP_NUM_THREADS setting: a comma-separated list of
/// positive decimal integers (one per nesting level, blanks allowed around
/// each), each at most kMaxOpenMPThreads. On failure `error` says what is
/// wrong, without the variable's name.
bool checkOpenMPThreadCount(const std::string &value, std::string &error);

/// Checks the process's OMP_NUM_THREADS, if set (checkOpenMPThreadCount);
/// `error` names the variable and its value. Call it first in main, before
/// anything can start an OpenMP thread team.
bool checkOpenMPEnvironment(std::string &error);

/// How many OpenMP threads each rank of a launch runs. mpirun starts its
/// ranks with no thread count of their own, and libomp gives each as many
/// threads as its affinity mask has CPUs: unbound ranks (mpirun -np 3 and
/// more, or --bind-to none) would each run one thread per CPU of the
/// machine, W times more threads than CPUs, whose barriers then wait on
/// descheduled threads. So a rank runs its share of the CPUs the machine's
/// ranks may use together, and no more than its own mask has: with ranks
/// bound to one core each (OpenMPI's default for -np 2) that is one thread,
/// with unbound ranks the CPUs divided by the ranks. OMP_NUM_THREADS, when
/// set, is the user's choice and is kept.
struct ThreadSplit {
  /// The launch's ranks on this machine, this one included.
  int ranksHere = 1;
  /// CPUs in this rank's affinity mask, and in the union of the masks of the
  /// ranks on this machine.
  int rankCpus = 1, machineCpus = 1;
  /// The first level of OMP_NUM_THREADS (0: unset).
  long requested = 0;
  /// The OpenMP threads this rank runs.
  int threads = 1;
  /// OMP_NUM_THREADS asks for more threads than the CPUs there are for them:
  /// more than this rank's mask, or ranks x threads above the machine's.
  bool oversubscribed = false;
  /// Thread teams shrink while other processes keep the CPUs busy (OpenMP's
  /// dynamic adjustment; libomp's default mode on Linux counts the running
  /// threads of the machine, "load_balance"). Set unless the user set
  /// OMP_DYNAMIC. Without it, a team of two on a machine whose other core
  /// is busy waits at every barrier for its descheduled thread: a 16 ms
  /// llama_medium step took 76-140 ms at load 8 on 2 cores, 56 ms with it
  /// (the 1-thread step: 39-52 ms). Results do not depend on the team size
  /// (every parallel loop writes disjoint elements, and CpuGemm's tiles
  /// depend on the shape only), so the bits stay the same.
  bool dynamic = false;
};

/// The split for `ranksHere` ranks with these CPU counts (ThreadSplit);
/// `requested` is OMP_NUM_THREADS's first level, 0 when unset.
ThreadSplit splitThreads(int ranksHere, int rankCpus, int machineCpus,
                         long requested);

/// "2 ranks on this machine, 1 OpenMP thread each (2 CPUs)": the start-up
/// line's words for the split.
std::string describeThreadSplit(const ThreadSplit &split);

/// The warning for an oversubscribing OMP_NUM_THREADS (empty when the split
/// does not oversubscribe).
std::string threadSplitWarning(const ThreadSplit &split);

/// This process's affinity mask (sched_getaffinity), as bits indexed by CPU
/// number.
std::vector<uint64_t> affinityMask();

/// Chooses this rank's OpenMP threads (splitThreads: its affinity mask, the
/// ranks sharing its machine from `comm`, OMP_NUM_THREADS) and sets them
/// when OMP_NUM_THREADS is unset, for libomp, oneDNN and an OpenMP runtime
/// loaded later with the compiled step. A collective: every rank calls it,
/// after checkOpenMPEnvironment and before the first step.
bool applyThreadSplit(Communicator &comm, ThreadSplit &split,
                      std::string &error);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_OPENMPENVIRONMENT_H
