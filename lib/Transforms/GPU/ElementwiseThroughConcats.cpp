//===- ElementwiseThroughConcats.cpp - Elementwise ops on each part -------===//
//
// mantissa-elementwise-through-concats (Passes.td): an elementwise op that
// reads a `train.cat` (only it) runs on each of the cat's parts, with the
// matching slices of its other operands, and the cat joins the results; a
// slice of an elementwise op whose every reader slices it takes the
// slices of its operands instead, and a slice that is one part of a cat is
// that part. RoPE's `x * cos + cat(-x2, x1) * sin` becomes
// `cat(x1 * cos1 - x2 * sin1, x2 * cos2 + x1 * sin2)`: two elementwise
// kernels that write the halves of the result, where the GPU step had a
// kernel for the negation, one for the cat's copies and one for the sum.
// A slice_scatter whose kept parts then go through the tensor it writes
// into is a cat, and the roundings of views of one tensor round the tensor
// once: RoPE's backward, which adds into the halves of g * cos, becomes a
// cat of two elementwise halves rounded to bf16, whose views carry bf16.
//
//===----------------------------------------------------------------------===//

#include "TrainElementwise.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Transforms/GPU/Passes.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_ELEMENTWISETHROUGHCONCATSPASS
#include "mantissa/Transforms/GPU/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// Whether `op` reads a matrix product (through views): the GEMM's
/// epilogue may absorb it whole (a bias add), which its slices would not
/// be.
bool readsProduct(Operation *op) {
  return llvm::any_of(op->getOperands(), [](Value operand) {
    while (auto view = operand.getDefiningOp<train::ViewOp>())
      operand = view.getInput();
    return isa_and_present<train::MatmulOp, train::BatchMatmulOp,
                           train::AddmmOp>(operand.getDefiningOp());
  });
}

RankedTensorType getStaticType(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && type.hasStaticShape() ? type : RankedTensorType();
}

/// `value` along its dimension `dim` restricted to [start, end), step 1,
/// at the builder's point.
Value createSlice(RewriterBase &rewriter, Location loc, Value value,
                  int64_t dim, int64_t start, int64_t end) {
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] = end - start;
  return rewriter.create<train::SliceOp>(
      loc, RankedTensorType::get(shape, type.getElementType()), value,
      rewriter.getI64IntegerAttr(dim), rewriter.getI64IntegerAttr(start),
      rewriter.getI64IntegerAttr(end), rewriter.getI64IntegerAttr(1));
}

/// `op`'s result along its dimension `dim` restricted to [start, start +
/// size): `op` cloned on the slices of its operands (an operand broadcast
/// along `dim` as it is; `part` in place of operand `whole`, which is
/// that slice already), at the builder's point.
Value sliceElementwise(RewriterBase &rewriter, Operation *op, int64_t dim,
                       int64_t start, int64_t size, Value whole = nullptr,
                       Value part = nullptr) {
  auto type = cast<RankedTensorType>(op->getResult(0).getType());
  Location loc = op->getLoc();
  SmallVector<Value> operands;
  for (Value operand : op->getOperands()) {
    if (whole && operand == whole) {
      operands.push_back(part);
      continue;
    }
    auto operandType = cast<RankedTensorType>(operand.getType());
    int64_t aligned = dim - (type.getRank() - operandType.getRank());
    if (aligned < 0 || operandType.getDimSize(aligned) == 1) {
      operands.push_back(operand);
      continue;
    }
    operands.push_back(
        createSlice(rewriter, loc, operand, aligned, start, start + size));
  }
  Operation *sliced = rewriter.clone(*op);
  sliced->setOperands(operands);
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] = size;
  sliced->getResult(0).setType(
      RankedTensorType::get(shape, type.getElementType()));
  return sliced->getResult(0);
}

/// A slice along one dimension with step 1: its dimension, start and size;
/// false when `slice` is not one.
bool getUnitSlice(train::SliceOp slice, int64_t &dim, int64_t &start,
                  int64_t &size) {
  RankedTensorType input = getStaticType(slice.getInput());
  RankedTensorType result = getStaticType(slice.getResult());
  if (!input || !result || slice.getStep() != 1)
    return false;
  // The dialect verifies the dimension, and the result's extent along it.
  dim = slice.getDim();
  start = train::normalizeSliceBound(slice.getStart(), input.getDimSize(dim));
  size = result.getDimSize(dim);
  return true;
}

/// Whether every reader of `producer` but `except` is a unit slice along
/// `dim`, no two of them, nor any of them and `ranges`, sharing an element.
bool readersSliceDisjointly(Operation *producer, int64_t dim,
                            SmallVector<std::pair<int64_t, int64_t>> ranges,
                            Operation *except = nullptr) {
  for (Operation *user : producer->getUsers()) {
    if (user == except)
      continue;
    auto other = dyn_cast<train::SliceOp>(user);
    int64_t otherDim, otherStart, otherSize;
    if (!other || !getUnitSlice(other, otherDim, otherStart, otherSize) ||
        otherDim != dim)
      return false;
    ranges.push_back({otherStart, otherStart + otherSize});
  }
  llvm::sort(ranges);
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      return false;
  return true;
}

/// E(..., cat(a_1, ..., a_n), ...) -> cat(E(..., a_1, ...), ..., E(..., a_n,
/// ...)), the other operands sliced to each part.
bool rewriteElementwiseOfConcat(Operation *op, RewriterBase &rewriter) {
  if (!isTrainElementwise(op) || readsProduct(op))
    return false;
  RankedTensorType type = getStaticType(op->getResult(0));
  if (!type)
    return false;
  for (Value operand : op->getOperands()) {
    auto concat = operand.getDefiningOp<train::ConcatOp>();
    RankedTensorType concatType = concat ? getStaticType(concat) : nullptr;
    if (!concatType || !concat->hasOneUse() ||
        concatType.getRank() != type.getRank() ||
        llvm::any_of(concat.getInputs(), [&](Value input) {
          RankedTensorType inputType = getStaticType(input);
          return !inputType ||
                 inputType.getElementType() != concatType.getElementType();
        }))
      continue;
    int64_t dim = concat.getDim();
    if (concatType.getDimSize(dim) != type.getDimSize(dim))
      continue;
    SmallVector<Value> parts;
    int64_t start = 0;
    rewriter.setInsertionPoint(op);
    for (Value input : concat.getInputs()) {
      int64_t size = getStaticType(input).getDimSize(dim);
      parts.push_back(
          sliceElementwise(rewriter, op, dim, start, size, operand, input));
      start += size;
    }
    rewriter.replaceOpWithNewOp<train::ConcatOp>(
        op, type, parts, rewriter.getI64IntegerAttr(dim));
    rewriter.eraseOp(concat);
    return true;
  }
  return false;
}

/// slice(E(x, y)) -> E(slice(x), slice(y)) when E's readers are all unit
/// slices along one dimension, no two of which overlap (no work is
/// repeated).
bool rewriteSliceOfElementwise(train::SliceOp slice, RewriterBase &rewriter) {
  Operation *producer = slice.getInput().getDefiningOp();
  int64_t dim, start, size;
  if (!producer || !isTrainElementwise(producer) || readsProduct(producer) ||
      !getStaticType(producer->getResult(0)) ||
      !getUnitSlice(slice, dim, start, size))
    return false;
  if (!readersSliceDisjointly(producer, dim, {}))
    return false;
  rewriter.setInsertionPoint(slice);
  rewriter.replaceOp(slice,
                     sliceElementwise(rewriter, producer, dim, start, size));
  if (producer->use_empty())
    rewriter.eraseOp(producer);
  return true;
}

/// slice(cat(a, b, ...)) -> a when the slice is exactly one part.
bool rewriteSliceOfConcat(train::SliceOp slice, RewriterBase &rewriter) {
  auto concat = slice.getInput().getDefiningOp<train::ConcatOp>();
  int64_t dim, start, size;
  if (!concat || !getStaticType(concat) ||
      !getUnitSlice(slice, dim, start, size))
    return false;
  if (int64_t(concat.getDim()) != dim)
    return false;
  int64_t offset = 0;
  for (Value input : concat.getInputs()) {
    RankedTensorType type = getStaticType(input);
    if (!type)
      return false;
    if (offset == start && type == getStaticType(slice.getResult())) {
      rewriter.replaceOp(slice, input);
      if (concat->use_empty())
        rewriter.eraseOp(concat);
      return true;
    }
    offset += type.getDimSize(dim);
  }
  return false;
}

/// The range [start, start + size) along `dim` that `scatter` writes, step
/// 1, in a tensor of static shape; false when it is not one.
bool getUnitScatter(train::SliceScatterOp scatter, int64_t &dim, int64_t &start,
                    int64_t &size) {
  RankedTensorType input = getStaticType(scatter.getInput());
  RankedTensorType source = getStaticType(scatter.getSource());
  if (!input || !source || scatter.getStep() != 1 ||
      input.getElementType() != source.getElementType())
    return false;
  // The dialect verifies the dimension, and that the source has the
  // range's shape.
  dim = scatter.getDim();
  start = train::normalizeSliceBound(scatter.getStart(), input.getDimSize(dim));
  size = source.getDimSize(dim);
  return true;
}

/// slice_scatter(x, u, [s, e)) -> cat(x[0, s), u, x[e, n)) where x's parts
/// then go through x: x a cat of which each part taken is one part, or x
/// elementwise with its other readers slices along the same dimension, no
/// two of them (nor the parts taken) overlapping. RoPE's backward adds
/// into the halves of x * cos so (mantissa-add-into-slices): each half
/// becomes one elementwise op, and x * cos is never written whole.
bool rewriteSliceScatter(train::SliceScatterOp scatter,
                         RewriterBase &rewriter) {
  int64_t dim, start, size;
  if (!getUnitScatter(scatter, dim, start, size))
    return false;
  Value whole = scatter.getInput();
  RankedTensorType type = getStaticType(whole);
  int64_t extent = type.getDimSize(dim);
  SmallVector<std::pair<int64_t, int64_t>> kept;
  if (start > 0)
    kept.push_back({0, start});
  if (start + size < extent)
    kept.push_back({start + size, extent});
  Operation *producer = whole.getDefiningOp();
  if (auto concat = dyn_cast_or_null<train::ConcatOp>(producer)) {
    if (int64_t(concat.getDim()) != dim)
      return false;
    SmallVector<std::pair<int64_t, int64_t>> parts;
    int64_t offset = 0;
    for (Value input : concat.getInputs()) {
      RankedTensorType inputType = getStaticType(input);
      if (!inputType)
        return false;
      parts.push_back({offset, offset + inputType.getDimSize(dim)});
      offset += inputType.getDimSize(dim);
    }
    if (llvm::any_of(kept, [&](auto range) {
          return !llvm::is_contained(parts, range);
        }))
      return false;
  } else if (!producer || !isTrainElementwise(producer) ||
             readsProduct(producer) ||
             !readersSliceDisjointly(producer, dim, kept, scatter)) {
    return false;
  }
  rewriter.setInsertionPoint(scatter);
  Location loc = scatter.getLoc();
  SmallVector<Value> parts;
  if (start > 0)
    parts.push_back(createSlice(rewriter, loc, whole, dim, 0, start));
  parts.push_back(scatter.getSource());
  if (start + size < extent)
    parts.push_back(
        createSlice(rewriter, loc, whole, dim, start + size, extent));
  rewriter.replaceOpWithNewOp<train::ConcatOp>(
      scatter, scatter.getType(), parts, rewriter.getI64IntegerAttr(dim));
  return true;
}

/// Whether `op` moves elements without changing them: a view or a permute.
bool isDataMovement(Operation *op) {
  return isa_and_present<train::ViewOp, train::PermuteOp>(op);
}

/// cast(view(... y)) -> view(... cast(y)) where every reader of y, through
/// views and permutes, rounds it to one narrower float type: the views move the
/// narrow elements, y's producer computes them (through a cat, its parts),
/// and the casts of several views of y (a product's operand and its
/// transpose) are one. A product's result is left alone (its rounding goes
/// into the GEMM: mantissa-round-products-once).
bool rewriteCastThroughViews(train::CastOp rounding, RewriterBase &rewriter) {
  if (!isDataMovement(rounding.getInput().getDefiningOp()))
    return false;
  Value root = rounding.getInput();
  while (isDataMovement(root.getDefiningOp()))
    root = root.getDefiningOp()->getOperand(0);
  Operation *producer = root.getDefiningOp();
  // A rounding to a narrower float: the views then move fewer bytes.
  auto narrow = dyn_cast<FloatType>(getElementTypeOrSelf(rounding.getType()));
  auto wide = dyn_cast<FloatType>(getElementTypeOrSelf(root.getType()));
  if (!producer || !narrow || !wide || narrow.getWidth() >= wide.getWidth() ||
      isa<train::MatmulOp, train::BatchMatmulOp, train::AddmmOp>(producer))
    return false;
  // The views and permutes reading root (in order of their readers' walk)
  // and the casts at their ends.
  SmallVector<Operation *> moves, casts;
  SmallVector<Value> work = {root};
  while (!work.empty()) {
    Value value = work.pop_back_val();
    for (Operation *user : value.getUsers()) {
      if (isDataMovement(user)) {
        moves.push_back(user);
        work.push_back(user->getResult(0));
        continue;
      }
      auto leaf = dyn_cast<train::CastOp>(user);
      if (!leaf || getElementTypeOrSelf(leaf.getType()) != narrow)
        return false;
      casts.push_back(leaf);
    }
  }
  rewriter.setInsertionPointAfter(producer);
  auto rootType = cast<RankedTensorType>(root.getType());
  Value rounded = rewriter.create<train::CastOp>(rounding.getLoc(),
                                                 rootType.clone(narrow), root);
  for (Operation *move : moves) {
    rewriter.modifyOpInPlace(move, [&] {
      if (move->getOperand(0) == root)
        move->setOperand(0, rounded);
      auto type = cast<RankedTensorType>(move->getResult(0).getType());
      move->getResult(0).setType(type.clone(narrow));
    });
  }
  for (Operation *leaf : casts) {
    if (leaf->getOperand(0) == root)
      rewriter.replaceOp(leaf, rounded);
    else
      rewriter.replaceOp(leaf, leaf->getOperand(0));
  }
  return true;
}

/// One rewrite anywhere in `module`; false when there is none left.
bool rewriteOnce(ModuleOp module, RewriterBase &rewriter) {
  WalkResult result = module.walk([&](Operation *op) {
    bool rewritten = false;
    if (auto slice = dyn_cast<train::SliceOp>(op))
      rewritten = rewriteSliceOfConcat(slice, rewriter) ||
                  rewriteSliceOfElementwise(slice, rewriter);
    else if (auto scatter = dyn_cast<train::SliceScatterOp>(op))
      rewritten = rewriteSliceScatter(scatter, rewriter);
    else if (auto rounding = dyn_cast<train::CastOp>(op);
             rounding && rewriteCastThroughViews(rounding, rewriter))
      rewritten = true;
    else
      rewritten = rewriteElementwiseOfConcat(op, rewriter);
    return rewritten ? WalkResult::interrupt() : WalkResult::advance();
  });
  return result.wasInterrupted();
}

struct ElementwiseThroughConcatsPass
    : mantissa::impl::ElementwiseThroughConcatsPassBase<
          ElementwiseThroughConcatsPass> {
  void runOnOperation() override {
    // Rewritten one at a time until none applies, without the greedy
    // driver's folding and constant merging, which would change the rest
    // of the step (the later passes' fusion reads its order).
    IRRewriter rewriter(&getContext());
    while (rewriteOnce(getOperation(), rewriter)) {
    }
  }
};

} // namespace
