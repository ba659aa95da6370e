//===- Interpreter.cpp - Reference interpreter of train.step --------------===//
//
// Checks the arguments against the step's signature, then evaluates the body
// in order, one operation family at a time (see Kernels.h), and collects
// what train.return yields. A tensor is freed after its last use.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Reference/Interpreter.h"
#include "Kernels.h"
#include "Numerics.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::reference;
using namespace mlir::mantissa::reference::kernels;

/// `argument #2 ('fc.weight')`, naming the tensor when it has metadata.
static std::string describeArgument(train::StepOp step, unsigned index) {
  std::string text = "argument #" + std::to_string(index);
  if (train::TensorInfoAttr info = step.getTensorInfo(index))
    text += " ('" + info.getFqn().getValue().str() + "')";
  return text;
}

static LogicalResult checkArguments(train::StepOp step,
                                    ArrayRef<Tensor> arguments) {
  ArrayRef<Type> types = step.getArgumentTypes();
  if (arguments.size() != types.size())
    return step.emitError()
           << "step @" << step.getSymName() << " takes " << types.size()
           << " arguments, got " << arguments.size();
  for (auto [index, argument] : llvm::enumerate(arguments)) {
    auto type = dyn_cast<RankedTensorType>(types[index]);
    if (!type || !type.hasStaticShape() ||
        !Tensor::isSupportedElementType(type.getElementType()))
      return step.emitError()
             << describeArgument(step, index) << " has type " << types[index]
             << ", which the reference interpreter does not support";
    if (!argument.getElementType())
      return step.emitError()
             << describeArgument(step, index) << " has no value";
    if (argument.getType() != type)
      return step.emitError() << describeArgument(step, index) << " must be "
                              << type << ", got " << argument.getType();
  }
  return success();
}

/// Evaluates one operation of the body and checks what it produced against
/// the types the IR gives its results.
static LogicalResult evaluateOperation(Operation *op, Environment &env) {
  for (Type type : op->getResultTypes()) {
    auto tensorType = dyn_cast<RankedTensorType>(type);
    if (!tensorType || !tensorType.hasStaticShape() ||
        !Tensor::isSupportedElementType(tensorType.getElementType()))
      return op->emitOpError() << "has a result of type " << type
                               << ", which the reference interpreter does not "
                                  "support";
  }
  std::optional<LogicalResult> outcome;
  for (auto family :
       {evaluateElementwiseOp, evaluateReductionOp, evaluateLinalgOp,
        evaluateShapeOp, evaluateIndexingOp, evaluateCreationOp}) {
    outcome = family(op, env);
    if (outcome)
      break;
  }
  if (!outcome)
    return op->emitOpError() << "is not supported by the reference interpreter";
  if (failed(*outcome))
    return failure();
  for (Value result : op->getResults())
    if (env.lookup(result).getType() != result.getType())
      return op->emitOpError()
             << "internal error: the reference interpreter produced "
             << env.lookup(result).getType() << " for a result of type "
             << result.getType();
  return success();
}

FailureOr<SmallVector<Tensor>>
reference::interpretStep(train::StepOp step, ArrayRef<Tensor> arguments) {
  if (failed(checkArguments(step, arguments)))
    return failure();
  Environment env;
  Block &body = step.getBody().front();
  for (auto [argument, tensor] : llvm::zip(body.getArguments(), arguments))
    env.bind(argument, tensor);
  // The last operation reading each value: its tensor is freed after it.
  llvm::DenseMap<Value, Operation *> lastUser;
  for (Operation &op : body)
    for (Value operand : op.getOperands())
      lastUser[operand] = &op;
  for (Operation &op : body) {
    // Shard groups describe how parameters are distributed, not values.
    if (isa<train::ShardGroupOp>(op))
      continue;
    if (auto ret = dyn_cast<train::ReturnOp>(op)) {
      SmallVector<Tensor> results;
      for (Value operand : ret.getOperands())
        results.push_back(env.lookup(operand));
      return results;
    }
    if (failed(evaluateOperation(&op, env)))
      return failure();
    for (Value operand : op.getOperands())
      if (lastUser.lookup(operand) == &op)
        env.release(operand);
    for (Value result : op.getResults())
      if (result.use_empty())
        env.release(result);
  }
  return step.emitError() << "step @" << step.getSymName()
                          << " has no train.return";
}
