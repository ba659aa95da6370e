//===- Numerics.h - Rounding, conversion and indexing helpers ---*- C++ -*-===//
//
// The number formats of the reference interpreter: rounding to each element
// type, conversions between them with torch's semantics, Python scalars, and
// walking row-major index spaces. Private to lib/Reference.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_LIB_REFERENCE_NUMERICS_H
#define MANTISSA_LIB_REFERENCE_NUMERICS_H

#include "mantissa/Reference/Tensor.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinTypes.h"

namespace mlir::mantissa::reference::kernels {

//===----------------------------------------------------------------------===//
// Rounding and conversion of single values
//===----------------------------------------------------------------------===//

/// `value` rounded to bf16 with round-to-nearest-even (NaN stays a quiet NaN
/// of the same sign), as c10::BFloat16's constructor does.
float roundToBFloat16(float value);

/// `value` rounded once to the floating-point `type` (f64, f32, bf16, f16)
/// with round-to-nearest-even.
double roundToFloat(double value, Type type);

/// `value` wrapped to the integer `type`: two's complement truncation to its
/// width (sign- or zero-extended by signedness); i1 is `value != 0`.
int64_t wrapToInteger(int64_t value, Type type);

/// An integer converted to the floating-point `type` as torch's casts do:
/// straight to f64 or f32, and through f32 to bf16 and f16.
double integerToFloat(int64_t value, Type type);

/// A floating-point value converted to the integer `type`: truncation toward
/// zero (NaN and values beyond int64 give INT64_MIN, as x86 does), then
/// wrapped to the width; i1 is `value != 0`.
int64_t floatToInteger(double value, Type type);

//===----------------------------------------------------------------------===//
// Tensor-level helpers
//===----------------------------------------------------------------------===//

/// `tensor` converted elementwise to `elementType` (train.cast semantics).
Tensor convertTensor(const Tensor &tensor, Type elementType);

/// `tensor` broadcast to `shape` (right-aligned, size-1 dimensions repeat);
/// the shapes must be compatible.
Tensor broadcastTensor(const Tensor &tensor, ArrayRef<int64_t> shape);

/// The product of `shape`'s sizes.
int64_t numElementsOf(ArrayRef<int64_t> shape);

/// Row-major strides of `shape`, in elements.
SmallVector<int64_t> rowMajorStrides(ArrayRef<int64_t> shape);

/// Whether `type` is a floating-point element type the interpreter computes
/// with (f64, f32, bf16, f16).
inline bool isFloatElement(Type type) { return isa<FloatType>(type); }

/// Calls `fn` with a value-initialised object of the C++ type that
/// floating-point math on `type` is done in: double for f64, float otherwise
/// (fp32 is torch's opmath type of fp32, bf16 and fp16).
template <typename Fn> decltype(auto) withComputeType(Type type, Fn &&fn) {
  if (type.isF64())
    return fn(double());
  return fn(float());
}

//===----------------------------------------------------------------------===//
// Python scalars (I64Attr, F64Attr, BoolAttr)
//===----------------------------------------------------------------------===//

/// A scalar attribute as a double (exact for floats and bools).
double scalarAsDouble(Attribute scalar);
/// Whether a scalar attribute is a floating-point number.
bool isFloatScalar(Attribute scalar);
/// A scalar converted to `elementType` as torch converts a Scalar to a
/// tensor's dtype: a float rounded to a float type or truncated to an
/// integer one, an integer converted or wrapped, a bool as 0/1.
double scalarToFloat(Attribute scalar, Type floatType);
int64_t scalarToInteger(Attribute scalar, Type integerType);

//===----------------------------------------------------------------------===//
// Index spaces
//===----------------------------------------------------------------------===//

/// Walks the multi-indices of a shape in row-major order, keeping the offset
/// of the current index under a set of strides (a stride 0 repeats a
/// dimension, as broadcasting does).
class IndexWalker {
public:
  IndexWalker(ArrayRef<int64_t> shape, ArrayRef<int64_t> strides)
      : shape(shape), strides(strides), index(shape.size(), 0) {}

  ArrayRef<int64_t> getIndex() const { return index; }
  int64_t getOffset() const { return offset; }

  /// Moves to the next multi-index; false once past the last one.
  bool next() {
    for (int64_t dim = static_cast<int64_t>(shape.size()) - 1; dim >= 0;
         --dim) {
      if (++index[dim] < shape[dim]) {
        offset += strides[dim];
        return true;
      }
      offset -= strides[dim] * (shape[dim] - 1);
      index[dim] = 0;
    }
    return false;
  }

private:
  SmallVector<int64_t> shape;
  SmallVector<int64_t> strides;
  SmallVector<int64_t> index;
  int64_t offset = 0;
};

/// The shape with dimension `dim` split off: the number of elements before
/// it (`outer`), its size, and the number of elements after it (`inner`), so
/// that element (o, d, i) sits at `(o * size + d) * inner + i`.
struct DimSplit {
  int64_t outer = 1;
  int64_t size = 1;
  int64_t inner = 1;
};
DimSplit splitAtDim(ArrayRef<int64_t> shape, int64_t dim);

} // namespace mlir::mantissa::reference::kernels

#endif // MANTISSA_LIB_REFERENCE_NUMERICS_H
