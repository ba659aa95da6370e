//===- ScattersAsComparisons.cpp - One-hot scatters as comparisons -------===//
//
// mantissa-scatters-as-comparisons (Passes.td): a `train.scatter_value`
// that writes one position per row (an index of extent 1 along its
// dimension) becomes `where(arange == index, value, input)`, elementwise,
// so that the GPU step computes the one-hot tensor of a cross-entropy's
// backward where its readers read it instead of filling a [tokens, vocab]
// buffer with zeros and scattering into it. A sum of such a one-hot tensor
// along its dimension (the log_softmax backward's row sum of the gradient),
// scaled row by row first (the loss's weights), is computed from the index
// alone: the [tokens, vocabulary] tensor then has one reader left, into
// which the lowering fuses it.
//
//===----------------------------------------------------------------------===//

#include "TrainElementwise.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Transforms/GPU/Passes.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_SCATTERSASCOMPARISONSPASS
#include "mantissa/Transforms/GPU/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// Whether `op`, reading `input` (of the one-hot tensor's shape), is
/// elementwise on it with operands that are the same along `dim` (a
/// negation, a scalar product or quotient, a product with a tensor of
/// extent 1 there), without widening it: each row of its result then holds
/// f(value) at the hit and f(0) elsewhere, for one function f per row.
bool isRowScaling(Operation *op, Value input, int64_t dim) {
  if (op->getNumResults() != 1 || op->getResult(0).getType() != input.getType())
    return false;
  if (isa<train::NegOp, train::MulScalarOp, train::DivScalarOp>(op))
    return true;
  auto product = dyn_cast<train::MulOp>(op);
  if (!product || product.getLhs() == product.getRhs())
    return false;
  Value other = product.getLhs() == input ? product.getRhs() : product.getLhs();
  auto type = dyn_cast<RankedTensorType>(other.getType());
  int64_t rank = cast<RankedTensorType>(input.getType()).getRank();
  if (!type || type.getRank() > rank)
    return false;
  // Broadcast from the right: `dim` is the operand's dimension `aligned`.
  int64_t aligned = dim - (rank - type.getRank());
  return aligned < 0 || type.getDimSize(aligned) == 1;
}

/// Rewrites each `train.sum` of `oneHot` (= where(arange == index, value,
/// zeros), `index` with extent 1 along `dim`) along `dim` alone, through
/// row scalings f (isRowScaling): on the index's shape, the sum of a row is
/// +0 + f(value or 0) (+ f(0) once more when the row is longer than 1,
/// which stands for its other elements: ±0, or NaN where f makes 0 a NaN),
/// value where 0 <= index < extent. Exact: the sum adds ±0 to the one
/// value at the hit (or NaNs), whatever its order.
void rewriteSums(Value oneHot, Value index, Value value, Value zeros,
                 int64_t dim) {
  auto indexType = cast<RankedTensorType>(index.getType());
  int64_t extent = cast<RankedTensorType>(oneHot.getType()).getDimSize(dim);
  // The scalings from the one-hot tensor to each sum, nearest first, each
  // with the operand that reads the one before.
  using Chain = SmallVector<std::pair<Operation *, unsigned>>;
  SmallVector<std::pair<train::SumOp, Chain>> sums;
  SmallVector<std::pair<Value, Chain>> work = {{oneHot, {}}};
  while (!work.empty()) {
    auto [current, chain] = work.pop_back_val();
    for (OpOperand &use : current.getUses()) {
      Operation *user = use.getOwner();
      if (auto sum = dyn_cast<train::SumOp>(user)) {
        if (sum.getDims() == ArrayRef<int64_t>{dim} &&
            getElementTypeOrSelf(sum.getType()) ==
                getElementTypeOrSelf(current.getType()))
          sums.push_back({sum, chain});
      } else if (isRowScaling(user, current, dim)) {
        Chain longer = chain;
        longer.push_back({user, use.getOperandNumber()});
        work.push_back({user->getResult(0), longer});
      }
    }
  }
  if (sums.empty())
    return;
  // The value where the index is in range, 0 elsewhere, next to the
  // one-hot tensor.
  OpBuilder builder(oneHot.getContext());
  builder.setInsertionPointAfterValue(oneHot);
  Location loc = oneHot.getLoc();
  auto zerosOf = [&](Type element) -> Value {
    return builder.create<train::FullOp>(
        loc, RankedTensorType::get(indexType.getShape(), element),
        builder.getI64IntegerAttr(0));
  };
  Value zero = zerosOf(getElementTypeOrSelf(zeros));
  Value below = builder.create<train::LtScalarOp>(
      loc, index, builder.getI64IntegerAttr(extent));
  Value above = builder.create<train::GeScalarOp>(loc, index,
                                                  builder.getI64IntegerAttr(0));
  Value hit = builder.create<train::WhereOp>(
      loc, below, builder.create<train::WhereOp>(loc, above, value, zero),
      zero);
  // Each summed tensor's row sums (keeping the dimension), once, after it.
  llvm::DenseMap<Value, Value> rowSums;
  for (auto &[sum, chain] : sums) {
    Value &rowSum = rowSums[sum.getInput()];
    if (!rowSum) {
      // (After `hit`, which comes before the scalings.)
      builder.setInsertionPointAfterValue(chain.empty() ? hit : sum.getInput());
      auto scale = [&](Value row) {
        for (auto [scaling, operand] : chain) {
          if (isa<train::NegOp>(scaling))
            row = builder.create<train::NegOp>(loc, row);
          else if (auto product = dyn_cast<train::MulScalarOp>(scaling))
            row = builder.create<train::MulScalarOp>(loc, row,
                                                     product.getScalar());
          else if (auto quotient = dyn_cast<train::DivScalarOp>(scaling))
            row = builder.create<train::DivScalarOp>(loc, row,
                                                     quotient.getScalar());
          else if (operand == 0)
            row =
                builder.create<train::MulOp>(loc, row, scaling->getOperand(1));
          else
            row =
                builder.create<train::MulOp>(loc, scaling->getOperand(0), row);
        }
        return row;
      };
      rowSum = scale(hit);
      if (extent > 1)
        rowSum = builder.create<train::AddOp>(loc, rowSum, scale(zero));
      // The sum starts at +0 (so a -0 becomes +0).
      rowSum = builder.create<train::AddOp>(
          loc, rowSum, zerosOf(getElementTypeOrSelf(rowSum)));
    }
    Value result = rowSum;
    if (result.getType() != sum.getType()) {
      builder.setInsertionPoint(sum);
      result =
          builder.create<train::ViewOp>(sum.getLoc(), sum.getType(), result);
    }
    sum.replaceAllUsesWith(result);
    sum.erase();
  }
}

/// Rewrites `scatter` when its index holds one position per row: the same
/// shape as its input but for extent 1 along the dimension. Returns whether
/// it did.
bool rewriteScatter(train::ScatterValueOp scatter) {
  auto input = dyn_cast<RankedTensorType>(scatter.getInput().getType());
  auto index = dyn_cast<RankedTensorType>(scatter.getIndex().getType());
  auto result = dyn_cast<RankedTensorType>(scatter.getType());
  int64_t dim = scatter.getDim();
  if (!input || !index || !result || input != result ||
      !input.hasStaticShape() || !index.hasStaticShape() ||
      input.getRank() != index.getRank() || dim < 0 || dim >= input.getRank() ||
      !index.getElementType().isInteger(64))
    return false;
  for (int64_t d = 0; d < input.getRank(); ++d)
    if (index.getDimSize(d) != (d == dim ? 1 : input.getDimSize(d)))
      return false;
  OpBuilder builder(scatter);
  Location loc = scatter.getLoc();
  Type i64 = builder.getI64Type();
  int64_t extent = input.getDimSize(dim);
  Value range = builder.create<train::ArangeOp>(
      loc, RankedTensorType::get({extent}, i64), builder.getI64IntegerAttr(0),
      builder.getI64IntegerAttr(extent), builder.getI64IntegerAttr(1));
  // The positions along `dim`, extent 1 along the others.
  SmallVector<int64_t> shape(input.getRank(), 1);
  shape[dim] = extent;
  Value positions = builder.create<train::ViewOp>(
      loc, RankedTensorType::get(shape, i64), range);
  Value hit = builder.create<train::EqOp>(
      loc, RankedTensorType::get(input.getShape(), builder.getI1Type()),
      positions, scatter.getIndex());
  Value value = builder.create<train::FullOp>(
      loc, RankedTensorType::get({}, input.getElementType()),
      scatter.getValueAttr());
  Value selected = builder.create<train::WhereOp>(loc, result, hit, value,
                                                  scatter.getInput());
  scatter.getResult().replaceAllUsesWith(selected);
  Value zeros = scatter.getInput(), indices = scatter.getIndex();
  scatter.erase();
  if (isZeros(zeros))
    rewriteSums(selected, indices, value, zeros, dim);
  return true;
}

struct ScattersAsComparisonsPass
    : mantissa::impl::ScattersAsComparisonsPassBase<ScattersAsComparisonsPass> {
  void runOnOperation() override {
    SmallVector<train::ScatterValueOp> scatters;
    getOperation().walk(
        [&](train::ScatterValueOp scatter) { scatters.push_back(scatter); });
    for (train::ScatterValueOp scatter : scatters)
      rewriteScatter(scatter);
  }
};

} // namespace
