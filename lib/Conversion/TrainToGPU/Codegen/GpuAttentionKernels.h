//===- GpuAttentionKernels.h - Fused attention on the tensor cores -*- C++
//-*-===//
//
// The kernels of a fused attention (docs/gpu-step.md, "Fused attention"):
// the forward, and the backward as two kernels (queries, then keys and
// values), each warp a tile of 16 rows, a block's warps sharing the other
// side's rows of each step in shared memory, the matrix products on the
// tensor cores (mma.sync m16n8k16, bf16 operands, fp32 sums), the softmax
// online, no [S, S] tensor in memory.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_LIB_CONVERSION_TRAINTOGPU_CODEGEN_GPUATTENTIONKERNELS_H
#define MANTISSA_LIB_CONVERSION_TRAINTOGPU_CODEGEN_GPUATTENTIONKERNELS_H

#include "mantissa/Conversion/TrainToGPU/GpuKernelMarks.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include <array>
#include <string>

namespace mlir::mantissa {

/// One tensor the attention kernels read or write: a buffer of `elements`
/// elements of `elementType`, whose element (batch, head, row, column) is at
/// `offset + batch * strides[0] + head * strides[1] + row * strides[2] +
/// column * strides[3]` (a stride 0 broadcasts, as the mask does over
/// batches and heads). Rows are positions in the sequence; columns the head
/// dimension (keys for the mask).
struct AttentionOperand {
  Type elementType;
  int64_t elements = 0;
  int64_t offset = 0;
  std::array<int64_t, 4> strides = {0, 0, 0, 0};
};

/// Masked attention of `batch` x `heads` sequences of `sequence`
/// positions, head dimension `headDim`: scores = bf16(bf16(q k^T) * scale)
/// (the products rounded as the bf16 bmm and its scaling round them; in
/// fp32 with `fp32Scores`),
/// -inf where `mask` is true, softmax along the keys in fp32, out = p v.
/// The backward takes dout and gives dq, dk, dv, with
/// delta = rowsum(dout * out) (fp32) as the softmax's backward term. q, k,
/// v, out, dout, dq, dk, dv are bf16; the mask i1 (none, without an element
/// type: every key visible to every query, and no mask argument); lse and
/// delta fp32, dense [batch, heads, sequence].
struct AttentionKernelSpec {
  int64_t batch = 1, heads = 1, sequence = 0, headDim = 0;
  double scale = 1.0;
  /// The scores' gradient rounded to bf16 before it is scaled
  /// (train.attention_kernel's rounded_gradient).
  bool roundedGradient = false;
  /// The scores q k^T * scale and dp = dout v^T kept in fp32, as torch's
  /// SDPA kernels keep them (train.attention_kernel's fp32_scores).
  bool fp32Scores = false;
  AttentionOperand q, k, v, mask, out, lse, dout, delta, dq, dk, dv;
};

enum class AttentionKernel {
  /// (q, k, v, mask, out, lse): out, and each row's log-sum-exp of its
  /// scores (-inf for a row the mask closes).
  Forward,
  /// (q, k, v, mask, out, dout, lse, delta, dq): delta, then dq.
  BackwardQuery,
  /// (q, k, v, mask, dout, lse, delta, dk, dv), after BackwardQuery.
  BackwardKeyValue,
};

/// Why the kernels cannot run `spec` (empty when they can): the head
/// dimension a multiple of 8 up to 128 (any sequence), the operands'
/// dtypes, and every element inside its buffer.
std::string whyAttentionKernelsCannotRun(const AttentionKernelSpec &spec);

/// One argument of an attention kernel: an operand's buffer as its
/// elements, or as pairs of neighbouring columns (`pairs`: bf16 pairs as
/// i32, the mask's bytes as i16), which an operand whose columns are
/// contiguous and whose every pair starts at an even element also has.
struct AttentionArgument {
  const AttentionOperand *operand;
  bool pairs;
};

/// The arguments of kernel `kind`: each of its operands, in the order
/// AttentionKernel lists them, and after it its pairs where it has them.
SmallVector<AttentionArgument>
getAttentionKernelArguments(AttentionKernel kind,
                            const AttentionKernelSpec &spec);

/// Whether kernel `kind` writes `operand`.
bool isWrittenByAttentionKernel(AttentionKernel kind,
                                const AttentionKernelSpec &spec,
                                const AttentionOperand *operand);

/// What one attention kernel's launch does, for reports and the cost model.
struct AttentionLaunch {
  /// Blocks, and the warps that do work (one per 16 rows of a sequence).
  int64_t grid = 0, warps = 0;
  /// Steps of 32 each warp takes on average (the mask taken for causal,
  /// the others skipped, where it is one [S, S] for every batch and head;
  /// for closing nothing, every step, where it is per batch or head or
  /// absent), and what one step issues per lane: its weighted instructions
  /// (GpuStepOp::opsPerIteration) and its mma.sync.
  double stepsPerWarp = 0;
  int64_t opsPerStep = 0, mmasPerStep = 0;
  /// The launch's tensor-core flops (under a causal mask, where it has one).
  int64_t tensorFlops() const;
};

/// Appends kernel `kind` of `spec` as gpu.func `name` to `gpuModule` (a
/// flat memref argument per getAttentionKernelArguments, and workgroup
/// memory for the shared tiles), marked kWarpLockstepAttr, for blocks of
/// `blockSize` threads (a multiple of 32): a block per blockSize / 32
/// tiles of 16 rows of a sequence.
AttentionLaunch buildAttentionKernel(gpu::GPUModuleOp gpuModule, StringRef name,
                                     AttentionKernel kind,
                                     const AttentionKernelSpec &spec,
                                     int64_t blockSize);

/// Everything that makes kernel `kind` of `spec` what it is (its
/// operands' layouts, the shapes, the scale), as text: two kernels with the
/// same description are the same gpu.func.
std::string describeAttentionKernel(AttentionKernel kind,
                                    const AttentionKernelSpec &spec);

} // namespace mlir::mantissa

#endif // MANTISSA_LIB_CONVERSION_TRAINTOGPU_CODEGEN_GPUATTENTIONKERNELS_H
