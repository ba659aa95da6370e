//===- GpuVectorAccesses.h - Consecutive iterations as vectors --*- C++ -*-===//
//
// A launch of elementwise members may give each thread `width` consecutive
// iterations of each member's loops, whose loads and stores along a
// contiguous dimension are then one aligned vector access each (128 bits
// where the element allows): what the launch builder (GpuKernels.cpp)
// asks of a member, the width it picks, and the rewrite of the copies it
// emitted (docs/gpu-step.md).
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_LIB_CONVERSION_TRAINTOGPU_CODEGEN_GPUVECTORACCESSES_H
#define MANTISSA_LIB_CONVERSION_TRAINTOGPU_CODEGEN_GPUVECTORACCESSES_H

#include "mantissa/Format/GpuProgram.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace mlir::mantissa {

/// Bytes a thread loads or stores at once: 128 bits, the widest global
/// access of sm_90 (ld.global.v4.b32), and the alignment the runtime
/// requires of every argument's and result's storage.
constexpr int64_t kVectorAccessBytes = rt::kGpuStorageAlignment;

/// What a member whose threads each run one iteration of `loops` (its
/// whole nest, perfectly nested, innermost last) offers to a thread that
/// runs consecutive iterations of the innermost loop instead.
struct VectorCandidates {
  /// A load or store at the top of the innermost loop's body whose index
  /// along one dimension of unit stride is the loop's induction variable
  /// (and whose other indices do not depend on it), so that consecutive
  /// iterations touch consecutive elements.
  struct Access {
    Operation *op;
    /// Bytes per element.
    int64_t elementBytes;
    /// The index of that dimension.
    size_t dimension;
    /// A divisor of the first element's position whenever the induction
    /// variable is a multiple of it (the gcd of the view's offset, its
    /// other strides and the loop's lower bound); 0 when that is 0.
    int64_t alignment;
  };
  SmallVector<Access> accesses;
  /// The innermost loop's trip count.
  int64_t tripCount = 0;
};

/// The candidates of member `function` (its threads each running one
/// iteration of `loops`), or failure when a thread may not run several
/// consecutive iterations of the innermost loop: a loop bound that is not
/// static, a step other than 1, or an op with effects other than loads and
/// stores. The caller checks that `loops` is the member's whole nest.
FailureOr<VectorCandidates> findVectorCandidates(func::FuncOp function,
                                                 ArrayRef<scf::ForOp> loops);

/// The iterations each thread of a launch runs consecutively: the most
/// (up to kVectorAccessBytes of the narrowest candidate's elements) that
/// divides every member's innermost trip count and the alignment of some
/// candidate; 1 when there is none.
int64_t chooseVectorWidth(ArrayRef<VectorCandidates> members);

/// Whether `access` of width `width` is one vector access.
bool isVectorAccess(const VectorCandidates::Access &access, int64_t width);

/// Replaces the `copies` (consecutive iterations, in order, emitted one
/// after the other in one block; copy j's index along the access's
/// contiguous dimension, `dimension`, is copy 0's plus j) of a vector
/// access by vector
/// loads or stores of at most kVectorAccessBytes each: the loads at copy
/// 0's place, each copy reading its element from them; the stores at the
/// last copy's place. Every iteration of a member touches elements no
/// other touches (its threads run them in any order), and
/// findVectorCandidates keeps a load after which its iteration stores to
/// the same buffer, or a store before which it loads it, out, so the moves
/// keep what each element holds.
void fuseCopiesIntoVectors(ArrayRef<Operation *> copies, size_t dimension);

/// `loc` marked as a vector access's, which alignVectorAccesses aligns.
Location getVectorAccessLoc(Location loc);

/// Gives the vector loads and stores fuseCopiesIntoVectors made (and those
/// at getVectorAccessLoc), once
/// lowered to the LLVM dialect in `gpuModule`, their vector's alignment:
/// the lowering takes the element's, with which LLVM would split them.
void alignVectorAccesses(gpu::GPUModuleOp gpuModule);

} // namespace mlir::mantissa

#endif // MANTISSA_LIB_CONVERSION_TRAINTOGPU_CODEGEN_GPUVECTORACCESSES_H
