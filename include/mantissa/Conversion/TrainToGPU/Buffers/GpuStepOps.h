//===- GpuStepOps.h - How the GPU program runs a bufferized step -*- C++
//-*-===//
//
// What each op of a bufferized step becomes in the GPU program (a kernel, a
// GEMM, part of a GEMM, the attention kernels or nothing), and the marks by
// which the passes that plan its launches (mantissa-group-launches) and its
// arena (mantissa-pack-arena) tell the program builder what they decided.
// The passes and the builder read the step through these one definitions.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_TRAINTOGPU_BUFFERS_GPUSTEPOPS_H
#define MANTISSA_CONVERSION_TRAINTOGPU_BUFFERS_GPUSTEPOPS_H

#include "mantissa/Format/GpuProgram.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"

#include <optional>

namespace mlir::mantissa {

/// On a kernel op (a linalg op or loop nest the program runs as a generated
/// kernel): the launch it runs in, numbered in program order from 0, its
/// place among that launch's members, and its thread stride there (it runs
/// iteration i on thread i * stride). A launch runs where its first member
/// (in the step's order) is.
constexpr llvm::StringLiteral kGpuLaunchAttr = "mantissa.gpu_launch";
constexpr llvm::StringLiteral kGpuLaunchMemberAttr = "mantissa.gpu_member";
constexpr llvm::StringLiteral kGpuThreadStrideAttr =
    "mantissa.gpu_thread_stride";
/// On a kernel op that runs by rows in its launch: the columns of each row
/// (its iterations are rows of that many, row r on the thread-stride lanes
/// from r * stride, lane l running columns l, l + stride, ..., after a
/// barrier of the block).
constexpr llvm::StringLiteral kGpuRowColumnsAttr = "mantissa.gpu_row_columns";
/// On a memref.alloc: its offset in the arena of temporaries; on the step's
/// function: the arena's bytes.
constexpr llvm::StringLiteral kGpuArenaOffsetAttr = "mantissa.gpu_arena_offset";
constexpr llvm::StringLiteral kGpuArenaBytesAttr = "mantissa.gpu_arena_bytes";

/// Arena and constant offsets are multiples of this (cuBLAS and vector
/// loads want aligned operands).
constexpr int64_t kGpuBufferAlignment = 256;

/// The bytes of a buffer of `type` (at least one).
int64_t getGpuBufferBytes(MemRefType type);

/// What the GPU program makes of an op of a bufferized step.
struct GpuStepOpRole {
  enum class Kind {
    /// Allocations, deallocations, views, constants: nothing runs.
    Free,
    /// A generated kernel: a linalg op, or a loop nest (scf.for).
    Kernel,
    /// A cuBLAS(Lt) GEMM: the contraction, with the zero fill of its output
    /// it absorbs as beta = 0 and the elementwise op whose rounding (and
    /// bias) it computes in its epilogue, when there are.
    Gemm,
    /// The fill or the epilogue of the GEMM next to it.
    InGemm,
    /// train.attention_kernel: kernels of its own, in launches of its own.
    Attention,
  };
  Kind kind = Kind::Free;
  Operation *fill = nullptr, *epilogue = nullptr;
};

/// The role of every op of `body` (a bufferized step's function body).
/// Fails, with an error on the op, where an op has no lowering to the GPU
/// program.
FailureOr<llvm::DenseMap<Operation *, GpuStepOpRole>>
getGpuStepOpRoles(Block &body);

/// The views of buffers that the program's launch for an op of the step
/// reads and writes: none for ops of role Free and InGemm (a GEMM that
/// absorbs an epilogue writes the epilogue's output, not the contraction's
/// fp32 temporary).
struct GpuOpBuffers {
  SmallVector<Value> reads, writes;
};
GpuOpBuffers getGpuOpBuffers(Operation *op, const GpuStepOpRole &role);

/// The GEMM a contraction of role Gemm runs as (with its fill and epilogue);
/// `getBufferId` names the operands' base buffers.
std::optional<rt::GpuStepOp>
buildGpuGemm(linalg::LinalgOp op, const GpuStepOpRole &role,
             function_ref<int64_t(Value)> getBufferId);

/// The parts of a split reduction's fold (kGpuFoldPartsAttr) that a warp
/// can run as a tree of shuffles: a power of two within a warp, its
/// partials' view first and its output second, and one combining op on
/// 32-bit values, applied to the running value and a partial.
std::optional<int64_t> getTreeFoldParts(Operation *op);

/// The launch marks of a kernel op, when mantissa-group-launches set them.
struct GpuLaunchMark {
  int64_t launch, member, threadStride, rowColumns = 0;
};
std::optional<GpuLaunchMark> getGpuLaunchMark(Operation *op);

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_TRAINTOGPU_BUFFERS_GPUSTEPOPS_H
