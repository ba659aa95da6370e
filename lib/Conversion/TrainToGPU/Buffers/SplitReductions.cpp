//===- SplitReductions.cpp - Long reductions in two deterministic steps ---===//
//
// mantissa-split-reductions (Passes.td): a reduction whose every output
// element a GPU thread would fold over a long row, one element after the
// other, folds it in P interleaved partial sums first (threads side by side
// read side by side), then each output folds its P partials in order.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/GemmMatching.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Utils/Utils.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_SPLITREDUCTIONSPASS
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// Below this many iterations per output element a thread's serial loop
/// costs less than the two launches a split adds.
constexpr int64_t kMinReduction = 128;
/// At most this many threads after the split (a few waves of an H200).
constexpr int64_t kMaxThreads = int64_t(1) << 20;

/// The reduction a split needs: the combining op (associative, with an
/// identity) that the body applies last, to the output's running value:
/// an fp32 sum, max or min, or an integer sum.
struct Combiner {
  Operation *op;
  /// The identity of the combining op in the accumulator's type.
  TypedAttr identity;
};

std::optional<Combiner> getCombiner(linalg::GenericOp op) {
  if (op.getNumDpsInits() != 1 || op.getNumResults() != 0)
    return std::nullopt;
  Block *body = op.getBody();
  BlockArgument accumulator = body->getArguments().back();
  Value yielded = body->getTerminator()->getOperand(0);
  Operation *combine = yielded.getDefiningOp();
  if (!combine || combine->getBlock() != body || !accumulator.hasOneUse() ||
      accumulator.getUses().begin()->getOwner() != combine)
    return std::nullopt;
  Builder builder(op.getContext());
  // Integer sums (a count of targets) are exact in any order.
  if (auto integer = dyn_cast<IntegerType>(accumulator.getType());
      integer && isa<arith::AddIOp>(combine))
    return Combiner{combine, builder.getIntegerAttr(integer, 0)};
  auto type = dyn_cast<FloatType>(accumulator.getType());
  if (!type || !type.isF32())
    return std::nullopt;
  double identity;
  if (isa<arith::AddFOp>(combine))
    identity = -0.0; // x + -0.0 == x for every x, -0.0 included
  else if (isa<arith::MaximumFOp, arith::MaxNumFOp>(combine))
    identity = -std::numeric_limits<double>::infinity();
  else if (isa<arith::MinimumFOp, arith::MinNumFOp>(combine))
    identity = std::numeric_limits<double>::infinity();
  else
    return std::nullopt;
  // The fast-math flags of the sum must not allow reassociation already
  // assumed elsewhere; plain ops only.
  if (auto fastMath = dyn_cast<arith::ArithFastMathInterface>(combine))
    if (fastMath.getFastMathFlagsAttr().getValue() !=
        arith::FastMathFlags::none)
      return std::nullopt;
  return Combiner{combine, builder.getFloatAttr(type, identity)};
}

/// Splits `op` along its innermost reduction loop into `parts` interleaved
/// partials: iteration i of that loop goes to partial i mod parts.
void split(linalg::GenericOp op, unsigned loop, int64_t parts,
           const Combiner &combiner) {
  MLIRContext *context = op.getContext();
  OpBuilder builder(op);
  Location loc = op.getLoc();
  unsigned numLoops = op.getNumLoops();
  OpOperand *init = op.getDpsInitOperand(0);
  Value output = init->get();
  AffineMap outputMap = op.getMatchingIndexingMap(init);
  auto outputType = cast<MemRefType>(output.getType());

  // The partials: the output's shape (as the output map indexes it) and
  // one more dimension, the part.
  SmallVector<int64_t> partialShape(outputType.getShape());
  partialShape.push_back(parts);
  auto partialType = MemRefType::get(partialShape, outputType.getElementType());
  Value partials = builder.create<memref::AllocOp>(loc, partialType);
  Value identity =
      builder.create<arith::ConstantOp>(loc, combiner.identity).getResult();
  builder.create<linalg::FillOp>(loc, identity, partials);

  // The first step's loops: the op's, the split loop now counting rows of
  // `parts` (d_loop), and one more parallel loop, the part (d_numLoops):
  // the op's loop index is d_loop * parts + d_numLoops. Each input that
  // the split loop indexes is seen with that dimension expanded into
  // (rows, parts).
  AffineExpr part = getAffineDimExpr(numLoops, context);
  SmallVector<Value> inputs;
  SmallVector<AffineMap> maps;
  for (OpOperand *input : op.getDpsInputOperands()) {
    AffineMap map = op.getMatchingIndexingMap(input);
    SmallVector<AffineExpr> results;
    Value value = input->get();
    auto type = cast<MemRefType>(value.getType());
    std::optional<unsigned> position =
        map.getResultPosition(getAffineDimExpr(loop, context));
    for (auto [index, expr] : llvm::enumerate(map.getResults())) {
      results.push_back(expr);
      if (position && index == *position)
        results.push_back(part);
    }
    if (position) {
      SmallVector<ReassociationIndices> groups;
      SmallVector<int64_t> shape;
      for (unsigned dim = 0, e = type.getRank(); dim < e; ++dim) {
        unsigned next = shape.size();
        if (dim == *position) {
          groups.push_back({next, next + 1});
          shape.push_back(type.getDimSize(dim) / parts);
          shape.push_back(parts);
        } else {
          groups.push_back({next});
          shape.push_back(type.getDimSize(dim));
        }
      }
      FailureOr<MemRefType> expanded =
          memref::ExpandShapeOp::computeExpandedType(type, shape, groups);
      value =
          builder.create<memref::ExpandShapeOp>(loc, *expanded, value, groups);
    }
    inputs.push_back(value);
    maps.push_back(AffineMap::get(numLoops + 1, 0, results, context));
  }
  SmallVector<AffineExpr> partialResults(outputMap.getResults());
  partialResults.push_back(part);
  maps.push_back(AffineMap::get(numLoops + 1, 0, partialResults, context));
  SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
  iterators.push_back(utils::IteratorType::parallel);
  auto first = builder.create<linalg::GenericOp>(
      loc, TypeRange(), inputs, ValueRange{partials}, maps, iterators);
  // The same body: it reads the same elements, in the part's order.
  IRMapping mapping;
  op.getRegion().cloneInto(&first.getRegion(), mapping);

  // The second step: each output element folds its partials in order.
  unsigned outputRank = outputType.getRank();
  AffineMap partialIdentity =
      AffineMap::getMultiDimIdentityMap(outputRank + 1, context);
  AffineMap outputIdentity = partialIdentity.dropResult(outputRank);
  SmallVector<utils::IteratorType> secondIterators(
      outputRank, utils::IteratorType::parallel);
  secondIterators.push_back(utils::IteratorType::reduction);
  auto second = builder.create<linalg::GenericOp>(
      loc, TypeRange(), ValueRange{partials}, ValueRange{output},
      ArrayRef<AffineMap>{partialIdentity, outputIdentity}, secondIterators,
      [&](OpBuilder &nested, Location bodyLoc, ValueRange arguments) {
        // The running value first, as the op combined it.
        Operation *combined = nested.clone(*combiner.op);
        unsigned accumulatorOperand =
            combiner.op->getOperand(0) == op.getBody()->getArguments().back()
                ? 0
                : 1;
        combined->setOperand(accumulatorOperand, arguments[1]);
        combined->setOperand(1 - accumulatorOperand, arguments[0]);
        nested.create<linalg::YieldOp>(bodyLoc, combined->getResult(0));
      });
  second->setAttr(mantissa::kGpuFoldPartsAttr,
                  builder.getI64IntegerAttr(parts));
  builder.create<memref::DeallocOp>(loc, partials);
  op.erase();
}

struct SplitReductionsPass
    : mantissa::impl::SplitReductionsPassBase<SplitReductionsPass> {
  void runOnOperation() override {
    SmallVector<linalg::GenericOp> candidates;
    getOperation().walk([&](linalg::GenericOp op) {
      if (op.hasPureBufferSemantics() && !op.hasDynamicShape() &&
          op.getNumReductionLoops() > 0)
        candidates.push_back(op);
    });
    for (linalg::GenericOp op : candidates) {
      // The body must not ask where it is (linalg.index would see the
      // split loop's new numbering); matrix products (rows and columns)
      // are GEMMs on the GPU. Row-by-row dot products (a norm gain's
      // gradient) are not.
      if (!op.getBody()->getOps<linalg::IndexOp>().empty())
        continue;
      if (isMatrixProduct(op))
        continue;
      std::optional<Combiner> combiner = getCombiner(op);
      if (!combiner)
        continue;
      SmallVector<int64_t> ranges = op.getStaticLoopRanges();
      int64_t threads = 1, reduction = 1;
      std::optional<unsigned> innermost;
      for (auto [index, iterator] :
           llvm::enumerate(op.getIteratorTypesArray())) {
        if (linalg::isParallelIterator(iterator)) {
          threads *= ranges[index];
        } else {
          reduction *= ranges[index];
          innermost = index;
        }
      }
      if (reduction < kMinReduction || !innermost)
        continue;
      // Each input indexes the split loop as one whole dimension or not at
      // all (an expression of it cannot be expanded).
      AffineExpr splitDim = getAffineDimExpr(*innermost, op.getContext());
      bool plain = llvm::all_of(op.getDpsInputOperands(), [&](OpOperand *in) {
        AffineMap map = op.getMatchingIndexingMap(in);
        return llvm::count(map.getResults(), splitDim) <= 1 &&
               llvm::all_of(map.getResults(), [&](AffineExpr expr) {
                 return expr == splitDim || !expr.isFunctionOfDim(*innermost);
               });
      });
      if (!plain)
        continue;
      // The split loop is the innermost reduction loop; its parts are as
      // many as divide it, at most a warp, keeping each part at least 8 long.
      int64_t parts = 32;
      while (parts > 1 &&
             (ranges[*innermost] % parts != 0 ||
              ranges[*innermost] / parts < 8 || threads * parts > kMaxThreads))
        parts /= 2;
      if (parts < 4)
        continue;
      split(op, *innermost, parts, *combiner);
    }
  }
};

} // namespace
