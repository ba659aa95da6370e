//===- ScattersAsComparisons.cpp - One-hot scatters as comparisons -------===//
//
// mantissa-scatters-as-comparisons (Passes.td): a `train.scatter_value`
// that writes one position per row (an index of extent 1 along its
// dimension) becomes `where(arange == index, value, input)`, elementwise,
// so that the GPU step computes the one-hot tensor of a cross-entropy's
// backward where its readers read it instead of filling a [tokens, vocab]
// buffer with zeros and scattering into it.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/Passes.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_SCATTERSASCOMPARISONSPASS
#include "mantissa/Conversion/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

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
  scatter.erase();
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
