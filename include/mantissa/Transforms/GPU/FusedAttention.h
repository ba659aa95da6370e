//===- FusedAttention.h - What the fused attention kernels run --*- C++ -*-===//
//
// The shapes the fused attention's kernels take (GpuAttentionKernels.h),
// checked once here for mantissa-fuse-attention, which only fuses what the
// kernels can run, and for the kernels themselves. It lives with the
// rewrite (lib/Transforms/GPU), the earlier stage of the pipeline: the code
// generator includes it, not the reverse.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_TRANSFORMS_GPU_FUSEDATTENTION_H
#define MANTISSA_TRANSFORMS_GPU_FUSEDATTENTION_H

#include "llvm/Support/FormatVariadic.h"
#include <cstdint>
#include <string>

namespace mlir::mantissa {

/// Rows (of a sequence) each warp owns, and the columns one step of its
/// loop covers.
constexpr int64_t kAttentionTileRows = 16;
constexpr int64_t kAttentionStepColumns = 32;

/// Why the kernels cannot run attention over `sequence` positions with
/// heads of `headDim` (empty when they can): the head dimension in 8-column
/// tiles (the last 8 of an odd number a k of 16 half zeros), its fragments
/// in registers. Any sequence: rows and
/// columns past its end (in the last warp's 16 rows, the last step's 32
/// columns) are closed and not stored.
inline std::string whyAttentionShapeIsUnsupported(int64_t sequence,
                                                  int64_t headDim) {
  if (sequence <= 0)
    return llvm::formatv("the sequence ({0}) is empty", sequence);
  if (headDim <= 0 || headDim % 8 != 0 || headDim > 128)
    return llvm::formatv(
        "the head dimension ({0}) is not a multiple of 8 up to 128", headDim);
  return "";
}

} // namespace mlir::mantissa

#endif // MANTISSA_TRANSFORMS_GPU_FUSEDATTENTION_H
