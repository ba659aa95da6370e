//===- Passes.td - Transformations of train IR -------------*- tablegen -*-===//
//
// The precision pass and the passes that work on `train` steps before they
// are lowered.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_TRANSFORMS_PASSES_TD
#define MANTISSA_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def ApplyPrecisionPass : Pass<"mantissa-precision", "::mlir::ModuleOp"> {
  let summary = "Resolve per-tensor precision rules into a validated plan, "
                "insert casts and form nested shard groups";
  let description = [{
    Applies a precision spec to every `train.step` of the module. The spec is
    a YAML file (`spec`) plus rules given as options (`rules`, applied after
    the file's) and a default dtype (`default-dtype`):

    ```yaml
    default_dtype: bf16          # gather dtype of parameters no rule sets
    shard_units: ["layers.*"]    # module-path globs, '*' within one segment
    rules:                       # FQN globs (llvm::GlobPattern)
      - match: "*norm*"
        master: fp32
        gather: fp32
    ```

    Each parameter and floating-point buffer gets four dtypes, the last
    matching rule winning per axis: `master` (resident and optimizer dtype;
    unset: the exported dtype), `gather` (all-gathered and used in forward
    and backward; unset: the default dtype, else the master), `reduce`
    (gradient reduce-scatter; unset: the gather dtype) and `moments` (Adam
    state; unset: fp32). Buffers take master and gather only, and the
    default dtype does not apply to them: they are not sharded, and rounding
    a RoPE table or position data would change math the exported graph does
    in their dtype, so only a rule naming them does. Integer and boolean
    buffers (masks) take no plan and no rule applies to them.

    Everything is validated before the IR changes. Errors, each naming the
    rule's text and `file:line` with a note on what it conflicts with: a rule
    or shard unit that matches nothing, an unknown axis or dtype, a default
    dtype given twice with different values, a tensor left without a plan
    (exported in a dtype no plan holds and no rule sets its master).
    Warnings (errors with `warnings-as-errors`): the stall lint, for each
    parameter with a bf16/fp16 master whose update (`lr`) is below half the
    dtype's spacing at the parameter's typical magnitude (the `train.init_rms`
    argument attribute, the RMS of its initial values, which
    `mantissa-compile` attaches; without it the lint cannot judge), and Adam
    moments below fp32.

    Then, per step:

    - each argument gets its `#train.plan`, and parameters and buffers take
      their master dtype as type (`#train.tensor` keeps the exported one);
    - a master that differs from the gather dtype is cast to it at the top of
      the step (what goes on the wire), and cast back to the exported dtype
      where the exported graph consumed it: the pass never changes the dtype
      an exported operation computes in;
    - gradients leave backward in the gather dtype and are cast to the reduce
      dtype (the results' types change accordingly); buffer mutations are
      cast to the buffer's master dtype;
    - cast chains fold, no-op casts go, identical casts are merged;
    - `train.shard_group`s are formed: each shard unit (the root, and every
      module a `shard_units` glob matches) owns the parameters beneath it
      that no inner unit owns. Its main group gathers in the dtype that holds
      most of its elements (ties: its first parameter's) and reshards after
      forward (except the root's, used again first in backward); every other
      gather dtype forms a nested group `<unit>/<dtype>` that stays gathered,
      since it holds few bytes and gathering it again would cost a collective.

    Before (`default_dtype: bf16`, rule `*norm*` -> master fp32, gather fp32):
    ```mlir
    train.step @s(%w: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "l.proj.weight", ...>},
                  %g: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "l.norm.weight", ...>}, ...)
        -> (..., tensor<4x4xf32> {train.result = #train.result<gradient, fqn = "l.proj.weight">}, ...) {
      %0 = train.mm %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
      ...
    }
    ```
    After:
    ```mlir
    train.step @s(%w: tensor<4x4xf32> {train.plan = #train.plan<master = fp32, gather = bf16, reduce = bf16, moments = fp32>, ...},
                  %g: tensor<4xf32> {train.plan = #train.plan<master = fp32, gather = fp32, reduce = fp32, moments = fp32>, ...}, ...)
        -> (..., tensor<4x4xbf16> {train.result = #train.result<gradient, fqn = "l.proj.weight">}, ...) {
      train.shard_group "root" unit "" gather bf16 members ["l.proj.weight"] {
        train.shard_group "root/fp32" unit "" gather fp32 members ["l.norm.weight"]
      }
      %w_bf16 = train.cast %w : tensor<4x4xf32> to tensor<4x4xbf16>
      %w_f32 = train.cast %w_bf16 : tensor<4x4xbf16> to tensor<4x4xf32>
      %0 = train.mm %x, %w_f32 : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
      ...
      %dw = train.cast %grad_w : tensor<4x4xf32> to tensor<4x4xbf16>
      train.return ..., %dw, ...
    }
    ```
  }];
  let dependentDialects = ["::mlir::mantissa::train::TrainDialect"];
  let options = [
    Option<"specPath", "spec", "std::string", /*default=*/"",
           "YAML precision spec (default_dtype, shard_units, rules)">,
    ListOption<"rules", "rules", "std::string",
               "Rules applied after the spec's, each "
               "GLOB:AXIS=DTYPE[;AXIS=DTYPE...] (';' or ',' between axes; "
               "quote a rule that has a ',')">,
    Option<"defaultDtype", "default-dtype", "std::string", /*default=*/"",
           "Gather dtype of parameters no rule sets (must agree with the "
           "spec's default_dtype)">,
    Option<"compute", "compute", "std::string", /*default=*/"",
           "Compute dtype of matrix products, as the spec's compute (must "
           "agree with it); applied after the plan as mantissa-autocast">,
    Option<"learningRate", "lr", "double", /*default=*/"1e-3",
           "Learning rate the stall lint compares with dtype spacings">,
    Option<"warningsAsErrors", "warnings-as-errors", "bool",
           /*default=*/"false", "Report the lints' warnings as errors">,
  ];
}

def AutocastPass : Pass<"mantissa-autocast", "::mlir::ModuleOp"> {
  let summary = "Compute matrix products in bf16 or fp16 as torch.autocast does, "
                "over the whole joint graph";
  let description = [{
    The spec's `compute: bf16` (or `--precision-compute`): every
    `train.step` computes as its program would under torch.autocast, forward
    and backward. Matrix products (`train.mm`, `bmm`, `addmm`, and so
    convolutions, which the importer lowers to batched products) take their
    operands in the compute dtype, accumulate in fp32 and produce the
    compute dtype. The ops torch's autocast runs in fp32 (softmax,
    log_softmax, the norms and their backwards, exp, log, pow, rsqrt,
    reciprocal, sum and mean) take fp32 operands. Every other op computes
    in torch's promotion of its operands as they now are (the widest); ops
    that need equal operand dtypes get them cast to that. The parts of
    torch's fused kernels that the importer decomposes and that those
    kernels compute in fp32 on operands in the compute dtype (marked
    `train.fp32_accumulate`: SDPA's scores, dp and row products) take their
    operands rounded to the compute dtype and widened back, and keep fp32
    results. Results are
    re-inferred by each op's own type rules, so the new dtypes flow to the
    consumers. The step's results keep their declared types (a cast before
    `train.return`), cast chains fold, and the step is marked
    `train.compute = "bf16"`; a second run is an error. After
    `mantissa-precision`, a weight gathered in bf16 feeds its product
    directly (its cast back to the exported fp32 folds away).

    Before (`compute=bf16`):
    ```mlir
    %0 = train.mm %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
    %1 = train.softmax %0 {dim = 1 : i64} : tensor<2x4xf32> -> tensor<2x4xf32>
    ```
    After:
    ```mlir
    %x16 = train.cast %x : tensor<2x4xf32> to tensor<2x4xbf16>
    %w16 = train.cast %w : tensor<4x4xf32> to tensor<4x4xbf16>
    %0 = train.mm %x16, %w16 : tensor<2x4xbf16>, tensor<4x4xbf16> -> tensor<2x4xbf16>
    %c = train.cast %0 : tensor<2x4xbf16> to tensor<2x4xf32>
    %1 = train.softmax %c {dim = 1 : i64} : tensor<2x4xf32> -> tensor<2x4xf32>
    ```
  }];
  let dependentDialects = ["::mlir::mantissa::train::TrainDialect"];
  let options = [
    Option<"compute", "compute", "std::string", /*default=*/"\"bf16\"",
           "The dtype matrix products compute in: bf16 or fp16 (fp32: as "
           "exported)">,
  ];
}

def ReadGatheredParametersPass
    : Pass<"mantissa-read-gathered-parameters", "::mlir::ModuleOp"> {
  let summary = "Take each parameter of a step in its gather dtype";
  let description = [{
    On planned `train.step`s (before lowering), for both step programs (the
    CPU step's library, deriveCpuStep in StepEvaluator.h; the GPU program,
    buildTrainGpuRewritePipeline): a parameter whose every use is the
    precision pass's rounding to its gather dtype (`train.plan`'s `gather`)
    becomes an argument of that dtype, so that the runtime binds the update
    path's gathered copy as it is rather than widening it every micro-batch
    for the step to round it back; and a rounding to a dtype of a value
    that was widened from that dtype, with only permutes and views between
    (autocast's rounding of the widened gathered weight and of its
    transposes), reads the narrow value through the same permutes and views
    instead. Widening is exact and rounding a widened value gives it back,
    so the numbers do not change; the step writes no widened copy of its
    weights and no rounded copy of those.
  }];
  let dependentDialects = ["::mlir::mantissa::train::TrainDialect"];
}

def ForwardOnlyPass : Pass<"mantissa-forward-only", "::mlir::ModuleOp"> {
  let summary = "Reduce each training step to its forward pass: the loss and "
                "what it needs";
  let description = [{
    Turns every `train.step` into the step that evaluation runs: its results
    keep only the loss (and user outputs); gradients and buffer mutations
    are dropped, and so is every operation that only they needed, so that
    evaluating the loss costs a forward pass rather than a training step.
    Arguments, their plans and the step's shard groups stay as they are: the
    forward-only step takes exactly the joint step's arguments, so the
    trainer binds the same parameters (in their gather dtype) to either.

    Before:
    ```mlir
    train.step @s(%w: ..., %x: ...) -> (tensor<f32> {train.result = #train.result<loss>},
                                        tensor<4x4xf32> {train.result = #train.result<gradient, fqn = "w">}) {
      %y = train.mm %x, %w ...
      %loss = train.mean %y ...
      %dw = train.mm ...   // backward
      train.return %loss, %dw : tensor<f32>, tensor<4x4xf32>
    }
    ```
    After:
    ```mlir
    train.step @s(%w: ..., %x: ...) -> (tensor<f32> {train.result = #train.result<loss>}) {
      %y = train.mm %x, %w ...
      %loss = train.mean %y ...
      train.return %loss : tensor<f32>
    }
    ```
  }];
  let dependentDialects = ["::mlir::mantissa::train::TrainDialect"];
}

#endif // MANTISSA_TRANSFORMS_PASSES_TD
