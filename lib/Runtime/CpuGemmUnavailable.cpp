//===- CpuGemmUnavailable.cpp - The CPU step's products without oneDNN ----===//
//
// The runtime built without oneDNN (a GPU machine's runtime-only build, the
// fuzzers' copy of the readers): CpuGemm.h's entry points exist, say that
// the library is missing, and the CPU step's loader refuses a step whose
// products call it (CpuStep.cpp), before anything runs.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/CpuGemm.h"

#include <cstdio>
#include <cstdlib>

extern "C" void mantissa_rt_cpu_gemm(uintptr_t, uintptr_t, uintptr_t,
                                     uintptr_t) {
  // Unreachable through CpuStep::load, which refuses such a step first.
  std::fprintf(stderr, "mantissa: %s\n",
               mlir::mantissa::rt::kCpuGemmUnavailableMessage);
  std::abort();
}

bool mlir::mantissa::rt::cpuGemmAvailable() { return false; }

std::string mlir::mantissa::rt::describeCpuGemmLibrary() {
  return "none (this runtime was built without oneDNN)";
}

mlir::mantissa::rt::CpuGemmPath
mlir::mantissa::rt::cpuGemmPath(const int64_t *) {
  return CpuGemmPath::Loops; // refused at load (CpuStep.cpp)
}

std::string mlir::mantissa::rt::describeWidenedProducts(const std::string &) {
  return "";
}

void mlir::mantissa::rt::warnOfWidenedProductsOnce(const std::string &) {}
