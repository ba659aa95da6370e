//===- TrainToLinalg.cpp - train.step to linalg on tensors ----------------===//
//
// Lowers a train.step to a func.func whose body is linalg on tensors. Each
// compute op becomes linalg.generic / named linalg ops / tensor reshapes and
// slices; bf16 and fp16 math happens in fp32 inside the generic bodies and is
// rounded once per op, as the reference interpreter does. The patterns live
// in one file per family of ops (PopulatePatterns.h); this file assembles
// them into a dialect conversion, one step at a time.
//
//===----------------------------------------------------------------------===//

#include "PopulatePatterns.h"
#include "mantissa/Conversion/TrainToLinalg/Passes.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_LOWERTRAINTOLINALGPASS
#include "mantissa/Conversion/TrainToLinalg/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::train_to_linalg;

namespace {

/// train.step becomes a func.func of the same name and signature (without
/// the train.* attributes) before it, whose entry block takes the step's
/// body; the ops in it are converted by the families' patterns.
struct StepOpLowering : OpConversionPattern<train::StepOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult
  matchAndRewrite(train::StepOp step, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto func = rewriter.create<func::FuncOp>(step.getLoc(), step.getSymName(),
                                              step.getFunctionType());
    ArrayRef<Type> inputs = step.getFunctionType().getInputs();
    Block *entry = rewriter.createBlock(
        &func.getBody(), func.getBody().end(), inputs,
        SmallVector<Location>(inputs.size(), func.getLoc()));
    Block &body = step.getBody().front();
    rewriter.inlineBlockBefore(&body, entry, entry->end(),
                               entry->getArguments());
    rewriter.eraseOp(step);
    return success();
  }
};

/// train.return becomes func.return of the lowered results.
struct ReturnOpLowering : OpConversionPattern<train::ReturnOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult
  matchAndRewrite(train::ReturnOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOpWithNewOp<func::ReturnOp>(op, adaptor.getOperands());
    return success();
  }
};

/// Shard groups describe the optimizer's layout, not computation: dropped.
struct ShardGroupOpLowering : OpConversionPattern<train::ShardGroupOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult
  matchAndRewrite(train::ShardGroupOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    rewriter.eraseOp(op);
    return success();
  }
};

/// Tried last on every op the conversion must replace: names an op that no
/// family lowers. An op that a family lowers but whose types it does not
/// support has had its pattern's error already.
struct NoLoweringPattern : ConversionPattern {
  NoLoweringPattern(MLIRContext *context,
                    llvm::DenseSet<OperationName> loweredOps,
                    SmallVector<TypeID> loweredInterfaces)
      : ConversionPattern(MatchAnyOpTypeTag(), /*benefit=*/0, context),
        loweredOps(std::move(loweredOps)),
        loweredInterfaces(std::move(loweredInterfaces)) {}

  LogicalResult
  matchAndRewrite(Operation *op, ArrayRef<Value> operands,
                  ConversionPatternRewriter &rewriter) const override {
    OperationName name = op->getName();
    bool lowered = loweredOps.contains(name) ||
                   llvm::any_of(loweredInterfaces, [&](TypeID id) {
                     return name.hasInterface(id);
                   });
    if (!lowered)
      op->emitOpError()
          << "has no lowering to linalg (mantissa-lower-train-to-linalg)";
    return failure();
  }

  llvm::DenseSet<OperationName> loweredOps;
  SmallVector<TypeID> loweredInterfaces;
};

/// Whether `op` is a train.view of a train.view or a train.cast of a
/// train.cast. The dialect conversion folds an op before it tries its
/// pattern, and replaces the uses of a converted op only when it commits, so
/// such an op would still read its producer and fold the chain into one op;
/// the lowering keeps every link. These ops wait for a later round, when
/// they read their producer's lowered value.
static bool readsOwnKind(Operation *op) {
  if (!isa<train::ViewOp, train::CastOp>(op))
    return false;
  Operation *producer = op->getOperand(0).getDefiningOp();
  return producer && producer->getName() == op->getName();
}

/// Whether `region` still holds ops for the conversion.
static bool hasTrainOps(Region &region) {
  WalkResult walk = region.walk([](Operation *op) {
    return isa_and_nonnull<train::TrainDialect>(op->getDialect()) &&
                   !isa<train::AttentionKernelOp>(op)
               ? WalkResult::interrupt()
               : WalkResult::advance();
  });
  return walk.wasInterrupted();
}

struct LowerTrainToLinalgPass
    : public mantissa::impl::LowerTrainToLinalgPassBase<
          LowerTrainToLinalgPass> {
  LogicalResult initialize(MLIRContext *context) override {
    // Every type is its own: the ops change, the tensors do not.
    typeConverter.addConversion([](Type type) { return type; });
    RewritePatternSet set(context);
    set.add<StepOpLowering, ReturnOpLowering, ShardGroupOpLowering>(
        typeConverter, context);
    populateElementwisePatterns(set, typeConverter);
    populateReductionPatterns(set, typeConverter);
    populateLinalgPatterns(set, typeConverter);
    populateShapePatterns(set, typeConverter);
    populateIndexingPatterns(set, typeConverter);
    populateCreationPatterns(set, typeConverter);
    llvm::DenseSet<OperationName> loweredOps;
    SmallVector<TypeID> loweredInterfaces;
    for (const std::unique_ptr<RewritePattern> &pattern :
         set.getNativePatterns()) {
      if (std::optional<OperationName> root = pattern->getRootKind())
        loweredOps.insert(*root);
      else if (std::optional<TypeID> id = pattern->getRootInterfaceID())
        loweredInterfaces.push_back(*id);
    }
    set.add<NoLoweringPattern>(context, std::move(loweredOps),
                               std::move(loweredInterfaces));
    patterns = FrozenRewritePatternSet(std::move(set));
    return success();
  }

  /// Lowers `step` into a func.func before it; fails, leaving the step
  /// whole, at the first op that has no lowering.
  LogicalResult lowerStep(train::StepOp step) {
    MLIRContext *context = &getContext();
    // The ops of other dialects the step holds have no lowering either
    // (but tensor.empty, formed for the GPU with train.attention_kernel);
    // the same dialects' ops the patterns create are legal.
    llvm::DenseSet<Operation *> foreignOps;
    for (Operation &op : step.getBody().front())
      if (!isa_and_nonnull<train::TrainDialect>(op.getDialect()) &&
          !isa<tensor::EmptyOp>(op))
        foreignOps.insert(&op);
    auto isCreated = [&](Operation *op) { return !foreignOps.contains(op); };
    ConversionTarget target(*context);
    target.addDynamicallyLegalDialect<arith::ArithDialect, func::FuncDialect,
                                      linalg::LinalgDialect, math::MathDialect,
                                      scf::SCFDialect, tensor::TensorDialect>(
        isCreated);
    target.markUnknownOpDynamicallyLegal(isCreated);
    target.addIllegalDialect<train::TrainDialect>();
    target.addDynamicallyLegalOp<train::ViewOp, train::CastOp>(readsOwnKind);
    // Formed for the GPU (mantissa-fuse-attention): already on tensors,
    // with their outputs' storage.
    target.addLegalOp<train::AttentionKernelOp>();

    Block *block = step->getBlock();
    Operation *before = step->getPrevNode();
    if (failed(applyPartialConversion(step.getOperation(), target, patterns)))
      return failure();
    Operation *func = before ? before->getNextNode() : &block->front();
    // Views of views and casts of casts, one link per round (readsOwnKind);
    // they always lower.
    while (hasTrainOps(func->getRegion(0)))
      if (failed(applyPartialConversion(func, target, patterns)))
        return failure();
    return success();
  }

  void runOnOperation() override {
    MLIRContext *context = &getContext();
    SmallVector<train::StepOp> steps(getOperation().getOps<train::StepOp>());
    bool failedAny = false;
    for (train::StepOp step : steps) {
      // A step that cannot be lowered is reported once, at the first op
      // without a lowering: the conversion stops there, and its own
      // "failed to legalize" error that follows is dropped.
      bool reported = false;
      ScopedDiagnosticHandler firstErrorOnly(
          context, [&](Diagnostic &diagnostic) -> LogicalResult {
            if (diagnostic.getSeverity() != DiagnosticSeverity::Error)
              return failure();
            if (reported)
              return success();
            reported = true;
            return failure();
          });
      failedAny |= failed(lowerStep(step));
    }
    if (failedAny)
      signalPassFailure();
  }

  TypeConverter typeConverter;
  FrozenRewritePatternSet patterns;
};

} // namespace
