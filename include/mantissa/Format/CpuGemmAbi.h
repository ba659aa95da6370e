//===- CpuGemmAbi.h - How the compiled CPU step calls its GEMM --*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The compiled CPU step (step.cpu.so) computes each matrix product by
// calling, through a hook the loader sets, the runtime's GEMM
// (mantissa/Runtime/CpuGemm.h) with a descriptor of int64 values. The
// compiler writes the descriptors and the hook into the step
// (CallGemmLibrary.cpp) and the descriptor's version into step.cpu.json;
// the runtime reads them: the one definition of that ABI.
//
// Part of mantissa_format: no LLVM, MLIR or runtime headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_FORMAT_CPUGEMMABI_H
#define MANTISSA_FORMAT_CPUGEMMABI_H

#include <array>
#include <cstdint>

extern "C" {

/// The layout of the descriptor array of int64 values that the step passes
/// for each product (a constant of the step library):
///   C[b][i][j] += sum_k A[b][i][k] * B[b][k][j]   for b < batch, i < m,
///   j < n, with every operand at `element stride` distances
///   (C must have unit stride along j), accumulating in fp32; with
///   kGemmAccumulate 0, C[b][i][j] = sum_k ... instead (C's old values are
///   never read: the compiler gives that to a product whose output was
///   filled with +0.0 just before, and drops the fill); with kGemmRoundC 1,
///   each element of C is then rounded to bf16 (the compiler gives that to
///   a product whose only reader rounded it so into another buffer, which
///   the product then writes): kept in fp32 for an fp32 C, stored as bf16
///   for a bf16 C (kGemmTypeC kGemmBF16, only with kGemmRoundC 1 and
///   kGemmAccumulate 0: the sums are fp32 either way).
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
  /// 1: C += A * B; 0: C = A * B.
  kGemmAccumulate,
  /// 1: each element of C, once summed, is rounded to bf16 and kept in
  /// fp32 (to nearest even, NaN to the quiet NaN 0x7fc0: arith.truncf then
  /// arith.extf, as the step's loops and torch round), or stored as bf16
  /// where C is bf16 (arith.truncf); 0: C as summed.
  kGemmRoundC,
  kGemmFieldCount
};

/// Element types of the descriptor's kGemmType* fields.
enum MantissaCpuGemmType : int64_t { kGemmF32 = 0, kGemmBF16 = 1 };

/// The type of mantissa_rt_cpu_gemm, and of the step library's hook.
typedef void (*MantissaCpuGemmFunction)(uintptr_t, uintptr_t, uintptr_t,
                                        uintptr_t);
}

namespace mlir::mantissa::rt {

/// The version of the descriptor above (MantissaCpuGemmField), written into
/// step.cpu.json ("cpu_gemm_abi") by the compiler and checked by the loader.
/// Version 2 adds kGemmAccumulate, version 3 kGemmRoundC, version 4 a bf16
/// C (written rounded).
constexpr int64_t kCpuGemmAbi = 4;

/// The descriptor of a product of dense row-major operands, A [batch][m][k]
/// and B [batch][k][n] of element type `type`, into C [batch][m][n] in fp32,
/// written (not accumulated): the product the compiler and the precision
/// report ask the library about.
inline std::array<int64_t, kGemmFieldCount>
denseGemmDescriptor(int64_t type, int64_t batch, int64_t m, int64_t n,
                    int64_t k) {
  std::array<int64_t, kGemmFieldCount> d{};
  d[kGemmAbi] = kCpuGemmAbi;
  d[kGemmTypeA] = d[kGemmTypeB] = type;
  d[kGemmTypeC] = kGemmF32;
  d[kGemmBatch] = batch;
  d[kGemmM] = m;
  d[kGemmN] = n;
  d[kGemmK] = k;
  d[kGemmStrideABatch] = m * k;
  d[kGemmStrideAM] = k;
  d[kGemmStrideAK] = 1;
  d[kGemmStrideBBatch] = k * n;
  d[kGemmStrideBK] = n;
  d[kGemmStrideBN] = 1;
  d[kGemmStrideCBatch] = m * n;
  d[kGemmStrideCM] = n;
  d[kGemmStrideCN] = 1;
  d[kGemmAccumulate] = 0;
  d[kGemmRoundC] = 0;
  return d;
}

/// The exported global of a step library whose products call the runtime:
/// a MantissaCpuGemmFunction the loader sets before the first call.
constexpr const char *kCpuGemmHookSymbol = "mantissa_cpu_gemm_hook";

} // namespace mlir::mantissa::rt

#endif // MANTISSA_FORMAT_CPUGEMMABI_H
