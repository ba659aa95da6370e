//===- AddIntoSlices.cpp - Zero-padded slices added where they land -------===//
//
// mantissa-add-into-slices (Passes.td): `a + slice_scatter(zeros, x)`
// becomes `slice_scatter(a, slice(a) + x)`, so that the GPU step adds `x`
// into the range of `a` it covers instead of materialising the padding.
//
//===----------------------------------------------------------------------===//

#include "TrainElementwise.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Transforms/GPU/Passes.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Matchers.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_ADDINTOSLICESPASS
#include "mantissa/Transforms/GPU/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// Rewrites `add` when one operand is a zero-padded slice that only it
/// reads; returns whether it did.
bool addIntoSlice(train::AddOp add) {
  for (unsigned padded = 0; padded < 2; ++padded) {
    auto scatter =
        add->getOperand(padded).getDefiningOp<train::SliceScatterOp>();
    Value other = add->getOperand(1 - padded);
    if (!scatter || !scatter->hasOneUse() || !isZeros(scatter.getInput()) ||
        other.getType() != add.getType() ||
        scatter.getType() != add.getType() ||
        getElementTypeOrSelf(scatter.getSource().getType()) !=
            getElementTypeOrSelf(add.getType()))
      continue;
    OpBuilder builder(add);
    Location loc = add.getLoc();
    Type sliceType = scatter.getSource().getType();
    Value slice = builder.create<train::SliceOp>(
        loc, sliceType, other, scatter.getDimAttr(), scatter.getStartAttr(),
        scatter.getEndAttr(), scatter.getStepAttr());
    // The operands in the add's order.
    Value lhs = padded == 0 ? scatter.getSource() : slice;
    Value rhs = padded == 0 ? slice : scatter.getSource();
    Value sum = builder.create<train::AddOp>(loc, sliceType, lhs, rhs);
    Value result = builder.create<train::SliceScatterOp>(
        loc, add.getType(), other, sum, scatter.getDimAttr(),
        scatter.getStartAttr(), scatter.getEndAttr(), scatter.getStepAttr());
    add.getResult().replaceAllUsesWith(result);
    Operation *zeros = scatter.getInput().getDefiningOp();
    add.erase();
    scatter.erase();
    if (zeros->use_empty())
      zeros->erase();
    return true;
  }
  return false;
}

struct AddIntoSlicesPass
    : mantissa::impl::AddIntoSlicesPassBase<AddIntoSlicesPass> {
  void runOnOperation() override {
    SmallVector<train::AddOp> adds;
    getOperation().walk([&](train::AddOp add) { adds.push_back(add); });
    for (train::AddOp add : adds)
      addIntoSlice(add);
  }
};

} // namespace
