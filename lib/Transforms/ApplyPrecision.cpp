//===- ApplyPrecision.cpp - The precision pass ----------------------------===//
//
// Resolves a precision spec for each `train.step`, reports what is wrong
// with it before anything changes, then attaches plans, retypes parameters
// and buffers to their master dtypes, inserts and folds casts and emits the
// shard groups. Resolution itself lives in PrecisionSpec.cpp.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Transforms/Passes.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"

#include <cmath>

namespace mlir::mantissa {
#define GEN_PASS_DEF_APPLYPRECISIONPASS
#include "mantissa/Transforms/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::precision;
using train::CastOp;
using train::ReturnOp;
using train::ShardGroupOp;
using train::StepOp;
using train::TensorInfoAttr;
using train::TensorKind;

//===----------------------------------------------------------------------===//
// Diagnostics
//===----------------------------------------------------------------------===//

namespace {
/// Places problems on the step argument that declares the tensor they are
/// about, or on the step.
class ProblemEmitter {
public:
  explicit ProblemEmitter(StepOp step) : step(step) {
    for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index)
      if (TensorInfoAttr info = step.getTensorInfo(index))
        if (info.getKind() != TensorKind::user_input &&
            info.getKind() != TensorKind::random)
          argumentByFqn[info.getFqn().getValue()] = index;
  }

  Location locate(StringRef fqn) {
    auto it = argumentByFqn.find(fqn);
    if (fqn.empty() || it == argumentByFqn.end())
      return step.getLoc();
    return step.getArgument(it->second).getLoc();
  }

  void emit(const Problem &problem, bool asError) {
    Location location = locate(problem.fqn);
    InFlightDiagnostic diagnostic =
        asError ? emitError(location) : emitWarning(location);
    diagnostic << problem.message;
    if (!problem.note.empty())
      diagnostic.attachNote(locate(problem.noteFqn)) << problem.note;
  }

private:
  StepOp step;
  llvm::StringMap<unsigned> argumentByFqn;
};

/// Forgets the casts the folder erases, so that only live ones are revisited.
class ErasedOpTracker : public RewriterBase::Listener {
public:
  explicit ErasedOpTracker(llvm::SetVector<Operation *> &ops) : ops(ops) {}
  void notifyOperationErased(Operation *op) override { ops.remove(op); }

private:
  llvm::SetVector<Operation *> &ops;
};
} // namespace

FailureOr<Spec> mlir::mantissa::loadPrecisionSpec(const SpecOptions &options,
                                                  Location location) {
  Spec spec;
  std::vector<Problem> problems;
  if (buildSpec(options, spec, problems))
    return spec;
  for (const Problem &problem : problems) {
    InFlightDiagnostic diagnostic = emitError(location) << problem.message;
    if (!problem.note.empty())
      diagnostic.attachNote(location) << problem.note;
  }
  return failure();
}

//===----------------------------------------------------------------------===//
// Reading the step
//===----------------------------------------------------------------------===//

/// The parameters and buffers of `step`, with their argument numbers.
static std::vector<std::pair<TensorDesc, unsigned>>
describeTensors(StepOp step) {
  std::vector<std::pair<TensorDesc, unsigned>> tensors;
  for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index) {
    TensorInfoAttr info = step.getTensorInfo(index);
    if (!info || (info.getKind() != TensorKind::parameter &&
                  info.getKind() != TensorKind::buffer))
      continue;
    TensorDesc tensor;
    tensor.fqn = info.getFqn().getValue().str();
    tensor.module = info.getModule().getValue().str();
    tensor.isParameter = info.getKind() == TensorKind::parameter;
    tensor.shape.assign(info.getShape().asArrayRef().begin(),
                        info.getShape().asArrayRef().end());
    tensor.exported = train::getDTypeOf(info.getDtype());
    llvm::raw_string_ostream(tensor.exportedTypeName) << info.getDtype();
    tensor.isFloat = isa<FloatType>(info.getDtype());
    if (auto rms = step.getArgAttrOfType<FloatAttr>(index, kInitRmsAttrName))
      tensor.initRms = rms.getValueAsDouble();
    tensors.emplace_back(std::move(tensor), index);
  }
  return tensors;
}

/// The pass runs once: a second run would stack casts on casts.
static LogicalResult checkNotPlanned(StepOp step) {
  for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index) {
    TensorInfoAttr info = step.getTensorInfo(index);
    bool retyped = info && getElementTypeOrSelf(step.getArgument(index)) !=
                               info.getDtype();
    if (!step.getPlan(index) && !retyped)
      continue;
    InFlightDiagnostic diagnostic =
        step.emitOpError() << "already has a precision plan; the precision "
                              "pass runs once per step";
    diagnostic.attachNote(step.getArgument(index).getLoc())
        << "'" << info.getFqn().getValue() << "' is already "
        << (retyped ? "retyped from its exported dtype" : "planned");
    return failure();
  }
  auto groups = step.getBody().getOps<ShardGroupOp>();
  if (!groups.empty()) {
    InFlightDiagnostic diagnostic =
        step.emitOpError() << "already has shard groups; the precision pass "
                              "forms them";
    diagnostic.attachNote((*groups.begin()).getLoc())
        << "a shard group is here";
    return failure();
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Applying a plan
//===----------------------------------------------------------------------===//

static RankedTensorType withElementType(Type type, DType dtype) {
  auto tensorType = cast<RankedTensorType>(type);
  return tensorType.clone(train::getElementType(type.getContext(), dtype));
}

/// `value` converted to `type` by a new cast, or `value` if it has the type.
static Value castTo(OpBuilder &builder, Location location, Value value,
                    Type type, llvm::SetVector<Operation *> &casts) {
  if (value.getType() == type)
    return value;
  auto cast = builder.create<CastOp>(location, type, value);
  casts.insert(cast);
  return cast;
}

/// Emits the shard groups at the top of the step: main groups, each holding
/// its nested groups.
static void emitShardGroups(OpBuilder &builder, StepOp step,
                            const StepPlan &plan) {
  llvm::StringMap<ShardGroupOp> mainGroups;
  for (const ShardGroup &group : plan.groups) {
    OpBuilder::InsertionGuard guard(builder);
    if (group.nestedIn) {
      ShardGroupOp parent = mainGroups.lookup(*group.nestedIn);
      Region &body = parent.getBody();
      if (body.empty())
        body.push_back(new Block());
      builder.setInsertionPointToEnd(&body.front());
    }
    auto op = builder.create<ShardGroupOp>(
        step.getLoc(), group.name, group.unit, group.gather,
        group.reshardAfterForward,
        builder.getStrArrayAttr(llvm::to_vector_of<StringRef>(group.members)));
    if (!group.nestedIn)
      mainGroups[group.name] = op;
  }
}

/// Folds the inserted casts (chains, no-ops), merges identical ones and
/// checks that none is left that changes nothing.
static LogicalResult foldCasts(StepOp step,
                               llvm::SetVector<Operation *> &casts) {
  if (casts.empty())
    return success();
  MLIRContext *context = step.getContext();
  ErasedOpTracker tracker(casts);
  GreedyRewriteConfig config;
  config.strictMode = GreedyRewriteStrictness::ExistingAndNewOps;
  config.listener = &tracker;
  // Only the casts: the exported graph's operations are left as they are.
  SmallVector<Operation *> initial(casts.begin(), casts.end());
  (void)applyOpPatternsAndFold(
      initial, FrozenRewritePatternSet(RewritePatternSet(context)), config);

  // CSE of the casts: one per (input, type).
  llvm::DenseMap<std::pair<Value, Type>, CastOp> firstCast;
  IRRewriter rewriter(context);
  for (Operation *op : llvm::to_vector(casts)) {
    auto cast = llvm::cast<CastOp>(op);
    auto [it, fresh] =
        firstCast.try_emplace({cast.getInput(), cast.getType()}, cast);
    if (fresh)
      continue;
    rewriter.replaceOp(cast, it->second.getResult());
    casts.remove(op);
  }
  for (Operation *op : casts) {
    auto cast = llvm::cast<CastOp>(op);
    if (cast.getInput().getType() == cast.getType())
      return cast.emitOpError()
             << "is a no-op the precision pass failed to fold";
  }
  return success();
}

static LogicalResult
applyToStep(StepOp step, const StepPlan &plan,
            llvm::ArrayRef<std::pair<TensorDesc, unsigned>> tensors) {
  MLIRContext *context = step.getContext();
  Block &body = step.getBody().front();
  OpBuilder builder = OpBuilder::atBlockBegin(&body);
  emitShardGroups(builder, step, plan);

  SmallVector<Type> argumentTypes(step.getArgumentTypes());
  SmallVector<Type> resultTypes(step.getResultTypes());
  llvm::SetVector<Operation *> casts;

  // Arguments: master-dtype storage, cast to the gather dtype once (the
  // wire), then back to what the exported graph computes in.
  for (const auto &[tensor, index] : tensors) {
    const TensorPlan *tensorPlan = plan.lookup(tensor.fqn);
    if (!tensorPlan)
      continue;
    BlockArgument argument = step.getArgument(index);
    Type exportedType = argument.getType();
    Location location = argument.getLoc();
    argument.setType(
        withElementType(exportedType, tensorPlan->get(Axis::Master)));
    argumentTypes[index] = argument.getType();
    Value gathered = castTo(
        builder, location, argument,
        withElementType(exportedType, tensorPlan->get(Axis::Gather)), casts);
    Value computed = castTo(builder, location, gathered, exportedType, casts);
    // The first cast reads the argument; everything else reads `computed`.
    if (computed != argument)
      argument.replaceAllUsesExcept(computed, gathered != argument
                                                  ? gathered.getDefiningOp()
                                                  : computed.getDefiningOp());

    std::optional<train::DType> reduce =
        tensorPlan->isParameter() ? std::optional(tensorPlan->get(Axis::Reduce))
                                  : std::nullopt;
    std::optional<train::DType> moments =
        tensorPlan->isParameter()
            ? std::optional(tensorPlan->get(Axis::Moments))
            : std::nullopt;
    step.setArgAttr(
        index, StepOp::kPlanAttrName,
        train::PrecisionPlanAttr::get(context, tensorPlan->get(Axis::Master),
                                      tensorPlan->get(Axis::Gather), reduce,
                                      moments, tensorPlan->splitMaster));
  }

  // Results: gradients in the gather dtype, then the reduce dtype; buffer
  // mutations in the buffer's master dtype.
  auto returnOp = cast<ReturnOp>(body.getTerminator());
  builder.setInsertionPoint(returnOp);
  for (unsigned index = 0, e = step.getNumResults(); index < e; ++index) {
    train::ResultInfoAttr info = step.getResultInfo(index);
    if (!info || !info.getFqn())
      continue;
    const TensorPlan *tensorPlan = plan.lookup(info.getFqn().getValue());
    if (!tensorPlan)
      continue;
    Value value = returnOp.getOperand(index);
    Location location = value.getLoc();
    if (info.getKind() == train::ResultKind::gradient) {
      value = castTo(
          builder, location, value,
          withElementType(value.getType(), tensorPlan->get(Axis::Gather)),
          casts);
      value = castTo(
          builder, location, value,
          withElementType(value.getType(), tensorPlan->get(Axis::Reduce)),
          casts);
    } else if (info.getKind() == train::ResultKind::buffer_mutation) {
      value = castTo(
          builder, location, value,
          withElementType(value.getType(), tensorPlan->get(Axis::Master)),
          casts);
    }
    returnOp.setOperand(index, value);
    resultTypes[index] = value.getType();
  }
  step.setFunctionType(FunctionType::get(context, argumentTypes, resultTypes));

  if (failed(foldCasts(step, casts)))
    return failure();
  // The shard groups' verifier checks each group's single gather dtype and
  // single membership; the step's, the retyped signature.
  return verify(step);
}

FailureOr<StepPlan> mlir::mantissa::applyPrecisionPlan(StepOp step,
                                                       const Spec &spec,
                                                       double learningRate,
                                                       bool warningsAsErrors) {
  if (!(learningRate > 0) || !std::isfinite(learningRate))
    return step.emitOpError()
           << "needs a positive learning rate for the stall lint, got "
           << learningRate;
  if (failed(checkNotPlanned(step)))
    return failure();
  std::vector<std::pair<TensorDesc, unsigned>> described =
      describeTensors(step);
  std::vector<TensorDesc> tensors;
  for (const auto &entry : described)
    tensors.push_back(entry.first);

  StepPlan plan;
  std::vector<Problem> errors;
  ResolveOptions options;
  options.learningRate = learningRate;
  bool resolved =
      resolvePlan(spec, tensors, step.getSymName(), options, plan, errors);

  ProblemEmitter emitter(step);
  for (const Problem &error : errors)
    emitter.emit(error, /*asError=*/true);
  for (const Problem &warning : plan.warnings)
    emitter.emit(warning, /*asError=*/warningsAsErrors);
  if (!resolved || (warningsAsErrors && !plan.warnings.empty()))
    return failure();

  if (failed(applyToStep(step, plan, described)))
    return failure();
  if (spec.compute && *spec.compute != DType::fp32) {
    plan.compute = spec.compute;
    if (failed(applyAutocast(step, *spec.compute)))
      return failure();
  }
  plan.matrixProducts = collectMatrixProducts(step);
  return plan;
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

namespace {
struct ApplyPrecisionPass
    : public mantissa::impl::ApplyPrecisionPassBase<ApplyPrecisionPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<StepOp> steps(module.getOps<StepOp>());
    SpecOptions specOptions;
    specOptions.specPath = specPath;
    specOptions.flagRules.assign(rules.begin(), rules.end());
    specOptions.defaultDtype = defaultDtype;
    specOptions.compute = compute;
    FailureOr<Spec> spec = loadPrecisionSpec(
        specOptions, steps.empty() ? module.getLoc() : steps.front().getLoc());
    if (failed(spec))
      return signalPassFailure();
    for (StepOp step : steps)
      if (failed(
              applyPrecisionPlan(step, *spec, learningRate, warningsAsErrors)))
        signalPassFailure();
  }
};
} // namespace
