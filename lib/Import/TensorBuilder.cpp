//===- TensorBuilder.cpp - Building decompositions from train ops ---------===//
//
// The helpers of TensorBuilder.h: `train` operations with inferred result
// types, and the window arithmetic that convolutions and pooling share.
//
//===----------------------------------------------------------------------===//

#include "TensorBuilder.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::train;
using namespace mlir::mantissa::importer;

Value TensorBuilder::view(Value value, ArrayRef<int64_t> shape) {
  if (shapeOf(value) == shape)
    return value;
  return builder.create<ViewOp>(
      location, RankedTensorType::get(shape, typeOf(value).getElementType()),
      value);
}

Value TensorBuilder::expand(Value value, ArrayRef<int64_t> shape) {
  if (shapeOf(value) == shape)
    return value;
  return builder.create<ExpandOp>(
      location, RankedTensorType::get(shape, typeOf(value).getElementType()),
      value);
}

Value TensorBuilder::permute(Value value, ArrayRef<int64_t> dims) {
  return builder.create<PermuteOp>(location, value,
                                   builder.getDenseI64ArrayAttr(dims));
}

Value TensorBuilder::slice(Value value, int64_t dim, int64_t start, int64_t end,
                           int64_t step) {
  if (start == 0 && step == 1 && end == shapeOf(value)[dim])
    return value;
  return builder.create<SliceOp>(
      location, value, builder.getI64IntegerAttr(dim),
      builder.getI64IntegerAttr(start), builder.getI64IntegerAttr(end),
      builder.getI64IntegerAttr(step));
}

Value TensorBuilder::sliceScatter(Value into, Value source, int64_t dim,
                                  int64_t start, int64_t end, int64_t step) {
  return builder.create<SliceScatterOp>(
      location, into, source, builder.getI64IntegerAttr(dim),
      builder.getI64IntegerAttr(start), builder.getI64IntegerAttr(end),
      builder.getI64IntegerAttr(step));
}

Value TensorBuilder::concat(ValueRange values, int64_t dim) {
  if (values.size() == 1)
    return values.front();
  return builder.create<ConcatOp>(location, values,
                                  builder.getI64IntegerAttr(dim));
}

Value TensorBuilder::full(ArrayRef<int64_t> shape, Type elementType,
                          double value) {
  Attribute scalar =
      isa<IntegerType>(elementType)
          ? Attribute(builder.getI64IntegerAttr(static_cast<int64_t>(value)))
          : Attribute(builder.getF64FloatAttr(value));
  return builder.create<FullOp>(
      location, RankedTensorType::get(shape, elementType), scalar);
}

Value TensorBuilder::convert(Value value, Type elementType) {
  RankedTensorType type = typeOf(value);
  if (type.getElementType() == elementType)
    return value;
  return builder.create<CastOp>(
      location, RankedTensorType::get(type.getShape(), elementType), value);
}

Value TensorBuilder::sum(Value value, ArrayRef<int64_t> dims, bool keepdim) {
  return builder.create<SumOp>(location, value, dims, keepdim, TypeAttr());
}

Value TensorBuilder::mean(Value value, ArrayRef<int64_t> dims, bool keepdim) {
  return builder.create<MeanOp>(location, value, dims, keepdim, TypeAttr());
}

Value TensorBuilder::amax(Value value, ArrayRef<int64_t> dims, bool keepdim) {
  return builder.create<AmaxOp>(location, value, dims, keepdim, TypeAttr());
}

Value TensorBuilder::add(Value lhs, Value rhs) {
  return builder.create<AddOp>(location, lhs, rhs);
}

Value TensorBuilder::sub(Value lhs, Value rhs) {
  return builder.create<SubOp>(location, lhs, rhs);
}

Value TensorBuilder::mul(Value lhs, Value rhs) {
  return builder.create<MulOp>(location, lhs, rhs);
}

Value TensorBuilder::div(Value lhs, Value rhs) {
  return builder.create<DivOp>(location, lhs, rhs);
}

Value TensorBuilder::mulScalar(Value value, double scalar) {
  return builder.create<MulScalarOp>(location, value,
                                     builder.getF64FloatAttr(scalar));
}

Value TensorBuilder::divScalar(Value value, double scalar) {
  return builder.create<DivScalarOp>(location, value,
                                     builder.getF64FloatAttr(scalar));
}

Value TensorBuilder::addScalar(Value value, double scalar) {
  return builder.create<AddScalarOp>(location, value,
                                     builder.getF64FloatAttr(scalar));
}

Value TensorBuilder::rsqrt(Value value) {
  return builder.create<RsqrtOp>(location, value);
}

Value TensorBuilder::bmm(Value lhs, Value rhs) {
  return builder.create<BatchMatmulOp>(location, lhs, rhs);
}

//===----------------------------------------------------------------------===//
// Windows
//===----------------------------------------------------------------------===//

int64_t WindowGeometry::numOffsets() const {
  return ShapedType::getNumElements(kernel);
}

SmallVector<int64_t> WindowGeometry::offset(int64_t index) const {
  SmallVector<int64_t> result(kernel.size());
  for (int64_t d = spatialRank() - 1; d >= 0; --d) {
    result[d] = index % kernel[d];
    index /= kernel[d];
  }
  return result;
}

SmallVector<int64_t> WindowGeometry::paddedInput() const {
  SmallVector<int64_t> sizes;
  for (int64_t d = 0; d < spatialRank(); ++d)
    sizes.push_back(input[d] + 2 * padding[d]);
  return sizes;
}

int64_t WindowGeometry::outputSize(int64_t input, int64_t kernel,
                                   int64_t stride, int64_t padding,
                                   int64_t dilation) {
  return (input + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
}

/// The index of spatial dimension `d` in a tensor of `rank`.
static int64_t spatialDim(int64_t rank, const WindowGeometry &geometry,
                          int64_t d) {
  return rank - geometry.spatialRank() + d;
}

Value mlir::mantissa::importer::padSpatial(TensorBuilder &b, Value value,
                                           const WindowGeometry &geometry,
                                           double fill) {
  int64_t rank = TensorBuilder::shapeOf(value).size();
  Type element = TensorBuilder::typeOf(value).getElementType();
  for (int64_t d = 0; d < geometry.spatialRank(); ++d) {
    int64_t pad = geometry.padding[d];
    if (pad == 0)
      continue;
    int64_t dim = spatialDim(rank, geometry, d);
    SmallVector<int64_t> shape(TensorBuilder::shapeOf(value));
    int64_t size = shape[dim];
    shape[dim] += 2 * pad;
    value = b.sliceScatter(b.full(shape, element, fill), value, dim, pad,
                           pad + size);
  }
  return value;
}

Value mlir::mantissa::importer::unpadSpatial(TensorBuilder &b, Value value,
                                             const WindowGeometry &geometry) {
  int64_t rank = TensorBuilder::shapeOf(value).size();
  for (int64_t d = 0; d < geometry.spatialRank(); ++d) {
    int64_t pad = geometry.padding[d];
    if (pad != 0)
      value = b.slice(value, spatialDim(rank, geometry, d), pad,
                      pad + geometry.input[d]);
  }
  return value;
}

Value mlir::mantissa::importer::windowSlice(TensorBuilder &b, Value padded,
                                            const WindowGeometry &geometry,
                                            ArrayRef<int64_t> offset) {
  int64_t rank = TensorBuilder::shapeOf(padded).size();
  for (int64_t d = 0; d < geometry.spatialRank(); ++d) {
    int64_t start = offset[d] * geometry.dilation[d];
    int64_t end = start + (geometry.output[d] - 1) * geometry.stride[d] + 1;
    padded = b.slice(padded, spatialDim(rank, geometry, d), start, end,
                     geometry.stride[d]);
  }
  return padded;
}

Value mlir::mantissa::importer::windowScatter(TensorBuilder &b, Value source,
                                              const WindowGeometry &geometry,
                                              ArrayRef<int64_t> offset) {
  int64_t rank = TensorBuilder::shapeOf(source).size();
  Type element = TensorBuilder::typeOf(source).getElementType();
  SmallVector<int64_t> padded = geometry.paddedInput();
  // Widen one spatial dimension at a time, innermost first; the strided
  // positions of each are zero elsewhere.
  for (int64_t d = geometry.spatialRank() - 1; d >= 0; --d) {
    int64_t dim = spatialDim(rank, geometry, d);
    SmallVector<int64_t> shape(TensorBuilder::shapeOf(source));
    shape[dim] = padded[d];
    int64_t start = offset[d] * geometry.dilation[d];
    int64_t end = start + (geometry.output[d] - 1) * geometry.stride[d] + 1;
    source = b.sliceScatter(b.full(shape, element, 0.0), source, dim, start,
                            end, geometry.stride[d]);
  }
  return source;
}
