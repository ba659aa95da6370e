//===- Passes.td - Lowerings to CPU and GPU code -----------*- tablegen -*-===//
//
// The passes that lower `train` operations to loops, vectors and GPU kernels.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_PASSES_TD
#define MANTISSA_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def LowerAdamWPass : Pass<"mantissa-lower-adamw", "::mlir::ModuleOp"> {
  let summary = "Expand train.adamw_update into a vectorised CPU loop or a GPU kernel";
  let description = [{
    Replaces every `train.adamw_update` by the code of its single pass over
    the group's buffers.

    The group's elements are cut into tiles of `tile-size` elements (the
    same tiles on both targets, so that a slice, `slice(%part, %parts)`, is
    the same elements on the CPU and the GPU); each tile belongs to one
    member. A
    binary search over the members' first tiles, unrolled into `scf.if`s on
    constants, finds a tile's member and its offsets, and an
    `scf.index_switch` over the members' distinct dtype combinations runs
    the code of that kind. Code size therefore grows with the number of
    distinct kinds, not with the number of members, and the whole group is one
    loop (CPU) or one launch (GPU).

    The bias corrections and every scalar torch converts to fp32 are computed
    once, in f64, before the loop. Per element the update follows torch's
    order of operations exactly (`lerp` as an FMA with the weight-0.5 switch,
    `addcmul` as an FMA, IEEE `sqrt` and division), rounding after each
    in-place operation for bf16/fp16 parameters without master.

    `target=cpu`: a tile loop with `vector-width`-wide `vector.load`s and a
    scalar tail, in place in the enclosing function.

    `target=gpu`: a `gpu.module` holding one `gpu.func` kernel with a fixed
    signature (the buffers present on the op, in operand order, then the
    fp32 scalars `decay, lerp_weight, beta2, one_minus_beta2,
    bias_correction2_sqrt, eps, neg_step_size, grad_scale`, then the index
    range `first_tile, end_tile` of tiles it updates), and a
    `gpu.launch_func` of one block per tile of the op's slice in place of
    the op. Blocks stride over the range; a block walks its tile in chunks
    of `block-size * 8` elements, each thread 8 consecutive elements with
    128-bit loads and stores (`memref<?xvector<4xf32>>` views).

    `grad_scale(%s)` multiplies each gradient as it is loaded and rounds to
    the gradient's dtype (clip_grad_norm_'s in-place `mul_`).

    Before:
    ```mlir
    train.adamw_update members [
        "w" 4099 {grad = fp32 at 0, param = fp32 at 0, moments = fp32 at 0}
      ]
      grad(%g : memref<16400xi8>) param(%p : memref<16400xi8>)
      exp_avg(%m : memref<16400xi8>) exp_avg_sq(%v : memref<16400xi8>)
      lr(%lr) beta1(%b1) beta2(%b2) eps(%eps) weight_decay(%wd) step(%step)
    ```
    After (`target=cpu`, abridged):
    ```mlir
    %bc1 = ... math.powf %b1, %stepf : f64 ...
    %gv = memref.view %g[%c0][%n] : memref<16400xi8> to memref<?xf32>
    scf.for %t = %first to %last step %c1 {
      scf.for %i = %begin to %vend step %c8 {
        %x = vector.load %pv[%i] : memref<?xf32>, vector<8xf32>
        ...
      }
      scf.for %i = %vend to %end step %c1 { ... }
    }
    ```
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::func::FuncDialect",
    "::mlir::gpu::GPUDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect",
  ];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"",
           "Code to produce: 'cpu' (vector loops) or 'gpu' (a kernel)">,
    Option<"vectorWidth", "vector-width", "unsigned", /*default=*/"8",
           "Elements per vector operation of the CPU loop">,
    Option<"tileSize", "tile-size", "int64_t", /*default=*/"4096",
           "Elements per tile of the CPU loop (a multiple of vector-width)">,
    Option<"gpuBlockSize", "gpu-block-size", "unsigned", /*default=*/"256",
           "Threads per block of the GPU kernel (each handles 8 elements)">,
    Option<"testGpuElementCode", "test-gpu-element-code", "bool",
           /*default=*/"false",
           "CPU target: update each chunk of 8 elements with the GPU kernel's "
           "code (128-bit view accesses, sqrt intrinsic, hardware bf16 "
           "rounding), so that it can be tested where there is no GPU">,
  ];
}

def LowerTrainToLinalgPass
    : Pass<"mantissa-lower-train-to-linalg", "::mlir::ModuleOp"> {
  let summary = "Lower train.step compute ops to linalg on tensors";
  let description = [{
    Replaces every `train.step` by a `func.func` of the same name and
    signature (without the `train.*` attributes) whose body computes the
    step with `linalg` on tensors, `tensor` reshapes and slices, and
    `arith`/`math` in the generic bodies. bf16 and fp16 operations compute
    in fp32 and are rounded once per op (`arith.extf` / `arith.truncf` in
    the body), reductions and matrix products accumulate in fp32 (fp64 for
    fp64), so the numbers match the reference interpreter.

    An operation without a lowering makes the pass fail with an error that
    names it; nothing is dropped silently. Scatters (`scatter`,
    `scatter_value`, `index_put`, `embedding_backward`) are `scf.for` nests
    of `tensor.extract` / `tensor.insert` in row-major order, so repeated
    indices accumulate in the interpreter's order.

    Before:
    ```mlir
    train.step @s(%x: tensor<2x4xbf16> {...}) -> (tensor<2x4xbf16> {...}) {
      %0 = train.exp %x : tensor<2x4xbf16> -> tensor<2x4xbf16>
      train.return %0 : tensor<2x4xbf16>
    }
    ```
    After:
    ```mlir
    func.func @s(%x: tensor<2x4xbf16>) -> tensor<2x4xbf16> {
      %e = tensor.empty() : tensor<2x4xbf16>
      %0 = linalg.generic {...} ins(%x : tensor<2x4xbf16>) outs(%e : ...) {
      ^bb0(%in: bf16, %out: bf16):
        %f = arith.extf %in : bf16 to f32
        %r = math.exp %f : f32
        %t = arith.truncf %r : f32 to bf16
        linalg.yield %t : bf16
      } -> tensor<2x4xbf16>
      return %0 : tensor<2x4xbf16>
    }
    ```
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::func::FuncDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
  ];
}

//===----------------------------------------------------------------------===//
// The stages of mantissa-train-cpu-pipeline that are Mantissa's own
// (TrainToLLVM.cpp, CallGemmLibrary.cpp), in the order it runs them.
//===----------------------------------------------------------------------===//

def MarkArgumentsReadOnlyPass
    : Pass<"mantissa-mark-arguments-read-only", "::mlir::func::FuncOp"> {
  let summary = "Mark every argument of a lowered step read-only for bufferization";
  let description = [{
    Sets `bufferization.writable = false` on every argument of each
    function. The step's arguments are read-only: parameters are the update
    path's own memory and the batch is reused every step. Without this,
    one-shot bufferization writes results such as an in-place scatter into
    the argument's buffer.
  }];
  let dependentDialects = ["::mlir::bufferization::BufferizationDialect"];
}

def ComputeResultsInPlacePass
    : Pass<"mantissa-compute-results-in-place", "::mlir::func::FuncOp"> {
  let summary = "Compute results in their out-parameters instead of copying a temporary";
  let description = [{
    After `buffer-results-to-out-params`, bufferization computes each result
    into a temporary and copies it into the out-parameter at the end. This
    pass makes the ops write the out-parameter directly where that is
    equivalent: a temporary (`memref.alloc`) of the out-parameter's very
    type, used only by ops of the function body before the copy (and its
    `memref.dealloc`), copied into a block argument nothing else touches.
    Each result then costs no copy (every gradient of a step).

    Before:
    ```mlir
    %t = memref.alloc() : memref<4xf32>
    linalg.fill ins(%c : f32) outs(%t : memref<4xf32>)
    memref.copy %t, %out : memref<4xf32> to memref<4xf32>
    memref.dealloc %t : memref<4xf32>
    ```
    After:
    ```mlir
    linalg.fill ins(%c : f32) outs(%out : memref<4xf32>)
    ```
  }];
}

def ConvertCopiesToLinalgPass
    : Pass<"mantissa-convert-copies-to-linalg", "::mlir::ModuleOp"> {
  let summary = "Turn memref.copy into linalg.copy";
  let description = [{
    Copies between strided views would call the `memrefCopy` runtime
    function, which the step libraries do not link; as `linalg.copy` they
    become loops like every other op.
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
}

def CallGemmLibraryPass
    : Pass<"mantissa-call-gemm-library", "::mlir::ModuleOp"> {
  let summary = "Compute matrix products by calling the runtime's GEMM (oneDNN)";
  let description = [{
    Replaces every linalg contraction on buffers that is a (batched) matrix
    product the runtime's GEMM computes (include/mantissa/Runtime/CpuGemm.h)
    by a call to `@mantissa_cpu_gemm`: `linalg.matmul`, `linalg.batch_matmul`
    and the `linalg.generic`s that elementwise fusion makes of them, whose
    body is `out + in0 * in1` with both inputs f32 or both bf16 (extended to
    f32 in the body, as the named ops and mantissa-lower-train-to-linalg
    write them) and an f32 output: fp32 accumulation either way.

    The op's loops are grouped into batch, M, N and K dimensions
    (`linalg::inferContractionDims`); each group must collapse to one stride
    in every operand (as a reshape of the buffer would), the output must be
    contiguous along N and each input along one of its two matrix
    dimensions, all strides and offsets static. The shape, element types
    and strides go into a constant descriptor (`memref.global`, the layout
    of CpuGemm.h, version in its first element); the call passes the
    descriptor's and the operands' addresses as `index` values. Other
    contractions are left to the loops, unchanged.

    The library adds its sum to the output, as the op does, but in its own
    order (blocked, FMA), so results differ from the loops by fp32
    accumulation-order rounding. mantissa-train-cpu-pipeline runs this pass
    unless `gemm=loops`.

    Before:
    ```mlir
    linalg.matmul ins(%a, %b : memref<128x64xbf16>, memref<64x32xbf16>)
                  outs(%c : memref<128x32xf32>)
    ```
    After:
    ```mlir
    memref.global "private" constant @__mantissa_gemm_0 : memref<17xi64> =
        dense<[1, 1, 1, 0, 1, 128, 32, 64, 8192, 64, 1, 2048, 32, 1, 4096, 32, 1]>
    ...
    %d = memref.get_global @__mantissa_gemm_0 : memref<17xi64>
    %dp = memref.extract_aligned_pointer_as_index %d : memref<17xi64> -> index
    %ap = memref.extract_aligned_pointer_as_index %a : memref<128x64xbf16> -> index
    ...
    call @mantissa_cpu_gemm(%dp, %ap, %bp, %cp) : (index, index, index, index) -> ()
    ```
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::func::FuncDialect",
    "::mlir::memref::MemRefDialect",
  ];
}

def InterchangeReductionsOutwardPass
    : Pass<"mantissa-interchange-reductions-outward", "::mlir::ModuleOp"> {
  let summary = "Move a contiguous parallel loop innermost in ops that end in a reduction";
  let description = [{
    In linalg ops on buffers whose innermost loop is a reduction (matrix
    products left to the loops, column sums), puts a parallel loop that
    every operand walks contiguously innermost, so that LLVM vectorizes it,
    first giving inputs that read the output's last index along another
    dimension a transposed copy (`x @ w^T`, `q @ k^T`). Each output element
    still accumulates over the reduction loops in the same order: only a
    parallel loop moves, so the results are bit-identical.
  }];
  let dependentDialects = [
    "::mlir::linalg::LinalgDialect",
    "::mlir::memref::MemRefDialect",
  ];
}

def OutlineLinalgOpsPass
    : Pass<"mantissa-outline-linalg-ops", "::mlir::ModuleOp"> {
  let summary = "Move each linalg op on buffers into a private function of its own";
  let description = [{
    Moves every linalg op on buffers of each function into a private
    function named `<function>__<index>_<op>`, called in its place; its
    operands and the values its body captures become arguments, except
    constants, which are cloned so that they still fold. A whole step as
    one function holds thousands of loop nests, and LLVM's scalar evolution
    analysis is quadratic in them (most of a minute for llama_medium); one
    function per op keeps every analysis local, and profiles name the op.

    Ops with enough work (2^18 iterations or more) whose outermost loop is
    parallel and indexes every output get the `mantissa.parallel_outer_loop`
    attribute on their function, which mantissa-parallelize-outer-loops
    reads.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
}

def ParallelizeOuterLoopsPass
    : Pass<"mantissa-parallelize-outer-loops", "::mlir::ModuleOp"> {
  let summary = "Turn the outer scf.for of marked functions into scf.parallel";
  let description = [{
    In each function marked `mantissa.parallel_outer_loop` (by
    mantissa-outline-linalg-ops), turns the outermost `scf.for` into an
    `scf.parallel`, which `convert-scf-to-openmp` distributes over the
    OpenMP threads, and removes the mark. Every output element is still
    computed by one thread in the same order, so results do not change.
  }];
  let dependentDialects = ["::mlir::scf::SCFDialect"];
}

def InlineAllocaScopesPass
    : Pass<"mantissa-inline-alloca-scopes", "::mlir::ModuleOp"> {
  let summary = "Inline the memref.alloca_scope bodies convert-scf-to-openmp makes";
  let description = [{
    `convert-scf-to-openmp` wraps each loop body in a `memref.alloca_scope`,
    which must stay one block; the bodies allocate nothing on the stack, so
    the scopes (without results) are inlined before the loops inside them
    become branches.
  }];
}

def ApproximateMathPass : Pass<"mantissa-approximate-math", "::mlir::ModuleOp"> {
  let summary = "Replace math functions by MLIR's polynomial approximations";
  let description = [{
    tanh and erf (and the other functions MLIR approximates) have no LLVM
    lowering without libm, which the step libraries do not link; the f32
    polynomial approximations need none.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::math::MathDialect",
    "::mlir::vector::VectorDialect",
  ];
}

def RouteGemmCallsThroughHookPass
    : Pass<"mantissa-route-gemm-calls-through-hook", "::mlir::ModuleOp"> {
  let summary = "Call the runtime's GEMM through a pointer the loader sets";
  let description = [{
    On the LLVM dialect: replaces every call of the external
    `@mantissa_cpu_gemm` by an indirect call through the exported global
    `@mantissa_cpu_gemm_hook` (a null pointer until the loader stores the
    runtime's `mantissa_rt_cpu_gemm` there, CpuGemm.h), and removes the
    declaration. The step library then has no undefined symbol to resolve
    and no path to a library: libmantissa_rt, the compiler's evaluators and
    the tests bind it the same way after dlopen. Modules without such calls
    are left unchanged (no hook).
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

def MarkOutlinedNoInlinePass
    : Pass<"mantissa-mark-outlined-noinline", "::mlir::ModuleOp"> {
  let summary = "Keep the outlined ops out of line in LLVM";
  let description = [{
    Marks every private LLVM function with a body `noinline`: inlining the
    outlined ops back (each has one caller) would undo
    mantissa-outline-linalg-ops.
  }];
}

//===----------------------------------------------------------------------===//
// The GPU step's transforms (lib/Conversion/TrainToGPU), in the order
// compileTrainStepForGpu runs them on the bufferized step.
//===----------------------------------------------------------------------===//

def FoldCopiesIntoProducersPass
    : Pass<"mantissa-fold-copies-into-producers", "::mlir::func::FuncOp"> {
  let summary = "Compute a temporary that is only copied (or transposed) elsewhere in its destination";
  let description = [{
    On a bufferized step, a temporary that a single linalg op or attention
    kernel (`train.attention_kernel`, which writes its outputs whole through
    any strided view) writes, or that several linalg ops write each through
    a static subview of it (the parts of a concatenation), and
    only a `linalg.copy` or `linalg.transpose` reads (directly or through
    one `memref.transpose`) is computed in the copy's destination instead,
    through a transposed view of it where the copy permutes (and the same
    subviews of that view): each producer writes each element where the
    copy would have put it. An attention kernel that also reads the
    temporary (the backward reading the forward's output) reads that view
    of the destination instead, where nothing writes the destination
    between the copy and it. The copy and the temporary go. This is how a
    gradient computed in one layout and transposed into its result, a half
    of a concatenation, RoPE's backward written in halves and transposed
    into the projections' layout, or the attention's output transposed for
    the output projection, stops costing a kernel and a round trip through
    memory.

    Left alone: producers that read their output (an accumulation whose
    initial value another op wrote), copies whose destination something
    touches between the producer and the copy, and contractions whose
    destination would not be a plain matrix (a GEMM writes a dense,
    untransposed output).

    Before:
    ```mlir
    %t = memref.alloc() : memref<4x8xbf16>
    linalg.generic ... ins(%x) outs(%t) { truncf }
    %v = memref.transpose %t (d0, d1) -> (d1, d0)
    linalg.copy ins(%v) outs(%grad : memref<8x4xbf16>)
    ```
    After:
    ```mlir
    %w = memref.transpose %grad (d0, d1) -> (d1, d0)
    linalg.generic ... ins(%x) outs(%w) { truncf }
    ```
  }];
  let dependentDialects = ["::mlir::memref::MemRefDialect"];
}

def ShareRoundingsPass
    : Pass<"mantissa-share-roundings", "::mlir::func::FuncOp"> {
  let summary = "Round an fp32 buffer to a narrow dtype once, for every reader";
  let description = [{
    On a bufferized step, the generics that only round an fp32 buffer to
    bf16 or fp16 (the operand casts of matrix products under `compute:
    bf16`), each through its own view of it (a weight for the forward
    product, its transpose for the backward one), become one rounding of
    the whole buffer, placed right after the buffer's last writer, whose
    readers read the same views of the rounded copy. The same roundings
    happen, once: after a GEMM the rounding is its epilogue (cuBLASLt
    writes bf16), after an elementwise kernel mantissa-fuse-parallel-kernels
    merges it in.

    Left alone: buffers written after the first rounding, and roundings
    whose readers are not linalg inputs or views that the copy's layout
    allows.

    Before:
    ```mlir
    %t = memref.transpose %w (d0, d1) -> (d1, d0)
    linalg.generic ... ins(%w) outs(%a : memref<4x8xbf16>) { truncf }
    linalg.generic ... ins(%t) outs(%b : memref<8x4xbf16>) { truncf }
    ```
    After:
    ```mlir
    linalg.generic ... ins(%w) outs(%r : memref<4x8xbf16>) { truncf }
    %rt = memref.transpose %r (d0, d1) -> (d1, d0)
    ```
    with the readers of `%a` reading `%r` and those of `%b` reading `%rt`.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::memref::MemRefDialect",
  ];
}

def MaterializeOperandCastsPass
    : Pass<"mantissa-materialize-operand-casts", "::mlir::func::FuncOp"> {
  let summary = "Give a GEMM's operand rounding, folded into the contraction, back its own op";
  let description = [{
    On a bufferized step, elementwise fusion folds the `truncf` of an fp32
    operand (the cast of the compute dtype that autocast inserts) into a
    contraction's body, which then reads fp32, rounds every element again
    for every product it enters, and no longer fits a bf16 GEMM. Where the
    contraction is a GEMM with the rounded operand (GemmMatching.h), the
    rounding moves back into an elementwise `linalg.generic` writing a bf16
    (fp16) temporary that the contraction reads: the same numbers, with the
    products on the tensor cores. Contractions that would not be GEMMs even
    so are left as they are.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::memref::MemRefDialect",
  ];
}

def ReuseWrittenRoundingsPass
    : Pass<"mantissa-reuse-written-roundings", "::mlir::func::FuncOp"> {
  let summary = "Copy a rounding that the rounded buffer's writer already wrote";
  let description = [{
    On a bufferized step, a `linalg.generic` that only rounds a temporary X
    (one `truncf`, read whole through a permutation: a GEMM operand's cast
    that mantissa-materialize-operand-casts moved out of the contraction,
    reading X transposed) becomes a copy, through the same permutation, of
    the temporary Y into which X's last writer also wrote the same rounding
    (a kernel that yields a value and its bf16 copy, indexed alike), when
    nothing writes Y in between: the same bits, and a copy that
    mantissa-fold-transposes-into-views then reads as a view of Y (a
    norm backward's gradient, rounded once for both of its GEMMs).
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
}

def FoldTransposesIntoViewsPass
    : Pass<"mantissa-fold-transposes-into-views", "::mlir::func::FuncOp"> {
  let summary = "Replace a transpose into a temporary by a strided view of its input";
  let description = [{
    On a bufferized step, each transpose into a temporary (`linalg.transpose`,
    or the `linalg.generic` it generalizes to: one input and one output
    indexed by permutations, all loops parallel, a body that yields the
    input) becomes a `memref.transpose` view of its input when the
    temporary is only read
    afterwards (by linalg ops or attention kernels, directly or through
    reshapes and transposes
    that the input's strides allow, which are rebuilt on the view) and
    nothing writes the input's buffer after the transpose. The copy then
    costs nothing: GEMMs take the transposed operand as transa / transb and
    kernels read through the strided view. Left alone when a reader that is
    a GEMM would stop being one.
  }];
  let dependentDialects = ["::mlir::memref::MemRefDialect"];
}

def SegmentScatterAccumulationsPass
    : Pass<"mantissa-segment-scatter-accumulations", "::mlir::func::FuncOp"> {
  let summary = "Run an accumulating scatter (an embedding backward) as a deterministic segmented reduction";
  let description = [{
    On a bufferized step, a perfect `scf.for` nest that accumulates into one
    buffer at a data-dependent row (`dest[key(i), f] = dest[key(i), f] op
    value(i, f)`, the loops of `i` being the index loops and those of `f`
    the feature loops, e.g. the embedding backward's `index_put` with
    accumulation) becomes four loop nests a GPU runs in parallel:

    1. the rank of each index iteration `t` among all N in (key, t) order,
       counted in P interleaved partials per `t` (threads N x P, N / P
       comparisons each);
    2. the partials summed into the rank;
    3. the ranks inverted into the stably sorted order of the iterations;
    4. one thread per sorted position and feature: the first position of
       each run of equal keys folds the run's values into `dest` in order.

    Every element of `dest` receives its values in the original iteration
    order, so the results are exactly the loop nest's, with no atomics.
    Each new nest is marked with the loops a GPU kernel may spread over
    threads (`mantissa.gpu_parallel_loops`) and, where a thread loops, how
    many iterations it runs (`mantissa.gpu_serial_iterations`; a run's
    length is data-dependent and counted as one). Left alone: nests with
    fewer than 32 index iterations, more than one data-dependent
    coordinate, a key that depends on a feature loop, other writes, or ops
    with regions.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
  ];
}

def ReadGatheredParametersPass
    : Pass<"mantissa-read-gathered-parameters", "::mlir::ModuleOp"> {
  let summary = "Take each parameter of a step for the GPU in its gather dtype";
  let description = [{
    On `train.step`s (before lowering), for the GPU program: a parameter
    whose every use is the precision pass's rounding to its gather dtype
    (`train.plan`'s `gather`) becomes an argument of that dtype, so that the
    runtime binds the update path's gathered copy as it is rather than
    widening it into scratch every step for the step to round it back; and
    a rounding to a dtype of a value that was widened from that dtype, with
    only permutes and views between (autocast's rounding of the widened
    gathered weight and of its transposes), reads the narrow value through
    the same permutes and views instead. Widening is exact and rounding a
    widened value gives it back, so the numbers do not change; the step
    writes no widened copy of its weights and no rounded copy of those.
  }];
  let dependentDialects = ["::mlir::mantissa::train::TrainDialect"];
}

def RoundProductsOncePass
    : Pass<"mantissa-round-products-once", "::mlir::func::FuncOp"> {
  let summary = "Round an fp32 matrix product that every reader rounds, once, right after it";
  let description = [{
    On tensors, before bufferization, for the GPU: a contraction
    (`linalg.generic`, or a named one such as `linalg.matmul` whose bf16
    operands needed no rounding fused into it) with an fp32 result that every reader only rounds to
    the same narrower type on the way in (autocast's bf16 product, whose
    rounding elementwise fusion moved into the readers: the attention
    scores that the softmax reads, its gradient) gets that rounding as an
    op of its own right after it, and the readers read the rounded tensor.
    The GPU program computes that rounding in the GEMM's epilogue
    (cuBLASLt writes bf16), so the product is written and read in bf16
    rather than fp32. Each element is rounded once, as before: the numbers
    do not change.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::tensor::TensorDialect",
  ];
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

def DropUnreadOutputsPass
    : Pass<"mantissa-drop-unread-outputs", "::mlir::func::FuncOp"> {
  let summary = "Do not write temporaries that nothing reads";
  let description = [{
    On a bufferized step, for the GPU program: an output of a linalg op
    whose buffer is a temporary (`memref.alloc`) that nothing else touches
    (its other uses are views leading back to the op and its deallocation),
    and whose value the op does not read first, is not written. A generic
    loses the output (its map, block argument and yielded value); an op
    whose only output it was is erased; the temporary goes too. Such writes
    are left behind when mantissa-fuse-parallel-kernels moves every reader
    of a temporary into its writer, which then passes the value along
    inside the kernel (the ~120M LLaMA's SwiGLU backward wrote a 46 MB fp32
    temporary per layer that nothing read). An output that is the only
    operand naming one of the generic's loops stays: without it the loop
    would have no range.
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::memref::MemRefDialect"];
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

def RecomputeWideningProducersPass
    : Pass<"mantissa-recompute-widening-producers", "::mlir::func::FuncOp"> {
  let summary = "Recompute an elementwise op in its readers where that moves fewer bytes than its result";
  let description = [{
    On tensors, before bufferization, for the GPU: an all-parallel
    `linalg.generic` with several readers is computed again inside each
    reader that is a `linalg.generic` other than a matrix product
    (elementwise ops, reductions and row-by-row dot products such as a norm
    gain's gradient; matrix products stay GEMMs on their operands), directly
    or through a `tensor.expand_shape` (the copy is then computed in the
    expanded shape, its inputs expanded alike), when
    that moves fewer bytes per element: each such reader no longer reads
    the result but reads the inputs it does not read already, and when every
    reader recomputes it, the result is not written at all. Examples:
    autocast's fp32 copy of the masked bf16 attention scores, read by the
    softmax's max, sum of exponentials and normalisation (each now reads
    the bf16 scores and the mask), and the softmax backward's fp32 product
    of the bf16 gradient and the fp32 probabilities, read by the row sum and
    by the op that also reads the probabilities. An input that the body only
    rounds to a narrower type counts at that width (the program rounds it
    where it is written), and an input broadcast along some loops counts
    once per element it has, not once per element computed (RMSNorm's
    `x * rsqrt(mean)` costs a reader that reads `x` already 4 bytes a row);
    except in an op that reads a matrix product, which the GEMM's epilogue
    may take (a bias added to its rows), where every input counts once per
    element. Every element is computed by the same operations
    from the same inputs, so the numbers do not change. Only producers
    whose result is written in their loops' order, whose inputs are read
    through projected permutations (a unit dimension may be read at 0: a
    keepdim row statistic) and whose body is short (at most 16 ops), reads
    nothing but its inputs (no gather) and not its position (no
    linalg.index) are recomputed. RMSNorm's fp32 `x * rstd`, read by the gain's product and
    by the gain's gradient, is no longer written.
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
}

def SplitReductionsPass
    : Pass<"mantissa-split-reductions", "::mlir::func::FuncOp"> {
  let summary = "Fold long reductions in interleaved partials, then the partials in order";
  let description = [{
    On a bufferized step, a `linalg.generic` whose output elements each fold
    at least 128 input elements (a sum, max or min in fp32 or an integer
    sum, combined last
    with the output's running value) becomes three ops: a fill of P
    partials per output element with the combination's identity (-0.0 for
    sums, -inf for max, +inf for min), the op itself over P times as many
    output elements, where partial p folds elements p, p + P, p + 2P, ...
    of the innermost reduction loop (each in the op's own order), and a
    fold of each element's P partials into the output, in order p = 0, 1,
    ..., marked `mantissa.gpu_fold_parts = P` (the GPU program runs it in
    the partials' launch, as a tree of warp shuffles over the lanes that
    computed them). On the GPU, where each output element is one thread's serial loop,
    that loop is P times shorter and P threads side by side read side by
    side.

    The sums' order changes (a fixed one: the same on every run, launch
    configuration and device), so the results may differ from the CPU's
    sequential sums in the last bits; max and min do not change. P is the
    largest of 32, 16, 8, 4 that divides the loop with at least 8 elements
    per part and at most 2^20 threads. Left alone: matrix products (with
    row and column loops: GEMMs on the GPU; a row-by-row dot product such
    as a norm gain's gradient is split), ops whose body reads linalg.index,
    and ops that index the split loop other than as one whole dimension.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::memref::MemRefDialect",
  ];
}

def FuseProducersIntoPartialsPass
    : Pass<"mantissa-fuse-producers-into-partials", "::mlir::func::FuncOp"> {
  let summary = "Compute an elementwise op's output in the split reduction's partials that read it";
  let description = [{
    On a bufferized step after `mantissa-split-reductions`, the partials of
    a split reduction (the generic whose output a later fold marked
    `mantissa.gpu_fold_parts` folds) that read a temporary which one
    all-parallel `linalg.generic` wrote whole (the output indexed by the
    identity and not read, the inputs by loops or 0, no linalg.index)
    compute that op's element themselves where they read it: the fused
    generic takes the producer's inputs (expanded as the partials' view
    expands the temporary), runs the producer's body, then the partials'
    body on its result, and writes the result through the partials' view
    of the temporary as a second output. Each element is computed once, by
    the thread that folds it, in the same order, so every result is the
    same bit for bit; the producer goes. On the GPU the partials' threads
    walk rows side by side, so the fold and the ops by rows that read the
    temporary (a norm's scaling) join the same launch: a residual add, an
    RMSNorm's sum of squares and its scaling become one kernel.

    Only where nothing between the two ops touches the temporary or writes
    what the producer reads, the partials read the temporary through one
    operand (the temporary or a `memref.expand_shape` of it) indexed by a
    permutation of all their loops, and the producer is a kernel of its own
    (not the epilogue of a GEMM).

    Before:
    ```mlir
    linalg.generic ins(%a, %b) outs(%x)              { addf }
    %v = memref.expand_shape %x [[0], [1, 2]]
    linalg.generic ins(%v) outs(%partials)           { mulf, addf }
    ```
    After:
    ```mlir
    %va = memref.expand_shape %a [[0], [1, 2]]
    %vb = memref.expand_shape %b [[0], [1, 2]]
    linalg.generic ins(%va, %vb) outs(%partials, %v) { addf, mulf, addf }
    ```
  }];
  let dependentDialects = [
    "::mlir::linalg::LinalgDialect",
    "::mlir::memref::MemRefDialect",
  ];
}

def FuseParallelKernelsPass
    : Pass<"mantissa-fuse-parallel-kernels", "::mlir::func::FuncOp"> {
  let summary = "Merge elementwise linalg.generic ops over the same iteration space into one";
  let description = [{
    On a bufferized step, each all-parallel `linalg.generic` joins an
    earlier one over the same static iteration space, as one generic with
    both bodies and both sets of outputs, when moving it up to there cannot
    be observed: nothing in between reads what it writes or writes what it
    touches, it writes nothing the earlier one touches, and where it reads
    what the earlier one writes it reads that very element (the same view
    and indexing map), which the merged body passes on as a value. On the
    GPU each generic is a kernel launch; tensor-level elementwise fusion
    leaves producers with several uses, sibling ops and the operand casts
    of the matrix products unmerged.

    Left alone: fills (the GPU program merges a zero fill into the GEMM
    after it as beta = 0) and ops reading the result of the contraction
    just before them (a GEMM epilogue).

    Before:
    ```mlir
    linalg.generic ... ins(%x) outs(%a) { exp }
    linalg.generic ... ins(%a) outs(%b) { truncf }
    ```
    After:
    ```mlir
    linalg.generic ... ins(%x) outs(%a, %b) { exp; truncf }
    ```
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
}

def GroupLaunchesPass
    : Pass<"mantissa-group-launches", "::mlir::func::FuncOp"> {
  let summary = "Decide which kernels of a bufferized step share a GPU launch";
  let description = [{
    On a bufferized step ready for the GPU program (GpuStepOps.h says what
    each op becomes: a generated kernel, a GEMM, the fill or epilogue a GEMM
    absorbs, the attention kernels), marks every kernel op with the launch
    it runs in (`mantissa.gpu_launch`, numbered in program order), its
    place among that launch's members (`mantissa.gpu_member`) and the
    stride of its threads there (`mantissa.gpu_thread_stride`: iteration i
    on thread i * stride). One launch of the largest thread count then runs
    its members one after the other on each thread, without a launch in
    between.

    A kernel joins the latest launch, at most 12 ops back, that it may run
    in without changing a result:
    - independent: neither it nor anything in between (kernels, GEMMs,
      attention) touches what the other writes (where both touch a buffer
      through subviews with static ranges, of it or of a transposed view of
      it, only the elements those cover: the parts of a concatenation are
      independent, in any layout);
    - or dependent thread-locally: on every buffer where it conflicts with
      a member, both run on the same threads, and each thread touches one
      element, the same in both, that no other thread touches;
    - or as the fold of a split reduction (`mantissa.gpu_fold_parts = P`)
      whose partials a member computed, thread t partial t: the fold runs
      output u on the threads from u * P, where the warp's shuffles combine
      what each lane computed; the fill of its output, independent of the
      rest of the launch, moves behind the partials onto the fold's threads;
    - or by rows (`mantissa.gpu_row_columns` = the columns of a row): its
      parallel loops are a fold's outputs (rows, loops of extent 1 aside)
      then columns, and of what the launch writes it reads only each row's
      value that the fold's lanes for the row wrote; row r runs on those
      lanes after a barrier of the block, each lane a strided share of the
      columns (a norm's scaling by its rsqrt, in the launch of its sum);
      it may also read what a member on its own threads wrote where those
      threads are the rows and then the fold's lanes, and what both touch
      of the buffer for row r lies in one range no other row's reaches
      (partials that wrote the elements they folded, as
      mantissa-fuse-producers-into-partials makes them);
      with one column per lane (a second reduction's partials reading the
      first's result) it runs on the threads a plain member would, and
      may also depend element by element on such members.
    GEMMs and the attention kernels run alone. A launch holds at most 16
    members.
  }];
}

def PackArenaPass : Pass<"mantissa-pack-arena", "::mlir::func::FuncOp"> {
  let summary = "Place a bufferized step's temporaries in one arena, reusing the bytes of dead ones";
  let description = [{
    On a bufferized step ready for the GPU program, gives each
    `memref.alloc` its offset in the arena of temporaries
    (`mantissa.gpu_arena_offset`, a multiple of 256 bytes) and the function
    the arena's size (`mantissa.gpu_arena_bytes`). A temporary lives from
    its allocation to the last op that uses it (through views), where each
    kernel runs at its launch (`mantissa.gpu_launch`: the position of the
    launch's first member), so every buffer of a launch is alive when it
    runs. Everything runs in order on one stream, so first fit, in the
    order lifetimes start, may give a temporary the bytes of any that died
    before it was allocated.
  }];
}

#endif // MANTISSA_CONVERSION_PASSES_TD
