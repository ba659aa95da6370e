//===- TrainAttrs.td - Attributes of the train dialect -----*- tablegen -*-===//
//
// Dtypes, tensor roles and per-tensor metadata carried across a step's
// boundary, and the precision plan that the precision pass attaches.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINATTRS_TD
#define MANTISSA_DIALECT_TRAIN_IR_TRAINATTRS_TD

include "mantissa/Dialect/Train/IR/TrainDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

/// The floating-point formats a precision plan can choose. The numbering
/// leaves room for the fp8 formats (e4m3, e5m2) to be appended without
/// renumbering what checkpoints and reports already store by name.
def Train_DType : I32EnumAttr<"DType", "a floating-point storage format", [
    I32EnumAttrCase<"fp32", 0>,
    I32EnumAttrCase<"bf16", 1>,
    I32EnumAttrCase<"fp16", 2>]> {
  let cppNamespace = "::mlir::mantissa::train";
  let genSpecializedAttr = 0;
}

def Train_DTypeAttr : EnumAttr<Train_Dialect, Train_DType, "dtype"> {
  let summary = "a floating-point storage format: fp32, bf16 or fp16";
  let assemblyFormat = "`<` $value `>`";
}

/// What a step argument is, as torch.export's signature says; `random` is
/// a random operator's draw, which the runtime fills before each micro-batch
/// (its `train.random` argument attribute says what it draws,
/// RandomDraws.h, docs/randomness.md).
def Train_TensorKind : I32EnumAttr<"TensorKind", "role of a step input", [
    I32EnumAttrCase<"parameter", 0>,
    I32EnumAttrCase<"buffer", 1>,
    I32EnumAttrCase<"constant", 2>,
    I32EnumAttrCase<"user_input", 3>,
    I32EnumAttrCase<"random", 4>]> {
  let cppNamespace = "::mlir::mantissa::train";
  let genSpecializedAttr = 0;
}

/// What a step result is.
def Train_ResultKind : I32EnumAttr<"ResultKind", "role of a step result", [
    I32EnumAttrCase<"loss", 0>,
    I32EnumAttrCase<"gradient", 1>,
    I32EnumAttrCase<"buffer_mutation", 2>,
    I32EnumAttrCase<"user_output", 3>]> {
  let cppNamespace = "::mlir::mantissa::train";
  let genSpecializedAttr = 0;
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

class Train_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Train_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Train_TensorInfoAttr : Train_Attr<"TensorInfo", "tensor"> {
  let summary = "role and exported metadata of one step input";
  let description = [{
    Attached to every argument of a `train.step` under the name `train.tensor`.
    It records what the precision pass matches rules against and what it must
    never lose: the tensor's role, its fully qualified name (FQN, e.g.
    `layers.0.mlp.up_proj.weight`; the input's name for user inputs), the
    path of the module that owns it (`layers.0.mlp.up_proj`; empty for the
    root), its shape and the element type it was exported with. The
    argument's own type may later change (a parameter lives in its master
    dtype); `dtype` keeps what torch computed in. Buffers also say whether
    they are persistent (saved in the state_dict).

    ```mlir
    #train.tensor<parameter, fqn = "fc1.weight", module = "fc1", shape = [32, 16], dtype = f32>
    #train.tensor<buffer, fqn = "layers.0.attn.mask", module = "layers.0.attn", shape = [8, 8], dtype = f32, persistent = false>
    ```
  }];
  let parameters = (ins
    EnumParameter<Train_TensorKind>:$kind,
    "::mlir::StringAttr":$fqn,
    "::mlir::StringAttr":$module,
    "::mlir::DenseI64ArrayAttr":$shape,
    "::mlir::Type":$dtype,
    DefaultValuedParameter<"bool", "true">:$persistent);
  let assemblyFormat = [{
    `<` $kind `,` struct($fqn, $module, $shape, $dtype, $persistent) `>`
  }];
  let genVerifyDecl = 1;
}

def Train_ResultInfoAttr : Train_Attr<"ResultInfo", "result"> {
  let summary = "role of one step result";
  let description = [{
    Attached to every result of a `train.step` under the name `train.result`.
    Gradients and buffer mutations name the parameter or buffer they belong
    to by FQN, so nothing downstream depends on result positions.

    ```mlir
    #train.result<loss>
    #train.result<gradient, fqn = "fc1.weight">
    ```
  }];
  let parameters = (ins
    EnumParameter<Train_ResultKind>:$kind,
    OptionalParameter<"::mlir::StringAttr">:$fqn);
  let assemblyFormat = "`<` $kind (`,` `fqn` `=` $fqn^)? `>`";
  let genVerifyDecl = 1;
}

def Train_PrecisionPlanAttr : Train_Attr<"PrecisionPlan", "plan"> {
  let summary = "the resolved dtypes of one parameter or buffer";
  let description = [{
    The precision pass attaches one plan to every parameter and buffer, under
    the name `train.plan`:

    - `master`: the resident and optimizer dtype;
    - `gather`: the dtype it is all-gathered in and used in forward/backward;
    - `reduce`: the dtype its gradient is reduce-scattered in (parameters);
    - `moments`: the dtype of its Adam state (parameters).

    Buffers have no gradient and no optimizer state, so their plans carry
    `master` and `gather` only.

    `master = fp32_split` (`masterSplit`) is an fp32 master kept as the bf16
    parameter plus its low 16 bits (Transformer Engine's
    store_param_remainders): the same fp32 values in 2 bytes per element
    beside the bf16 copy instead of 4. It needs a bf16 gather dtype, since
    the remainder completes a bf16 value, and is a parameter's only.

    ```mlir
    #train.plan<master = fp32, gather = bf16, reduce = bf16, moments = fp32>
    #train.plan<master = fp32_split, gather = bf16, reduce = bf16, moments = fp32>
    #train.plan<master = fp32, gather = fp32>
    ```
  }];
  let parameters = (ins
    "DType":$master,
    "DType":$gather,
    "std::optional<DType>":$reduce,
    "std::optional<DType>":$moments,
    "bool":$masterSplit);
  let skipDefaultBuilders = 1;
  let builders = [
    AttrBuilder<(ins "DType":$master, "DType":$gather,
                     "std::optional<DType>":$reduce,
                     "std::optional<DType>":$moments,
                     CArg<"bool", "false">:$masterSplit), [{
      return $_get($_ctxt, master, gather, reduce, moments, masterSplit);
    }]>
  ];
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINATTRS_TD
