//===- Tensor.h - Tensors of the reference interpreter ----------*- C++ -*-===//
//
// The value the reference interpreter computes with: a dense, row-major
// tensor of static shape whose element type is an MLIR type.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_REFERENCE_TENSOR_H
#define MANTISSA_REFERENCE_TENSOR_H

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"
#include <cstdint>
#include <vector>

namespace mlir::mantissa::reference {

/// A dense row-major tensor.
///
/// Floating-point elements (f64, f32, bf16, f16) are stored as `double`, each
/// holding a value exactly representable in the element type: a bf16 tensor
/// holds fp32 values rounded to bf16, never anything in between. Integer and
/// boolean elements are stored as `int64_t`, each already wrapped to the
/// element type's width (i1 holds 0 or 1, i32 a sign-extended 32-bit value,
/// ui8 a value in [0, 255]).
class Tensor {
public:
  /// An empty placeholder; not a valid value of any program.
  Tensor() = default;

  /// A zero-filled tensor of `elementType` and `shape`.
  Tensor(Type elementType, ArrayRef<int64_t> shape);

  /// A tensor from `values` in row-major order, each rounded to `elementType`
  /// (round-to-nearest-even for floats, truncation toward zero for integers,
  /// `!= 0` for i1).
  static Tensor fromFloats(Type elementType, ArrayRef<int64_t> shape,
                           ArrayRef<float> values);
  /// As `fromFloats`, from double-precision values.
  static Tensor fromDoubles(Type elementType, ArrayRef<int64_t> shape,
                            ArrayRef<double> values);
  /// A tensor from integer `values`, converted to `elementType` as a cast
  /// would (wrapped to the width of an integer type, rounded for a float
  /// type, `!= 0` for i1).
  static Tensor fromIntegers(Type elementType, ArrayRef<int64_t> shape,
                             ArrayRef<int64_t> values);

  /// A tensor from raw little-endian storage in `elementType`'s layout (f64,
  /// f32, bf16, f16, i64, i32, i16, i8, ui8, and i1 as one byte per element).
  /// Fails when the byte count does not match or the type is not storable.
  static llvm::Expected<Tensor>
  fromBytes(Type elementType, ArrayRef<int64_t> shape, ArrayRef<uint8_t> bytes);

  /// The raw little-endian storage that `fromBytes` reads.
  std::vector<uint8_t> toBytes() const;
  /// Every element as a float (exact for fp32, bf16 and fp16 tensors).
  std::vector<float> toFloats() const;

  /// Whether tensors of `elementType` can be represented.
  static bool isSupportedElementType(Type elementType);
  /// Bytes per element in the raw storage, or 0 when not storable.
  static unsigned getStorageByteWidth(Type elementType);

  Type getElementType() const { return elementType; }
  ArrayRef<int64_t> getShape() const { return shape; }
  int64_t getRank() const { return static_cast<int64_t>(shape.size()); }
  int64_t getNumElements() const;
  /// The tensor type this value has.
  RankedTensorType getType() const;
  /// Whether the elements are floating-point (else integer or boolean).
  bool isFloatingPoint() const { return isa<FloatType>(elementType); }

  /// The floating-point elements; only for floating-point tensors.
  ArrayRef<double> getFloats() const { return floats; }
  MutableArrayRef<double> getFloats() { return floats; }
  /// The integer or boolean elements; only for integer tensors.
  ArrayRef<int64_t> getIntegers() const { return integers; }
  MutableArrayRef<int64_t> getIntegers() { return integers; }
  /// Element `index` (row-major) as a double, whatever the element type.
  double getAsDouble(int64_t index) const;

private:
  Type elementType;
  SmallVector<int64_t> shape;
  std::vector<double> floats;
  std::vector<int64_t> integers;
};

} // namespace mlir::mantissa::reference

#endif // MANTISSA_REFERENCE_TENSOR_H
