//===- IndexingOps.cpp - Gathers and scatters to linalg and loops ---------===//
//
// embedding, gather and index_select are linalg.generic ops that extract
// from the source at coordinates read from the indices; scatter,
// scatter_value, index_put and embedding_backward are scf.for nests of
// tensor.extract / tensor.insert in row-major order, so repeated indices
// accumulate in the interpreter's order.
//
//===----------------------------------------------------------------------===//

#include "PopulatePatterns.h"
#include "Utils.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/DialectConversion.h"

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::train_to_linalg;

namespace {

/// A gather of rows of a two-dimensional weight.
struct EmbeddingLowering : OpConversionPattern<train::EmbeddingOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult matchAndRewrite(train::EmbeddingOp o, OpAdaptor adaptor,
                                ConversionPatternRewriter &b) const override {
    Location loc = o.getLoc();
    // result[i..., c] = weight[indices[i...], c]
    auto type = typeOf(o.getResult());
    int64_t rank = type.getRank();
    if (typeOf(o.getWeight()).getRank() != 2)
      return o.emitOpError() << "has no lowering for a weight of rank "
                             << typeOf(o.getWeight()).getRank();
    SmallVector<AffineExpr> exprs;
    for (int64_t d = 0; d + 1 < rank; ++d)
      exprs.push_back(b.getAffineDimExpr(d));
    b.replaceOp(
        o, buildGather(b, loc, type, adaptor.getWeight(), adaptor.getIndices(),
                       AffineMap::get(rank, 0, exprs, b.getContext()),
                       [&](OpBuilder &nb, Location l, Value row) {
                         return SmallVector<Value>{
                             row, nb.create<linalg::IndexOp>(l, rank - 1)};
                       }));
    return success();
  }
};

/// A gather along one dimension.
struct GatherLowering : OpConversionPattern<train::GatherOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult matchAndRewrite(train::GatherOp o, OpAdaptor adaptor,
                                ConversionPatternRewriter &b) const override {
    Location loc = o.getLoc();
    // result[i, j, k] = input[.., index[i, j, k] at dim, ..]
    auto type = typeOf(o.getResult());
    int64_t dim = o.getDim();
    b.replaceOp(
        o,
        buildGather(b, loc, type, adaptor.getInput(), adaptor.getIndex(),
                    b.getMultiDimIdentityMap(type.getRank()),
                    [&](OpBuilder &nb, Location l, Value at) {
                      SmallVector<Value> coordinates;
                      for (int64_t d = 0; d < type.getRank(); ++d)
                        coordinates.push_back(
                            d == dim ? at : nb.create<linalg::IndexOp>(l, d));
                      return coordinates;
                    }));
    return success();
  }
};

/// A gather of slices along one dimension.
struct IndexSelectLowering : OpConversionPattern<train::IndexSelectOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult matchAndRewrite(train::IndexSelectOp o, OpAdaptor adaptor,
                                ConversionPatternRewriter &b) const override {
    Location loc = o.getLoc();
    // result[.., i at dim, ..] = input[.., index[i], ..]
    auto type = typeOf(o.getResult());
    int64_t dim = o.getDim();
    AffineMap indexMap = AffineMap::get(
        type.getRank(), 0, b.getAffineDimExpr(dim), b.getContext());
    b.replaceOp(
        o,
        buildGather(b, loc, type, adaptor.getInput(), adaptor.getIndex(),
                    indexMap, [&](OpBuilder &nb, Location l, Value at) {
                      SmallVector<Value> coordinates;
                      for (int64_t d = 0; d < type.getRank(); ++d)
                        coordinates.push_back(
                            d == dim ? at : nb.create<linalg::IndexOp>(l, d));
                      return coordinates;
                    }));
    return success();
  }
};

/// A scatter loop of rows, accumulating or not.
struct IndexPutLowering : OpConversionPattern<train::IndexPutOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult matchAndRewrite(train::IndexPutOp o, OpAdaptor adaptor,
                                ConversionPatternRewriter &b) const override {
    Location loc = o.getLoc();
    // result[indices[i...], rest...] (+)= values[i..., rest...]
    auto type = typeOf(o.getResult());
    auto indicesType = typeOf(o.getIndices());
    Type element = type.getElementType();
    SmallVector<int64_t> shape(indicesType.getShape());
    llvm::append_range(shape, type.getShape().drop_front());
    int64_t indexRank = indicesType.getRank();
    Value dest = convertTensor(b, loc, adaptor.getInput(), element);
    b.replaceOp(
        o, buildScatterLoops(
               b, loc, dest, shape, o.getAccumulate(),
               [&](OpBuilder &nb, Location l, ValueRange ivs) {
                 ScatterWrite w;
                 Value row = nb.create<tensor::ExtractOp>(
                     l, adaptor.getIndices(), ivs.take_front(indexRank));
                 // Negative rows count from the end, as in torch.
                 Value r64 = convertScalar(nb, l, row, nb.getI64Type());
                 Value zero =
                     nb.create<arith::ConstantOp>(l, nb.getI64IntegerAttr(0));
                 Value size = nb.create<arith::ConstantOp>(
                     l, nb.getI64IntegerAttr(type.getDimSize(0)));
                 Value negative = nb.create<arith::CmpIOp>(
                     l, arith::CmpIPredicate::slt, r64, zero);
                 r64 = nb.create<arith::SelectOp>(
                     l, negative, nb.create<arith::AddIOp>(l, r64, size), r64);
                 w.coordinates.push_back(toIndex(nb, l, r64));
                 llvm::append_range(w.coordinates, ivs.drop_front(indexRank));
                 w.value = convertScalar(
                     nb, l,
                     nb.create<tensor::ExtractOp>(
                         l, adaptor.getValues(),
                         broadcastCoordinates(nb, l, typeOf(o.getValues()),
                                              shape, ivs)),
                     element);
                 return w;
               }));
    return success();
  }
};

/// A scatter-add of the gradient's rows, but the padding row's.
struct EmbeddingBackwardLowering
    : OpConversionPattern<train::EmbeddingBackwardOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult matchAndRewrite(train::EmbeddingBackwardOp o, OpAdaptor adaptor,
                                ConversionPatternRewriter &b) const override {
    Location loc = o.getLoc();
    // zeros[num_weights, d]; row indices[i...] += grad[i..., :], except
    // the padding row.
    auto type = typeOf(o.getResult());
    auto indicesType = typeOf(o.getIndices());
    Type element = type.getElementType();
    Type compute = getComputeType(element);
    if (!isa<FloatType>(compute))
      return o.emitOpError() << "has no lowering for integer gradients";
    SmallVector<int64_t> shape(indicesType.getShape());
    shape.push_back(type.getDimSize(1));
    int64_t indexRank = indicesType.getRank();
    int64_t padding = o.getPaddingIdx();
    Value dest = buildFilled(b, loc, type.getShape(),
                             floatConstant(b, loc, element, 0.0));
    b.replaceOp(
        o, buildScatterLoops(
               b, loc, dest, shape, /*accumulate=*/true,
               [&](OpBuilder &nb, Location l, ValueRange ivs) {
                 ScatterWrite w;
                 Value row = convertScalar(
                     nb, l,
                     nb.create<tensor::ExtractOp>(l, adaptor.getIndices(),
                                                  ivs.take_front(indexRank)),
                     nb.getI64Type());
                 w.coordinates = {toIndex(nb, l, row), ivs.back()};
                 Value g = convertScalar(
                     nb, l,
                     nb.create<tensor::ExtractOp>(l, adaptor.getGrad(), ivs),
                     element);
                 if (padding >= 0) {
                   Value isPadding = nb.create<arith::CmpIOp>(
                       l, arith::CmpIPredicate::eq, row,
                       nb.create<arith::ConstantOp>(
                           l, nb.getI64IntegerAttr(padding)));
                   g = nb.create<arith::SelectOp>(
                       l, isPadding, floatConstant(nb, l, element, 0.0), g);
                 }
                 w.value = g;
                 return w;
               }));
    return success();
  }
};

/// scatter and scatter_value: a loop nest over the index tensor writing
/// (or adding) the source's elements or the value.
template <typename OpTy> struct ScatterLowering : OpConversionPattern<OpTy> {
  using OpConversionPattern<OpTy>::OpConversionPattern;

  LogicalResult matchAndRewrite(OpTy o, typename OpTy::Adaptor adaptor,
                                ConversionPatternRewriter &b) const override {
    Location loc = o.getLoc();
    Operation *op = o;
    ValueRange operands = adaptor.getOperands();
    // result[.., index[i, j] at dim, ..] (+)= source[i, j]
    Value index = op->getOperand(1);
    Type element = typeOf(op->getResult(0)).getElementType();
    auto scatter = dyn_cast<train::ScatterOp>(op);
    auto scatterValue = dyn_cast<train::ScatterValueOp>(op);
    int64_t dim =
        scatter ? int64_t(scatter.getDim()) : int64_t(scatterValue.getDim());
    bool accumulate = scatter && scatter.getReduce() == "add";
    Value dest = convertTensor(b, loc, operands[0], element);
    b.replaceOp(
        op, buildScatterLoops(
                b, loc, dest, typeOf(index).getShape(), accumulate,
                [&](OpBuilder &nb, Location l, ValueRange ivs) {
                  ScatterWrite w;
                  w.coordinates.assign(ivs.begin(), ivs.end());
                  w.coordinates[dim] = toIndex(
                      nb, l, nb.create<tensor::ExtractOp>(l, operands[1], ivs));
                  w.value = scatter
                                ? convertScalar(nb, l,
                                                nb.create<tensor::ExtractOp>(
                                                    l, operands[2], ivs),
                                                element)
                                : scalarConstant(nb, l, scatterValue.getValue(),
                                                 element);
                  return w;
                }));
    return success();
  }
};

} // namespace

void mlir::mantissa::train_to_linalg::populateIndexingPatterns(
    RewritePatternSet &patterns, TypeConverter &typeConverter) {
  patterns.add<EmbeddingLowering, GatherLowering, IndexSelectLowering,
               IndexPutLowering, EmbeddingBackwardLowering,
               ScatterLowering<train::ScatterOp>,
               ScatterLowering<train::ScatterValueOp>>(typeConverter,
                                                       patterns.getContext());
}
