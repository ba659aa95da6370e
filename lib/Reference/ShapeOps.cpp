//===- ShapeOps.cpp - Reshaping, slicing and concatenation ----------------===//
//
// Operations that move elements without computing on them (cat converts its
// inputs to the promoted result type).
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "Numerics.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "llvm/ADT/TypeSwitch.h"
#include <algorithm>

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::reference;
using namespace mlir::mantissa::reference::kernels;

/// Copies element `from` of `source` to element `to` of `target` (tensors of
/// the same storage kind).
static void copyElement(const Tensor &source, int64_t from, Tensor &target,
                        int64_t to) {
  if (target.isFloatingPoint())
    target.getFloats()[to] = source.getFloats()[from];
  else
    target.getIntegers()[to] = source.getIntegers()[from];
}

static LogicalResult evaluateView(train::ViewOp op, Environment &env) {
  RankedTensorType type = typeOf(op.getResult());
  const Tensor &input = env.lookup(op.getInput());
  Tensor result(type.getElementType(), type.getShape());
  for (int64_t i = 0, e = result.getNumElements(); i < e; ++i)
    copyElement(input, i, result, i);
  env.bind(op.getResult(), std::move(result));
  return success();
}

static LogicalResult evaluatePermute(train::PermuteOp op, Environment &env) {
  RankedTensorType type = typeOf(op.getResult());
  const Tensor &input = env.lookup(op.getInput());
  SmallVector<int64_t> inputStrides = rowMajorStrides(input.getShape());
  SmallVector<int64_t> strides;
  for (int64_t dim : op.getDims())
    strides.push_back(inputStrides[dim]);
  Tensor result(type.getElementType(), type.getShape());
  if (result.getNumElements() != 0) {
    IndexWalker walker(type.getShape(), strides);
    int64_t position = 0;
    do {
      copyElement(input, walker.getOffset(), result, position++);
    } while (walker.next());
  }
  env.bind(op.getResult(), std::move(result));
  return success();
}

static LogicalResult evaluateExpand(train::ExpandOp op, Environment &env) {
  env.bind(op.getResult(), broadcastTensor(env.lookup(op.getInput()),
                                           typeOf(op.getResult()).getShape()));
  return success();
}

namespace {
/// The elements `start, start + step, ...` of one dimension that a slice
/// selects, after torch's normalisation of `start` and `end`.
struct SliceRange {
  int64_t start = 0;
  int64_t step = 1;
  int64_t length = 0;
};
} // namespace

/// torch's slice bounds: negative `start`/`end` count from the end, both are
/// clamped into [0, size], and an `end` before `start` selects nothing.
static SliceRange normalizeSlice(int64_t size, int64_t start, int64_t end,
                                 int64_t step) {
  if (start < 0)
    start += size;
  if (end < 0)
    end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  return {start, step, (end - start + step - 1) / step};
}

/// The slice a `slice`/`slice_scatter` selects in `shape`, checked against
/// the size the IR gives it.
template <typename SliceOpTy>
static FailureOr<SliceRange> sliceOf(SliceOpTy op, ArrayRef<int64_t> shape,
                                     int64_t expectedLength) {
  // I64Attr getters return uint64_t: read them back as signed.
  auto dim = static_cast<int64_t>(op.getDim());
  auto start = static_cast<int64_t>(op.getStart());
  auto end = static_cast<int64_t>(op.getEnd());
  auto step = static_cast<int64_t>(op.getStep());
  if (step < 1)
    return op.emitOpError() << "slice step must be positive, got " << step;
  SliceRange range = normalizeSlice(shape[dim], start, end, step);
  if (range.length != expectedLength)
    return op.emitOpError()
           << "slice [" << start << ", " << end << ") step " << step
           << " of a dimension of size " << shape[dim] << " holds "
           << range.length << " elements, but the IR says " << expectedLength;
  return range;
}

/// Calls `fn(sliceOffset, fullOffset)` for each element of the slice `range`
/// of dimension `dim` of `shape`: its row-major offset in the slice and in
/// the full tensor.
template <typename Fn>
static void forEachSliced(ArrayRef<int64_t> shape, int64_t dim,
                          SliceRange range, Fn fn) {
  DimSplit split = splitAtDim(shape, dim);
  for (int64_t outer = 0; outer < split.outer; ++outer)
    for (int64_t j = 0; j < range.length; ++j)
      for (int64_t inner = 0; inner < split.inner; ++inner)
        fn((outer * range.length + j) * split.inner + inner,
           (outer * split.size + range.start + j * range.step) * split.inner +
               inner);
}

static LogicalResult evaluateSlice(train::SliceOp op, Environment &env) {
  RankedTensorType type = typeOf(op.getResult());
  const Tensor &input = env.lookup(op.getInput());
  auto range = sliceOf(op, input.getShape(), type.getDimSize(op.getDim()));
  if (failed(range))
    return failure();
  Tensor result(type.getElementType(), type.getShape());
  forEachSliced(input.getShape(), op.getDim(), *range,
                [&](int64_t sliced, int64_t full) {
                  copyElement(input, full, result, sliced);
                });
  env.bind(op.getResult(), std::move(result));
  return success();
}

static LogicalResult evaluateSliceScatter(train::SliceScatterOp op,
                                          Environment &env) {
  Tensor result = env.lookup(op.getInput());
  Tensor source =
      convertTensor(env.lookup(op.getSource()), result.getElementType());
  auto range = sliceOf(op, result.getShape(), source.getShape()[op.getDim()]);
  if (failed(range))
    return failure();
  forEachSliced(result.getShape(), op.getDim(), *range,
                [&](int64_t sliced, int64_t full) {
                  copyElement(source, sliced, result, full);
                });
  env.bind(op.getResult(), std::move(result));
  return success();
}

static LogicalResult evaluateConcat(train::ConcatOp op, Environment &env) {
  RankedTensorType type = typeOf(op.getResult());
  int64_t dim = op.getDim();
  Tensor result(type.getElementType(), type.getShape());
  DimSplit resultSplit = splitAtDim(type.getShape(), dim);
  int64_t position = 0;
  for (Value value : op.getInputs()) {
    Tensor input = convertTensor(env.lookup(value), type.getElementType());
    DimSplit split = splitAtDim(input.getShape(), dim);
    int64_t chunk = split.size * split.inner;
    for (int64_t outer = 0; outer < split.outer; ++outer)
      for (int64_t i = 0; i < chunk; ++i)
        copyElement(input, outer * chunk + i, result,
                    outer * resultSplit.size * resultSplit.inner +
                        position * resultSplit.inner + i);
    position += split.size;
  }
  env.bind(op.getResult(), std::move(result));
  return success();
}

std::optional<LogicalResult> kernels::evaluateShapeOp(Operation *op,
                                                      Environment &env) {
  using namespace train;
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(op)
      .Case<ViewOp>([&](ViewOp op) { return evaluateView(op, env); })
      .Case<PermuteOp>([&](PermuteOp op) { return evaluatePermute(op, env); })
      .Case<ExpandOp>([&](ExpandOp op) { return evaluateExpand(op, env); })
      .Case<SliceOp>([&](SliceOp op) { return evaluateSlice(op, env); })
      .Case<SliceScatterOp>(
          [&](SliceScatterOp op) { return evaluateSliceScatter(op, env); })
      .Case<ConcatOp>([&](ConcatOp op) { return evaluateConcat(op, env); })
      .Default([](Operation *) { return std::nullopt; });
}
