//===- TileTransposedReads.cpp - transposes a cache line at a time --------===//
//
// mantissa-tile-transposed-reads: an elementwise op on buffers that reads
// an input transposed (a transpose, a rounding in another layout) is split
// into strips of its innermost loop, each as wide as a cache line of its
// output; on an AVX2 CPU, f32 ops of that kind are computed in 8x8 blocks
// that AVX2 shuffles transpose in registers (Passes.td).
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToLLVM.h"
#include "mantissa/Conversion/TrainToLinalg/Passes.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Affine/Utils.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/X86Vector/Transforms.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

using namespace mlir;

namespace mlir::mantissa {
#define GEN_PASS_DEF_TILETRANSPOSEDREADSPASS
#include "mantissa/Conversion/TrainToLinalg/Passes.h.inc"
} // namespace mlir::mantissa

namespace {

/// The bytes of a cache line, which a strip of the output fills.
constexpr int64_t kCacheLineBytes = 64;

/// The side of the blocks AVX2 transposes in registers (8 f32 lanes).
constexpr int64_t kBlock = 8;

bool isLoop(AffineExpr expr, unsigned loop) {
  auto dim = dyn_cast<AffineDimExpr>(expr);
  return dim && dim.getPosition() == loop;
}

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
  // Every output is written contiguously along the innermost loop; the
  // narrowest element decides how many make a cache line.
  int64_t narrowestBits = 64;
  for (OpOperand &init : op.getDpsInitsMutable()) {
    AffineMap map = op.getMatchingIndexingMap(&init);
    auto type = dyn_cast<MemRefType>(init.get().getType());
    if (!type || !type.getElementType().isIntOrFloat() ||
        map.getNumResults() == 0 || !isLoop(map.getResults().back(), innermost))
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
      if (position + 1 < map.getNumResults() && isLoop(result, innermost))
        readsAcross = true;
  }
  int64_t width = kCacheLineBytes * 8 / narrowestBits;
  if (!readsAcross || ranges[innermost] <= width)
    return 0;
  return width;
}

/// How a block of the op reads an operand.
enum class Access {
  /// Along the innermost loop (O): one vector per row of the block.
  Row,
  /// Along the loop the transposed inputs walk contiguously (I), with O at
  /// another dimension: one vector per column, transposed in registers.
  Column,
  /// At an element that depends on neither loop: one value, broadcast.
  Scalar,
};

/// An op that computes in 8x8 blocks of (I, O): the loop I the transposed
/// inputs read contiguously (O is the innermost loop), and each operand the
/// body reads (inputs, and outputs whose values it uses) with its access.
struct BlockPlan {
  unsigned columnLoop = 0;
  SmallVector<std::pair<OpOperand *, Access>> reads;
};

/// Whether `map` indexes with loops and constants only.
bool isProjection(AffineMap map) {
  return llvm::all_of(map.getResults(), [](AffineExpr expr) {
    return isa<AffineDimExpr, AffineConstantExpr>(expr);
  });
}

/// How many of `map`'s results are `loop`.
unsigned countUses(AffineMap map, unsigned loop) {
  return llvm::count_if(map.getResults(),
                        [&](AffineExpr expr) { return isLoop(expr, loop); });
}

/// The blocks in which `op` (a strip candidate, strips `width` wide) can be
/// computed with AVX2 vectors: every operand f32, bf16 or f16 in memory
/// with a contiguous last dimension, read along O, along one loop I with O
/// elsewhere, or at an element that depends on neither; O a multiple of
/// the strip width and I of 8; a body of arith and math ops on its own
/// values.
std::optional<BlockPlan> planBlocks(linalg::LinalgOp op, int64_t width) {
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  unsigned rowLoop = op.getNumLoops() - 1;
  if (ranges[rowLoop] % width != 0)
    return std::nullopt;
  BlockPlan plan;
  std::optional<unsigned> columnLoop;
  SmallVector<AffineMap> scalarMaps;
  for (OpOperand &operand : op->getOpOperands()) {
    auto type = cast<MemRefType>(operand.get().getType());
    AffineMap map = op.getMatchingIndexingMap(&operand);
    Type element = type.getElementType();
    if (!(element.isF32() || element.isBF16() || element.isF16()) ||
        !isLastMemrefDimUnitStride(type) || !isProjection(map))
      return std::nullopt;
    bool isInit = op.isDpsInit(&operand);
    if (isInit && op.getMatchingBlockArgument(&operand).use_empty())
      continue;
    unsigned rowUses = countUses(map, rowLoop);
    if (rowUses == 1 && isLoop(map.getResults().back(), rowLoop)) {
      plan.reads.emplace_back(&operand, Access::Row);
      continue;
    }
    if (isInit)
      return std::nullopt;
    if (rowUses == 0) {
      // Neither O nor (checked below) I: one element per block.
      plan.reads.emplace_back(&operand, Access::Scalar);
      scalarMaps.push_back(map);
      continue;
    }
    auto last = dyn_cast<AffineDimExpr>(map.getResults().back());
    if (rowUses != 1 || !last || countUses(map, last.getPosition()) != 1 ||
        (columnLoop && *columnLoop != last.getPosition()))
      return std::nullopt;
    columnLoop = last.getPosition();
    plan.reads.emplace_back(&operand, Access::Column);
  }
  if (!columnLoop || ranges[*columnLoop] % kBlock != 0)
    return std::nullopt;
  plan.columnLoop = *columnLoop;
  if (llvm::any_of(scalarMaps,
                   [&](AffineMap map) { return countUses(map, *columnLoop); }))
    return std::nullopt;
  Block *body = op.getBlock();
  for (Operation &bodyOp : body->without_terminator()) {
    if (bodyOp.getNumRegions() != 0 ||
        !isa<arith::ArithDialect, math::MathDialect>(bodyOp.getDialect()) ||
        (!isa<arith::ConstantOp>(bodyOp) &&
         !OpTrait::hasElementwiseMappableTraits(&bodyOp)) ||
        llvm::any_of(bodyOp.getResultTypes(),
                     [](Type type) { return !type.isIntOrFloat(); }))
      return std::nullopt;
  }
  // Every value the body uses is its own.
  bool ownValues = true;
  body->walk([&](Operation *bodyOp) {
    for (Value value : bodyOp->getOperands())
      if (value.getParentBlock() != body)
        ownValues = false;
  });
  if (!ownValues)
    return std::nullopt;
  return plan;
}

/// The indices at which `map` (loops and constants) reads, with the loops'
/// values `ivs` (I and O already moved to the element's).
SmallVector<Value, 8> indicesOf(ImplicitLocOpBuilder &b, AffineMap map,
                                ArrayRef<Value> ivs) {
  return *affine::expandAffineMap(b, b.getLoc(), map, ivs);
}

/// Transposes the 8x8 block of `rows` (8 vectors of 8 f32, bf16 or f16) in
/// registers, with AVX2's 32-bit shuffles: 16-bit elements travel in the
/// low half of 32-bit lanes, so every bit pattern (NaN payloads included)
/// arrives unchanged.
void transposeBlock(ImplicitLocOpBuilder &b, MutableArrayRef<Value> rows) {
  auto type = cast<VectorType>(rows.front().getType());
  if (type.getElementType().isF32())
    return x86vector::avx2::transpose8x8xf32(b, rows);
  auto bits16 = type.clone(b.getI16Type());
  auto bits32 = type.clone(b.getI32Type());
  auto lanes = type.clone(b.getF32Type());
  for (Value &row : rows)
    row = b.create<arith::BitcastOp>(
        lanes, b.create<arith::ExtUIOp>(
                   bits32, b.create<arith::BitcastOp>(bits16, row)));
  x86vector::avx2::transpose8x8xf32(b, rows);
  for (Value &row : rows)
    row = b.create<arith::BitcastOp>(
        type, b.create<arith::TruncIOp>(
                  bits16, b.create<arith::BitcastOp>(bits32, row)));
}

/// `value` plus the constant `offset`.
Value offsetBy(ImplicitLocOpBuilder &b, Value value, int64_t offset) {
  if (offset == 0)
    return value;
  return b.create<arith::AddIOp>(value,
                                 b.create<arith::ConstantIndexOp>(offset));
}

/// Replaces `op` by loops over its blocks: the strips of O (`width` wide)
/// outermost, then every other loop in order (I in steps of 8), then the
/// 8-wide blocks of the strip. In a block, each column input's 8 vectors
/// along I are transposed into 8 along O (AVX2 shuffles), the body runs on
/// 8 rows of vectors, and each row is stored along O. Each element is still
/// computed by the same body from the same operands.
void emitBlocks(RewriterBase &rewriter, linalg::LinalgOp op,
                const BlockPlan &plan, int64_t width) {
  ImplicitLocOpBuilder b(op.getLoc(), rewriter);
  b.setInsertionPoint(op);
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  unsigned loops = op.getNumLoops();
  unsigned rowLoop = loops - 1;
  Value zero = b.create<arith::ConstantIndexOp>(0);

  SmallVector<Value> ivs(loops);
  auto strip = b.create<scf::ForOp>(
      zero, b.create<arith::ConstantIndexOp>(ranges[rowLoop]),
      b.create<arith::ConstantIndexOp>(width));
  b.setInsertionPointToStart(strip.getBody());
  Value stripStart = strip.getInductionVar();
  for (unsigned loop = 0; loop < rowLoop; ++loop) {
    int64_t step = loop == plan.columnLoop ? kBlock : 1;
    auto forOp = b.create<scf::ForOp>(
        zero, b.create<arith::ConstantIndexOp>(ranges[loop]),
        b.create<arith::ConstantIndexOp>(step));
    b.setInsertionPointToStart(forOp.getBody());
    ivs[loop] = forOp.getInductionVar();
  }
  auto blocks =
      b.create<scf::ForOp>(zero, b.create<arith::ConstantIndexOp>(width),
                           b.create<arith::ConstantIndexOp>(kBlock));
  b.setInsertionPointToStart(blocks.getBody());
  Value blockStart =
      b.create<arith::AddIOp>(stripStart, blocks.getInductionVar());
  Value columnStart = ivs[plan.columnLoop];

  // Each read operand's value in each of the 8 rows (I = start + row), as
  // vectors along O.
  SmallVector<SmallVector<Value, kBlock>> rows;
  for (auto [operand, access] : plan.reads) {
    AffineMap map = op.getMatchingIndexingMap(operand);
    auto vectorType = VectorType::get(
        {kBlock}, cast<MemRefType>(operand->get().getType()).getElementType());
    SmallVector<Value, kBlock> vectors;
    SmallVector<Value> at(ivs);
    at[rowLoop] = blockStart;
    switch (access) {
    case Access::Row:
      for (int64_t row = 0; row < kBlock; ++row) {
        at[plan.columnLoop] = offsetBy(b, columnStart, row);
        vectors.push_back(b.create<vector::LoadOp>(vectorType, operand->get(),
                                                   indicesOf(b, map, at)));
      }
      break;
    case Access::Column:
      for (int64_t column = 0; column < kBlock; ++column) {
        at[rowLoop] = offsetBy(b, blockStart, column);
        vectors.push_back(b.create<vector::LoadOp>(vectorType, operand->get(),
                                                   indicesOf(b, map, at)));
      }
      transposeBlock(b, vectors);
      break;
    case Access::Scalar: {
      Value scalar =
          b.create<memref::LoadOp>(operand->get(), indicesOf(b, map, at));
      vectors.assign(kBlock, b.create<vector::BroadcastOp>(vectorType, scalar));
      break;
    }
    }
    rows.push_back(vectors);
  }

  // The body's constants, broadcast once per block.
  Block *body = op.getBlock();
  IRMapping constants;
  for (auto constant : body->getOps<arith::ConstantOp>())
    constants.map(constant.getResult(),
                  b.create<vector::BroadcastOp>(
                      VectorType::get({kBlock}, constant.getType()),
                      b.clone(*constant)->getResult(0)));
  // The body on each row, its results stored along O.
  for (int64_t row = 0; row < kBlock; ++row) {
    IRMapping mapping = constants;
    for (auto [read, vectors] : llvm::zip(plan.reads, rows))
      mapping.map(op.getMatchingBlockArgument(read.first), vectors[row]);
    for (Operation &bodyOp : body->without_terminator()) {
      if (isa<arith::ConstantOp>(bodyOp))
        continue;
      SmallVector<Value> operands;
      for (Value value : bodyOp.getOperands())
        operands.push_back(mapping.lookup(value));
      SmallVector<Type> types;
      for (Type type : bodyOp.getResultTypes())
        types.push_back(VectorType::get({kBlock}, type));
      Operation *vectorOp =
          b.create(bodyOp.getLoc(), bodyOp.getName().getIdentifier(), operands,
                   types, bodyOp.getAttrs());
      mapping.map(bodyOp.getResults(), vectorOp->getResults());
    }
    SmallVector<Value> at(ivs);
    at[rowLoop] = blockStart;
    at[plan.columnLoop] = offsetBy(b, columnStart, row);
    for (auto [yielded, init] : llvm::zip(body->getTerminator()->getOperands(),
                                          op.getDpsInitsMutable()))
      b.create<vector::StoreOp>(
          mapping.lookup(yielded), init.get(),
          indicesOf(b, op.getMatchingIndexingMap(&init), at));
  }
  rewriter.eraseOp(op);
}

struct TileTransposedReadsPass
    : mantissa::impl::TileTransposedReadsPassBase<TileTransposedReadsPass> {
  using TileTransposedReadsPassBase::TileTransposedReadsPassBase;

  /// The CPU's features are looked up once, not for each of the step's
  /// hundreds of outlined functions.
  LogicalResult initialize(MLIRContext *) override {
    avx2 = !cpu.empty() && mantissa::cpuHasFeatures(cpu, {"avx2"});
    return success();
  }

  void runOnOperation() override {
    SmallVector<std::pair<linalg::LinalgOp, int64_t>> candidates;
    getOperation().walk([&](linalg::LinalgOp op) {
      if (int64_t width = stripWidth(op))
        candidates.emplace_back(op, width);
    });
    if (candidates.empty())
      return;
    IRRewriter rewriter(&getContext());
    for (auto [op, width] : candidates) {
      if (avx2)
        if (std::optional<BlockPlan> plan = planBlocks(op, width)) {
          emitBlocks(rewriter, op, *plan, width);
          continue;
        }
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
    (void)applyPatternsAndFoldGreedily(getOperation(),
                                       RewritePatternSet(&getContext()));
  }

private:
  bool avx2 = false;
};

} // namespace
