//===- TrainLinalgOps.td - Matrix products and norms -------*- tablegen -*-===//
//
// Matrix products, and the fused normalisation kernels torch keeps whole.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINLINALGOPS_TD
#define MANTISSA_DIALECT_TRAIN_IR_TRAINLINALGOPS_TD

include "mantissa/Dialect/Train/IR/TrainComputeBase.td"

def Train_MatmulOp : Train_ComputeOp<"mm"> {
  let summary = "matrix product of two 2-D tensors";
  let description = [{
    `[m, k] x [k, n] -> [m, n]`; bf16 and fp16 products accumulate in fp32.
  }];
  let arguments = (ins AnyRankedTensor:$lhs, AnyRankedTensor:$rhs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
}

def Train_BatchMatmulOp : Train_ComputeOp<"bmm"> {
  let summary = "batched matrix product of two 3-D tensors";
  let description = [{
    `[b, m, k] x [b, k, n] -> [b, m, n]`; accumulates as `train.mm`.
  }];
  let arguments = (ins AnyRankedTensor:$lhs, AnyRankedTensor:$rhs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
}

def Train_AddmmOp : Train_ComputeOp<"addmm"> {
  let summary = "bias plus matrix product (a Linear layer)";
  let description = [{
    `beta * bias + alpha * (lhs x rhs)`, `bias` broadcasting to `[m, n]`.
  }];
  let arguments = (ins AnyRankedTensor:$bias, AnyRankedTensor:$lhs,
                       AnyRankedTensor:$rhs,
                       DefaultValuedAttr<F64Attr, "1.0">:$beta,
                       DefaultValuedAttr<F64Attr, "1.0">:$alpha);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $bias `,` $lhs `,` $rhs attr-dict `:` type($bias) `,` type($lhs) `,`
    type($rhs) `->` type($result)
  }];
}

def Train_LayerNormOp : Train_ComputeOp<"layer_norm", [AttrSizedOperandSegments]> {
  let summary = "layer normalisation over the trailing dimensions";
  let description = [{
    torch's `native_layer_norm`: normalises over the last
    `normalized_rank` dimensions, `(x - mean) * rstd * weight + bias`, and
    also returns `mean` and `rstd` (shaped as the input with the normalised
    dimensions set to 1, in the input's dtype as torch's CPU kernel returns
    them when input and weight share a dtype) for the backward.
  }];
  let arguments = (ins AnyRankedTensor:$input,
                       Optional<AnyRankedTensor>:$weight,
                       Optional<AnyRankedTensor>:$bias,
                       I64Attr:$normalized_rank, F64Attr:$eps);
  let results = (outs AnyRankedTensor:$result, AnyRankedTensor:$mean,
                      AnyRankedTensor:$rstd);
  let assemblyFormat = [{
    $input (`weight` $weight^ `:` type($weight))? (`bias` $bias^ `:` type($bias))?
    attr-dict `:` type($input) `->` type($result) `,` type($mean) `,` type($rstd)
  }];
}

def Train_LayerNormBackwardOp : Train_ComputeOp<"layer_norm_backward", [
    AttrSizedOperandSegments]> {
  let summary = "gradients of layer normalisation";
  let description = [{
    torch's `native_layer_norm_backward`: the gradients of the input, the
    weight and the bias, from the forward's `mean` and `rstd`.
  }];
  let arguments = (ins AnyRankedTensor:$grad, AnyRankedTensor:$input,
                       AnyRankedTensor:$mean, AnyRankedTensor:$rstd,
                       Optional<AnyRankedTensor>:$weight,
                       Optional<AnyRankedTensor>:$bias,
                       I64Attr:$normalized_rank);
  let results = (outs AnyRankedTensor:$grad_input,
                      AnyRankedTensor:$grad_weight,
                      AnyRankedTensor:$grad_bias);
  let assemblyFormat = [{
    $grad `,` $input `,` $mean `,` $rstd (`weight` $weight^ `:` type($weight))?
    (`bias` $bias^ `:` type($bias))? attr-dict `:` type($grad) `,`
    type($input) `,` type($mean) `,` type($rstd) `->` type(results)
  }];
}

def Train_RmsNormOp : Train_ComputeOp<"rms_norm"> {
  let summary = "RMS normalisation over the trailing dimensions";
  let description = [{
    torch's `_fused_rms_norm`: `x * rsqrt(mean(x^2) + eps) * weight` over the
    last `normalized_rank` dimensions, also returning `rstd` for the backward.
    Without `eps` torch uses the machine epsilon of the input type.
  }];
  let arguments = (ins AnyRankedTensor:$input,
                       Optional<AnyRankedTensor>:$weight,
                       I64Attr:$normalized_rank, OptionalAttr<F64Attr>:$eps);
  let results = (outs AnyRankedTensor:$result, AnyRankedTensor:$rstd);
  let assemblyFormat = [{
    $input (`weight` $weight^ `:` type($weight))? attr-dict `:` type($input)
    `->` type($result) `,` type($rstd)
  }];
}

def Train_RmsNormBackwardOp : Train_ComputeOp<"rms_norm_backward"> {
  let summary = "gradients of RMS normalisation";
  let description = [{
    torch's `_fused_rms_norm_backward`: the gradients of the input and the
    weight from the forward's `rstd`.
  }];
  let arguments = (ins AnyRankedTensor:$grad, AnyRankedTensor:$input,
                       AnyRankedTensor:$rstd,
                       Optional<AnyRankedTensor>:$weight,
                       I64Attr:$normalized_rank);
  let results = (outs AnyRankedTensor:$grad_input,
                      AnyRankedTensor:$grad_weight);
  let assemblyFormat = [{
    $grad `,` $input `,` $rstd (`weight` $weight^ `:` type($weight))? attr-dict
    `:` type($grad) `,` type($input) `,` type($rstd) `->` type(results)
  }];
}

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINLINALGOPS_TD
