//===- TrainKernelOps.td - Ops the GPU path forms from the graph -*- tablegen -*-===//
//
// Operations that no export contains: the GPU path forms them from patterns
// of the joint graph (mantissa-fuse-attention) and runs each as kernels of
// its own. They take their results' storage as operands (destination
// passing), so that bufferization gives them buffers, and then run on
// memrefs.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINKERNELOPS_TD
#define MANTISSA_DIALECT_TRAIN_IR_TRAINKERNELOPS_TD

include "mantissa/Dialect/Train/IR/TrainDialect.td"
include "mlir/Dialect/Bufferization/IR/BufferizableOpInterface.td"
include "mlir/Interfaces/DestinationStyleOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Train_AttentionKernelOp : Train_Op<"attention_kernel", [
    AttrSizedOperandSegments, DestinationStyleOpInterface,
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>,
    DeclareOpInterfaceMethods<BufferizableOpInterface,
        ["bufferizesToMemoryRead", "bufferizesToMemoryWrite",
         "getAliasingValues", "bufferize"]>]> {
  let summary = "fused softmax attention, forward or backward";
  let description = [{
    Attention over `[batch, heads, sequence, head_dim]` bf16 tensors with
    a mask, i1 (true: the key is hidden from the query) or f32 (added to
    the scaled scores: an additive mask or bias), that is
    `[sequence, sequence]` (the same for every batch and head, as a causal
    mask) or `[batch or 1, heads or 1, sequence or 1, sequence]` (a padded
    batch's key padding mask `[batch, 1, 1, sequence]`, say), broadcast;
    with `unmasked`, no mask operand: every query sees every key, as an
    encoder's attention. As the graph computes it under autocast: scores
    `bf16(bf16(q k^T) * scale)` (plus an f32 mask, in f32), -inf where
    masked, softmax over the keys in fp32, `out = p v` (the probabilities
    rounded to bf16 for it).

    Forward: `ins(q, k, v, mask) outs(out, lse)`, `lse` the fp32
    `[batch, heads, sequence]` log-sum-exp of each query's scores.
    Backward (`backward`): `ins(q, k, v, mask, out, lse, dout)
    outs(dq, dk, dv, delta)`, `delta = rowsum(dout * out)` in fp32 (the
    softmax backward's term, `rowsum(dp * p)` of the graph). The scores'
    gradient `ds = p (dp - delta)` is masked, scaled and rounded to bf16
    once, as under autocast; with `rounded_gradient` (a graph in bf16
    throughout), rounded to bf16 before it is scaled, and again after.

    With `fp32_scores`, the scores and their gradient are kept as torch's
    own SDPA kernels keep them (F.scaled_dot_product_attention under
    autocast): `q k^T * scale` in fp32 (plus the mask), not rounded to bf16,
    and `dp = dout v^T` in fp32 before `ds = p (dp - delta)`; only the
    probabilities and ds are rounded to bf16, as the operands of the
    products that read them.

    On tensors its results are its outputs; on memrefs it has none. The GPU
    program runs it as flash-attention kernels (docs/gpu-step.md).
  }];
  let arguments = (ins Variadic<AnyShaped>:$inputs,
                       Variadic<AnyShaped>:$outputs, UnitAttr:$backward,
                       F64Attr:$scale, UnitAttr:$rounded_gradient,
                       UnitAttr:$unmasked, UnitAttr:$fp32_scores);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let assemblyFormat = [{
    attr-dict `ins` `(` $inputs `:` type($inputs) `)`
    `outs` `(` $outputs `:` type($outputs) `)` (`->` type($results)^)?
  }];
  let extraClassDeclaration = [{
    MutableOperandRange getDpsInitsMutable() { return getOutputsMutable(); }
    /// The mask operand, or null where the op is `unmasked`.
    Value getMask() { return getUnmasked() ? Value() : getInputs()[3]; }
    /// Whether a mask of shape `mask` broadcasts to the scores of a query
    /// of shape `query` ([batch, heads, sequence, head_dim]) as the op
    /// takes it: [sequence, sequence], or rank 4 with each of the first
    /// three dimensions the scores' or 1 and the last the sequence.
    static bool isMaskShape(ArrayRef<int64_t> mask, ArrayRef<int64_t> query);
  }];
  let hasVerifier = 1;
}

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINKERNELOPS_TD
