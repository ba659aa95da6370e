//===- IndexingOps.cpp - Gathers and scatters -----------------------------===//
//
// Embedding lookups, gathers and scatters. Indices out of range are errors
// that name the index and its bound. Accumulating forms add in index order
// and round after every addition to the result type, as ATen's CPU kernels
// (`self[i] += value` in the tensor's type) do.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "Numerics.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::reference;
using namespace mlir::mantissa::reference::kernels;

/// Writes element `from` of `source` to element `to` of `target`, or adds it
/// (rounded to the target's type) when `accumulate` is set. Both tensors
/// have the same element type.
static void storeElement(const Tensor &source, int64_t from, Tensor &target,
                         int64_t to, bool accumulate) {
  Type element = target.getElementType();
  if (target.isFloatingPoint()) {
    double value = source.getFloats()[from];
    double &slot = target.getFloats()[to];
    slot = accumulate ? roundToFloat(slot + value, element) : value;
    return;
  }
  int64_t value = source.getIntegers()[from];
  int64_t &slot = target.getIntegers()[to];
  slot = accumulate
             ? wrapToInteger(static_cast<int64_t>(static_cast<uint64_t>(slot) +
                                                  static_cast<uint64_t>(value)),
                             element)
             : value;
}

/// Fails on `op` unless `index` lies in [0, size).
static LogicalResult checkIndex(Operation *op, int64_t index, int64_t size,
                                int64_t dim, int64_t position) {
  if (index >= 0 && index < size)
    return success();
  return op->emitOpError() << "index " << index << " (element " << position
                           << " of the indices) is out of bounds for dimension "
                           << dim << " with size " << size;
}

static LogicalResult evaluateEmbedding(train::EmbeddingOp op,
                                       Environment &env) {
  RankedTensorType type = typeOf(op.getResult());
  const Tensor &weight = env.lookup(op.getWeight());
  const Tensor &indices = env.lookup(op.getIndices());
  int64_t rows = weight.getShape()[0], width = weight.getShape()[1];
  Tensor result(type.getElementType(), type.getShape());
  for (int64_t position = 0, e = indices.getNumElements(); position < e;
       ++position) {
    int64_t row = indices.getIntegers()[position];
    if (row < 0 || row >= rows)
      return op.emitOpError()
             << "index " << row << " (element " << position
             << " of the indices) is out of range for an embedding table of "
             << rows << " rows";
    for (int64_t column = 0; column < width; ++column)
      storeElement(weight, row * width + column, result,
                   position * width + column, /*accumulate=*/false);
  }
  env.bind(op.getResult(), std::move(result));
  return success();
}

/// torch's embedding_dense_backward_cpu: zeros, then `grad_weight[k] +=
/// grad[i]` for every index `k != padding_idx`, in order.
static LogicalResult evaluateEmbeddingBackward(train::EmbeddingBackwardOp op,
                                               Environment &env) {
  RankedTensorType type = typeOf(op.getResult());
  Tensor grad = convertTensor(env.lookup(op.getGrad()), type.getElementType());
  const Tensor &indices = env.lookup(op.getIndices());
  auto rows = static_cast<int64_t>(op.getNumWeights());
  auto paddingIndex = static_cast<int64_t>(op.getPaddingIdx());
  int64_t width = type.getDimSize(1);
  Tensor result(type.getElementType(), type.getShape());
  for (int64_t position = 0, e = indices.getNumElements(); position < e;
       ++position) {
    int64_t row = indices.getIntegers()[position];
    if (row == paddingIndex)
      continue;
    if (row < 0 || row >= rows)
      return op.emitOpError()
             << "index " << row << " (element " << position
             << " of the indices) is out of range for an embedding table of "
             << rows << " rows";
    for (int64_t column = 0; column < width; ++column)
      storeElement(grad, position * width + column, result,
                   row * width + column, /*accumulate=*/true);
  }
  env.bind(op.getResult(), std::move(result));
  return success();
}

/// `input[indices[i...]] = values[i...]` on the leading dimension (negative
/// indices count from the end, as in torch's advanced indexing); with
/// `accumulate`, `+=` in index order.
static LogicalResult evaluateIndexPut(train::IndexPutOp op, Environment &env) {
  Tensor result = env.lookup(op.getInput());
  const Tensor &indices = env.lookup(op.getIndices());
  SmallVector<int64_t> indexedShape(indices.getShape());
  llvm::append_range(indexedShape, result.getShape().drop_front());
  Tensor values =
      convertTensor(broadcastTensor(env.lookup(op.getValues()), indexedShape),
                    result.getElementType());
  int64_t rows = result.getShape()[0];
  int64_t rowSize = numElementsOf(result.getShape().drop_front());
  for (int64_t position = 0, e = indices.getNumElements(); position < e;
       ++position) {
    int64_t row = indices.getIntegers()[position];
    int64_t original = row;
    if (row < 0)
      row += rows;
    if (row < 0 || row >= rows)
      return checkIndex(op, original, rows, 0, position);
    for (int64_t i = 0; i < rowSize; ++i)
      storeElement(values, position * rowSize + i, result, row * rowSize + i,
                   op.getAccumulate());
  }
  env.bind(op.getResult(), std::move(result));
  return success();
}

static LogicalResult evaluateIndexSelect(train::IndexSelectOp op,
                                         Environment &env) {
  RankedTensorType type = typeOf(op.getResult());
  const Tensor &input = env.lookup(op.getInput());
  const Tensor &index = env.lookup(op.getIndex());
  auto dim = static_cast<int64_t>(op.getDim());
  DimSplit split = splitAtDim(input.getShape(), dim);
  int64_t count = index.getNumElements();
  for (int64_t k = 0; k < count; ++k)
    if (failed(checkIndex(op, index.getIntegers()[k], split.size, dim, k)))
      return failure();
  Tensor result(type.getElementType(), type.getShape());
  for (int64_t outer = 0; outer < split.outer; ++outer)
    for (int64_t k = 0; k < count; ++k)
      for (int64_t inner = 0; inner < split.inner; ++inner)
        storeElement(
            input,
            (outer * split.size + index.getIntegers()[k]) * split.inner + inner,
            result, (outer * count + k) * split.inner + inner,
            /*accumulate=*/false);
  env.bind(op.getResult(), std::move(result));
  return success();
}

namespace {
/// Where gather and scatter find the element that position `p` of the index
/// tensor designates in `target`: `p` with its `dim` coordinate replaced by
/// the index value.
struct AlongDim {
  SmallVector<int64_t> otherStrides; // target strides, 0 at `dim`
  int64_t dimStride = 0;
  int64_t dimSize = 1;
};
} // namespace

static AlongDim alongDim(ArrayRef<int64_t> targetShape, int64_t dim) {
  AlongDim along;
  along.otherStrides = rowMajorStrides(targetShape);
  if (!targetShape.empty()) {
    along.dimStride = along.otherStrides[dim];
    along.dimSize = targetShape[dim];
    along.otherStrides[dim] = 0;
  }
  return along;
}

static LogicalResult evaluateGather(train::GatherOp op, Environment &env) {
  RankedTensorType type = typeOf(op.getResult());
  const Tensor &input = env.lookup(op.getInput());
  const Tensor &index = env.lookup(op.getIndex());
  auto dim = static_cast<int64_t>(op.getDim());
  AlongDim along = alongDim(input.getShape(), dim);
  Tensor result(type.getElementType(), type.getShape());
  if (index.getNumElements() != 0) {
    IndexWalker walker(index.getShape(), along.otherStrides);
    int64_t position = 0;
    do {
      int64_t value = index.getIntegers()[position];
      if (failed(checkIndex(op, value, along.dimSize, dim, position)))
        return failure();
      storeElement(input, walker.getOffset() + value * along.dimStride, result,
                   position, /*accumulate=*/false);
      ++position;
    } while (walker.next());
  }
  env.bind(op.getResult(), std::move(result));
  return success();
}

/// scatter and scatter_value: `result[p with dim = index[p]] (+)= source[p]`
/// for every position `p` of the index, in row-major order.
static LogicalResult scatterInto(Operation *op, Tensor &result,
                                 const Tensor &index, const Tensor &source,
                                 int64_t dim, bool accumulate) {
  if (index.getNumElements() == 0)
    return success();
  // As torch requires: the source covers the index in every dimension.
  for (int64_t d = 0; d < index.getRank(); ++d)
    if (index.getShape()[d] > source.getShape()[d])
      return op->emitOpError()
             << "index " << index.getType() << " is larger than the source "
             << source.getType() << " in dimension " << d;
  AlongDim along = alongDim(result.getShape(), dim);
  IndexWalker target(index.getShape(), along.otherStrides);
  IndexWalker from(index.getShape(), rowMajorStrides(source.getShape()));
  int64_t position = 0;
  do {
    int64_t value = index.getIntegers()[position];
    if (failed(checkIndex(op, value, along.dimSize, dim, position)))
      return failure();
    storeElement(source, from.getOffset(), result,
                 target.getOffset() + value * along.dimStride, accumulate);
    ++position;
    from.next();
  } while (target.next());
  return success();
}

static LogicalResult evaluateScatter(train::ScatterOp op, Environment &env) {
  Tensor result = env.lookup(op.getInput());
  Tensor source =
      convertTensor(env.lookup(op.getSource()), result.getElementType());
  if (failed(scatterInto(op, result, env.lookup(op.getIndex()), source,
                         static_cast<int64_t>(op.getDim()),
                         op.getReduce() == "add")))
    return failure();
  env.bind(op.getResult(), std::move(result));
  return success();
}

static LogicalResult evaluateScatterValue(train::ScatterValueOp op,
                                          Environment &env) {
  Tensor result = env.lookup(op.getInput());
  const Tensor &index = env.lookup(op.getIndex());
  Type element = result.getElementType();
  // A source of the index's shape holding the value everywhere.
  Tensor source(element, index.getShape());
  if (source.isFloatingPoint())
    std::fill(source.getFloats().begin(), source.getFloats().end(),
              scalarToFloat(op.getValue(), element));
  else
    std::fill(source.getIntegers().begin(), source.getIntegers().end(),
              scalarToInteger(op.getValue(), element));
  if (failed(scatterInto(op, result, index, source,
                         static_cast<int64_t>(op.getDim()),
                         /*accumulate=*/false)))
    return failure();
  env.bind(op.getResult(), std::move(result));
  return success();
}

std::optional<LogicalResult> kernels::evaluateIndexingOp(Operation *op,
                                                         Environment &env) {
  using namespace train;
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(op)
      .Case<EmbeddingOp>(
          [&](EmbeddingOp op) { return evaluateEmbedding(op, env); })
      .Case<EmbeddingBackwardOp>([&](EmbeddingBackwardOp op) {
        return evaluateEmbeddingBackward(op, env);
      })
      .Case<IndexPutOp>(
          [&](IndexPutOp op) { return evaluateIndexPut(op, env); })
      .Case<IndexSelectOp>(
          [&](IndexSelectOp op) { return evaluateIndexSelect(op, env); })
      .Case<GatherOp>([&](GatherOp op) { return evaluateGather(op, env); })
      .Case<ScatterOp>([&](ScatterOp op) { return evaluateScatter(op, env); })
      .Case<ScatterValueOp>(
          [&](ScatterValueOp op) { return evaluateScatterValue(op, env); })
      .Default([](Operation *) { return std::nullopt; });
}
