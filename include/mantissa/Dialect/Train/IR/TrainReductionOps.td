//===- TrainReductionOps.td - Reductions and softmax -------*- tablegen -*-===//
//
// Reductions over dimensions, softmax and log-softmax with their gradients.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINREDUCTIONOPS_TD
#define MANTISSA_DIALECT_TRAIN_IR_TRAINREDUCTIONOPS_TD

include "mantissa/Dialect/Train/IR/TrainComputeBase.td"

class Train_ReduceOp<string mnemonic, string what> : Train_ComputeOp<mnemonic> {
  let summary = what # " over dimensions";
  let description = [{
    Reduces `input` over `dims` (non-negative, sorted, unique; empty means
    every dimension), keeping them as size 1 when `keepdim` is set.
    Floating-point inputs accumulate in at least fp32 and round once.
  }];
  let arguments = (ins AnyRankedTensor:$input, DenseI64ArrayAttr:$dims,
                       UnitAttr:$keepdim, OptionalAttr<TypeAttr>:$dtype);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Train_SumOp : Train_ReduceOp<"sum", "sum"> {
  let description = [{
    Sum of `input` over `dims` (non-negative, sorted, unique; empty means
    every dimension), keeping them as size 1 when `keepdim` is set.
    Integer and boolean inputs sum to i64 as in torch, unless `dtype`
    names the result element type. Floating-point inputs accumulate in at
    least fp32 and round once.

    ```mlir
    %1 = train.sum %0 {dims = array<i64: 1>, keepdim} : tensor<4x8xf32> -> tensor<4x1xf32>
    ```
  }];
}
def Train_MeanOp : Train_ReduceOp<"mean", "arithmetic mean">;
def Train_AmaxOp : Train_ReduceOp<"amax", "maximum">;

class Train_SoftmaxOpBase<string mnemonic, string what>
    : Train_ComputeOp<mnemonic> {
  let summary = what # " along one dimension";
  let description = [{
    }] # what # [{ of `input` along `dim` (non-negative), computed in fp32
    for bf16 and fp16 inputs with the maximum subtracted first, as torch's
    CPU kernel does.
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$dim);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = Train_ResultTypeOfInput;
}

def Train_SoftmaxOp : Train_SoftmaxOpBase<"softmax", "softmax">;
def Train_LogSoftmaxOp : Train_SoftmaxOpBase<"log_softmax", "log-softmax">;

class Train_SoftmaxBackwardOpBase<string mnemonic, string formula>
    : Train_ComputeOp<mnemonic> {
  let summary = "gradient of a softmax given its output";
  let description = [{
    `}] # formula # [{` along `dim`, from the output of the forward op.
  }];
  let arguments = (ins AnyRankedTensor:$grad, AnyRankedTensor:$output,
                       I64Attr:$dim);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $grad `,` $output attr-dict `:` type($grad) `,` type($output) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Train_SoftmaxBackwardOp : Train_SoftmaxBackwardOpBase<"softmax_backward",
    "output * (grad - sum(grad * output, dim))">;
def Train_LogSoftmaxBackwardOp : Train_SoftmaxBackwardOpBase<
    "log_softmax_backward", "grad - exp(output) * sum(grad, dim)">;

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINREDUCTIONOPS_TD
