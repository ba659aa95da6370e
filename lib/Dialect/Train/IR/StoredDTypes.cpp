//===- StoredDTypes.cpp - MLIR element types as stored dtypes -------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Dialect/Train/IR/StoredDTypes.h"

using namespace mlir;
using namespace mlir::mantissa;

Type train::getStoredElementType(MLIRContext *context, rt::DType dtype) {
  switch (dtype) {
  case rt::DType::F32:
    return Float32Type::get(context);
  case rt::DType::BF16:
    return BFloat16Type::get(context);
  case rt::DType::F16:
    return Float16Type::get(context);
  case rt::DType::F64:
    return Float64Type::get(context);
  case rt::DType::I64:
    return IntegerType::get(context, 64);
  case rt::DType::I32:
    return IntegerType::get(context, 32);
  case rt::DType::I16:
    return IntegerType::get(context, 16);
  case rt::DType::I8:
    return IntegerType::get(context, 8);
  case rt::DType::U8:
    return IntegerType::get(context, 8, IntegerType::Unsigned);
  case rt::DType::Bool:
    return IntegerType::get(context, 1);
  }
  return {};
}

std::optional<rt::DType> train::getStoredDType(Type type) {
  if (type.isF32())
    return rt::DType::F32;
  if (type.isBF16())
    return rt::DType::BF16;
  if (type.isF16())
    return rt::DType::F16;
  if (auto integer = dyn_cast<IntegerType>(type)) {
    switch (integer.getWidth()) {
    case 1:
      return rt::DType::Bool;
    case 8:
      return integer.isUnsigned() ? rt::DType::U8 : rt::DType::I8;
    case 16:
      return rt::DType::I16;
    case 32:
      return rt::DType::I32;
    case 64:
      return rt::DType::I64;
    }
  }
  if (type.isF64())
    return rt::DType::F64;
  return std::nullopt;
}

rt::DType train::getStoredDType(DType dtype) {
  switch (dtype) {
  case DType::fp32:
    return rt::DType::F32;
  case DType::bf16:
    return rt::DType::BF16;
  case DType::fp16:
    return rt::DType::F16;
  }
  return rt::DType::F32;
}
