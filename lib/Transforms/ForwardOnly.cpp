//===- ForwardOnly.cpp - A training step's forward pass -------------------===//
//
// The `mantissa-forward-only` pass (Passes.td): what the trainer evaluates
// validation data with.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Dialect/Train/IR/RandomDraws.h"
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

/// Evaluation runs dropout off, as torch's eval mode does: the importer's
/// native_dropout (lib/Import/ImportRandom.cpp) is mul_scalar(mul(x, mask),
/// 1 / (1 - p)) over a bernoulli random argument, whose output here becomes
/// x. The argument stays in the signature (the runtime binds arguments by
/// position) but nothing reads it.
void switchDropoutOff(train::StepOp step) {
  Block &body = step.getBody().front();
  for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index) {
    if (step.getTensorInfo(index).getKind() != train::TensorKind::random)
      continue;
    std::string error;
    std::optional<rt::RandomDraw> draw =
        train::getRandomDraw(step, index, error);
    // torch names the nodes native_dropout, native_dropout_1, ...
    if (!draw ||
        draw->distribution != rt::RandomDraw::Distribution::Bernoulli ||
        !llvm::StringRef(draw->node).starts_with("native_dropout"))
      continue;
    for (Operation *user :
         llvm::make_early_inc_range(body.getArgument(index).getUsers())) {
      auto mul = dyn_cast<train::MulOp>(user);
      if (!mul || mul.getRhs() != body.getArgument(index) || !mul->hasOneUse())
        continue;
      auto scaled = dyn_cast<train::MulScalarOp>(*mul->getUsers().begin());
      if (scaled && scaled.getType() == mul.getLhs().getType())
        scaled.getResult().replaceAllUsesWith(mul.getLhs());
    }
  }
}

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
    for (train::StepOp step : getOperation().getOps<train::StepOp>()) {
      switchDropoutOff(step);
      reduceToForward(step);
    }
  }
};

} // namespace
