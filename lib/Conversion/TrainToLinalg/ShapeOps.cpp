//===- ShapeOps.cpp - Views, permutes, slices and concats to tensor ops ---===//
//
// view, expand, permute, slice, slice_scatter and concat: tensor reshapes,
// slices and inserts, a linalg.transpose, and an elementwise copy for
// broadcasting; a copy converts elements where the result's type differs.
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

/// A reshape: a collapse to one dimension and an expand.
struct ViewLowering : OpConversionPattern<train::ViewOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult matchAndRewrite(train::ViewOp o, OpAdaptor adaptor,
                                ConversionPatternRewriter &b) const override {
    Location loc = o.getLoc();
    b.replaceOp(
        o, reshapeTensor(b, loc, adaptor.getInput(), typeOf(o.getResult())));
    return success();
  }
};

/// Broadcasting to the result, an elementwise copy.
struct ExpandLowering : OpConversionPattern<train::ExpandOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult matchAndRewrite(train::ExpandOp o, OpAdaptor adaptor,
                                ConversionPatternRewriter &b) const override {
    Location loc = o.getLoc();
    b.replaceOp(
        o, buildElementwise(b, loc, typeOf(o.getResult()), adaptor.getInput(),
                            [](OpBuilder &, Location, ArrayRef<Value> args) {
                              return args[0];
                            }));
    return success();
  }
};

/// A linalg.transpose.
struct PermuteLowering : OpConversionPattern<train::PermuteOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult matchAndRewrite(train::PermuteOp o, OpAdaptor adaptor,
                                ConversionPatternRewriter &b) const override {
    Location loc = o.getLoc();
    auto type = typeOf(o.getResult());
    Value init =
        b.create<tensor::EmptyOp>(loc, type.getShape(), type.getElementType());
    b.replaceOp(o, b.create<linalg::TransposeOp>(loc, adaptor.getInput(), init,
                                                 o.getDims())
                       .getResult()[0]);
    return success();
  }
};

/// A strided tensor.extract_slice along one dimension.
struct SliceLowering : OpConversionPattern<train::SliceOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult matchAndRewrite(train::SliceOp o, OpAdaptor adaptor,
                                ConversionPatternRewriter &b) const override {
    Location loc = o.getLoc();
    auto inputType = typeOf(o.getInput());
    auto type = typeOf(o.getResult());
    int64_t dim = o.getDim();
    SmallVector<OpFoldResult> offsets(inputType.getRank(), b.getIndexAttr(0));
    SmallVector<OpFoldResult> sizes,
        strides(inputType.getRank(), b.getIndexAttr(1));
    for (int64_t size : type.getShape())
      sizes.push_back(b.getIndexAttr(size));
    offsets[dim] = b.getIndexAttr(
        train::normalizeSliceBound(o.getStart(), inputType.getDimSize(dim)));
    strides[dim] = b.getIndexAttr(o.getStep());
    b.replaceOp(o, b.create<tensor::ExtractSliceOp>(
                       loc, type, adaptor.getInput(), offsets, sizes, strides));
    return success();
  }
};

/// A tensor.insert_slice of the source, both in the result's type.
struct SliceScatterLowering : OpConversionPattern<train::SliceScatterOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult matchAndRewrite(train::SliceScatterOp o, OpAdaptor adaptor,
                                ConversionPatternRewriter &b) const override {
    Location loc = o.getLoc();
    auto inputType = typeOf(o.getInput());
    auto sourceType = typeOf(o.getSource());
    int64_t dim = o.getDim();
    SmallVector<OpFoldResult> offsets(inputType.getRank(), b.getIndexAttr(0));
    SmallVector<OpFoldResult> sizes,
        strides(inputType.getRank(), b.getIndexAttr(1));
    for (int64_t size : sourceType.getShape())
      sizes.push_back(b.getIndexAttr(size));
    offsets[dim] = b.getIndexAttr(
        train::normalizeSliceBound(o.getStart(), inputType.getDimSize(dim)));
    strides[dim] = b.getIndexAttr(o.getStep());
    Type element = typeOf(o.getResult()).getElementType();
    Value source = convertTensor(b, loc, adaptor.getSource(), element);
    Value dest = convertTensor(b, loc, adaptor.getInput(), element);
    b.replaceOp(o, b.create<tensor::InsertSliceOp>(loc, source, dest, offsets,
                                                   sizes, strides));
    return success();
  }
};

/// tensor.insert_slice of each input into an empty tensor.
struct ConcatLowering : OpConversionPattern<train::ConcatOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult matchAndRewrite(train::ConcatOp o, OpAdaptor adaptor,
                                ConversionPatternRewriter &b) const override {
    Location loc = o.getLoc();
    auto type = typeOf(o.getResult());
    int64_t dim = o.getDim();
    Value result =
        b.create<tensor::EmptyOp>(loc, type.getShape(), type.getElementType());
    int64_t offset = 0;
    for (auto [input, lowered] :
         llvm::zip(o.getInputs(), adaptor.getInputs())) {
      auto inputType = typeOf(input);
      SmallVector<OpFoldResult> offsets(type.getRank(), b.getIndexAttr(0));
      SmallVector<OpFoldResult> sizes,
          strides(type.getRank(), b.getIndexAttr(1));
      for (int64_t size : inputType.getShape())
        sizes.push_back(b.getIndexAttr(size));
      offsets[dim] = b.getIndexAttr(offset);
      offset += inputType.getDimSize(dim);
      Value source = convertTensor(b, loc, lowered, type.getElementType());
      result = b.create<tensor::InsertSliceOp>(loc, source, result, offsets,
                                               sizes, strides);
    }
    b.replaceOp(o, result);
    return success();
  }
};

} // namespace

void mlir::mantissa::train_to_linalg::populateShapePatterns(
    RewritePatternSet &patterns, TypeConverter &typeConverter) {
  patterns.add<ViewLowering, ExpandLowering, PermuteLowering, SliceLowering,
               SliceScatterLowering, ConcatLowering>(typeConverter,
                                                     patterns.getContext());
}
