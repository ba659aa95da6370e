//===- CreationOps.cpp - full and arange to linalg ------------------------===//
//
// Tensors made from attributes alone: full is a linalg.fill, arange a
// linalg.generic of its index.
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

/// A linalg.fill of the scalar in the result's type.
struct FullLowering : OpConversionPattern<train::FullOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult matchAndRewrite(train::FullOp o, OpAdaptor adaptor,
                                ConversionPatternRewriter &b) const override {
    Location loc = o.getLoc();
    auto type = typeOf(o.getResult());
    b.replaceOp(o, buildFilled(b, loc, type.getShape(),
                               scalarConstant(b, loc, o.getValue(),
                                              type.getElementType())));
    return success();
  }
};

/// arange: `start + i * step`, in i64 (wrapping) for integer bounds and an
/// integer result, in f64 rounded once otherwise.
struct ArangeLowering : OpConversionPattern<train::ArangeOp> {
  using OpConversionPattern::OpConversionPattern;

  LogicalResult matchAndRewrite(train::ArangeOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &b) const override {
    Location loc = op.getLoc();
    auto resultType = typeOf(op.getResult());
    Type element = resultType.getElementType();
    if (element.isInteger(1))
      return op.emitOpError() << "has no lowering for boolean results";
    auto isFloatAttr = [](Attribute a) { return isa<FloatAttr>(a); };
    bool integer = !isa<FloatType>(element) && !isFloatAttr(op.getStart()) &&
                   !isFloatAttr(op.getEnd()) && !isFloatAttr(op.getStep());
    Value init = b.create<tensor::EmptyOp>(loc, resultType.getShape(), element);
    auto generic = b.create<linalg::GenericOp>(
        loc, TypeRange{resultType}, ValueRange{}, ValueRange{init},
        ArrayRef<AffineMap>{b.getMultiDimIdentityMap(1)},
        ArrayRef<utils::IteratorType>{utils::IteratorType::parallel},
        [&](OpBuilder &nb, Location l, ValueRange) {
          Value i = nb.create<arith::IndexCastOp>(
              l, nb.getI64Type(), nb.create<linalg::IndexOp>(l, 0));
          Type type = integer ? Type(nb.getI64Type()) : Type(nb.getF64Type());
          Value start = scalarConstant(nb, l, op.getStart(), type);
          Value step = scalarConstant(nb, l, op.getStep(), type);
          Value r;
          if (integer) {
            r = nb.create<arith::AddIOp>(l, start,
                                         nb.create<arith::MulIOp>(l, i, step));
          } else {
            Value fi = nb.create<arith::SIToFPOp>(l, type, i);
            r = nb.create<arith::AddFOp>(l, start,
                                         nb.create<arith::MulFOp>(l, fi, step));
            // The CPU runtime has no f64 -> bf16/f16 truncation: go through
            // f32 (a double rounding only for values not exact in f32).
            if (isa<FloatType>(element) && element.getIntOrFloatBitWidth() < 32)
              r = nb.create<arith::TruncFOp>(l, nb.getF32Type(), r);
          }
          nb.create<linalg::YieldOp>(l, convertScalar(nb, l, r, element));
        });
    b.replaceOp(op, generic.getResult(0));
    return success();
  }
};

} // namespace

void mlir::mantissa::train_to_linalg::populateCreationPatterns(
    RewritePatternSet &patterns, TypeConverter &typeConverter) {
  patterns.add<FullLowering, ArangeLowering>(typeConverter,
                                             patterns.getContext());
}
