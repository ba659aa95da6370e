//===- TrainCreationOps.td - Tensors from nothing ----------*- tablegen -*-===//
//
// Constant fills, ranges and element type conversions of values.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINCREATIONOPS_TD
#define MANTISSA_DIALECT_TRAIN_IR_TRAINCREATIONOPS_TD

include "mantissa/Dialect/Train/IR/TrainComputeBase.td"

def Train_FullOp : Train_Op<"full", [Pure]> {
  let summary = "a tensor filled with one value";
  let description = [{
    Every element is `value` converted to the result's element type (torch's
    `full`, `full_like`, `zeros`, `ones`, `scalar_tensor`, and the `empty`
    family, whose contents no valid program reads, as zeros).

    ```mlir
    %0 = train.full {value = 0xFFF0000000000000 : f64} : tensor<f32>
    %1 = train.full {value = 0 : i64} : tensor<2x4xi64>
    ```
  }];
  let arguments = (ins Train_ScalarAttr:$value);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def Train_ArangeOp : Train_Op<"arange", [Pure]> {
  let summary = "a 1-D range of numbers";
  let description = [{
    `start, start + step, ...` below `end` (torch's `arange`), as many
    elements as the result holds, computed in the result's element type.
  }];
  let arguments = (ins Train_ScalarAttr:$start, Train_ScalarAttr:$end,
                       Train_ScalarAttr:$step);
  let results = (outs 1DTensorOf<[AnyType]>:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINCREATIONOPS_TD
