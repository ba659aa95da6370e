//===- Autocast.cpp - Compute precision as torch.autocast ---------------===//
//
// `compute: bf16` (or fp16): rewrites a step so that it computes as the same
// program run under torch.autocast would, forward and backward alike. The
// exported joint graph is walked once in program order; each operation
// takes its operands in the dtype autocast gives its kind of op and its
// result type is inferred again by torch's own rules (the op's type
// inference), so the new dtypes flow to the consumers:
//
// - matrix products (torch's "lower_precision_fp" list: mm, bmm, addmm,
//   linear and convolutions, which are batched products after import; and
//   the products of their backward, which autograd runs in the dtype of
//   the forward's operands) read their operands in the compute dtype,
//   accumulate in fp32 and produce the compute dtype;
// - the ops autocast runs in fp32 (its "fp32" and "fp32_set_opt_dtype"
//   lists: softmax, log_softmax, the norms, exp, log, pow, rsqrt,
//   reciprocal, sum, and their backwards, which autograd runs in the
//   forward's fp32; also mean, see below) read fp32 operands;
// - every other op runs in torch's promotion of its inputs (the widest);
// - the parts of torch's fused kernels that the importer decomposes and
//   that those kernels compute in fp32 from operands in the compute dtype
//   (kFp32AccumulateAttrName: SDPA's score products, for one) read their
//   operands rounded to the compute dtype and widened back, and keep fp32.
//
// Step results keep the step's declared types (gradients their reduce
// dtype, the loss and buffer mutations theirs): a cast before the return.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Dialect/Train/IR/TrainTypeRules.h"
#include "mantissa/Transforms/Passes.h"
#include "mantissa/Transforms/PrecisionSpec.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_AUTOCASTPASS
#include "mantissa/Transforms/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::train;

namespace {
/// What autocast does with an op's floating-point operands.
enum class CastPolicy {
  /// Matrix products: operands in the compute dtype.
  LowerPrecision,
  /// Numerically sensitive ops: operands in fp32.
  Fp32,
  /// Everything else: torch's promotion of what the operands now are.
  Promote,
  /// Inside a fused kernel of torch's: operands rounded to the compute
  /// dtype, then computed in fp32.
  Fp32OnLowerPrecision,
};
} // namespace

/// torch's lists in aten/src/ATen/autocast_mode.cpp (the CUDA ones, which
/// are what mixed-precision training on GPUs runs; the CPU lists of torch
/// 1.13 keep fewer ops in fp32, see docs/precision.md), expressed over the
/// `train` ops that the importer produces. Ops the importer decomposes
/// (losses, group/batch norm, convolutions) are covered through their
/// parts: a loss's log_softmax, sums and means run in fp32 and its
/// gathers and selects promote.
static CastPolicy getCastPolicy(Operation *op) {
  if (op->hasAttr(kFp32AccumulateAttrName))
    return CastPolicy::Fp32OnLowerPrecision;
  if (isa<MatmulOp, BatchMatmulOp, AddmmOp>(op))
    return CastPolicy::LowerPrecision;
  // `mean` is not on torch's list (only `sum`, `prod`, `cumsum`); it is
  // here because its backward and the losses' means divide sums that the
  // fp32 list accumulates, and torch's own mean of bf16 accumulates in
  // fp32 too: only the rounding of its result differs.
  if (isa<SoftmaxOp, LogSoftmaxOp, SoftmaxBackwardOp, LogSoftmaxBackwardOp,
          LayerNormOp, LayerNormBackwardOp, RmsNormOp, RmsNormBackwardOp, SumOp,
          MeanOp, ExpOp, LogOp, PowOp, PowScalarOp, RsqrtOp, ReciprocalOp>(op))
    return CastPolicy::Fp32;
  return CastPolicy::Promote;
}

static bool isFloatTensor(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && isa<FloatType>(type.getElementType());
}

namespace {
/// The casts the pass inserts, one per value and element type: the step is
/// one block walked in order, so the first cast of a value dominates every
/// later op that needs the same one.
class CastCache {
public:
  /// `value` as `elementType`, through a cast before `builder`'s insertion
  /// point when there is none yet.
  Value get(OpBuilder &builder, Location location, Value value,
            Type elementType) {
    auto type = cast<RankedTensorType>(value.getType());
    if (type.getElementType() == elementType)
      return value;
    Value &cached = byValueAndType[{value, elementType}];
    if (!cached)
      cached = builder.create<CastOp>(location, type.clone(elementType), value);
    return cached;
  }

private:
  llvm::DenseMap<std::pair<Value, Type>, Value> byValueAndType;
};
} // namespace

/// The result types `op`'s type inference gives its current operands; it
/// reports why it fails only when given `location`.
static LogicalResult inferResultTypes(Operation *op,
                                      std::optional<Location> location,
                                      SmallVectorImpl<Type> &types) {
  auto inference = dyn_cast<InferTypeOpInterface>(op);
  if (!inference)
    return failure();
  types.clear();
  return inference.inferReturnTypes(
      op->getContext(), location, op->getOperands(),
      op->getRawDictionaryAttrs(), op->getPropertiesStorage(), op->getRegions(),
      types);
}

/// torch's promotion over the floating-point operands of `op`.
static Type promoteFloatOperands(Operation *op) {
  SmallVector<PromotionOperand> operands;
  for (Value operand : op->getOperands())
    if (isFloatTensor(operand)) {
      auto type = cast<RankedTensorType>(operand.getType());
      operands.push_back({type.getElementType(), type.getRank() == 0, false});
    }
  if (operands.empty())
    return {};
  return resultType(op->getContext(), operands);
}

static LogicalResult autocastOp(Operation *op, Type computeType,
                                CastCache &casts) {
  OpBuilder builder(op);
  Type f32 = Float32Type::get(op->getContext());
  CastPolicy policy = getCastPolicy(op);
  if (policy != CastPolicy::Promote) {
    Type target = policy == CastPolicy::Fp32 ? f32 : computeType;
    for (OpOperand &operand : op->getOpOperands())
      if (isFloatTensor(operand.get())) {
        Value cast = casts.get(builder, op->getLoc(), operand.get(), target);
        if (policy == CastPolicy::Fp32OnLowerPrecision)
          cast = casts.get(builder, op->getLoc(), cast, f32);
        operand.set(cast);
      }
  }

  SmallVector<Type> types;
  if (failed(inferResultTypes(op, std::nullopt, types))) {
    // An op that needs equal operand dtypes (where, cat, index_put, ...)
    // and now has a mix: autocast's "promote" rule, all in the widest.
    Type widest = promoteFloatOperands(op);
    if (!widest)
      return op->emitOpError()
             << "cannot be retyped for compute precision: its type inference "
                "fails on its operands";
    for (OpOperand &operand : op->getOpOperands())
      if (isFloatTensor(operand.get()))
        operand.set(casts.get(builder, op->getLoc(), operand.get(), widest));
    if (failed(inferResultTypes(op, op->getLoc(), types)))
      return op->emitOpError()
             << "cannot be retyped for compute precision: its type inference "
                "fails on operands promoted to "
             << widest;
  }
  for (auto [result, type] : llvm::zip_equal(op->getResults(), types))
    result.setType(type);
  return success();
}

/// Folds cast chains and no-op casts: those the pass inserted and the
/// precision pass's, whose input types the walk may have changed; the rest
/// of the graph is left as it is.
static void foldCasts(StepOp step) {
  SmallVector<Operation *> initial;
  step.walk([&](CastOp castOp) { initial.push_back(castOp); });
  GreedyRewriteConfig config;
  config.strictMode = GreedyRewriteStrictness::ExistingAndNewOps;
  (void)applyOpPatternsAndFold(
      initial, FrozenRewritePatternSet(RewritePatternSet(step.getContext())),
      config);
}

LogicalResult mlir::mantissa::applyAutocast(StepOp step, DType compute) {
  if (compute == DType::fp32)
    return success();
  MLIRContext *context = step.getContext();
  if (step->hasAttr(kComputeAttrName))
    return step.emitOpError()
           << "already computes in "
           << step->getAttrOfType<StringAttr>(kComputeAttrName).getValue()
           << "; compute precision applies once per step";
  Type computeType = getElementType(context, compute);
  CastCache casts;
  Block &body = step.getBody().front();
  for (Operation &op : llvm::make_early_inc_range(body)) {
    if (isa<CastOp, ShardGroupOp>(op))
      continue;
    if (auto returnOp = dyn_cast<ReturnOp>(op)) {
      OpBuilder builder(returnOp);
      for (auto [index, type] :
           llvm::enumerate(step.getFunctionType().getResults()))
        if (returnOp.getOperand(index).getType() != type)
          returnOp.setOperand(
              index,
              casts.get(builder, returnOp.getLoc(), returnOp.getOperand(index),
                        cast<RankedTensorType>(type).getElementType()));
      continue;
    }
    if (isa<ViewOp, ExpandOp>(op)) {
      // Shape-only ops state their result type: the shape is theirs, the
      // element type their input's.
      auto resultType = cast<RankedTensorType>(op.getResult(0).getType());
      op.getResult(0).setType(
          resultType.clone(getElementTypeOrSelf(op.getOperand(0).getType())));
      continue;
    }
    if (!isa<InferTypeOpInterface>(op))
      continue;
    if (failed(autocastOp(&op, computeType, casts)))
      return failure();
  }
  foldCasts(step);
  step->setAttr(kComputeAttrName,
                StringAttr::get(context, stringifyDType(compute)));
  return verify(step);
}

std::vector<precision::MatrixProduct>
mlir::mantissa::collectMatrixProducts(StepOp step) {
  std::vector<precision::MatrixProduct> products;
  auto typeName = [](Type type) {
    std::string text;
    llvm::raw_string_ostream(text) << getElementTypeOrSelf(type);
    return text;
  };
  auto shapeOf = [](Value value) {
    ArrayRef<int64_t> shape =
        cast<RankedTensorType>(value.getType()).getShape();
    return std::vector<int64_t>(shape.begin(), shape.end());
  };
  step.walk([&](Operation *op) {
    Value lhs, rhs;
    StringRef name;
    if (auto mm = dyn_cast<MatmulOp>(op)) {
      lhs = mm.getLhs(), rhs = mm.getRhs(), name = "mm";
    } else if (auto bmm = dyn_cast<BatchMatmulOp>(op)) {
      lhs = bmm.getLhs(), rhs = bmm.getRhs(), name = "bmm";
    } else if (auto addmm = dyn_cast<AddmmOp>(op)) {
      lhs = addmm.getLhs(), rhs = addmm.getRhs(), name = "addmm";
    } else {
      return;
    }
    precision::MatrixProduct product;
    if (auto nameLoc = dyn_cast<NameLoc>(op->getLoc()))
      product.node = nameLoc.getName().str();
    else
      llvm::raw_string_ostream(product.node) << op->getLoc();
    product.op = name.str();
    product.lhsShape = shapeOf(lhs);
    product.rhsShape = shapeOf(rhs);
    // Operands that are both widened from one narrower dtype (the parts of
    // torch's kernels that read bf16 and keep fp32, train.fp32_accumulate)
    // hold that dtype's values: the product reads it, its result is fp32.
    auto narrow = getWidenedSources(lhs, rhs);
    product.operandType =
        typeName(narrow ? narrow->first.getType() : lhs.getType());
    product.resultType = typeName(op->getResult(0).getType());
    // [.., M, K] x [.., K, N]: 2 M N K per batch element.
    int64_t flops = 2 * product.rhsShape.back();
    for (int64_t size : product.lhsShape)
      flops *= size;
    product.flops = flops;
    products.push_back(std::move(product));
  });
  return products;
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

namespace {
struct AutocastPass : public mantissa::impl::AutocastPassBase<AutocastPass> {
  using Base::Base;

  void runOnOperation() override {
    std::optional<DType> dtype = precision::parseComputeDType(compute);
    if (!dtype) {
      getOperation().emitError()
          << "mantissa-autocast: unknown compute dtype '" << compute
          << "'; expected fp32, bf16 or fp16 (or torch's float32, bfloat16, "
             "float16)";
      return signalPassFailure();
    }
    for (StepOp step : llvm::to_vector(getOperation().getOps<StepOp>()))
      if (failed(applyAutocast(step, *dtype)))
        signalPassFailure();
  }
};
} // namespace
