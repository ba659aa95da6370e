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

/// How the runtime computes a product (one descriptor, MantissaCpuGemmField).
enum class CpuGemmPath {
  /// A oneDNN matmul primitive on the operands as they are.
  Library,
  /// bf16 operands oneDNN has no matmul for on this CPU (or under
  /// ONEDNN_MAX_CPU_ISA): each tile's operands are widened to fp32 in a
  /// packing step (exact) and run through oneDNN's fp32 matmul.
  Widened,
  /// Plain loops: oneDNN has no matmul for the layout in either type.
  Loops,
};

/// The path products of `descriptor` take on this CPU, as the runtime
/// decides it when a step first calls such a product: asking oneDNN, on the
/// running CPU and under its ISA limit, for a primitive. Decided when the
/// step runs rather than when it is compiled because the answer is the
/// running oneDNN's: the same artifact may run where oneDNN dispatches to
/// another ISA. The compiler's precision report asks the same question.
CpuGemmPath cpuGemmPath(const int64_t *descriptor);

/// `oneDNN bf16`, `oneDNN fp32`, `fp32 GEMM on widened bf16` or `loops`:
/// `path` for operands of descriptor type `type` (kGemmF32 or kGemmBF16).
inline const char *describeCpuGemmPath(CpuGemmPath path, int64_t type) {
  switch (path) {
  case CpuGemmPath::Library:
    return type == kGemmBF16 ? "oneDNN bf16" : "oneDNN fp32";
  case CpuGemmPath::Widened:
    return "fp32 GEMM on widened bf16";
  case CpuGemmPath::Loops:
    break;
  }
  return "loops";
}

/// The line a run prints (once, to stderr, prefixed `mantissa: warning: `)
/// when its first bf16 product is widened: because this CPU's oneDNN has no
/// bf16 matmul, or (`compiledFor` not empty) because the step was compiled
/// for that CPU, on which oneDNN has none (mantissa-widen-bf16-products).
std::string describeWidenedProducts(const std::string &compiledFor = "");

/// Prints `mantissa: warning: <line>` to stderr, the first time a run calls
/// it: the one line a run says about widened products, whether the compiler
/// widened them or the runtime.
void warnOfWidenedProductsOnce(const std::string &line);

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
