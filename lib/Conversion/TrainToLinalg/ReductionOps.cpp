//===- ReductionOps.cpp - Reductions and softmax to linalg ----------------===//
//
// sum, mean, amax, softmax, log_softmax and their backward ops: reductions
// are linalg.generic ops with reduction iterators that accumulate in fp32
// (fp64 for fp64, i64 for integers); the results round once.
//
//===----------------------------------------------------------------------===//

#include "PopulatePatterns.h"
#include "Utils.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/DialectConversion.h"

#include <limits>

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::train_to_linalg;

namespace {

/// sum / mean / amax: accumulate in fp32 (fp64 for fp64, i64 for integers),
/// then divide (mean) and round once to the result type.
static LogicalResult lowerReduce(Operation *op, Value input, Value lowered,
                                 ArrayRef<int64_t> dims, StringRef kind,
                                 ConversionPatternRewriter &b) {
  Location loc = op->getLoc();
  auto inputType = typeOf(input);
  auto resultType = typeOf(op->getResult(0));
  Type element = resultType.getElementType();
  int64_t rank = inputType.getRank();
  SmallVector<bool> reduced(rank, dims.empty());
  for (int64_t d : dims)
    reduced[d] = true;
  int64_t count = 1;
  for (int64_t d = 0; d < rank; ++d)
    if (reduced[d])
      count *= inputType.getDimSize(d);

  Type inputElement = inputType.getElementType();
  bool isFloat = isa<FloatType>(element) || isa<FloatType>(inputElement);
  if (kind == "mean" && !isa<FloatType>(element))
    return op->emitOpError() << "has no lowering for integer results";
  Type accumulator;
  if (isFloat)
    accumulator = (element.isF64() || inputElement.isF64())
                      ? Type(b.getF64Type())
                      : Type(b.getF32Type());
  else
    accumulator = b.getI64Type();
  bool isMax = kind == "amax";
  Value initValue;
  if (isFloat)
    initValue =
        floatConstant(b, loc, accumulator,
                      isMax ? -std::numeric_limits<double>::infinity() : 0.0);
  else
    initValue = b.create<arith::ConstantOp>(
        loc, b.getIntegerAttr(accumulator,
                              isMax ? std::numeric_limits<int64_t>::min() : 0));
  SmallVector<int64_t> shape = keptShape(inputType.getShape(), reduced);
  Value init = buildFilled(b, loc, shape, initValue);
  Value acc = buildReduction(
      b, loc, lowered, {b.getMultiDimIdentityMap(rank)}, reduced, init,
      [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
        Value x = convertScalar(nb, l, args[0], accumulator);
        if (isFloat)
          return isMax ? nb.create<arith::MaximumFOp>(l, x, args[1]).getResult()
                       : nb.create<arith::AddFOp>(l, x, args[1]).getResult();
        return isMax ? nb.create<arith::MaxSIOp>(l, x, args[1]).getResult()
                     : nb.create<arith::AddIOp>(l, x, args[1]).getResult();
      });
  Value out = buildElementwise(
      b, loc, RankedTensorType::get(shape, element), acc,
      [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
        Value v = args[0];
        if (kind == "mean")
          v = nb.create<arith::DivFOp>(
              l, v, floatConstant(nb, l, accumulator, double(count)));
        return convertScalar(nb, l, v, element);
      });
  b.replaceOp(op, reshapeTensor(b, loc, out, resultType));
  return success();
}

/// softmax / log_softmax along `dim` in the compute type: the maximum, the
/// sum of the shifted exponentials, then one rounding per element.
static LogicalResult lowerSoftmax(Operation *op, Value input, Value lowered,
                                  int64_t dim, bool logarithm,
                                  ConversionPatternRewriter &b) {
  Location loc = op->getLoc();
  MLIRContext *context = b.getContext();
  auto inputType = typeOf(input);
  auto resultType = typeOf(op->getResult(0));
  Type element = resultType.getElementType();
  Type compute = getComputeType(element);
  if (!isa<FloatType>(compute) || !isa<FloatType>(inputType.getElementType()))
    return op->emitOpError() << "has no lowering for integer tensors";
  int64_t rank = inputType.getRank();
  SmallVector<bool> reduced(rank, false);
  reduced[dim] = true;
  SmallVector<int64_t> shape = keptShape(inputType.getShape(), reduced);
  AffineMap identity = b.getMultiDimIdentityMap(rank);
  AffineMap kept = keptMap(context, reduced);
  Value x = lowered;

  Value maxInit = buildFilled(
      b, loc, shape,
      floatConstant(b, loc, compute, -std::numeric_limits<double>::infinity()));
  Value maximum =
      buildReduction(b, loc, x, {identity}, reduced, maxInit,
                     [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                       return nb.create<arith::MaximumFOp>(
                           l, convertScalar(nb, l, args[0], compute), args[1]);
                     });
  Value sumInit =
      buildFilled(b, loc, shape, floatConstant(b, loc, compute, 0.0));
  Value sum = buildReduction(
      b, loc, ValueRange{x, maximum}, {identity, kept}, reduced, sumInit,
      [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
        Value shifted = nb.create<arith::SubFOp>(
            l, convertScalar(nb, l, args[0], compute), args[1]);
        return nb.create<arith::AddFOp>(l, nb.create<math::ExpOp>(l, shifted),
                                        args[2]);
      });
  // Per line: log(sum) or 1 / sum.
  Value lineFactor = buildElementwise(
      b, loc, RankedTensorType::get(shape, compute), sum,
      [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
        if (logarithm)
          return nb.create<math::LogOp>(l, args[0]);
        return nb.create<arith::DivFOp>(l, floatConstant(nb, l, compute, 1.0),
                                        args[0]);
      });
  Value init = b.create<tensor::EmptyOp>(loc, resultType.getShape(), element);
  SmallVector<utils::IteratorType> iterators(rank,
                                             utils::IteratorType::parallel);
  auto generic = b.create<linalg::GenericOp>(
      loc, TypeRange{resultType}, ValueRange{x, maximum, lineFactor},
      ValueRange{init}, ArrayRef<AffineMap>{identity, kept, kept, identity},
      iterators, [&](OpBuilder &nb, Location l, ValueRange args) {
        Value shifted = nb.create<arith::SubFOp>(
            l, convertScalar(nb, l, args[0], compute), args[1]);
        Value r =
            logarithm
                ? nb.create<arith::SubFOp>(l, shifted, args[2]).getResult()
                : nb.create<arith::MulFOp>(
                        l, nb.create<math::ExpOp>(l, shifted), args[2])
                      .getResult();
        nb.create<linalg::YieldOp>(l, convertScalar(nb, l, r, element));
      });
  b.replaceOp(op, generic.getResult(0));
  return success();
}

/// softmax_backward: `(grad - sum(grad * output)) * output`;
/// log_softmax_backward: `grad - exp(output) * sum(grad)`; the sums
/// accumulate in fp32 (fp64 for fp64), the rest in the compute type.
static LogicalResult lowerSoftmaxBackward(Operation *op, Value grad,
                                          Value output, Value g, Value y,
                                          int64_t dim, bool logarithm,
                                          ConversionPatternRewriter &b) {
  Location loc = op->getLoc();
  MLIRContext *context = b.getContext();
  auto gradType = typeOf(grad);
  auto resultType = typeOf(op->getResult(0));
  Type element = resultType.getElementType();
  Type compute = getComputeType(element);
  if (!isa<FloatType>(compute) || !isa<FloatType>(gradType.getElementType()) ||
      !isa<FloatType>(typeOf(output).getElementType()))
    return op->emitOpError() << "has no lowering for integer tensors";
  int64_t rank = gradType.getRank();
  SmallVector<bool> reduced(rank, false);
  reduced[dim] = true;
  SmallVector<int64_t> shape = keptShape(gradType.getShape(), reduced);
  AffineMap identity = b.getMultiDimIdentityMap(rank);
  AffineMap kept = keptMap(context, reduced);
  Value sumInit =
      buildFilled(b, loc, shape, floatConstant(b, loc, compute, 0.0));
  Value sum = buildReduction(
      b, loc, ValueRange{g, y}, {identity, identity}, reduced, sumInit,
      [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
        Value gv = convertScalar(nb, l, args[0], compute);
        if (!logarithm)
          gv = nb.create<arith::MulFOp>(l, gv,
                                        convertScalar(nb, l, args[1], compute));
        return nb.create<arith::AddFOp>(l, gv, args[2]);
      });
  b.replaceOp(
      op,
      buildMapped(
          b, loc, resultType, ValueRange{g, y, sum}, {identity, identity, kept},
          [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
            Value gv = convertScalar(nb, l, args[0], compute);
            Value yv = convertScalar(nb, l, args[1], compute);
            Value r;
            if (logarithm)
              r = nb.create<arith::SubFOp>(
                  l, gv,
                  nb.create<arith::MulFOp>(l, nb.create<math::ExpOp>(l, yv),
                                           args[2]));
            else
              r = nb.create<arith::MulFOp>(
                  l, nb.create<arith::SubFOp>(l, gv, args[2]), yv);
            return convertScalar(nb, l, r, element);
          }));
  return success();
}

/// sum, mean and amax over `dims` (all dimensions when empty).
template <typename OpTy> struct ReduceLowering : OpConversionPattern<OpTy> {
  ReduceLowering(TypeConverter &typeConverter, MLIRContext *context,
                 StringRef kind)
      : OpConversionPattern<OpTy>(typeConverter, context), kind(kind) {}

  LogicalResult
  matchAndRewrite(OpTy op, typename OpTy::Adaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    return lowerReduce(op, op.getInput(), adaptor.getInput(), op.getDims(),
                       kind, rewriter);
  }

  StringRef kind;
};

/// softmax and log_softmax.
template <typename OpTy, bool Logarithm>
struct SoftmaxLowering : OpConversionPattern<OpTy> {
  using OpConversionPattern<OpTy>::OpConversionPattern;

  LogicalResult
  matchAndRewrite(OpTy op, typename OpTy::Adaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    return lowerSoftmax(op, op.getInput(), adaptor.getInput(), op.getDim(),
                        Logarithm, rewriter);
  }
};

/// softmax_backward and log_softmax_backward.
template <typename OpTy, bool Logarithm>
struct SoftmaxBackwardLowering : OpConversionPattern<OpTy> {
  using OpConversionPattern<OpTy>::OpConversionPattern;

  LogicalResult
  matchAndRewrite(OpTy op, typename OpTy::Adaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    return lowerSoftmaxBackward(op, op.getGrad(), op.getOutput(),
                                adaptor.getGrad(), adaptor.getOutput(),
                                op.getDim(), Logarithm, rewriter);
  }
};

} // namespace

void mlir::mantissa::train_to_linalg::populateReductionPatterns(
    RewritePatternSet &patterns, TypeConverter &typeConverter) {
  MLIRContext *context = patterns.getContext();
  patterns.add<ReduceLowering<train::SumOp>>(typeConverter, context, "sum");
  patterns.add<ReduceLowering<train::MeanOp>>(typeConverter, context, "mean");
  patterns.add<ReduceLowering<train::AmaxOp>>(typeConverter, context, "amax");
  patterns.add<SoftmaxLowering<train::SoftmaxOp, false>,
               SoftmaxLowering<train::LogSoftmaxOp, true>,
               SoftmaxBackwardLowering<train::SoftmaxBackwardOp, false>,
               SoftmaxBackwardLowering<train::LogSoftmaxBackwardOp, true>>(
      typeConverter, context);
}
