//===- TrainOps.cpp - Operations of the train dialect ---------------------===//
//
// Syntax, verifiers and folds of the step container, casts and shard groups.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Dialect/Train/IR/RandomDraws.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/FunctionImplementation.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace mlir::mantissa::train;

//===----------------------------------------------------------------------===//
// Custom directives
//===----------------------------------------------------------------------===//

ParseResult mlir::mantissa::train::parseDTypeKeyword(OpAsmParser &parser,
                                                     DTypeAttr &dtype) {
  DType value;
  if (parseDTypeKeyword(static_cast<AsmParser &>(parser), value))
    return failure();
  dtype = DTypeAttr::get(parser.getContext(), value);
  return success();
}

void mlir::mantissa::train::printDTypeKeyword(OpAsmPrinter &printer,
                                              Operation *, DTypeAttr dtype) {
  printDTypeKeyword(static_cast<AsmPrinter &>(printer), dtype.getValue());
}

//===----------------------------------------------------------------------===//
// StepOp
//===----------------------------------------------------------------------===//

ParseResult StepOp::parse(OpAsmParser &parser, OperationState &result) {
  auto buildFunctionType =
      [](Builder &builder, ArrayRef<Type> argTypes, ArrayRef<Type> results,
         function_interface_impl::VariadicFlag,
         std::string &) { return builder.getFunctionType(argTypes, results); };
  return function_interface_impl::parseFunctionOp(
      parser, result, /*allowVariadic=*/false,
      getFunctionTypeAttrName(result.name), buildFunctionType,
      getArgAttrsAttrName(result.name), getResAttrsAttrName(result.name));
}

void StepOp::print(OpAsmPrinter &printer) {
  function_interface_impl::printFunctionOp(
      printer, *this, /*isVariadic=*/false, getFunctionTypeAttrName(),
      getArgAttrsAttrName(), getResAttrsAttrName());
}

TensorInfoAttr StepOp::getTensorInfo(unsigned index) {
  return getArgAttrOfType<TensorInfoAttr>(index, kTensorInfoAttrName);
}

ResultInfoAttr StepOp::getResultInfo(unsigned index) {
  return getResultAttrOfType<ResultInfoAttr>(index, kResultInfoAttrName);
}

PrecisionPlanAttr StepOp::getPlan(unsigned index) {
  return getArgAttrOfType<PrecisionPlanAttr>(index, kPlanAttrName);
}

BlockArgument StepOp::lookupArgument(StringRef fqn) {
  for (unsigned index = 0, e = getNumArguments(); index < e; ++index) {
    TensorInfoAttr info = getTensorInfo(index);
    if (info && info.getKind() != TensorKind::user_input &&
        info.getKind() != TensorKind::random && info.getFqn().getValue() == fqn)
      return getArgument(index);
  }
  return {};
}

LogicalResult StepOp::verify() {
  // Every argument: metadata present and consistent with its type; FQNs of
  // model state unique.
  llvm::StringMap<unsigned> stateByFqn;
  llvm::StringMap<unsigned> userInputByName;
  for (auto [index, type] : llvm::enumerate(getArgumentTypes())) {
    TensorInfoAttr info = getTensorInfo(index);
    if (!info)
      return emitOpError() << "argument #" << index << " has no '"
                           << kTensorInfoAttrName << "' metadata";
    StringRef fqn = info.getFqn().getValue();
    auto tensorType = dyn_cast<RankedTensorType>(type);
    if (!tensorType)
      return emitOpError() << "argument #" << index << " ('" << fqn
                           << "') must be a ranked tensor, got " << type;
    if (tensorType.getShape() != info.getShape().asArrayRef())
      return emitOpError() << "argument #" << index << " ('" << fqn
                           << "') has shape "
                           << formatShape(tensorType.getShape())
                           << " but its metadata says "
                           << formatShape(info.getShape().asArrayRef());
    // Random draws are named after their torch node, in the namespace of
    // the user inputs (torch's node names are unique across both).
    bool isInput = info.getKind() == TensorKind::user_input ||
                   info.getKind() == TensorKind::random;
    if (info.getKind() == TensorKind::random) {
      std::string problem;
      if (!getRandomDraw(*this, index, problem))
        return emitOpError() << "random argument #" << index << " ('" << fqn
                             << "'): " << problem;
    }
    auto &seen = isInput ? userInputByName : stateByFqn;
    auto [it, inserted] = seen.try_emplace(fqn, index);
    if (!inserted)
      return emitOpError() << "tensor '" << fqn
                           << "' is declared twice (arguments #" << it->second
                           << " and #" << index << ")";
    if (PrecisionPlanAttr plan = getPlan(index)) {
      bool isParameter = info.getKind() == TensorKind::parameter;
      if (info.getKind() != TensorKind::parameter &&
          info.getKind() != TensorKind::buffer)
        return emitOpError() << "tensor '" << fqn << "' is a "
                             << stringifyTensorKind(info.getKind())
                             << " and cannot have a precision plan";
      if (isParameter != plan.getReduce().has_value())
        return emitOpError()
               << (isParameter ? "parameter" : "buffer") << " '" << fqn
               << "' has a plan " << (isParameter ? "without" : "with")
               << " reduce and moments dtypes";
    }
  }

  // Every result: a role; one loss; gradients and mutations name a tensor
  // of the right kind and shape, once each.
  unsigned numLosses = 0;
  llvm::StringMap<unsigned> resultByFqn;
  for (auto [index, type] : llvm::enumerate(getResultTypes())) {
    ResultInfoAttr info = getResultInfo(index);
    if (!info)
      return emitOpError() << "result #" << index << " has no '"
                           << kResultInfoAttrName << "' role";
    auto tensorType = dyn_cast<RankedTensorType>(type);
    if (!tensorType)
      return emitOpError() << "result #" << index
                           << " must be a ranked tensor, got " << type;
    switch (info.getKind()) {
    case ResultKind::loss:
      if (++numLosses > 1)
        return emitOpError()
               << "has more than one loss result (result #" << index << ")";
      if (tensorType.getNumElements() != 1)
        return emitOpError() << "loss result #" << index
                             << " must hold one element, got " << type;
      continue;
    case ResultKind::user_output:
      continue;
    case ResultKind::gradient:
    case ResultKind::buffer_mutation:
      break;
    }
    StringRef fqn = info.getFqn().getValue();
    bool isGradient = info.getKind() == ResultKind::gradient;
    auto [it, inserted] =
        resultByFqn.try_emplace((isGradient ? "g:" : "m:") + fqn.str(), index);
    if (!inserted)
      return emitOpError() << "results #" << it->second << " and #" << index
                           << " are both the "
                           << (isGradient ? "gradient" : "mutation") << " of '"
                           << fqn << "'";
    BlockArgument owner = lookupArgument(fqn);
    TensorInfoAttr ownerInfo =
        owner ? getTensorInfo(owner.getArgNumber()) : TensorInfoAttr();
    TensorKind expectedKind =
        isGradient ? TensorKind::parameter : TensorKind::buffer;
    if (!ownerInfo || ownerInfo.getKind() != expectedKind)
      return emitOpError() << (isGradient ? "gradient" : "buffer mutation")
                           << " result #" << index << " names '" << fqn
                           << "', which is not a "
                           << stringifyTensorKind(expectedKind)
                           << " of this step";
    if (tensorType.getShape() != ownerInfo.getShape().asArrayRef())
      return emitOpError() << (isGradient ? "gradient" : "mutation") << " of '"
                           << fqn << "' has shape "
                           << formatShape(tensorType.getShape()) << " but the "
                           << stringifyTensorKind(expectedKind) << " has "
                           << formatShape(ownerInfo.getShape().asArrayRef());
  }
  if (numLosses == 0 && getNumResults() != 0)
    return emitOpError() << "has no loss result";
  return success();
}

LogicalResult StepOp::verifyRegions() {
  // A parameter belongs to at most one shard group, and group names are
  // unique, across every nesting level.
  llvm::StringMap<ShardGroupOp> groupByMember;
  llvm::StringMap<ShardGroupOp> groupByName;
  WalkResult walk =
      getBody().walk<WalkOrder::PreOrder>([&](ShardGroupOp group) {
        auto [named, fresh] =
            groupByName.try_emplace(group.getGroupName(), group);
        if (!fresh) {
          InFlightDiagnostic diag = group.emitOpError()
                                    << "name '" << group.getGroupName()
                                    << "' is used by two shard groups";
          diag.attachNote(named->second.getLoc()) << "first used here";
          return WalkResult::interrupt();
        }
        for (StringRef member :
             group.getMembers().getAsValueRange<StringAttr>()) {
          auto [it, inserted] = groupByMember.try_emplace(member, group);
          if (inserted)
            continue;
          InFlightDiagnostic diag = group.emitOpError()
                                    << "tensor '" << member
                                    << "' belongs to two shard groups: '"
                                    << it->second.getGroupName() << "' and '"
                                    << group.getGroupName() << "'";
          diag.attachNote(it->second.getLoc())
              << "'" << member << "' is first claimed here";
          return WalkResult::interrupt();
        }
        return WalkResult::advance();
      });
  return failure(walk.wasInterrupted());
}

//===----------------------------------------------------------------------===//
// ReturnOp
//===----------------------------------------------------------------------===//

LogicalResult ReturnOp::verify() {
  auto step = cast<StepOp>((*this)->getParentOp());
  ArrayRef<Type> resultTypes = step.getResultTypes();
  if (getNumOperands() != resultTypes.size())
    return emitOpError() << "returns " << getNumOperands()
                         << " values but the step has " << resultTypes.size()
                         << " results";
  for (auto [index, operandAndType] :
       llvm::enumerate(llvm::zip(getOperandTypes(), resultTypes))) {
    auto [operandType, resultType] = operandAndType;
    if (operandType != resultType)
      return emitOpError() << "operand #" << index << " has type "
                           << operandType << " but step result #" << index
                           << " is " << resultType;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// CastOp
//===----------------------------------------------------------------------===//

OpFoldResult CastOp::fold(FoldAdaptor) {
  Value input = getInput();
  if (input.getType() == getType())
    return input;
  auto inner = input.getDefiningOp<CastOp>();
  if (!inner)
    return {};
  Type source = inner.getInput().getType();
  if (!holdsExactly(getElementTypeOrSelf(inner.getType()),
                    getElementTypeOrSelf(source)))
    return {};
  if (source == getType())
    return inner.getInput();
  getInputMutable().assign(inner.getInput());
  return getResult();
}

Value mlir::mantissa::train::getWidenedSource(Value value) {
  auto cast = value.getDefiningOp<CastOp>();
  if (!cast || !holdsExactly(getElementTypeOrSelf(cast.getType()),
                             getElementTypeOrSelf(cast.getInput().getType())))
    return Value();
  return cast.getInput();
}

std::optional<std::pair<Value, Value>>
mlir::mantissa::train::getWidenedSources(Value lhs, Value rhs) {
  Value narrowLhs = getWidenedSource(lhs), narrowRhs = getWidenedSource(rhs);
  if (!narrowLhs || !narrowRhs ||
      getElementTypeOrSelf(narrowLhs.getType()) !=
          getElementTypeOrSelf(narrowRhs.getType()))
    return std::nullopt;
  return std::pair{narrowLhs, narrowRhs};
}

//===----------------------------------------------------------------------===//
// ShardGroupOp
//===----------------------------------------------------------------------===//

RegionKind ShardGroupOp::getRegionKind(unsigned) { return RegionKind::Graph; }

StepOp ShardGroupOp::getStep() { return (*this)->getParentOfType<StepOp>(); }

LogicalResult ShardGroupOp::verify() {
  if (!getBody().empty())
    for (Operation &op : getBody().front())
      if (!isa<ShardGroupOp>(op))
        return op.emitOpError() << "cannot be nested in shard group '"
                                << getGroupName() << "'; only shard groups can";

  StepOp step = getStep();
  // Which member first asked for each gather dtype, to name both sides of a
  // conflict.
  std::optional<std::pair<StringRef, DType>> firstMember;
  for (StringRef member : getMembers().getAsValueRange<StringAttr>()) {
    BlockArgument argument = step.lookupArgument(member);
    TensorInfoAttr info =
        argument ? step.getTensorInfo(argument.getArgNumber()) : nullptr;
    if (!info || info.getKind() != TensorKind::parameter)
      return emitOpError() << "shard group '" << getGroupName() << "' names '"
                           << member << "', which is not a parameter of step @"
                           << step.getSymName();
    std::optional<DType> needed;
    if (PrecisionPlanAttr plan = step.getPlan(argument.getArgNumber()))
      needed = plan.getGather();
    else
      needed = getDTypeOf(info.getDtype());
    if (!needed)
      return emitOpError() << "member '" << member << "' has dtype "
                           << info.getDtype() << ", which cannot be gathered";
    if (firstMember && firstMember->second != *needed)
      return emitOpError() << "shard group '" << getGroupName()
                           << "' has members that need two gather dtypes: '"
                           << firstMember->first << "' needs "
                           << stringifyDType(firstMember->second) << ", '"
                           << member << "' needs " << stringifyDType(*needed);
    if (!firstMember)
      firstMember = {member, *needed};
  }
  if (firstMember && firstMember->second != getGather())
    return emitOpError() << "shard group '" << getGroupName() << "' gathers in "
                         << stringifyDType(getGather())
                         << " but its members need "
                         << stringifyDType(firstMember->second) << " (e.g. '"
                         << firstMember->first << "')";
  return success();
}

#include "mantissa/Dialect/Train/IR/TrainInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "mantissa/Dialect/Train/IR/TrainOps.cpp.inc"
