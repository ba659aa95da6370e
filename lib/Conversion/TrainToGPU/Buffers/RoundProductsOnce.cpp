//===- RoundProductsOnce.cpp - A product's rounding where it is computed --===//
//
// mantissa-round-products-once (Passes.td): an fp32 matrix product that
// every reader rounds to bf16 (fp16) on the way in is rounded once, by an op
// of its own right after it, which the GPU program then computes in the
// GEMM's epilogue: the product is written and read in the narrow dtype.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_ROUNDPRODUCTSONCEPASS
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;

namespace {

/// The rounding `use` (an input of a linalg.generic) goes through, when all
/// the reader does with the value is round it: the truncf of its block
/// argument.
arith::TruncFOp getRounding(OpOperand &use) {
  auto reader = dyn_cast<linalg::GenericOp>(use.getOwner());
  if (!reader || !reader.isDpsInput(&use))
    return {};
  BlockArgument argument = reader.getMatchingBlockArgument(&use);
  if (!argument.hasOneUse())
    return {};
  return dyn_cast<arith::TruncFOp>(*argument.getUsers().begin());
}

/// Whether `op` only rounds its one input, element for element, into its
/// result.
bool isRounding(linalg::GenericOp op) {
  Block *body = op.getBody();
  return op.getNumDpsInputs() == 1 && op.getNumResults() == 1 &&
         op.getNumParallelLoops() == op.getNumLoops() &&
         llvm::all_of(op.getIndexingMapsArray(),
                      [](AffineMap map) { return map.isIdentity(); }) &&
         body->getOperations().size() == 2 &&
         isa<arith::TruncFOp>(body->front()) &&
         body->front().getOperand(0) == body->getArgument(0) &&
         body->getTerminator()->getOperand(0) == body->front().getResult(0);
}

/// The readers' uses of `value`, through reshapes, in `uses`, and the
/// reshapes in `reshapes` (in order); false when something else reads it.
bool collectReaders(Value value, SmallVectorImpl<OpOperand *> &uses,
                    SmallVectorImpl<Operation *> &reshapes) {
  for (OpOperand &use : value.getUses()) {
    Operation *user = use.getOwner();
    if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(user)) {
      reshapes.push_back(user);
      if (!collectReaders(user->getResult(0), uses, reshapes))
        return false;
      continue;
    }
    uses.push_back(&use);
  }
  return true;
}

void roundOnce(linalg::LinalgOp product, IRRewriter &rewriter) {
  Value sums = product->getResult(0);
  auto type = dyn_cast<RankedTensorType>(sums.getType());
  if (!type || !type.getElementType().isF32() || sums.use_empty())
    return;
  SmallVector<OpOperand *> uses;
  SmallVector<Operation *> reshapes;
  if (!collectReaders(sums, uses, reshapes) || uses.empty())
    return;
  Type narrow;
  for (OpOperand *use : uses) {
    arith::TruncFOp rounding = getRounding(*use);
    if (!rounding || (narrow && rounding.getType() != narrow))
      return;
    narrow = rounding.getType();
  }
  Location loc = product.getLoc();
  rewriter.setInsertionPointAfter(product);
  Value empty = rewriter.create<tensor::EmptyOp>(loc, type.getShape(), narrow);
  AffineMap identity = rewriter.getMultiDimIdentityMap(type.getRank());
  auto rounded = rewriter.create<linalg::GenericOp>(
      loc, TypeRange{empty.getType()}, ValueRange{sums}, ValueRange{empty},
      ArrayRef<AffineMap>{identity, identity},
      SmallVector<utils::IteratorType>(type.getRank(),
                                       utils::IteratorType::parallel),
      [&](OpBuilder &nested, Location bodyLoc, ValueRange arguments) {
        nested.create<linalg::YieldOp>(
            bodyLoc,
            nested.create<arith::TruncFOp>(bodyLoc, narrow, arguments[0])
                .getResult());
      });
  // The reshapes reshape the rounded tensor; the readers read it as it is.
  rewriter.replaceAllUsesExcept(sums, rounded->getResult(0), rounded);
  for (Operation *reshape : reshapes) {
    auto reshaped = cast<RankedTensorType>(reshape->getResult(0).getType());
    reshape->getResult(0).setType(reshaped.clone(narrow));
  }
  for (OpOperand *use : uses) {
    arith::TruncFOp rounding = getRounding(*use);
    auto reader = cast<linalg::GenericOp>(use->getOwner());
    // A reader that only rounds (the graph's own rounding of the product)
    // is the new rounding.
    if (use->get() == rounded->getResult(0) && isRounding(reader)) {
      rewriter.replaceOp(reader, rounded->getResults());
      continue;
    }
    BlockArgument argument = reader.getMatchingBlockArgument(use);
    argument.setType(narrow);
    rounding.getResult().replaceAllUsesWith(argument);
    rewriter.eraseOp(rounding);
  }
}

struct RoundProductsOncePass
    : mantissa::impl::RoundProductsOncePassBase<RoundProductsOncePass> {
  void runOnOperation() override {
    // Generic contractions (a product whose operands' roundings fused into
    // it) and named ones (linalg.matmul of operands already narrow).
    SmallVector<linalg::LinalgOp> products;
    getOperation().walk([&](linalg::LinalgOp op) {
      if (op->getNumResults() == 1 && linalg::isaContractionOpInterface(op))
        products.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    for (linalg::LinalgOp product : products)
      roundOnce(product, rewriter);
  }
};

} // namespace
