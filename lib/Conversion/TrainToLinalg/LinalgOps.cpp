//===- LinalgOps.cpp - Matrix products and norms to linalg ----------------===//
//
// mm, bmm and addmm as named linalg matmuls accumulating in fp32 (then bias
// and scaling, rounded once), and layer_norm, rms_norm and their backward
// ops as per-row reductions and mapped generics in the compute type.
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

/// mm / bmm / addmm: a named linalg matmul accumulating in fp32 (the named
/// op extends bf16 operands), then bias and scaling, rounded once. Operands
/// that are both widened exactly from one narrower dtype (the products of
/// torch's kernels that read bf16 and keep fp32: train.fp32_accumulate)
/// are read in that dtype: the same products, without writing the widened
/// copies, and a bf16 GEMM on the GPU.
static LogicalResult lowerMatmul(Operation *op, Value lhs, Value rhs,
                                 bool batched, Value bias, double beta,
                                 double alpha, ConversionPatternRewriter &b) {
  auto get = [&](Value value) { return b.getRemappedValue(value); };
  if (auto narrow = train::getWidenedSources(lhs, rhs))
    std::tie(lhs, rhs) = *narrow;
  Location loc = op->getLoc();
  auto resultType = typeOf(op->getResult(0));
  Type element = resultType.getElementType();
  Type compute = getComputeType(element);
  if (!isa<FloatType>(compute))
    return op->emitOpError() << "has no lowering for integer matrices";
  Value init = buildFilled(b, loc, resultType.getShape(),
                           floatConstant(b, loc, compute, 0.0));
  auto accType = RankedTensorType::get(resultType.getShape(), compute);
  Value acc;
  if (batched)
    acc = b.create<linalg::BatchMatmulOp>(loc, TypeRange{accType},
                                          ValueRange{get(lhs), get(rhs)},
                                          ValueRange{init})
              .getResult(0);
  else
    acc = b.create<linalg::MatmulOp>(loc, TypeRange{accType},
                                     ValueRange{get(lhs), get(rhs)},
                                     ValueRange{init})
              .getResult(0);
  if (!bias) {
    b.replaceOp(op, convertTensor(b, loc, acc, element));
    return success();
  }
  b.replaceOp(
      op, buildElementwise(
              b, loc, resultType, {acc, get(bias)},
              [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
                Value product = args[0];
                Value addend = convertScalar(nb, l, args[1], compute);
                if (alpha != 1.0)
                  product = nb.create<arith::MulFOp>(
                      l, floatConstant(nb, l, compute, alpha), product);
                if (beta != 1.0)
                  addend = nb.create<arith::MulFOp>(
                      l, floatConstant(nb, l, compute, beta), addend);
                Value r = nb.create<arith::AddFOp>(l, addend, product);
                return convertScalar(nb, l, r, element);
              }));
  return success();
}

/// Dimension bookkeeping of a norm over the trailing `normalizedRank`
/// dimensions of a tensor of `rank`.
struct NormDims {
  NormDims(MLIRContext *context, ArrayRef<int64_t> shape,
           int64_t normalizedRank)
      : rank(shape.size()), trailing(rank, false), leading(rank, false) {
    for (int64_t d = 0; d < rank; ++d)
      (d >= rank - normalizedRank ? trailing : leading)[d] = true;
    rowShape = keptShape(shape, trailing);
    columnShape = keptShape(shape, leading);
    identity = AffineMap::getMultiDimIdentityMap(rank, context);
    rowMap = keptMap(context, trailing);
    columnMap = keptMap(context, leading);
  }
  int64_t rank;
  /// Reduced-dimension flags: over each row / over the rows.
  SmallVector<bool> trailing, leading;
  SmallVector<int64_t> rowShape, columnShape;
  AffineMap identity, rowMap, columnMap;
};

/// layer_norm in the compute type: two-pass mean and variance per row, then
/// `(x - mean) * rstd * weight + bias` rounded once.
static LogicalResult lowerLayerNorm(train::LayerNormOp op,
                                    train::LayerNormOp::Adaptor adaptor,
                                    ConversionPatternRewriter &b) {
  Location loc = op.getLoc();
  auto inputType = typeOf(op.getInput());
  Type compute = getComputeType(inputType.getElementType());
  if (!isa<FloatType>(compute))
    return op.emitOpError() << "has no lowering for integer tensors";
  NormDims n(b.getContext(), inputType.getShape(), op.getNormalizedRank());
  int64_t length = 1;
  for (int64_t s : n.columnShape)
    length *= s;
  double eps = op.getEps().convertToDouble();
  Value x = adaptor.getInput();
  Value zero =
      buildFilled(b, loc, n.rowShape, floatConstant(b, loc, compute, 0));
  Value sum =
      buildReduction(b, loc, x, {n.identity}, n.trailing, zero,
                     [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                       return nb.create<arith::AddFOp>(
                           l, convertScalar(nb, l, args[0], compute), args[1]);
                     });
  auto rowType = RankedTensorType::get(n.rowShape, compute);
  Value mean = buildElementwise(
      b, loc, rowType, sum,
      [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
        return nb.create<arith::DivFOp>(
            l, args[0], floatConstant(nb, l, compute, double(length)));
      });
  Value squares = buildReduction(
      b, loc, ValueRange{x, mean}, {n.identity, n.rowMap}, n.trailing, zero,
      [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
        Value d = nb.create<arith::SubFOp>(
            l, convertScalar(nb, l, args[0], compute), args[1]);
        return nb.create<arith::AddFOp>(l, nb.create<arith::MulFOp>(l, d, d),
                                        args[2]);
      });
  Value rstd = buildElementwise(
      b, loc, rowType, squares,
      [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
        Value variance = nb.create<arith::DivFOp>(
            l, args[0], floatConstant(nb, l, compute, double(length)));
        Value s = nb.create<math::SqrtOp>(
            l, nb.create<arith::AddFOp>(l, variance,
                                        floatConstant(nb, l, compute, eps)));
        return nb.create<arith::DivFOp>(l, floatConstant(nb, l, compute, 1.0),
                                        s);
      });
  SmallVector<Value> inputs{x, mean, rstd};
  SmallVector<AffineMap> maps{n.identity, n.rowMap, n.rowMap};
  Value weight = adaptor.getWeight();
  Value bias = adaptor.getBias();
  if (weight) {
    inputs.push_back(reshapeTensor(
        b, loc, weight,
        RankedTensorType::get(n.columnShape, typeOf(weight).getElementType())));
    maps.push_back(n.columnMap);
  }
  if (bias) {
    inputs.push_back(reshapeTensor(
        b, loc, bias,
        RankedTensorType::get(n.columnShape, typeOf(bias).getElementType())));
    maps.push_back(n.columnMap);
  }
  auto resultType = typeOf(op.getResult());
  Type element = resultType.getElementType();
  Value result = buildMapped(
      b, loc, resultType, inputs, maps,
      [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
        Value v = nb.create<arith::MulFOp>(
            l,
            nb.create<arith::SubFOp>(l, convertScalar(nb, l, args[0], compute),
                                     args[1]),
            args[2]);
        size_t next = 3;
        if (weight)
          v = nb.create<arith::MulFOp>(
              l, v, convertScalar(nb, l, args[next++], compute));
        if (bias)
          v = nb.create<arith::AddFOp>(
              l, v, convertScalar(nb, l, args[next++], compute));
        return convertScalar(nb, l, v, element);
      });
  auto meanType = typeOf(op.getMean());
  auto rstdType = typeOf(op.getRstd());
  Value loweredMean = reshapeTensor(
      b, loc, convertTensor(b, loc, mean, meanType.getElementType()), meanType);
  Value loweredRstd = reshapeTensor(
      b, loc, convertTensor(b, loc, rstd, rstdType.getElementType()), rstdType);
  b.replaceOp(op, ValueRange{result, loweredMean, loweredRstd});
  return success();
}

/// rms_norm: `x * rstd * weight` with `rstd = 1 / sqrt(mean(x^2) + eps)`
/// rounded to rstd's type before use, as the interpreter does.
static LogicalResult lowerRmsNorm(train::RmsNormOp op,
                                  train::RmsNormOp::Adaptor adaptor,
                                  ConversionPatternRewriter &b) {
  Location loc = op.getLoc();
  auto inputType = typeOf(op.getInput());
  Type compute = getComputeType(inputType.getElementType());
  if (!isa<FloatType>(compute))
    return op.emitOpError() << "has no lowering for integer tensors";
  NormDims n(b.getContext(), inputType.getShape(), op.getNormalizedRank());
  int64_t length = 1;
  for (int64_t s : n.columnShape)
    length *= s;
  double eps = op.getEps() ? op.getEps()->convertToDouble()
               : inputType.getElementType().isF64()
                   ? std::numeric_limits<double>::epsilon()
                   : double(std::numeric_limits<float>::epsilon());
  Value x = adaptor.getInput();
  Value zero =
      buildFilled(b, loc, n.rowShape, floatConstant(b, loc, compute, 0));
  Value squares =
      buildReduction(b, loc, x, {n.identity}, n.trailing, zero,
                     [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
                       Value v = convertScalar(nb, l, args[0], compute);
                       return nb.create<arith::AddFOp>(
                           l, nb.create<arith::MulFOp>(l, v, v), args[1]);
                     });
  auto rstdType = typeOf(op.getRstd());
  Type rstdElement = rstdType.getElementType();
  Value rstd = buildElementwise(
      b, loc, RankedTensorType::get(n.rowShape, rstdElement), squares,
      [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
        Value meanSquare = nb.create<arith::DivFOp>(
            l, args[0], floatConstant(nb, l, compute, double(length)));
        Value s = nb.create<math::SqrtOp>(
            l, nb.create<arith::AddFOp>(l, meanSquare,
                                        floatConstant(nb, l, compute, eps)));
        return convertScalar(
            nb, l,
            nb.create<arith::DivFOp>(l, floatConstant(nb, l, compute, 1.0), s),
            rstdElement);
      });
  SmallVector<Value> inputs{x, rstd};
  SmallVector<AffineMap> maps{n.identity, n.rowMap};
  Value weight = adaptor.getWeight();
  if (weight) {
    inputs.push_back(reshapeTensor(
        b, loc, weight,
        RankedTensorType::get(n.columnShape, typeOf(weight).getElementType())));
    maps.push_back(n.columnMap);
  }
  auto resultType = typeOf(op.getResult());
  Type element = resultType.getElementType();
  Value result = buildMapped(
      b, loc, resultType, inputs, maps,
      [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
        Value v =
            nb.create<arith::MulFOp>(l, convertScalar(nb, l, args[0], compute),
                                     convertScalar(nb, l, args[1], compute));
        if (weight)
          v = nb.create<arith::MulFOp>(l, v,
                                       convertScalar(nb, l, args[2], compute));
        return convertScalar(nb, l, v, element);
      });
  b.replaceOp(op, ValueRange{result, reshapeTensor(b, loc, rstd, rstdType)});
  return success();
}

/// Shared backward of layer_norm (`mean` set) and rms_norm (no `mean`):
/// with `xhat = (x - mean) * rstd` and `g = grad * weight`,
/// `grad_input = rstd * (g - mean(g) - xhat * mean(g * xhat))` (no `mean(g)`
/// term for rms_norm), `grad_weight = sum_rows(grad * xhat)`,
/// `grad_bias = sum_rows(grad)`; everything in the compute type, sums in
/// fp32 (fp64 for fp64).
struct NormBackward {
  OpBuilder &b;
  Location loc;
  NormDims n;
  Type compute;
  Value grad, x, mean, rstd, weight;
  int64_t length;

  /// xhat from the leading `args` (grad, x, mean?, rstd).
  Value xhat(OpBuilder &nb, Location l, ArrayRef<Value> args) {
    Value xv = convertScalar(nb, l, args[1], compute);
    if (mean)
      xv = nb.create<arith::SubFOp>(l, xv,
                                    convertScalar(nb, l, args[2], compute));
    return nb.create<arith::MulFOp>(
        l, xv, convertScalar(nb, l, args[mean ? 3 : 2], compute));
  }
  SmallVector<Value> rowInputs() {
    SmallVector<Value> v{grad, x};
    if (mean)
      v.push_back(mean);
    v.push_back(rstd);
    return v;
  }
  SmallVector<AffineMap> rowMaps() {
    SmallVector<AffineMap> m{n.identity, n.identity};
    if (mean)
      m.push_back(n.rowMap);
    m.push_back(n.rowMap);
    return m;
  }
  Value scaled(OpBuilder &nb, Location l, Value g, Value w) {
    Value gv = convertScalar(nb, l, g, compute);
    if (!w)
      return gv;
    return nb.create<arith::MulFOp>(l, gv, convertScalar(nb, l, w, compute));
  }

  /// Per-row sum of `g` (withXhat: of `g * xhat`).
  Value rowSum(bool withXhat) {
    SmallVector<Value> inputs = rowInputs();
    SmallVector<AffineMap> maps = rowMaps();
    if (weight) {
      inputs.push_back(weight);
      maps.push_back(n.columnMap);
    }
    Value zero =
        buildFilled(b, loc, n.rowShape, floatConstant(b, loc, compute, 0));
    return buildReduction(
        b, loc, inputs, maps, n.trailing, zero,
        [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
          size_t count = inputs.size();
          Value g = scaled(nb, l, args[0], weight ? args[count - 1] : Value());
          if (withXhat)
            g = nb.create<arith::MulFOp>(l, g,
                                         xhat(nb, l, SmallVector<Value>(args)));
          return nb.create<arith::AddFOp>(l, g, args[count]);
        });
  }

  Value gradInput(RankedTensorType type) {
    Value sumGX = rowSum(true);
    Value sumG = mean ? rowSum(false) : Value();
    SmallVector<Value> inputs = rowInputs();
    SmallVector<AffineMap> maps = rowMaps();
    inputs.push_back(sumGX);
    maps.push_back(n.rowMap);
    if (sumG) {
      inputs.push_back(sumG);
      maps.push_back(n.rowMap);
    }
    if (weight) {
      inputs.push_back(weight);
      maps.push_back(n.columnMap);
    }
    Type element = type.getElementType();
    size_t base = mean ? 4 : 3;
    return buildMapped(
        b, loc, type, inputs, maps,
        [&](OpBuilder &nb, Location l, ArrayRef<Value> args) -> Value {
          Value len = floatConstant(nb, l, compute, double(length));
          Value g = scaled(nb, l, args[0], weight ? args.back() : Value());
          Value h = xhat(nb, l, args);
          Value v = nb.create<arith::SubFOp>(
              l, g,
              nb.create<arith::MulFOp>(
                  l, h, nb.create<arith::DivFOp>(l, args[base], len)));
          if (mean)
            v = nb.create<arith::SubFOp>(
                l, v, nb.create<arith::DivFOp>(l, args[base + 1], len));
          Value r = convertScalar(nb, l, args[mean ? 3 : 2], compute);
          return convertScalar(nb, l, nb.create<arith::MulFOp>(l, r, v),
                               element);
        });
  }

  /// Column sums over the rows of `grad` (withXhat: `grad * xhat`).
  Value columnSum(RankedTensorType type, bool withXhat) {
    Value zero =
        buildFilled(b, loc, n.columnShape, floatConstant(b, loc, compute, 0));
    Value acc = buildReduction(
        b, loc, rowInputs(), rowMaps(), n.leading, zero,
        [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
          Value g = convertScalar(nb, l, args[0], compute);
          if (withXhat)
            g = nb.create<arith::MulFOp>(l, g,
                                         xhat(nb, l, SmallVector<Value>(args)));
          return nb.create<arith::AddFOp>(l, g, args.back());
        });
    acc = convertTensor(b, loc, acc, type.getElementType());
    return reshapeTensor(b, loc, acc, type);
  }
};

static LogicalResult
lowerLayerNormBackward(train::LayerNormBackwardOp op,
                       train::LayerNormBackwardOp::Adaptor adaptor,
                       ConversionPatternRewriter &b) {
  auto inputType = typeOf(op.getInput());
  Type compute = getComputeType(typeOf(op.getGradInput()).getElementType());
  if (!isa<FloatType>(compute) || !isa<FloatType>(inputType.getElementType()))
    return op.emitOpError() << "has no lowering for integer tensors";
  NormDims n(b.getContext(), inputType.getShape(), op.getNormalizedRank());
  int64_t length = 1;
  for (int64_t s : n.columnShape)
    length *= s;
  Location loc = op.getLoc();
  auto rows = [&](Value v) {
    return reshapeTensor(
        b, loc, v,
        RankedTensorType::get(n.rowShape, typeOf(v).getElementType()));
  };
  Value weight;
  if (adaptor.getWeight())
    weight = reshapeTensor(
        b, loc, adaptor.getWeight(),
        RankedTensorType::get(n.columnShape,
                              typeOf(op.getWeight()).getElementType()));
  NormBackward nb{b,
                  loc,
                  n,
                  compute,
                  adaptor.getGrad(),
                  adaptor.getInput(),
                  rows(adaptor.getMean()),
                  rows(adaptor.getRstd()),
                  weight,
                  length};
  Value gradInput = nb.gradInput(typeOf(op.getGradInput()));
  Value gradWeight = nb.columnSum(typeOf(op.getGradWeight()), true);
  Value gradBias = nb.columnSum(typeOf(op.getGradBias()), false);
  b.replaceOp(op, ValueRange{gradInput, gradWeight, gradBias});
  return success();
}

static LogicalResult
lowerRmsNormBackward(train::RmsNormBackwardOp op,
                     train::RmsNormBackwardOp::Adaptor adaptor,
                     ConversionPatternRewriter &b) {
  auto inputType = typeOf(op.getInput());
  Type compute = getComputeType(typeOf(op.getGradInput()).getElementType());
  if (!isa<FloatType>(compute) || !isa<FloatType>(inputType.getElementType()))
    return op.emitOpError() << "has no lowering for integer tensors";
  NormDims n(b.getContext(), inputType.getShape(), op.getNormalizedRank());
  int64_t length = 1;
  for (int64_t s : n.columnShape)
    length *= s;
  Location loc = op.getLoc();
  Value weight;
  if (adaptor.getWeight())
    weight = reshapeTensor(
        b, loc, adaptor.getWeight(),
        RankedTensorType::get(n.columnShape,
                              typeOf(op.getWeight()).getElementType()));
  Value rstd = reshapeTensor(
      b, loc, adaptor.getRstd(),
      RankedTensorType::get(n.rowShape, typeOf(op.getRstd()).getElementType()));
  NormBackward nb{
      b,       loc,  n,      compute, adaptor.getGrad(), adaptor.getInput(),
      Value(), rstd, weight, length};
  Value gradInput = nb.gradInput(typeOf(op.getGradInput()));
  Value gradWeight = nb.columnSum(typeOf(op.getGradWeight()), true);
  b.replaceOp(op, ValueRange{gradInput, gradWeight});
  return success();
}

/// mm and bmm.
template <typename OpTy, bool Batched>
struct MatmulLowering : OpConversionPattern<OpTy> {
  using OpConversionPattern<OpTy>::OpConversionPattern;

  LogicalResult
  matchAndRewrite(OpTy op, typename OpTy::Adaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    return lowerMatmul(op, op.getLhs(), op.getRhs(), Batched, Value(), 1.0, 1.0,
                       rewriter);
  }
};

/// addmm: `beta * bias + alpha * (lhs @ rhs)`.
struct AddmmLowering : OpConversionPattern<train::AddmmOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult
  matchAndRewrite(train::AddmmOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    return lowerMatmul(op, op.getLhs(), op.getRhs(), false, op.getBias(),
                       op.getBeta().convertToDouble(),
                       op.getAlpha().convertToDouble(), rewriter);
  }
};

/// Lowers `OpTy` with `Lower`, given the op's adaptor.
template <typename OpTy, LogicalResult (*Lower)(OpTy, typename OpTy::Adaptor,
                                                ConversionPatternRewriter &)>
struct NormLowering : OpConversionPattern<OpTy> {
  using OpConversionPattern<OpTy>::OpConversionPattern;

  LogicalResult
  matchAndRewrite(OpTy op, typename OpTy::Adaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    return Lower(op, adaptor, rewriter);
  }
};

} // namespace

void mlir::mantissa::train_to_linalg::populateLinalgPatterns(
    RewritePatternSet &patterns, TypeConverter &typeConverter) {
  patterns.add<MatmulLowering<train::MatmulOp, false>,
               MatmulLowering<train::BatchMatmulOp, true>, AddmmLowering,
               NormLowering<train::LayerNormOp, lowerLayerNorm>,
               NormLowering<train::LayerNormBackwardOp, lowerLayerNormBackward>,
               NormLowering<train::RmsNormOp, lowerRmsNorm>,
               NormLowering<train::RmsNormBackwardOp, lowerRmsNormBackward>>(
      typeConverter, patterns.getContext());
}
