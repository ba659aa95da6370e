//===- ReadGatheredParameters.cpp - Parameters in their gather dtype ------===//
//
// mantissa-read-gathered-parameters (Passes.td): a step, on the CPU or the
// GPU, reads the parameters the runtime gathers in a narrower dtype in that
// dtype, without widening and rounding them back.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Transforms/Passes.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_READGATHEREDPARAMETERSPASS
#include "mantissa/Transforms/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// Makes each parameter whose every use rounds it to its gather dtype an
/// argument of that dtype.
void takeParametersAsGathered(train::StepOp step) {
  MLIRContext *context = step.getContext();
  Block &body = step.getBody().front();
  SmallVector<Type> inputs(step.getArgumentTypes());
  for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index) {
    train::PrecisionPlanAttr plan = step.getPlan(index);
    BlockArgument argument = body.getArgument(index);
    auto type = dyn_cast<RankedTensorType>(argument.getType());
    if (!plan || !type ||
        step.getTensorInfo(index).getKind() != train::TensorKind::parameter)
      continue;
    auto gathered =
        type.clone(train::getElementType(context, plan.getGather()));
    if (gathered == type || argument.use_empty() ||
        !llvm::all_of(argument.getUsers(), [&](Operation *user) {
          auto cast = dyn_cast<train::CastOp>(user);
          return cast && cast.getType() == gathered;
        }))
      continue;
    argument.setType(gathered);
    for (Operation *user : llvm::make_early_inc_range(argument.getUsers())) {
      user->getResult(0).replaceAllUsesWith(argument);
      user->erase();
    }
    inputs[index] = gathered;
  }
  step.setFunctionTypeAttr(
      TypeAttr::get(FunctionType::get(context, inputs, step.getResultTypes())));
}

/// Rewrites `round` (a train.cast to element type T) of a value widened
/// from T through permutes and views to those permutes and views of the
/// narrow value. Returns whether it did.
bool readNarrowThroughLayout(train::CastOp round) {
  Type narrow = getElementTypeOrSelf(round.getType());
  SmallVector<Operation *> layout;
  Value value = round.getInput();
  while (Operation *op = value.getDefiningOp()) {
    if (!isa<train::PermuteOp, train::ViewOp>(op))
      break;
    layout.push_back(op);
    value = op->getOperand(0);
  }
  auto widen = value.getDefiningOp<train::CastOp>();
  if (layout.empty() || !widen ||
      getElementTypeOrSelf(widen.getInput().getType()) != narrow ||
      !isa<FloatType>(narrow) ||
      getElementTypeOrSelf(widen.getType()) == narrow ||
      !train::holdsExactly(getElementTypeOrSelf(widen.getType()), narrow))
    return false;
  OpBuilder builder(round);
  Value narrowValue = widen.getInput();
  for (Operation *op : llvm::reverse(layout)) {
    Operation *copy = builder.clone(*op);
    copy->setOperand(0, narrowValue);
    auto type = cast<RankedTensorType>(op->getResult(0).getType());
    copy->getResult(0).setType(type.clone(narrow));
    narrowValue = copy->getResult(0);
  }
  round.getResult().replaceAllUsesWith(narrowValue);
  round.erase();
  return true;
}

struct ReadGatheredParametersPass
    : mantissa::impl::ReadGatheredParametersPassBase<
          ReadGatheredParametersPass> {
  void runOnOperation() override {
    for (auto step : getOperation().getOps<train::StepOp>()) {
      takeParametersAsGathered(step);
      SmallVector<train::CastOp> rounds;
      step.walk([&](train::CastOp cast) { rounds.push_back(cast); });
      bool changed = false;
      for (train::CastOp round : rounds)
        changed |= readNarrowThroughLayout(round);
      if (!changed)
        continue;
      // The widened values and layouts nothing reads any more.
      SmallVector<Operation *> ops;
      step.walk([&](Operation *op) { ops.push_back(op); });
      for (Operation *op : llvm::reverse(ops))
        if (op != step && op->use_empty() && isMemoryEffectFree(op) &&
            op->getNumResults() > 0)
          op->erase();
    }
  }
};

} // namespace
