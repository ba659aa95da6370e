//===- GemmMatching.cpp - Contractions as cuBLAS GEMMs --------------------===//
//
// Which linalg contractions over buffers the GPU program runs as
// strided-batched cuBLAS GEMMs, and how: GemmMatching.h.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/GemmMatching.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Dialect/Train/IR/StoredDTypes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

#include <array>

using namespace mlir;
using namespace mlir::mantissa;

bool mlir::mantissa::isMatrixProduct(linalg::LinalgOp op) {
  if (!linalg::isaContractionOpInterface(op))
    return false;
  FailureOr<linalg::ContractionDimensions> dims =
      linalg::inferContractionDims(op);
  return failed(dims) || (!dims->m.empty() && !dims->n.empty());
}

rt::DType mlir::mantissa::getDType(Type element) {
  return train::getStoredDType(element).value_or(rt::DType::I64);
}

std::string mlir::mantissa::describeOp(Operation *op) {
  std::string text = op->getName().getStringRef().str();
  llvm::raw_string_ostream os(text);
  os << " at ";
  op->getLoc().print(os);
  return text;
}

/// A view's static offset and strides relative to its base buffer.
LogicalResult mlir::mantissa::getViewLayout(Value view,
                                            SmallVectorImpl<int64_t> &strides,
                                            int64_t &offset) {
  auto type = cast<MemRefType>(view.getType());
  if (failed(getStridesAndOffset(type, strides, offset)) ||
      ShapedType::isDynamic(offset) ||
      llvm::any_of(strides, ShapedType::isDynamic) || !type.hasStaticShape())
    return failure();
  return success();
}

bool mlir::mantissa::isGemmDType(Type element) {
  return element.isF32() || element.isBF16() || element.isF16();
}

FailureOr<LoopStrides> mlir::mantissa::getLoopStrides(linalg::LinalgOp op,
                                                      OpOperand &operand,
                                                      Value value) {
  SmallVector<int64_t> viewStrides;
  LoopStrides result;
  if (failed(getViewLayout(value ? value : operand.get(), viewStrides,
                           result.offset)))
    return failure();
  result.strides.assign(op.getNumLoops(), 0);
  AffineMap map = op.getMatchingIndexingMap(&operand);
  for (auto [position, expr] : llvm::enumerate(map.getResults())) {
    auto dim = dyn_cast<AffineDimExpr>(expr);
    if (!dim || result.strides[dim.getPosition()] != 0)
      return failure();
    result.strides[dim.getPosition()] = viewStrides[position];
  }
  return result;
}

namespace {

/// Whether `value` is block argument `index` of `block`, possibly widened
/// by arith.extf (the named matmul's and bf16 contractions' casts).
bool isBlockArgument(Value value, Block *block, unsigned index) {
  if (auto extend = value.getDefiningOp<arith::ExtFOp>())
    value = extend.getIn();
  auto argument = dyn_cast<BlockArgument>(value);
  return argument && argument.getOwner() == block &&
         argument.getArgNumber() == index;
}

/// Whether the body of `op` is `out + in0 * in1` (in either order) in the
/// output's type, the inputs possibly widened first.
bool isMultiplyAccumulate(linalg::LinalgOp op) {
  Block *body = op.getBlock();
  auto yield = cast<linalg::YieldOp>(body->getTerminator());
  if (yield.getNumOperands() != 1)
    return false;
  auto add = yield.getOperand(0).getDefiningOp<arith::AddFOp>();
  if (!add || add->getBlock() != body)
    return false;
  for (int first = 0; first < 2; ++first) {
    Value accumulator = add->getOperand(first);
    auto multiply = add->getOperand(1 - first).getDefiningOp<arith::MulFOp>();
    if (!multiply || !isBlockArgument(accumulator, body, 2))
      continue;
    if ((isBlockArgument(multiply.getLhs(), body, 0) &&
         isBlockArgument(multiply.getRhs(), body, 1)) ||
        (isBlockArgument(multiply.getLhs(), body, 1) &&
         isBlockArgument(multiply.getRhs(), body, 0)))
      return true;
  }
  return false;
}

/// A group of loops (the batch, row, column or reduction loops of a
/// contraction) collapsed into one: its size and each operand's stride.
struct CollapsedLoop {
  int64_t size = 1;
  std::array<int64_t, 3> strides = {0, 0, 0};
};

/// Collapses `loops` (order by the stride of operand `orderBy`, largest
/// first) into one loop, when each operand's strides nest exactly.
FailureOr<CollapsedLoop> collapseLoops(ArrayRef<unsigned> loops,
                                       ArrayRef<int64_t> ranges,
                                       ArrayRef<LoopStrides> operands,
                                       unsigned orderBy) {
  SmallVector<unsigned> kept;
  for (unsigned loop : loops)
    if (ranges[loop] != 1)
      kept.push_back(loop);
  llvm::stable_sort(kept, [&](unsigned a, unsigned b) {
    return operands[orderBy].strides[a] > operands[orderBy].strides[b];
  });
  CollapsedLoop result;
  for (auto [position, loop] : llvm::enumerate(kept)) {
    for (unsigned operand = 0; operand < 3; ++operand) {
      int64_t stride = operands[operand].strides[loop];
      if (position > 0 && result.strides[operand] != stride * ranges[loop])
        return failure();
      result.strides[operand] = stride;
    }
    result.size *= ranges[loop];
  }
  return result;
}

/// A matrix of `rows` x `cols` whose element (r, c) is at r * rowStride +
/// c * colStride, as a cuBLAS operand: stored column-major (transposed or
/// not) with leading dimension ld.
struct MatrixLayout {
  bool transposed = false;
  int64_t ld = 1;
};

std::optional<MatrixLayout> getMatrixLayout(int64_t rows, int64_t cols,
                                            int64_t rowStride,
                                            int64_t colStride) {
  // Column-major: rows contiguous.
  if (rows <= 1 || rowStride == 1) {
    int64_t ld = cols > 1 ? colStride : std::max<int64_t>(rows, 1);
    if (ld >= std::max<int64_t>(rows, 1))
      return MatrixLayout{false, ld};
  }
  // Row-major: the transpose of a column-major cols x rows matrix.
  if (cols <= 1 || colStride == 1) {
    int64_t ld = rows > 1 ? rowStride : std::max<int64_t>(cols, 1);
    if (ld >= std::max<int64_t>(cols, 1))
      return MatrixLayout{true, ld};
  }
  return std::nullopt;
}

} // namespace

std::optional<rt::GpuStepOp>
mlir::mantissa::matchGemm(linalg::LinalgOp op,
                          function_ref<int64_t(Value)> getBufferId,
                          Value output) {
  if (op.getNumDpsInputs() != 2 || op.getNumDpsInits() != 1 ||
      !op.hasPureBufferSemantics() || !isMultiplyAccumulate(op))
    return std::nullopt;
  FailureOr<linalg::ContractionDimensions> dims =
      linalg::inferContractionDims(op);
  if (failed(dims) || dims->k.empty())
    return std::nullopt;
  SmallVector<Value> values(op->getOperands());
  if (output) {
    if (cast<MemRefType>(output.getType()).getShape() !=
        cast<MemRefType>(values[2].getType()).getShape())
      return std::nullopt;
    values[2] = output;
  }
  SmallVector<LoopStrides> operands;
  for (OpOperand &operand : op->getOpOperands()) {
    FailureOr<LoopStrides> strides =
        getLoopStrides(op, operand, values[operand.getOperandNumber()]);
    if (failed(strides))
      return std::nullopt;
    operands.push_back(*strides);
  }
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (llvm::any_of(ranges, ShapedType::isDynamic))
    return std::nullopt;
  enum { A = 0, B = 1, C = 2 };
  FailureOr<CollapsedLoop> batch =
      collapseLoops(dims->batch, ranges, operands, C);
  FailureOr<CollapsedLoop> rows = collapseLoops(dims->m, ranges, operands, C);
  FailureOr<CollapsedLoop> cols = collapseLoops(dims->n, ranges, operands, C);
  FailureOr<CollapsedLoop> inner = collapseLoops(dims->k, ranges, operands, A);
  if (failed(batch) || failed(rows) || failed(cols) || failed(inner))
    return std::nullopt;

  Type aType = getElementTypeOrSelf(op.getDpsInputOperand(0)->get().getType());
  Type bType = getElementTypeOrSelf(op.getDpsInputOperand(1)->get().getType());
  Type accType = getElementTypeOrSelf(op.getDpsInitOperand(0)->get().getType());
  Type cType = getElementTypeOrSelf(values[2].getType());
  // A narrow accumulator would round after every product, which cuBLAS
  // (accumulating in fp32) does not reproduce; a narrow output is only the
  // one rounding at the end.
  if (aType != bType || !isGemmDType(aType) || !accType.isF32() ||
      (!cType.isF32() && cType != aType))
    return std::nullopt;

  int64_t M = rows->size, N = cols->size, K = inner->size;
  // C (M x N) column-major computes C = A * B; row-major computes
  // C^T = B^T * A^T.
  rt::GpuStepOp gemm;
  gemm.kind = rt::GpuStepOp::Kind::Gemm;
  gemm.k = K;
  gemm.batch = batch->size;
  gemm.beta = 1.0; // linalg accumulates into its (filled) output.
  std::optional<MatrixLayout> cLayout =
      getMatrixLayout(M, N, rows->strides[C], cols->strides[C]);
  unsigned first = A, second = B;
  int64_t firstRows = M, secondCols = N;
  CollapsedLoop *firstOuter = &*rows, *secondOuter = &*cols;
  if (!cLayout || cLayout->transposed) {
    cLayout = getMatrixLayout(N, M, cols->strides[C], rows->strides[C]);
    if (!cLayout || cLayout->transposed)
      return std::nullopt;
    first = B;
    second = A;
    std::swap(firstRows, secondCols);
    std::swap(firstOuter, secondOuter);
  }
  gemm.m = firstRows;
  gemm.n = secondCols;
  // The first factor is firstRows x K, the second K x secondCols.
  std::optional<MatrixLayout> firstLayout = getMatrixLayout(
      firstRows, K, firstOuter->strides[first], inner->strides[first]);
  std::optional<MatrixLayout> secondLayout = getMatrixLayout(
      K, secondCols, inner->strides[second], secondOuter->strides[second]);
  if (!firstLayout || !secondLayout)
    return std::nullopt;
  gemm.transa = firstLayout->transposed;
  gemm.transb = secondLayout->transposed;
  auto describe = [&](unsigned operand, const MatrixLayout &matrix) {
    rt::GpuGemmOperand result;
    Value value = values[operand];
    result.buffer = getBufferId(getBaseBuffer(value));
    result.offset = operands[operand].offset;
    result.ld = matrix.ld;
    result.stride = batch->size > 1 ? batch->strides[operand] : 0;
    result.dtype = getDType(getElementTypeOrSelf(value.getType()));
    return result;
  };
  gemm.a = describe(first, *firstLayout);
  gemm.b = describe(second, *secondLayout);
  gemm.c = describe(C, *cLayout);
  gemm.source = describeOp(op);
  return gemm;
}
