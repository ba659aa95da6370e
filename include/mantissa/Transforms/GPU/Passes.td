//===- Passes.td - The GPU step's train rewrites -----------*- tablegen -*-===//
//
// The rewrites of a planned `train.step` that the GPU pipeline runs first
// (lib/Transforms/GPU; buildTrainGpuRewritePipeline), in the order it runs
// them: train ops in, train ops out, so that the bufferized step has fewer
// temporaries and the attention arrives fused.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_TRANSFORMS_GPU_PASSES_TD
#define MANTISSA_TRANSFORMS_GPU_PASSES_TD

include "mlir/Pass/PassBase.td"

def AddIntoSlicesPass : Pass<"mantissa-add-into-slices", "::mlir::ModuleOp"> {
  let summary = "Add a zero-padded slice into its range instead of adding the padded tensor";
  let description = [{
    On `train.step`s (before lowering), for the GPU program: `a + s`, where
    `s` is `train.slice_scatter` of `x` into zeros (`train.full` 0) and read
    by nothing else, becomes `train.slice_scatter` of `slice(a) + x` into
    `a`: the backward of a slice (RoPE's rotate-half) then adds into the
    range it covers, in place, rather than filling a tensor of zeros, copying
    `x` into it and adding the whole tensor. The same values, but for the
    sign of zero: an `a` of -0.0 outside the range stays -0.0, where adding
    +0.0 made it +0.0. Only where `a`, `s` and the sum have one type.
  }];
  let dependentDialects = ["::mlir::mantissa::train::TrainDialect"];
}

def ScattersAsComparisonsPass
    : Pass<"mantissa-scatters-as-comparisons", "::mlir::ModuleOp"> {
  let summary = "A scatter of one value at one position per row as an elementwise comparison";
  let description = [{
    On `train.step`s (before lowering), for the GPU program: a
    `train.scatter_value` whose index has the input's shape but for extent 1
    along the scattered dimension (one position per row, as the
    cross-entropy backward's one-hot `scatter(zeros, target, -1)`) becomes
    `train.where(arange == index, value, input)`: the same elements, but
    elementwise, so that the GPU step computes them inside the kernels that
    read them (the backward's row sum and its difference with the
    probabilities) instead of filling a [tokens, vocabulary] buffer and
    scattering into it. An index out of range, which torch refuses, selects
    nothing.

    Where the input is zeros, each `train.sum` of the result along the
    scattered dimension alone, through elementwise ops that are the same
    along it (negations, scalar products and quotients, products with a
    tensor of extent 1 there: the cross-entropy's 1 / N or per-row weights,
    0 for an ignored target), becomes the same ops applied on the index's
    shape to the value where the index is in range (0 elsewhere), plus the
    ops applied to 0 once more for the row's other elements (±0, or NaN
    where they make 0 a NaN), plus +0 where the sum starts: the same bits,
    computed from the index instead of reading a [tokens, vocabulary]
    tensor, which then has one reader left to be fused into.
  }];
  let dependentDialects = ["::mlir::mantissa::train::TrainDialect"];
}

def FuseAttentionPass : Pass<"mantissa-fuse-attention", "::mlir::ModuleOp"> {
  let summary = "Fuse softmax attention, forward and backward, into train.attention_kernel";
  let description = [{
    On `train.step`s (before lowering), for the GPU program: each layer's
    attention as torch exports it under autocast (bf16 scores `q k^T`,
    scaled, masked with -inf, softmax in fp32, bf16 product with `v`, and
    the backward of all of it) becomes two `train.attention_kernel`s, one
    forward (the output and each query's log-sum-exp) and one backward
    (the gradients of q, k and v), which the GPU program runs as
    flash-attention kernels: no [S, S] tensor in memory, the probabilities
    recomputed in the backward. Their operands are the [B, H, S, D] tensors
    the products read through views, transposes and roundings, rounded to
    bf16 once. The softmax and the products change order and rounding (an
    online softmax, the probabilities rounded before the normalisation, the
    backward's row term from the output): the numbers differ from the
    unfused program in the last bits of bf16. Only what the kernels run is
    fused (any sequence, a head dimension that is a multiple of 8 up to
    128, bf16 products, a [S, S] mask, one per batch or head
    ([B or 1, H or 1, S or 1, S], a padded batch's key padding), or none:
    an encoder's attention,
    without `where`s, becomes ops marked `unmasked` without the mask
    operand; or an fp32 mask added to the scaled scores, an additive mask
    or a constant bias, which the ops take as their f32 mask); attention
    in other forms stays as
    it is. A graph in bf16 throughout (a model exported in bf16) widens dp
    before the softmax backward's product and rounds ds to bf16 before it
    masks and scales it; the backward op then rounds it there too
    (rounded_gradient). F.scaled_dot_product_attention, as the importer
    decomposes torch's operator and its backward (3-D scores, the causal
    mask from aranges, a bool attn_mask that keeps or a float one that
    adds, widened to fp32 where it is bf16, the log-sum-exp apart, a backward from exp(s - lse) that scales
    the scores' gradient before the products of dq and dk; under
    compute: bf16, or in a model exported in bf16, the scores and dp fp32
    products of bf16 operands, as torch's kernels keep them), is fused the
    same way (fp32_scores; a keep mask negated once).
  }];
  let dependentDialects = [
    "::mlir::mantissa::train::TrainDialect",
    "::mlir::tensor::TensorDialect",
  ];
}

def ElementwiseThroughConcatsPass
    : Pass<"mantissa-elementwise-through-concats", "::mlir::ModuleOp"> {
  let summary = "Elementwise ops on the parts of a concatenation";
  let description = [{
    On `train.step`s (before lowering), for the GPU program: an elementwise
    op that is the only reader of a `train.cat` runs on each of its parts,
    with the matching slices of its other operands (an operand broadcast
    along the cat's dimension as it is), and a cat joins the results; a
    slice (step 1) of an elementwise op whose readers are all slices along
    the same dimension that take each element at most once becomes the op on
    the slices of its operands; a slice that is exactly one part of a cat is
    that part. A `train.slice_scatter` (step 1) into a tensor whose parts
    then go through its producer (a cat whose parts it keeps whole, or an
    elementwise op whose other readers are slices that overlap neither each
    other nor the kept parts) is the cat of the parts it keeps and the part
    it writes. A rounding (`train.cast`) of a view or permute of a tensor
    whose every reader, through views and permutes, rounds to the same type
    rounds the tensor instead, once, and the views move the narrow elements
    (the tensor not a matrix product's, whose rounding goes into the GEMM).
    Every element is computed by the same operations as before.
    RoPE's `x * cos + cat(-x2, x1) * sin` (its `rotate_half`) becomes
    `cat(x1 * cos1 + (-x2) * sin1, x2 * cos2 + x1 * sin2)`, whose halves
    the GPU step computes in place in the cat's buffer, instead of a kernel
    for the negation, one for the cat's copies and one for the sum. Its
    backward, `g * cos` with `g`'s rotated halves times `sin` added into
    its halves (mantissa-add-into-slices), permuted into the projections'
    layout and rounded to bf16 for two products, becomes the same cat of
    two elementwise halves, each rounded to bf16 (and then written in the
    projections' layout: mantissa-fold-copies-into-producers).
  }];
}

def LogSoftmaxAsDifferencesPass
    : Pass<"mantissa-log-softmax-as-differences", "::mlir::ModuleOp"> {
  let summary = "An fp32 log_softmax as differences its readers compute";
  let description = [{
    On `train.step`s (before lowering), for the GPU program: an fp32
    `train.log_softmax` along `d` becomes `(x - m) - log(sum(exp(x - m)))`
    with `m = amax(x)` (keepdim), the operations its lowering performs, and
    a `train.gather` of an elementwise op becomes the op on the gathers of
    its operands (an operand of extent 1 along the gathered dimension, or a
    scalar, as it is). The cross-entropy's gather of the target's
    log-probability then reads one logit per row and the row's maximum and
    log-sum, and its backward's `exp(log_softmax(x))` computes `x - m - l`
    where it reads the logits: the `[tokens, vocabulary]` fp32
    log-probabilities are neither written nor read. Every value is computed
    by the same operations as before.
  }];
  let dependentDialects = ["::mlir::mantissa::train::TrainDialect"];
}

#endif // MANTISSA_TRANSFORMS_GPU_PASSES_TD
