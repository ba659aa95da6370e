//===- CpuGemm.h - The compiled CPU step's matrix products -------*- C++
//-*-===//
//
// Part of the Mantissa project.
//
// The compiled CPU step (step.cpu.so) computes its matrix products by
// calling the runtime, which runs them with oneDNN: the step library itself
// links nothing but the OpenMP runtime, and it reaches this entry through a
// pointer the loader stores into it (kCpuGemmHookSymbol), so that artifacts
// carry no path to a library and the compiler's own evaluators and the
// LLVM-free runtime load steps the same way.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_CPUGEMM_H
#define MANTISSA_RUNTIME_CPUGEMM_H

#include <cstdint>
#include <string>

extern "C" {

/// The layout of the descriptor array of int64 values that the step passes
/// for each product (a constant of the step library):
///   C[b][i][j] += sum_k A[b][i][k] * B[b][k][j]   for b < batch, i < m,
///   j < n, with every operand at `element stride` distances
///   (C must have unit stride along j), accumulating in fp32.
/// Changing it changes kCpuGemmAbi.
enum MantissaCpuGemmField : int {
  kGemmAbi = 0,
  kGemmTypeA,
  kGemmTypeB,
  kGemmTypeC,
  kGemmBatch,
  kGemmM,
  kGemmN,
  kGemmK,
  kGemmStrideABatch,
  kGemmStrideAM,
  kGemmStrideAK,
  kGemmStrideBBatch,
  kGemmStrideBK,
  kGemmStrideBN,
  kGemmStrideCBatch,
  kGemmStrideCM,
  kGemmStrideCN,
  kGemmFieldCount
};

/// Element types of the descriptor's kGemmType* fields.
enum MantissaCpuGemmType : int64_t { kGemmF32 = 0, kGemmBF16 = 1 };

/// The entry the step calls: `descriptor`, A, B and C are addresses (the
/// step passes them as 64-bit integers). Deterministic: the result depends
/// on the shape and strides only, never on the number of threads.
void mantissa_rt_cpu_gemm(uintptr_t descriptor, uintptr_t a, uintptr_t b,
                          uintptr_t c);

/// The type of mantissa_rt_cpu_gemm, and of the step library's hook.
typedef void (*MantissaCpuGemmFunction)(uintptr_t, uintptr_t, uintptr_t,
                                        uintptr_t);
}

namespace mlir::mantissa::rt {

/// The version of the descriptor above, written into step.cpu.json
/// ("cpu_gemm_abi") by the compiler and checked by the loader.
constexpr int64_t kCpuGemmAbi = 1;

/// The exported global of a step library whose products call the runtime:
/// a MantissaCpuGemmFunction the loader sets before the first call.
constexpr const char *kCpuGemmHookSymbol = "mantissa_cpu_gemm_hook";

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
