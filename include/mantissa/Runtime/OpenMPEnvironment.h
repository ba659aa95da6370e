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

#include <string>

namespace mlir::mantissa::rt {

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

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_OPENMPENVIRONMENT_H
