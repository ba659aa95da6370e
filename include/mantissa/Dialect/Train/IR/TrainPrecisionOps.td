//===- TrainPrecisionOps.td - Casts and shard groups -------*- tablegen -*-===//
//
// The operations the precision pass inserts: element type conversions and
// the sharding structure of the parameters.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINPRECISIONOPS_TD
#define MANTISSA_DIALECT_TRAIN_IR_TRAINPRECISIONOPS_TD

include "mantissa/Dialect/Train/IR/TrainAttrs.td"
include "mantissa/Dialect/Train/IR/TrainInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/RegionKindInterface.td"

def Train_CastOp : Train_Op<"cast", [Pure, SameOperandsAndResultShape,
                                    Train_ElementwiseOpInterface]> {
  let summary = "element type conversion of a tensor";
  let description = [{
    Converts every element of a tensor to another element type, with
    round-to-nearest-even when narrowing floats (torch's `_to_copy` with a
    dtype, and the casts the precision pass inserts).

    Folding keeps the numbers: a cast to the same type is removed, and a
    chain `A -> B -> C` becomes `A -> C` only when `B` holds every value of
    `A` exactly (bf16 -> fp32 -> bf16 is the identity; fp32 -> bf16 -> fp32
    is a rounding and stays).

    ```mlir
    %1 = train.cast %0 : tensor<32x16xf32> to tensor<32x16xbf16>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasFolder = 1;
}

def Train_ShardGroupOp : Train_Op<"shard_group", [
    NoTerminator, SingleBlock, NoRegionArguments,
    ParentOneOf<["StepOp", "ShardGroupOp"]>,
    DeclareOpInterfaceMethods<RegionKindInterface>
  ]> {
  let summary = "parameters that are gathered and reduced together";
  let description = [{
    A shard group is the unit of sharding: its members' flat buffer is split
    across ranks, all-gathered in one collective in the group's `gather`
    dtype before use, and their gradients reduce-scattered together. Members
    are named by FQN and must all be gathered in the group's dtype.

    A group may hold nested groups in its region: the members of a shard
    unit that a precision rule gathers in another dtype form a group of their
    own inside the unit's main group. `reshard_after_forward` says whether
    the gathered parameters are freed after forward and gathered again for
    backward.

    ```mlir
    train.shard_group "layers.0" unit "layers.0" gather bf16 reshard_after_forward
        members ["layers.0.attn.wq.weight", "layers.0.mlp.w1.weight"] {
      train.shard_group "layers.0/fp32" unit "layers.0" gather fp32
          members ["layers.0.attn_norm.weight"]
    }
    ```
  }];
  let arguments = (ins
    StrAttr:$group_name,
    StrAttr:$unit,
    Train_DTypeAttr:$gather,
    UnitAttr:$reshard_after_forward,
    StrArrayAttr:$members);
  let regions = (region MaxSizedRegion<1>:$body);
  let assemblyFormat = [{
    $group_name `unit` $unit `gather` custom<DTypeKeyword>($gather)
    (`reshard_after_forward` $reshard_after_forward^)?
    `members` $members attr-dict-with-keyword ($body^)?
  }];
  let extraClassDeclaration = [{
    /// The group this one is nested in, if any.
    ShardGroupOp getParentGroup() {
      return ::llvm::dyn_cast<ShardGroupOp>((*this)->getParentOp());
    }
    /// The step that owns this group (through any nesting).
    StepOp getStep();
  }];
  let hasVerifier = 1;
}

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINPRECISIONOPS_TD
