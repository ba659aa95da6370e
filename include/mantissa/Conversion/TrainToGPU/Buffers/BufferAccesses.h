//===- BufferAccesses.h - What ops of a bufferized step touch ---*- C++ -*-===//
//
// The buffers that ops of a bufferized step read and write, by base buffer,
// shared by the GPU step's transforms that move ops or their outputs.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_TRAINTOGPU_BUFFERS_BUFFERACCESSES_H
#define MANTISSA_CONVERSION_TRAINTOGPU_BUFFERS_BUFFERACCESSES_H

#include "mlir/IR/AffineMap.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallVector.h"

namespace mlir::arith {
class TruncFOp;
} // namespace mlir::arith
namespace mlir::linalg {
class GenericOp;
} // namespace mlir::linalg

namespace mlir::mantissa {

/// On an scf.for nest of a bufferized step: how many of its outer loops
/// (perfectly nested) a GPU kernel may run one iteration per thread of,
/// because distinct iterations touch distinct elements of what they write,
/// which the transform that built the nest knows and an analysis of the
/// accesses cannot see (mantissa-segment-scatter-accumulations).
constexpr llvm::StringLiteral kGpuParallelLoopsAttr =
    "mantissa.gpu_parallel_loops";
/// With it: the loop iterations each such thread runs in order, for reports
/// (absent: one).
constexpr llvm::StringLiteral kGpuSerialIterationsAttr =
    "mantissa.gpu_serial_iterations";
/// On the linalg.generic that folds a split reduction's partials
/// (mantissa-split-reductions): how many partials each output element
/// folds. Its first input holds them as [output..., part] in row-major
/// order, each written by the thread of the partials' generic that
/// computed it, so the GPU program may fold them in the same launch, each
/// lane of a warp loading the partial it computed, the warp's shuffles
/// combining them.
constexpr llvm::StringLiteral kGpuFoldPartsAttr = "mantissa.gpu_fold_parts";

/// Bytes per stored element (i1 is stored in a byte).
int64_t getStorageBytes(Type element);

/// Whether `op` only makes a view of a buffer (ViewLikeOpInterface,
/// memref.transpose, memref.cast).
bool isViewOp(Operation *op);

/// The buffer `value` views: a function argument, memref.alloc or
/// memref.get_global.
Value getBaseBuffer(Value value);

/// Whether every use of the temporary `base` (through views) is one of
/// `allowed` or its deallocation.
bool isOnlyUsedBy(Value base, ArrayRef<Operation *> allowed);

/// Whether `op` (or an op nested in it: linalg outputs, stores, copies)
/// writes any view of `base`.
bool writesBuffer(Operation *op, Value base);

/// The base buffers an op (and the ops nested in it) reads and writes.
struct BufferAccesses {
  llvm::SmallSetVector<Value, 8> reads, writes;
  /// False when it touches memory in a way this does not follow (calls,
  /// unknown ops): then it must be treated as touching everything.
  bool known = true;

  static BufferAccesses of(Operation *op);
  bool touches(Value base) const {
    return !known || reads.contains(base) || writes.contains(base);
  }
};

/// Whether `op` reads the result of the contraction just before it
/// (allocations, views and constants in between do not count): the GPU
/// program folds such an op into the GEMM's epilogue (cuBLASLt writes the
/// rounded result), so it must stay as it is and where it is.
bool isGemmEpilogueCandidate(Operation *op);

/// The truncf of an elementwise rounding: a generic whose loops are all
/// parallel, with one input and one output on buffers, both indexed by
/// permutations, whose body only yields its input rounded; null for any
/// other op.
arith::TruncFOp getElementRounding(linalg::GenericOp op);

/// `view` (expand_shape, collapse_shape, memref.transpose or a static
/// subview) applied to
/// `source` instead of its own source, its layout recomputed, built at the
/// builder's insertion point; null when the view cannot take that source's
/// strides.
Value rebuildView(OpBuilder &builder, Operation *view, Value source);

/// An operand of an elementwise op seen from loops that split each of the
/// op's loops into several (a reshape of its iteration space): the operand
/// expanded along each dimension the op indexes by a loop as that loop is
/// (a dimension indexed by a constant stays), and its map from the new
/// loops. `loops[j]` lists the new loops of loop j, outermost first;
/// `loopMap` gives each new loop's expression and `loopSizes` its extent.
struct ExpandedOperand {
  SmallVector<SmallVector<int64_t, 2>> groups;
  SmallVector<int64_t> shape;
  AffineMap map;
  /// Whether any dimension is split (else the operand is read as it is).
  bool expands = false;
};
ExpandedOperand expandOperand(AffineMap map, ArrayRef<int64_t> operandShape,
                              ArrayRef<SmallVector<int64_t, 2>> loops,
                              AffineMap loopMap, ArrayRef<int64_t> loopSizes);

/// The linalg reads of a temporary, directly or through views, moved onto
/// another buffer of the same shape (a strided view of another buffer):
/// the views rebuilt on it, in order, and each read with the value it
/// read before and the one it reads now.
struct ReadRedirection {
  SmallVector<Operation *> oldViews, newViews;
  struct Read {
    OpOperand *operand;
    Value before, after;
  };
  SmallVector<Read> reads;

  /// Collects the readers of `value` (skipping `writer` and deallocations)
  /// as readers of `replacement`, rebuilding the views in between (each
  /// where the view it replaces is); false when a use is neither an input
  /// of a linalg op or of an attention kernel nor a view that takes
  /// `replacement`'s strides.
  bool collect(Value value, Value replacement, Operation *writer);
  /// Points the reads at their new values, or back at the old ones.
  void apply(bool redirected);
  /// Erases the views no longer used: the new ones or the old ones.
  void eraseViews(bool newOnes);
};

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_TRAINTOGPU_BUFFERS_BUFFERACCESSES_H
