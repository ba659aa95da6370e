//===- FuseElementwiseKeepingProducts.cpp - fusion after widening ---------===//
//
// mantissa-fuse-elementwise-keeping-products: linalg's elementwise fusion
// of single-reader producers into their readers, except into matrix
// products, which must stay contractions the GEMM library call matches
// (Passes.td). Runs after mantissa-widen-bf16-products, whose fp32
// products and widened operands leave elementwise chains that the first
// fusion could not join (a product's bf16 result rounded, then widened
// into a gradient).
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/GemmMatching.h"
#include "mantissa/Conversion/TrainToLinalg/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

using namespace mlir;

namespace mlir::mantissa {
#define GEN_PASS_DEF_FUSEELEMENTWISEKEEPINGPRODUCTSPASS
#include "mantissa/Conversion/TrainToLinalg/Passes.h.inc"
} // namespace mlir::mantissa

namespace {

struct FuseElementwiseKeepingProductsPass
    : mantissa::impl::FuseElementwiseKeepingProductsPassBase<
          FuseElementwiseKeepingProductsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    linalg::ControlFusionFn control = [](OpOperand *fused) {
      Operation *producer = fused->get().getDefiningOp();
      auto consumer = dyn_cast<linalg::LinalgOp>(fused->getOwner());
      return producer && producer->hasOneUse() && consumer &&
             !mantissa::isMatrixProduct(consumer);
    };
    linalg::populateElementwiseOpsFusionPatterns(patterns, control);
    if (failed(
            applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
