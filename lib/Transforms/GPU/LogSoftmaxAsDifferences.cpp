//===- LogSoftmaxAsDifferences.cpp - log_softmax where it is read ---------===//
//
// mantissa-log-softmax-as-differences (Passes.td): an fp32 log_softmax
// becomes `(x - max) - log(sum(exp(x - max)))` (two row reductions and
// elementwise ops, the operations its own lowering performs), and a gather
// of an elementwise op gathers the op's operands instead. The
// cross-entropy's gather of each row's target log-probability then reads
// one logit per row, and its backward's exp(log_softmax(x)) computes the
// difference where it reads the logits: the [tokens, vocabulary] fp32
// log-probabilities are never written.
//
//===----------------------------------------------------------------------===//

#include "TrainElementwise.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Transforms/GPU/Passes.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_LOGSOFTMAXASDIFFERENCESPASS
#include "mantissa/Transforms/GPU/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// log_softmax(x, d) -> (x - m) - log(sum(exp(x - m), d)), m = amax(x, d),
/// for fp32 (a narrower log_softmax computes in fp32 and rounds, which the
/// pieces would not). Each reader of x - m has its own difference, as the
/// lowering computes it in each of its kernels, so that elementwise fusion
/// moves each into its reader.
bool decompose(train::LogSoftmaxOp op, RewriterBase &rewriter) {
  auto type = dyn_cast<RankedTensorType>(op.getType());
  if (!type || !type.hasStaticShape() || !type.getElementType().isF32() ||
      op.getInput().getType() != type)
    return false;
  int64_t dim = op.getDim();
  SmallVector<int64_t> rowShape(type.getShape());
  rowShape[dim] = 1;
  auto rowType = RankedTensorType::get(rowShape, type.getElementType());
  Location loc = op.getLoc();
  rewriter.setInsertionPoint(op);
  DenseI64ArrayAttr dims = rewriter.getDenseI64ArrayAttr({dim});
  Value x = op.getInput();
  Value maximum = rewriter.create<train::AmaxOp>(
      loc, rowType, x, dims, rewriter.getUnitAttr(), TypeAttr());
  Value sum = rewriter.create<train::SumOp>(
      loc, rowType,
      rewriter.create<train::ExpOp>(
          loc, type, rewriter.create<train::SubOp>(loc, type, x, maximum)),
      dims, rewriter.getUnitAttr(), TypeAttr());
  Value logSum = rewriter.create<train::LogOp>(loc, rowType, sum);
  rewriter.replaceOpWithNewOp<train::SubOp>(
      op, type, rewriter.create<train::SubOp>(loc, type, x, maximum), logSum);
  return true;
}

/// gather(E(a, b, ...), index, d) -> E(gather(a, index, d), b, ...) where E
/// is elementwise, the index has E's shape but along d, and each operand of
/// E either has E's shape (gathered) or extent 1 along d and E's elsewhere
/// (every element gathered from a row reads the row's one value), or is a
/// scalar. The gathers it makes go to `made`.
bool gatherOperands(train::GatherOp gather, RewriterBase &rewriter,
                    SmallVectorImpl<train::GatherOp> &made) {
  Operation *producer = gather.getInput().getDefiningOp();
  auto type = dyn_cast<RankedTensorType>(gather.getInput().getType());
  auto indexType = dyn_cast<RankedTensorType>(gather.getIndex().getType());
  if (!producer || !isTrainElementwise(producer) || !type ||
      !type.hasStaticShape() || !indexType || !indexType.hasStaticShape() ||
      indexType.getRank() != type.getRank())
    return false;
  int64_t rank = type.getRank();
  int64_t dim = gather.getDim();
  for (int64_t d = 0; d < rank; ++d)
    if (d != dim && indexType.getDimSize(d) != type.getDimSize(d))
      return false;
  SmallVector<int64_t> rowShape(type.getShape());
  rowShape[dim] = 1;
  enum class Use { Gathered, AsIs };
  SmallVector<Use> uses;
  for (Value operand : producer->getOperands()) {
    auto operandType = dyn_cast<RankedTensorType>(operand.getType());
    if (!operandType)
      return false;
    if (operandType.getShape() == type.getShape())
      uses.push_back(Use::Gathered);
    else if (operandType.getRank() == 0 ||
             operandType.getShape() == ArrayRef<int64_t>(rowShape))
      uses.push_back(Use::AsIs);
    else
      return false;
  }
  rewriter.setInsertionPoint(gather);
  SmallVector<Value> operands;
  for (auto [operand, use] : llvm::zip_equal(producer->getOperands(), uses)) {
    if (use == Use::AsIs) {
      operands.push_back(operand);
      continue;
    }
    auto operandType = cast<RankedTensorType>(operand.getType());
    made.push_back(rewriter.create<train::GatherOp>(
        gather.getLoc(), indexType.clone(operandType.getElementType()), operand,
        gather.getIndex(), gather.getDimAttr()));
    operands.push_back(made.back());
  }
  Operation *gathered = rewriter.clone(*producer);
  gathered->setOperands(operands);
  gathered->getResult(0).setType(gather.getType());
  rewriter.replaceOp(gather, gathered->getResults());
  if (producer->use_empty())
    rewriter.eraseOp(producer);
  return true;
}

struct LogSoftmaxAsDifferencesPass
    : mantissa::impl::LogSoftmaxAsDifferencesPassBase<
          LogSoftmaxAsDifferencesPass> {
  void runOnOperation() override {
    IRRewriter rewriter(&getContext());
    SmallVector<train::LogSoftmaxOp> logSoftmaxes;
    getOperation().walk(
        [&](train::LogSoftmaxOp op) { logSoftmaxes.push_back(op); });
    for (train::LogSoftmaxOp op : logSoftmaxes)
      decompose(op, rewriter);
    // Each rewrite moves a gather one op up; the gathers it makes may go
    // further.
    SmallVector<train::GatherOp> gathers;
    getOperation().walk([&](train::GatherOp op) { gathers.push_back(op); });
    while (!gathers.empty())
      gatherOperands(gathers.pop_back_val(), rewriter, gathers);
  }
};

} // namespace
