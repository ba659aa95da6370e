//===- CpuGemm.h - The compiled CPU step's matrix products ------*- C++ -*-===//
//
// Part of the Mantissa project.
//
// The compiled CPU step (step.cpu.so) computes its matrix products by
// calling the runtime, which runs them with oneDNN: the step library itself
// links nothing but the OpenMP runtime, and it reaches this entry through a
// pointer the loader stores into it (kCpuGemmHookSymbol), so that artifacts
// carry no path to a library and the compiler's own evaluators and the
// LLVM-free runtime load steps the same way. The descriptor the step passes
// and the hook's name are the compiler's contract with it
// (mantissa/Format/CpuGemmAbi.h).
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_CPUGEMM_H
#define MANTISSA_RUNTIME_CPUGEMM_H

#include "mantissa/Format/CpuGemmAbi.h"

#include <cstdint>
#include <string>

extern "C" {

/// The entry the step calls: `descriptor`, A, B and C are addresses (the
/// step passes them as 64-bit integers). Deterministic: the result depends
/// on the shape and strides only, never on the number of threads.
void mantissa_rt_cpu_gemm(uintptr_t descriptor, uintptr_t a, uintptr_t b,
                          uintptr_t c);
}

namespace mlir::mantissa::rt {

/// Stores mantissa_rt_cpu_gemm into the hook of the dlopen'd `library`.
/// Returns whether the library has a hook (a library compiled with
/// generated loops for its products has none).
bool bindCpuGemm(void *library);

/// What oneDNN reports about itself (version and the CPU ISA it dispatches
/// to), for benchmarks and logs.
std::string describeCpuGemmLibrary();

/// Whether this runtime was built with oneDNN (CpuGemm.cpp) rather than
/// without (CpuGemmUnavailable.cpp: a step whose products call the library
/// is refused with kCpuGemmUnavailableMessage).
bool cpuGemmAvailable();
inline constexpr const char *kCpuGemmUnavailableMessage =
    "this runtime was built without oneDNN (libdnnl-dev), which the CPU "
    "step's matrix products call; rebuild the runtime with it, or compile "
    "the artifact with MANTISSA_CPU_GEMM=loops";

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_CPUGEMM_H
