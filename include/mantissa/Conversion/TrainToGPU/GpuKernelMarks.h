//===- GpuKernelMarks.h - Marks the host emulation reads --------*- C++ -*-===//
//
// The marks the GPU program's kernels (lib/Conversion/TrainToGPU/Codegen)
// carry for the host emulation (lib/Conversion/TrainToGPU/HostEmulation),
// which reads the very gpu.funcs that become the PTX: defined once, below
// both.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_TRAINTOGPU_GPUKERNELMARKS_H
#define MANTISSA_CONVERSION_TRAINTOGPU_GPUKERNELMARKS_H

#include "llvm/ADT/StringRef.h"

namespace mlir::mantissa {

/// Marks a kernel whose warps run in lockstep: its lanes exchange values
/// (shuffles, ballots, mma.sync, ldmatrix) inside loops and branches, all
/// of them uniform across the warp, and its barriers are at its top level
/// or directly in a loop there. The host emulation runs such a kernel a
/// warp at a time, its 32 lanes' operations side by side, the block's
/// warps one after the other between barriers.
constexpr llvm::StringLiteral kWarpLockstepAttr = "mantissa.warp_lockstep";

/// The PTX of one warp-wide bf16 matrix product m16n8k16 (row-major A,
/// column-major B, fp32 C and D), as the kernels emit it and the host
/// emulation recognises it.
constexpr llvm::StringLiteral kMmaBf16Asm =
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {$0,$1,$2,$3}, "
    "{$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};";

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_TRAINTOGPU_GPUKERNELMARKS_H
