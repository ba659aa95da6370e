//===- TrainElementwiseOps.td - Elementwise math -----------*- tablegen -*-===//
//
// Elementwise arithmetic, comparisons, math functions and selection.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINELEMENTWISEOPS_TD
#define MANTISSA_DIALECT_TRAIN_IR_TRAINELEMENTWISEOPS_TD

include "mantissa/Dialect/Train/IR/TrainComputeBase.td"

def Train_AddOp : Train_BinaryOp<"add", "lhs + rhs">;
def Train_SubOp : Train_BinaryOp<"sub", "lhs - rhs">;
def Train_MulOp : Train_BinaryOp<"mul", "lhs * rhs">;
def Train_DivOp : Train_BinaryOp<"div", "lhs / rhs (true division)", "TrueDivide">;
def Train_PowOp : Train_BinaryOp<"pow", "lhs ** rhs">;
def Train_MaximumOp : Train_BinaryOp<"maximum", "max(lhs, rhs) (NaN wins)">;
def Train_MinimumOp : Train_BinaryOp<"minimum", "min(lhs, rhs) (NaN wins)">;

def Train_EqOp : Train_CompareOp<"eq", "lhs == rhs">;
def Train_NeOp : Train_CompareOp<"ne", "lhs != rhs">;
def Train_LtOp : Train_CompareOp<"lt", "lhs < rhs">;
def Train_LeOp : Train_CompareOp<"le", "lhs <= rhs">;
def Train_GtOp : Train_CompareOp<"gt", "lhs > rhs">;
def Train_GeOp : Train_CompareOp<"ge", "lhs >= rhs">;

def Train_AddScalarOp : Train_ScalarOp<"add_scalar", "input + scalar">;
def Train_SubScalarOp : Train_ScalarOp<"sub_scalar", "input - scalar">;
def Train_RsubScalarOp : Train_ScalarOp<"rsub_scalar", "scalar - input">;
def Train_MulScalarOp : Train_ScalarOp<"mul_scalar", "input * scalar">;
def Train_DivScalarOp : Train_ScalarOp<"div_scalar", "input / scalar", "TrueDivide">;
def Train_PowScalarOp : Train_ScalarOp<"pow_scalar", "input ** scalar">;
def Train_EqScalarOp : Train_ScalarOp<"eq_scalar", "input == scalar (i1)", "Compare">;
def Train_NeScalarOp : Train_ScalarOp<"ne_scalar", "input != scalar (i1)", "Compare">;
def Train_LtScalarOp : Train_ScalarOp<"lt_scalar", "input < scalar (i1)", "Compare">;
def Train_LeScalarOp : Train_ScalarOp<"le_scalar", "input <= scalar (i1)", "Compare">;
def Train_GtScalarOp : Train_ScalarOp<"gt_scalar", "input > scalar (i1)", "Compare">;
def Train_GeScalarOp : Train_ScalarOp<"ge_scalar", "input >= scalar (i1)", "Compare">;

def Train_NegOp : Train_UnaryOp<"neg", "-input", "SameType">;
def Train_AbsOp : Train_UnaryOp<"abs", "|input|", "SameType">;
def Train_ExpOp : Train_UnaryOp<"exp", "exp(input)">;
def Train_LogOp : Train_UnaryOp<"log", "log(input)">;
def Train_SqrtOp : Train_UnaryOp<"sqrt", "sqrt(input)">;
def Train_RsqrtOp : Train_UnaryOp<"rsqrt", "1 / sqrt(input)">;
def Train_ReciprocalOp : Train_UnaryOp<"reciprocal", "1 / input">;
def Train_SigmoidOp : Train_UnaryOp<"sigmoid", "1 / (1 + exp(-input))">;
def Train_TanhOp : Train_UnaryOp<"tanh", "tanh(input)">;
def Train_ErfOp : Train_UnaryOp<"erf", "erf(input)">;
def Train_SinOp : Train_UnaryOp<"sin", "sin(input)">;
def Train_CosOp : Train_UnaryOp<"cos", "cos(input)">;
def Train_ReluOp : Train_UnaryOp<"relu", "max(input, 0)", "SameType">;
def Train_SiluOp : Train_UnaryOp<"silu", "input * sigmoid(input)">;
def Train_LogicalNotOp : Train_UnaryOp<"logical_not", "!input (i1)", "Compare">;

def Train_GeluOp : Train_ElementwiseOp<"gelu"> {
  let summary = "GELU activation, exact (erf) or tanh-approximated";
  let description = [{
    `approximate = "none"`: `0.5 * x * (1 + erf(x / sqrt(2)))`;
    `approximate = "tanh"`:
    `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))`.

    ```mlir
    %1 = train.gelu %0 {approximate = "tanh"} : tensor<4x32xf32> -> tensor<4x32xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input,
                       DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = Train_ResultTypeOfInput;
}

def Train_GeluBackwardOp : Train_ElementwiseOp<"gelu_backward"> {
  let summary = "gradient of GELU";
  let description = [{
    `grad * d gelu(input) / d input`, for the same `approximate` mode as
    `train.gelu`.
  }];
  let arguments = (ins AnyRankedTensor:$grad, AnyRankedTensor:$input,
                       DefaultValuedStrAttr<StrAttr, "none">:$approximate);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $grad `,` $input attr-dict `:` type($grad) `,` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Train_SiluBackwardOp : Train_ElementwiseOp<"silu_backward"> {
  let summary = "gradient of SiLU";
  let description = [{
    `grad * sigmoid(input) * (1 + input * (1 - sigmoid(input)))`, in the
    order of ATen's CPU kernel; for bf16 and fp16 computed in fp32 and
    rounded once, as eager torch computes it (one kernel).
  }];
  let arguments = (ins AnyRankedTensor:$grad, AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $grad `,` $input attr-dict `:` type($grad) `,` type($input) `->` type($result)
  }];
}

def Train_WhereOp : Train_ElementwiseOp<"where"> {
  let summary = "elementwise selection";
  let description = [{
    `condition ? lhs : rhs` elementwise, the three operands broadcast
    together; `lhs` and `rhs` promote to a common type.
  }];
  let arguments = (ins AnyRankedTensor:$condition, AnyRankedTensor:$lhs,
                       AnyRankedTensor:$rhs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $condition `,` $lhs `,` $rhs attr-dict `:` type($condition) `,` type($lhs)
    `,` type($rhs) `->` type($result)
  }];
}

def Train_MaskedFillOp : Train_ElementwiseOp<"masked_fill"> {
  let summary = "replace elements where a mask is set";
  let description = [{
    `mask ? value : input` elementwise; `mask` broadcasts to `input`, whose
    type is the result's.
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$mask,
                       Train_ScalarAttr:$value);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `,` $mask attr-dict `:` type($input) `,` type($mask) `->` type($result)
  }];
}

def Train_ClampOp : Train_ElementwiseOp<"clamp"> {
  let summary = "clamp into [min, max]";
  let description = [{
    `min(max(input, min), max)` elementwise; either bound may be absent.
  }];
  let arguments = (ins AnyRankedTensor:$input,
                       OptionalAttr<Train_ScalarAttr>:$min,
                       OptionalAttr<Train_ScalarAttr>:$max);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let extraClassDefinition = Train_ResultTypeOfInput;
}

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINELEMENTWISEOPS_TD
