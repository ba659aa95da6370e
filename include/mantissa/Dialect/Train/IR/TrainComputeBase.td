//===- TrainComputeBase.td - Shared pieces of compute ops --*- tablegen -*-===//
//
// Base classes of the compute operations imported from ATen. Every compute
// operation works on ranked tensors of static shape, infers its result type
// from its operands and attributes exactly as torch does (including torch's
// type promotion), and is pure: torch's in-place and aliasing variants were
// functionalised by torch.export.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINCOMPUTEBASE_TD
#define MANTISSA_DIALECT_TRAIN_IR_TRAINCOMPUTEBASE_TD

include "mantissa/Dialect/Train/IR/TrainDialect.td"
include "mantissa/Dialect/Train/IR/TrainInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/CommonAttrConstraints.td"

/// A number as torch passes a Python scalar: integer, float or bool.
def Train_ScalarAttr : AnyAttrOf<[I64Attr, F64Attr, BoolAttr]>;

/// A compute operation whose result types are inferred.
class Train_ComputeOp<string mnemonic, list<Trait> traits = []>
    : Train_Op<mnemonic, !listconcat(traits, [Pure, InferTypeOpAdaptor])>;

/// The inference of an op whose result has its `input`'s type (shape and
/// element type): `let extraClassDefinition = Train_ResultTypeOfInput;`.
defvar Train_ResultTypeOfInput = [{
  ::mlir::LogicalResult $cppClass::inferReturnTypes(
      ::mlir::MLIRContext *, std::optional<::mlir::Location>, Adaptor adaptor,
      ::llvm::SmallVectorImpl<::mlir::Type> &types) {
    types.push_back(adaptor.getInput().getType());
    return ::mlir::success();
  }
}];

/// A compute operation of the elementwise family (Train_ElementwiseOpInterface).
class Train_ElementwiseOp<string mnemonic, list<Trait> traits = []>
    : Train_ComputeOp<mnemonic,
                      !listconcat(traits, [Train_ElementwiseOpInterface])>;

/// Elementwise `lhs op rhs` with torch's broadcasting and type promotion.
class Train_BinaryOp<string mnemonic, string expression,
                     string kind = "Arithmetic">
    : Train_ElementwiseOp<mnemonic> {
  let summary = "elementwise " # expression # " with broadcasting";
  let description = [{
    Computes `}] # expression # [{` elementwise. The operands broadcast as in
    torch and promote to a common element type by torch's rules (a
    zero-dimensional tensor does not raise the type of a dimensioned one in
    the same category). Floating-point math happens in the promoted type
    (bf16 and fp16 in fp32, rounded once per op).
  }];
  let arguments = (ins AnyRankedTensor:$lhs, AnyRankedTensor:$rhs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
  let extraClassDefinition = [{
    ::mlir::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *context, std::optional<::mlir::Location> location,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return detail::inferBinaryOp(location, adaptor.getLhs().getType(),
                                   adaptor.getRhs().getType(),
                                   detail::ElementwiseKind::}] # kind # [{, types);
    }
  }];
}

/// Elementwise comparison with broadcasting; the result is i1.
class Train_CompareOp<string mnemonic, string expression>
    : Train_BinaryOp<mnemonic, expression, "Compare"> {
  let summary = "elementwise comparison " # expression;
}

/// Elementwise `input op scalar` where the scalar is a Python number.
class Train_ScalarOp<string mnemonic, string expression,
                     string kind = "Arithmetic">
    : Train_ElementwiseOp<mnemonic> {
  let summary = "elementwise " # expression # " with a Python scalar";
  let description = [{
    Computes `}] # expression # [{` elementwise, `scalar` being a number
    passed from Python (torch's wrapped number): it takes part in type
    promotion only when it is of a higher category (an integer tensor with a
    float scalar computes in fp32), and is converted to the compute type.
  }];
  let arguments = (ins AnyRankedTensor:$input, Train_ScalarAttr:$scalar);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($result)
  }];
  let extraClassDefinition = [{
    ::mlir::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *context, std::optional<::mlir::Location> location,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return detail::inferScalarOp(location, adaptor.getInput().getType(),
                                   adaptor.getScalar(),
                                   detail::ElementwiseKind::}] # kind # [{, types);
    }
  }];
}

/// Elementwise math function of one floating-point tensor.
class Train_UnaryOp<string mnemonic, string expression,
                    string kind = "FloatMath">
    : Train_ElementwiseOp<mnemonic> {
  let summary = "elementwise " # expression;
  let description = [{
    Computes `}] # expression # [{` elementwise; bf16 and fp16 inputs are
    computed in fp32 and rounded once.
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let extraClassDefinition = [{
    ::mlir::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *context, std::optional<::mlir::Location> location,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return detail::inferUnaryOp(location, adaptor.getInput().getType(),
                                  detail::ElementwiseKind::}] # kind # [{, types);
    }
  }];
}

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINCOMPUTEBASE_TD
