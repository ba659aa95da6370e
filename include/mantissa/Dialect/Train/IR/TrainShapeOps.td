//===- TrainShapeOps.td - Reshaping and slicing ------------*- tablegen -*-===//
//
// Operations that move elements without computing on them. With value
// semantics, torch's views (view, permute, expand, slice) are copies here;
// code generation decides what to materialise.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINSHAPEOPS_TD
#define MANTISSA_DIALECT_TRAIN_IR_TRAINSHAPEOPS_TD

include "mantissa/Dialect/Train/IR/TrainComputeBase.td"

def Train_ViewOp : Train_Op<"view", [Pure]> {
  let summary = "reshape to the result's shape";
  let description = [{
    The same elements in row-major order under the result's shape (torch's
    `view`, `reshape`, `unsqueeze`, `squeeze`, `flatten`). Element counts
    must agree.

    ```mlir
    %1 = train.view %0 : tensor<2x8x32xf32> -> tensor<16x32xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Train_PermuteOp : Train_ComputeOp<"permute"> {
  let summary = "permute dimensions";
  let description = [{
    Result dimension `i` is input dimension `dims[i]` (torch's `permute`,
    `transpose`, `t`).

    ```mlir
    %1 = train.permute %0 {dims = array<i64: 1, 0>} : tensor<32x16xf32> -> tensor<16x32xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, DenseI64ArrayAttr:$dims);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Train_ExpandOp : Train_Op<"expand", [Pure]> {
  let summary = "broadcast to the result's shape";
  let description = [{
    Repeats size-1 dimensions (and adds leading ones) to reach the result's
    shape, as torch's `expand` with `-1` entries resolved.
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Train_SliceOp : Train_ComputeOp<"slice"> {
  let summary = "a strided range of one dimension";
  let description = [{
    Elements `start, start + step, ...` below `end` of dimension `dim`;
    `start` and `end` are clamped to the dimension as torch does.
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$dim, I64Attr:$start,
                       I64Attr:$end, DefaultValuedAttr<I64Attr, "1">:$step);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Train_SliceScatterOp : Train_ComputeOp<"slice_scatter"> {
  let summary = "write a tensor into a strided range of another";
  let description = [{
    `input` with the range that `train.slice` with the same attributes would
    read replaced by `source`.
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$source,
                       I64Attr:$dim, I64Attr:$start, I64Attr:$end,
                       DefaultValuedAttr<I64Attr, "1">:$step);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `,` $source attr-dict `:` type($input) `,` type($source) `->` type($result)
  }];
}

def Train_ConcatOp : Train_ComputeOp<"cat"> {
  let summary = "concatenate along one dimension";
  let description = [{
    Joins the inputs along `dim`; they promote to a common element type.
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs, I64Attr:$dim);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $inputs attr-dict `:` type($inputs) `->` type($result)
  }];
}

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINSHAPEOPS_TD
