//===- Pt2Enums.cpp - The schema's names for the data model's enums -------===//
//
// The schema's spelling of each enum of the data model in Pt2Archive.h
// (ScalarType, ArgumentKind, the InputSpec and OutputSpec kinds) and the
// element width and stored dtype of each ScalarType. They live apart from the
// readers because the importer, the weights writer and the summary use them on
// programs that have already been read.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Import/Pt2Archive.h"

using namespace mlir::mantissa::pt2;

//===----------------------------------------------------------------------===//
// ScalarType
//===----------------------------------------------------------------------===//

llvm::StringRef mlir::mantissa::pt2::stringifyScalarType(ScalarType type) {
  switch (type) {
  case ScalarType::Unknown:
    return "unknown";
  case ScalarType::UInt8:
    return "uint8";
  case ScalarType::Int8:
    return "int8";
  case ScalarType::Int16:
    return "int16";
  case ScalarType::Int32:
    return "int32";
  case ScalarType::Int64:
    return "int64";
  case ScalarType::Float16:
    return "float16";
  case ScalarType::Float32:
    return "float32";
  case ScalarType::Float64:
    return "float64";
  case ScalarType::Complex32:
    return "complex32";
  case ScalarType::Complex64:
    return "complex64";
  case ScalarType::Complex128:
    return "complex128";
  case ScalarType::Bool:
    return "bool";
  case ScalarType::BFloat16:
    return "bfloat16";
  case ScalarType::UInt16:
    return "uint16";
  case ScalarType::Float8E4M3FN:
    return "float8_e4m3fn";
  case ScalarType::Float8E5M2:
    return "float8_e5m2";
  case ScalarType::Float8E4M3FNUZ:
    return "float8_e4m3fnuz";
  case ScalarType::Float8E5M2FNUZ:
    return "float8_e5m2fnuz";
  }
  return "unknown";
}

unsigned mlir::mantissa::pt2::getScalarTypeByteWidth(ScalarType type) {
  switch (type) {
  case ScalarType::Unknown:
    return 0;
  case ScalarType::UInt8:
  case ScalarType::Int8:
  case ScalarType::Bool:
  case ScalarType::Float8E4M3FN:
  case ScalarType::Float8E5M2:
  case ScalarType::Float8E4M3FNUZ:
  case ScalarType::Float8E5M2FNUZ:
    return 1;
  case ScalarType::Int16:
  case ScalarType::UInt16:
  case ScalarType::Float16:
  case ScalarType::BFloat16:
    return 2;
  case ScalarType::Int32:
  case ScalarType::Float32:
  case ScalarType::Complex32:
    return 4;
  case ScalarType::Int64:
  case ScalarType::Float64:
  case ScalarType::Complex64:
    return 8;
  case ScalarType::Complex128:
    return 16;
  }
  return 0;
}

std::optional<mlir::mantissa::rt::DType>
mlir::mantissa::pt2::getStoredDType(ScalarType type) {
  using rt::DType;
  switch (type) {
  case ScalarType::Float32:
    return DType::F32;
  case ScalarType::BFloat16:
    return DType::BF16;
  case ScalarType::Float16:
    return DType::F16;
  case ScalarType::Float64:
    return DType::F64;
  case ScalarType::Int64:
    return DType::I64;
  case ScalarType::Int32:
    return DType::I32;
  case ScalarType::Int16:
    return DType::I16;
  case ScalarType::Int8:
    return DType::I8;
  case ScalarType::UInt8:
    return DType::U8;
  case ScalarType::Bool:
    return DType::Bool;
  default:
    return std::nullopt;
  }
}

//===----------------------------------------------------------------------===//
// ArgumentKind
//===----------------------------------------------------------------------===//

llvm::StringRef mlir::mantissa::pt2::stringifyArgumentKind(ArgumentKind kind) {
  switch (kind) {
  case ArgumentKind::None:
    return "as_none";
  case ArgumentKind::Tensor:
    return "as_tensor";
  case ArgumentKind::Tensors:
    return "as_tensors";
  case ArgumentKind::Int:
    return "as_int";
  case ArgumentKind::Ints:
    return "as_ints";
  case ArgumentKind::Float:
    return "as_float";
  case ArgumentKind::Floats:
    return "as_floats";
  case ArgumentKind::String:
    return "as_string";
  case ArgumentKind::Strings:
    return "as_strings";
  case ArgumentKind::SymInt:
    return "as_sym_int";
  case ArgumentKind::SymInts:
    return "as_sym_ints";
  case ArgumentKind::ScalarType:
    return "as_scalar_type";
  case ArgumentKind::MemoryFormat:
    return "as_memory_format";
  case ArgumentKind::Layout:
    return "as_layout";
  case ArgumentKind::Device:
    return "as_device";
  case ArgumentKind::Bool:
    return "as_bool";
  case ArgumentKind::Bools:
    return "as_bools";
  case ArgumentKind::SymBool:
    return "as_sym_bool";
  case ArgumentKind::SymBools:
    return "as_sym_bools";
  case ArgumentKind::Graph:
    return "as_graph";
  case ArgumentKind::OptionalTensors:
    return "as_optional_tensors";
  case ArgumentKind::CustomObj:
    return "as_custom_obj";
  case ArgumentKind::Operator:
    return "as_operator";
  case ArgumentKind::SymFloat:
    return "as_sym_float";
  case ArgumentKind::SymFloats:
    return "as_sym_floats";
  case ArgumentKind::OptionalTensor:
    return "as_optional_tensor";
  case ArgumentKind::Complex:
    return "as_complex";
  case ArgumentKind::NestedTensors:
    return "as_nested_tensors";
  case ArgumentKind::IntLists:
    return "as_int_lists";
  case ArgumentKind::StringToArgument:
    return "as_string_to_argument";
  }
  return "as_unknown";
}

//===----------------------------------------------------------------------===//
// Input and output specs
//===----------------------------------------------------------------------===//

llvm::StringRef mlir::mantissa::pt2::stringifyInputKind(InputSpec::Kind kind) {
  switch (kind) {
  case InputSpec::Kind::UserInput:
    return "user_input";
  case InputSpec::Kind::Parameter:
    return "parameter";
  case InputSpec::Kind::Buffer:
    return "buffer";
  case InputSpec::Kind::TensorConstant:
    return "tensor_constant";
  case InputSpec::Kind::ConstantInput:
    return "constant_input";
  }
  return "unknown";
}

llvm::StringRef
mlir::mantissa::pt2::stringifyOutputKind(OutputSpec::Kind kind) {
  switch (kind) {
  case OutputSpec::Kind::UserOutput:
    return "user_output";
  case OutputSpec::Kind::LossOutput:
    return "loss_output";
  case OutputSpec::Kind::BufferMutation:
    return "buffer_mutation";
  case OutputSpec::Kind::GradientToParameter:
    return "gradient_to_parameter";
  case OutputSpec::Kind::GradientToUserInput:
    return "gradient_to_user_input";
  case OutputSpec::Kind::UserInputMutation:
    return "user_input_mutation";
  case OutputSpec::Kind::ParameterMutation:
    return "parameter_mutation";
  }
  return "unknown";
}
