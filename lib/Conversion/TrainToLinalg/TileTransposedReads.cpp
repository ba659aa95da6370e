//===- TileTransposedReads.cpp - transposes a cache line at a time --------===//
//
// mantissa-tile-transposed-reads: an elementwise op on buffers that reads
// an input transposed (a transpose, a rounding in another layout) is split
// into strips of its innermost loop, each as wide as a cache line of its
// output (Passes.td).
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToLinalg/Passes.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

using namespace mlir;

namespace mlir::mantissa {
#define GEN_PASS_DEF_TILETRANSPOSEDREADSPASS
#include "mantissa/Conversion/TrainToLinalg/Passes.h.inc"
} // namespace mlir::mantissa

namespace {

/// The bytes of a cache line, which a strip of the output fills.
constexpr int64_t kCacheLineBytes = 64;

/// The strip width of `op`'s innermost loop, or 0 where `op` is not an
/// all-parallel op on static buffers that writes along its innermost loop
/// and reads some input across it.
int64_t stripWidth(linalg::LinalgOp op) {
  if (!op.hasPureBufferSemantics() || op.getNumLoops() < 2 ||
      op.getNumParallelLoops() != op.getNumLoops() || op.getNumDpsInits() == 0)
    return 0;
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (llvm::any_of(ranges, ShapedType::isDynamic))
    return 0;
  unsigned innermost = op.getNumLoops() - 1;
  auto isInnermost = [&](AffineExpr expr) {
    auto dim = dyn_cast<AffineDimExpr>(expr);
    return dim && dim.getPosition() == innermost;
  };
  // Every output is written contiguously along the innermost loop; the
  // narrowest element decides how many make a cache line.
  int64_t narrowestBits = 64;
  for (OpOperand &init : op.getDpsInitsMutable()) {
    AffineMap map = op.getMatchingIndexingMap(&init);
    auto type = dyn_cast<MemRefType>(init.get().getType());
    if (!type || !type.getElementType().isIntOrFloat() ||
        map.getNumResults() == 0 || !isInnermost(map.getResults().back()))
      return 0;
    narrowestBits =
        std::min<int64_t>(narrowestBits, type.getElementTypeBitWidth());
  }
  if (narrowestBits < 8)
    return 0;
  // Some input reads the innermost loop along another dimension than its
  // last: each of its loads lands in another cache line.
  bool readsAcross = false;
  for (OpOperand *input : op.getDpsInputOperands()) {
    AffineMap map = op.getMatchingIndexingMap(input);
    for (auto [position, result] : llvm::enumerate(map.getResults()))
      if (position + 1 < map.getNumResults() && isInnermost(result))
        readsAcross = true;
  }
  int64_t width = kCacheLineBytes * 8 / narrowestBits;
  if (!readsAcross || ranges[innermost] <= width)
    return 0;
  return width;
}

struct TileTransposedReadsPass
    : mantissa::impl::TileTransposedReadsPassBase<TileTransposedReadsPass> {
  void runOnOperation() override {
    SmallVector<std::pair<linalg::LinalgOp, int64_t>> candidates;
    getOperation().walk([&](linalg::LinalgOp op) {
      if (int64_t width = stripWidth(op))
        candidates.emplace_back(op, width);
    });
    IRRewriter rewriter(&getContext());
    for (auto [op, width] : candidates) {
      SmallVector<int64_t> sizes(op.getNumLoops(), 0);
      sizes.back() = width;
      linalg::LinalgTilingOptions options;
      options.setTileSizes(sizes).setLoopType(
          linalg::LinalgTilingLoopType::Loops);
      rewriter.setInsertionPoint(op);
      if (failed(linalg::tileLinalgOp(rewriter, op, options))) {
        op.emitError("mantissa-tile-transposed-reads could not tile this op");
        return signalPassFailure();
      }
      rewriter.eraseOp(op);
    }
    // The tiling's constants, one of each.
    if (!candidates.empty())
      (void)applyPatternsAndFoldGreedily(getOperation(),
                                         RewritePatternSet(&getContext()));
  }
};

} // namespace
