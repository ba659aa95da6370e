//===- TrainIndexingOps.td - Gathers and scatters ----------*- tablegen -*-===//
//
// Embedding lookups, gathers and scatters, and their accumulating forms.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAININDEXINGOPS_TD
#define MANTISSA_DIALECT_TRAIN_IR_TRAININDEXINGOPS_TD

include "mantissa/Dialect/Train/IR/TrainComputeBase.td"

def Train_EmbeddingOp : Train_ComputeOp<"embedding"> {
  let summary = "rows of a table selected by integer indices";
  let description = [{
    `result[i..., :] = weight[indices[i...], :]`. Indices out of range are
    an error at run time.
  }];
  let arguments = (ins AnyRankedTensor:$weight, AnyRankedTensor:$indices);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $weight `,` $indices attr-dict `:` type($weight) `,` type($indices) `->` type($result)
  }];
}

def Train_EmbeddingBackwardOp : Train_ComputeOp<"embedding_backward"> {
  let summary = "gradient of an embedding lookup";
  let description = [{
    A `[num_weights, d]` zero tensor into which each row of `grad` is added
    at its index, skipping `padding_idx` (torch's `embedding_dense_backward`
    without `scale_grad_by_freq`).
  }];
  let arguments = (ins AnyRankedTensor:$grad, AnyRankedTensor:$indices,
                       I64Attr:$num_weights,
                       DefaultValuedAttr<I64Attr, "-1">:$padding_idx);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $grad `,` $indices attr-dict `:` type($grad) `,` type($indices) `->` type($result)
  }];
}

def Train_IndexPutOp : Train_ComputeOp<"index_put"> {
  let summary = "write or accumulate values at indexed rows";
  let description = [{
    torch's `index_put` with one index tensor on the leading dimension:
    `input[indices[i...]] = values[i...]` (or `+=` with `accumulate`, in
    index order, so repeated indices all count).
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$indices,
                       AnyRankedTensor:$values, UnitAttr:$accumulate);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `[` $indices `]` `,` $values attr-dict `:` type($input) `,`
    type($indices) `,` type($values) `->` type($result)
  }];
}

def Train_IndexSelectOp : Train_ComputeOp<"index_select"> {
  let summary = "entries of one dimension selected by a 1-D index";
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$index,
                       I64Attr:$dim);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `,` $index attr-dict `:` type($input) `,` type($index) `->` type($result)
  }];
}

def Train_GatherOp : Train_ComputeOp<"gather"> {
  let summary = "gather along one dimension";
  let description = [{
    `result[i][j][k] = input[index[i][j][k]][j][k]` for `dim = 0`, and so on:
    the result has the index's shape.
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$index,
                       I64Attr:$dim);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `,` $index attr-dict `:` type($input) `,` type($index) `->` type($result)
  }];
}

def Train_ScatterOp : Train_ComputeOp<"scatter"> {
  let summary = "scatter a tensor along one dimension";
  let description = [{
    The inverse of `train.gather`: `input` with
    `result[index[i][j]][j] = source[i][j]` for `dim = 0`, or `+=` when
    `reduce = "add"` (torch's `scatter_add`).
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$index,
                       AnyRankedTensor:$source, I64Attr:$dim,
                       DefaultValuedStrAttr<StrAttr, "none">:$reduce);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `,` $index `,` $source attr-dict `:` type($input) `,` type($index)
    `,` type($source) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Train_ScatterValueOp : Train_ComputeOp<"scatter_value"> {
  let summary = "scatter one value along one dimension";
  let description = [{
    `input` with `value` written at every position `train.scatter` would
    write.
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$index,
                       Train_ScalarAttr:$value, I64Attr:$dim);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `,` $index attr-dict `:` type($input) `,` type($index)
    `->` type($result)
  }];
}

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAININDEXINGOPS_TD
