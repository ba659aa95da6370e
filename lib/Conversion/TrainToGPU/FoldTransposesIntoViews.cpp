//===- FoldTransposesIntoViews.cpp - Transposes as strided views ----------===//
//
// mantissa-fold-transposes-into-views (Passes.td): a transpose into a
// temporary that is only read becomes a strided view of its input.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/BufferAccesses.h"
#include "mantissa/Conversion/GemmMatching.h"
#include "mantissa/Conversion/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_FOLDTRANSPOSESINTOVIEWSPASS
#include "mantissa/Conversion/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// Replaces each linalg.transpose into a temporary by a memref.transpose
/// view of its input, when the temporary is only read afterwards (by linalg
/// ops, directly or through reshapes and transposes that the input's
/// strides allow) and nothing writes the input's buffer after the
/// transpose: the copy then costs nothing, GEMMs take the transposed
/// operand as transa/transb and kernels read through the strided view.
void foldTransposesIntoViews(func::FuncOp function) {
  Block &body = function.getBody().front();
  SmallVector<linalg::TransposeOp> transposes;
  for (Operation &op : body)
    if (auto transpose = dyn_cast<linalg::TransposeOp>(op))
      transposes.push_back(transpose);
  auto readByGemm = [](OpOperand *operand) {
    return isGemm(cast<linalg::LinalgOp>(operand->getOwner()));
  };
  for (linalg::TransposeOp transpose : transposes) {
    Value input = transpose.getInput();
    auto alloc = transpose.getInit().getDefiningOp<memref::AllocOp>();
    if (!alloc || alloc->getBlock() != &body)
      continue;
    Value inputBase = getBaseBuffer(input);
    bool inputWrittenLater = false;
    for (Operation *op = transpose->getNextNode(); op && !inputWrittenLater;
         op = op->getNextNode())
      inputWrittenLater = writesBuffer(op, inputBase);
    if (inputWrittenLater)
      continue;
    OpBuilder builder(transpose);
    AffineMap permutation = AffineMap::getPermutationMap(
        SmallVector<unsigned>(transpose.getPermutation()),
        builder.getContext());
    auto view = builder.create<memref::TransposeOp>(
        transpose.getLoc(), input, AffineMapAttr::get(permutation));
    if (view.getType().getShape() != alloc.getType().getShape()) {
      view.erase();
      continue;
    }
    ReadRedirection redirection;
    bool folded = redirection.collect(alloc, view, transpose);
    if (folded) {
      // Readers that are GEMMs must stay GEMMs (a contraction that cuBLAS
      // cannot take runs far slower as a kernel than a transpose costs).
      SmallVector<bool> wasGemm;
      for (ReadRedirection::Read &read : redirection.reads)
        wasGemm.push_back(readByGemm(read.operand));
      redirection.apply(/*redirected=*/true);
      for (auto [read, gemm] : llvm::zip_equal(redirection.reads, wasGemm))
        folded &= !gemm || readByGemm(read.operand);
      if (!folded)
        redirection.apply(/*redirected=*/false);
    }
    if (!folded) {
      redirection.eraseViews(/*newOnes=*/true);
      view.erase();
      continue;
    }
    redirection.eraseViews(/*newOnes=*/false);
    transpose.erase();
    for (Operation *user : llvm::make_early_inc_range(alloc->getUsers()))
      user->erase();
    alloc.erase();
  }
}

struct FoldTransposesIntoViewsPass
    : mantissa::impl::FoldTransposesIntoViewsPassBase<
          FoldTransposesIntoViewsPass> {
  void runOnOperation() override {
    if (!getOperation().getBody().empty())
      foldTransposesIntoViews(getOperation());
  }
};

} // namespace
