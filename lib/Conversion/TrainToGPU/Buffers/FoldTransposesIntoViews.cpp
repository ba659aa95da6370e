//===- FoldTransposesIntoViews.cpp - Transposes as strided views ----------===//
//
// mantissa-fold-transposes-into-views (Passes.td): a transpose into a
// temporary that is only read becomes a strided view of its input.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/GemmMatching.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_FOLDTRANSPOSESINTOVIEWSPASS
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// A transpose: `input` copied into `init` with `permutation` (dimension i
/// of `init` is dimension permutation[i] of `input`), as linalg.transpose
/// or as the linalg.generic it generalizes to (one input, one output, both
/// maps permutations, all loops parallel, a body that yields the input).
struct Transpose {
  Operation *op;
  Value input, init;
  SmallVector<int64_t> permutation;
};

std::optional<Transpose> matchTranspose(Operation *op) {
  if (auto transpose = dyn_cast<linalg::TransposeOp>(op))
    return Transpose{op, transpose.getInput(), transpose.getInit(),
                     SmallVector<int64_t>(transpose.getPermutation())};
  auto generic = dyn_cast<linalg::GenericOp>(op);
  if (!generic || generic.getNumDpsInputs() != 1 ||
      generic.getNumDpsInits() != 1 ||
      generic.getNumLoops() != generic.getNumParallelLoops() ||
      !generic.hasPureBufferSemantics())
    return std::nullopt;
  OpOperand *input = generic.getDpsInputOperand(0);
  OpOperand *init = generic.getDpsInitOperand(0);
  Block *body = generic.getBody();
  if (body->getOperations().size() != 1 ||
      body->getTerminator()->getOperand(0) != body->getArgument(0) ||
      getElementTypeOrSelf(input->get().getType()) !=
          getElementTypeOrSelf(init->get().getType()))
    return std::nullopt;
  AffineMap inputMap = generic.getMatchingIndexingMap(input);
  AffineMap initMap = generic.getMatchingIndexingMap(init);
  if (!inputMap.isPermutation() || !initMap.isPermutation())
    return std::nullopt;
  // Element x of the output is element (inputMap o initMap^-1)(x) of the
  // input: dimension k of the input is dimension q[k] of the output, so
  // dimension i of the output is dimension q^-1[i] of the input.
  AffineMap outputToInput = inputMap.compose(inversePermutation(initMap));
  AffineMap inverse = inversePermutation(outputToInput);
  SmallVector<int64_t> permutation;
  for (AffineExpr result : inverse.getResults())
    permutation.push_back(cast<AffineDimExpr>(result).getPosition());
  return Transpose{op, input->get(), init->get(), permutation};
}

/// Replaces each transpose (matchTranspose) into a temporary by a
/// memref.transpose view of its input, when the temporary is only read
/// afterwards (by linalg ops or attention kernels, directly or through
/// reshapes and transposes that the input's strides allow) and nothing
/// writes the input's buffer after the transpose: the copy then costs
/// nothing, GEMMs take the transposed operand as transa/transb and kernels
/// read through the strided view.
void foldTransposesIntoViews(func::FuncOp function) {
  Block &body = function.getBody().front();
  SmallVector<Operation *> transposes;
  for (Operation &op : body)
    if (matchTranspose(&op))
      transposes.push_back(&op);
  auto readByGemm = [](OpOperand *operand) {
    auto linalgOp = dyn_cast<linalg::LinalgOp>(operand->getOwner());
    return linalgOp && isGemm(linalgOp);
  };
  for (Operation *op : transposes) {
    // Matched again: folding an earlier transpose may have moved this one's
    // input onto a view.
    Transpose transpose = *matchTranspose(op);
    Value input = transpose.input;
    auto alloc = transpose.init.getDefiningOp<memref::AllocOp>();
    if (!alloc || alloc->getBlock() != &body)
      continue;
    Value inputBase = getBaseBuffer(input);
    bool inputWrittenLater = false;
    for (Operation *op = transpose.op->getNextNode(); op && !inputWrittenLater;
         op = op->getNextNode())
      inputWrittenLater = writesBuffer(op, inputBase);
    if (inputWrittenLater)
      continue;
    OpBuilder builder(transpose.op);
    AffineMap permutation = AffineMap::getPermutationMap(
        SmallVector<unsigned>(transpose.permutation.begin(),
                              transpose.permutation.end()),
        builder.getContext());
    auto view = builder.create<memref::TransposeOp>(
        transpose.op->getLoc(), input, AffineMapAttr::get(permutation));
    if (view.getType().getShape() != alloc.getType().getShape()) {
      view.erase();
      continue;
    }
    ReadRedirection redirection;
    bool folded = redirection.collect(alloc, view, transpose.op);
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
    transpose.op->erase();
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
