//===- TensorBuilder.h - Building decompositions from train ops -*- C++ -*-===//
//
// Operators that torch keeps whole but `train` expresses through others
// (convolutions as GEMMs over gathered windows, group and batch norms as
// reductions, pooling and nearest upsampling as strided slices) are built
// with these helpers, so that every backend runs them with the numerics the
// reference interpreter defines for their parts.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_LIB_IMPORT_TENSORBUILDER_H
#define MANTISSA_LIB_IMPORT_TENSORBUILDER_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

namespace mlir::mantissa::importer {

/// `train` operations at one location, with the result types they infer.
class TensorBuilder {
public:
  TensorBuilder(OpBuilder &builder, Location location)
      : builder(builder), location(location) {}

  static RankedTensorType typeOf(Value value) {
    return cast<RankedTensorType>(value.getType());
  }
  static ArrayRef<int64_t> shapeOf(Value value) {
    return typeOf(value).getShape();
  }

  /// The same elements in `shape` (row-major order kept).
  Value view(Value value, ArrayRef<int64_t> shape);
  /// Broadcast to `shape`.
  Value expand(Value value, ArrayRef<int64_t> shape);
  Value permute(Value value, ArrayRef<int64_t> dims);
  /// Elements `start, start + step, ...` below `end` along `dim`.
  Value slice(Value value, int64_t dim, int64_t start, int64_t end,
              int64_t step = 1);
  /// `into` with `source` written at `start, start + step, ...` along `dim`.
  Value sliceScatter(Value into, Value source, int64_t dim, int64_t start,
                     int64_t end, int64_t step = 1);
  Value concat(ValueRange values, int64_t dim);
  /// A tensor of `shape` and `elementType` filled with `value`.
  Value full(ArrayRef<int64_t> shape, Type elementType, double value);
  /// `value` converted to `elementType` (itself if it already is).
  Value convert(Value value, Type elementType);
  Value sum(Value value, ArrayRef<int64_t> dims, bool keepdim);
  Value mean(Value value, ArrayRef<int64_t> dims, bool keepdim);
  Value amax(Value value, ArrayRef<int64_t> dims, bool keepdim);
  Value add(Value lhs, Value rhs);
  Value sub(Value lhs, Value rhs);
  Value mul(Value lhs, Value rhs);
  Value div(Value lhs, Value rhs);
  Value mulScalar(Value value, double scalar);
  Value divScalar(Value value, double scalar);
  Value addScalar(Value value, double scalar);
  Value rsqrt(Value value);
  Value bmm(Value lhs, Value rhs);

private:
  OpBuilder &builder;
  Location location;
};

/// The geometry of a sliding window over the trailing spatial dimensions of
/// a tensor (convolution, pooling): per spatial dimension the kernel size,
/// stride, padding (both sides), dilation, and the input and output sizes.
struct WindowGeometry {
  SmallVector<int64_t> kernel, stride, padding, dilation, input, output;

  int64_t spatialRank() const { return kernel.size(); }
  /// How many kernel offsets there are (the product of the kernel sizes).
  int64_t numOffsets() const;
  /// The kernel offset of row-major index `index`.
  SmallVector<int64_t> offset(int64_t index) const;
  /// The spatial sizes of the padded input.
  SmallVector<int64_t> paddedInput() const;
  /// torch's output size for the given geometry (floor mode).
  static int64_t outputSize(int64_t input, int64_t kernel, int64_t stride,
                            int64_t padding, int64_t dilation);
};

/// `value` with its trailing spatial dimensions padded by `geometry`'s
/// padding on both sides with `fill`.
Value padSpatial(TensorBuilder &b, Value value, const WindowGeometry &geometry,
                 double fill);
/// The inverse of padSpatial: the interior of the padded spatial dimensions.
Value unpadSpatial(TensorBuilder &b, Value value,
                   const WindowGeometry &geometry);
/// From a padded input `[..., P1, ..., Pd]`, the elements that kernel
/// position `offset` sees at every output position: `[..., O1, ..., Od]`.
Value windowSlice(TensorBuilder &b, Value padded,
                  const WindowGeometry &geometry, ArrayRef<int64_t> offset);
/// The adjoint of windowSlice: `source` `[..., O1, ..., Od]` written where
/// kernel position `offset` reads in a zero padded input.
Value windowScatter(TensorBuilder &b, Value source,
                    const WindowGeometry &geometry, ArrayRef<int64_t> offset);

} // namespace mlir::mantissa::importer

#endif // MANTISSA_LIB_IMPORT_TENSORBUILDER_H
