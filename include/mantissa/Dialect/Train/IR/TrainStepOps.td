//===- TrainStepOps.td - The training step container -------*- tablegen -*-===//
//
// `train.step` holds one training step; `train.return` ends it.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINSTEPOPS_TD
#define MANTISSA_DIALECT_TRAIN_IR_TRAINSTEPOPS_TD

include "mantissa/Dialect/Train/IR/TrainAttrs.td"
include "mlir/Interfaces/FunctionInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/IR/RegionKindInterface.td"

def Train_StepOp : Train_Op<"step", [
    FunctionOpInterface, IsolatedFromAbove
  ]> {
  let summary = "one training step: forward, backward and the tensors they touch";
  let description = [{
    A function-like container for the joint forward and backward program of
    one training step. Every argument carries a `train.tensor` attribute
    (`#train.tensor`) naming its role (parameter, buffer, constant or user
    input), FQN, owning module, shape and exported dtype. Every result
    carries a `train.result` attribute: exactly one `loss`, then a `gradient`
    per parameter keyed by FQN, and a `buffer_mutation` per mutated buffer.

    The body is one block of tensor operations ending in `train.return`.
    Compute operations, `train.cast` and `train.shard_group` live in it.

    ```mlir
    train.step @mlp(%w: tensor<8x4xf32> {train.tensor = #train.tensor<parameter, fqn = "fc.weight", module = "fc", shape = [8, 4], dtype = f32>},
                    %x: tensor<2x4xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = f32>})
        -> (tensor<f32> {train.result = #train.result<loss>},
            tensor<8x4xf32> {train.result = #train.result<gradient, fqn = "fc.weight">}) {
      ...
      train.return %loss, %grad : tensor<f32>, tensor<8x4xf32>
    }
    ```
  }];

  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<FunctionType>:$function_type,
                       OptionalAttr<DictArrayAttr>:$arg_attrs,
                       OptionalAttr<DictArrayAttr>:$res_attrs);
  let regions = (region SizedRegion<1>:$body);

  let extraClassDeclaration = [{
    /// The attribute names under which step boundary metadata is stored.
    static constexpr ::llvm::StringLiteral kTensorInfoAttrName = "train.tensor";
    static constexpr ::llvm::StringLiteral kResultInfoAttrName = "train.result";
    static constexpr ::llvm::StringLiteral kPlanAttrName = "train.plan";

    /// Role and exported metadata of argument `index`; null if absent.
    TensorInfoAttr getTensorInfo(unsigned index);
    /// Role of result `index`; null if absent.
    ResultInfoAttr getResultInfo(unsigned index);
    /// Precision plan of argument `index`; null until the precision pass ran.
    PrecisionPlanAttr getPlan(unsigned index);

    /// The argument holding the parameter or buffer `fqn`, if any.
    ::mlir::BlockArgument lookupArgument(::llvm::StringRef fqn);

    /// FunctionOpInterface.
    ::mlir::Region *getCallableRegion() { return &getBody(); }
    ::llvm::ArrayRef<::mlir::Type> getArgumentTypes() {
      return getFunctionType().getInputs();
    }
    ::llvm::ArrayRef<::mlir::Type> getResultTypes() {
      return getFunctionType().getResults();
    }
    bool isDeclaration() { return false; }
  }];
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
}

def Train_ReturnOp : Train_Op<"return", [
    Pure, HasParent<"StepOp">, ReturnLike, Terminator
  ]> {
  let summary = "ends a training step, yielding its results";
  let description = [{
    Yields the loss, the gradients and the buffer mutations of the enclosing
    `train.step`, in the order of its results.

    ```mlir
    train.return %loss, %grad : tensor<f32>, tensor<8x4xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$operands);
  let assemblyFormat = "attr-dict ($operands^ `:` type($operands))?";
  let hasVerifier = 1;
}

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINSTEPOPS_TD
