//===- ForwardOnly.cpp - A training step's forward pass -------------------===//
//
// The `mantissa-forward-only` pass (Passes.td): what the trainer evaluates
// validation data with.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Transforms/Passes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/STLExtras.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_FORWARDONLYPASS
#include "mantissa/Transforms/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// Keeps the loss and user outputs of `step`, then erases every operation
/// whose results nothing uses any more (in reverse order, so that a chain
/// goes in one sweep). Operations without results (shard groups) and those
/// with effects stay.
void reduceToForward(train::StepOp step) {
  SmallVector<unsigned> kept;
  for (unsigned index = 0, e = step.getNumResults(); index < e; ++index) {
    train::ResultKind kind = step.getResultInfo(index).getKind();
    if (kind == train::ResultKind::loss ||
        kind == train::ResultKind::user_output)
      kept.push_back(index);
  }
  Block &body = step.getBody().front();
  auto terminator = cast<train::ReturnOp>(body.getTerminator());
  SmallVector<Value> operands;
  SmallVector<Type> types;
  SmallVector<Attribute> resultAttrs;
  ArrayAttr allResultAttrs = step.getResAttrsAttr();
  for (unsigned index : kept) {
    operands.push_back(terminator.getOperand(index));
    types.push_back(step.getResultTypes()[index]);
    resultAttrs.push_back(allResultAttrs
                              ? allResultAttrs[index]
                              : DictionaryAttr::get(step.getContext()));
  }
  terminator->setOperands(operands);
  step.setFunctionTypeAttr(TypeAttr::get(
      FunctionType::get(step.getContext(), step.getArgumentTypes(), types)));
  step.setResAttrsAttr(ArrayAttr::get(step.getContext(), resultAttrs));

  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body))) {
    if (&op == terminator.getOperation() || op.getNumResults() == 0 ||
        !op.use_empty() || !isMemoryEffectFree(&op))
      continue;
    op.erase();
  }
}

class ForwardOnlyPass
    : public mantissa::impl::ForwardOnlyPassBase<ForwardOnlyPass> {
public:
  void runOnOperation() override {
    for (train::StepOp step : getOperation().getOps<train::StepOp>())
      reduceToForward(step);
  }
};

} // namespace
