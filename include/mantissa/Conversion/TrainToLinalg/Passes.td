//===- Passes.td - The CPU lowering of train steps ---------*- tablegen -*-===//
//
// The passes that lower `train` steps to loops, vectors and library calls
// for the CPU (lib/Conversion/TrainToLinalg), in the order of
// mantissa-train-cpu-pipeline. The AdamW update's lowering is declared in
// mantissa/Conversion/AdamWToLoops/Passes.td; the GPU step's beside their
// folders (mantissa/Transforms/GPU, mantissa/Conversion/TrainToGPU/Buffers).
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_TRAINTOLINALG_PASSES_TD
#define MANTISSA_CONVERSION_TRAINTOLINALG_PASSES_TD

include "mlir/Pass/PassBase.td"

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

def FuseTransposesPass
    : Pass<"mantissa-fuse-transposes", "::mlir::func::FuncOp"> {
  let summary = "Fold each transpose into the ops that read it";
  let description = [{
    Runs after `linalg-fuse-elementwise-ops` in mantissa-train-cpu-pipeline.
    Rewrites every `linalg.transpose` on tensors as the equivalent
    `linalg.generic` (a permuted input map, a copy body), and every
    `linalg.matmul` / `linalg.batch_matmul` that reads one (through
    reshapes) as its generic; then fuses these transposes, and nothing else,
    into the generics that read them, as a permuted indexing map (reshapes
    between them move to the transpose's input). `x @ w^T` then reads `w`
    in place (the runtime's GEMM takes any static strides), an attention
    product reads its heads where the projection wrote them, and the step
    makes no transposed copy of them. A transpose that nothing fuses (a
    result, an input of a named op) stays a copy, as before.

    Only the order in which memory is read changes, not any sum: loops
    compute the same bits (the loops of a product and of its generic are
    the same nest); the GEMM library may block a strided operand otherwise.

    Before:
    ```mlir
    %t = linalg.transpose ins(%w : tensor<3x4xf32>)
                          outs(%e : tensor<4x3xf32>) permutation = [1, 0]
    %p = linalg.matmul ins(%x, %t : tensor<2x4xf32>, tensor<4x3xf32>)
                       outs(%z : tensor<2x3xf32>) -> tensor<2x3xf32>
    ```
    After:
    ```mlir
    %p = linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (m, k)>,
                                          affine_map<(m, n, k) -> (n, k)>,
                                          affine_map<(m, n, k) -> (m, n)>],
                         iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%x, %w : tensor<2x4xf32>, tensor<3x4xf32>) outs(%z : tensor<2x3xf32>) {...}
    ```
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect", "::mlir::tensor::TensorDialect"];
}

def WidenBf16ProductsPass
    : Pass<"mantissa-widen-bf16-products", "::mlir::func::FuncOp"> {
  let summary = "Give bf16 matrix products fp32 operands where the CPU's GEMM has no bf16 kernel, and f16 products everywhere";
  let description = [{
    Runs after `mantissa-fuse-transposes` in mantissa-train-cpu-pipeline.
    It widens bf16 products when the step is compiled for a CPU on which
    oneDNN has no bf16 matmul (`cpu` lacks one of AVX-512 F/BW/VL/DQ,
    oneDNN's avx512_core, or `library-bf16=false`: the running oneDNN
    refuses one), and f16 products (`compute: fp16`) on any CPU: the
    runtime's GEMM takes no f16 operands, so they would otherwise run in
    the generated loops (llama_medium under `compute: fp16` on an AVX2
    EPYC: 45-51 ms a step with its 111 products in loops, 13.5-16 widened).
    Everything below holds for f16 as for bf16: both widen exactly to f32,
    and a product of two is exact in f32 (at most 22 significant bits).

    A product of bf16 operands with fp32 accumulation (a contraction whose
    body is `out + ext(a) * ext(b)`, each input bf16 or an f32 input the
    body rounds to bf16) is exactly the fp32 product of the operands'
    widenings. Each such product becomes an fp32 product (`out + a * b`) of
    f32 tensors holding the bf16-rounded values, made where the value is
    made: an all-parallel `linalg.generic` that yields the bf16 value (or
    the f32 value the product rounds) gets one more result,
    `extf(truncf(v))` in f32 (its bf16 result stays for other consumers and
    goes when none is left); a value with no such producer (an argument, a
    named op's result) is widened by an elementwise op of its own, once for
    all its products; an argument's (a weight's, every step) is placed just
    before the first op that reads it, so that the product reads it while
    it is in the cache. Reshapes between producer and product are repeated
    on the f32 value. An op that rounds to bf16 a value whose producer now
    also yields it rounded (a value two products read, one of them through
    a transposed copy) reads the rounded result instead: the same bf16
    values, and the unrounded value is no longer written when nothing else
    reads it. The runtime's GEMM then runs the fp32 library product
    on the same fp32 values its run-time widening (lib/Runtime/CpuGemm.cpp)
    would have copied, without the copy. Dot products (M = N = 1), which
    stay in the loops, are left as they are.

    Before:
    ```mlir
    %r = linalg.generic {...} ins(%x : tensor<128x64xf32>) outs(%e : tensor<128x64xbf16>) {
      ^bb0(%in: f32, %out: bf16):
        %t = arith.truncf %in : f32 to bf16
        linalg.yield %t : bf16
    } -> tensor<128x64xbf16>
    %p = linalg.matmul ins(%r, %w : tensor<128x64xbf16>, tensor<64x32xbf16>) outs(%z : tensor<128x32xf32>)
    ```
    After:
    ```mlir
    %r = linalg.generic {...} ins(%x : tensor<128x64xf32>) outs(%e2 : tensor<128x64xf32>) {
      ^bb0(%in: f32, %out: f32):
        %t = arith.truncf %in : f32 to bf16
        %v = arith.extf %t : bf16 to f32
        linalg.yield %v : f32
    } -> tensor<128x64xf32>
    %wide = linalg.generic {...} ins(%w : tensor<64x32xbf16>) ... arith.extf ...
    %p = linalg.generic {...} ins(%r, %wide : tensor<128x64xf32>, tensor<64x32xf32>) outs(%z : tensor<128x32xf32>) {
      ^bb0(%a: f32, %b: f32, %o: f32): %m = arith.mulf %a, %b ... arith.addf %o, %m ...
    }
    ```
  }];
  let options = [
    Option<"cpu", "cpu", "std::string", /*default=*/"\"native\"",
           "The CPU the step is compiled for (MANTISSA_CPU_TARGET's names)">,
    Option<"libraryBf16", "library-bf16", "bool", /*default=*/"true",
           "Whether the running oneDNN computes bf16 matmuls">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::tensor::TensorDialect",
  ];
}

def FuseElementwiseKeepingProductsPass
    : Pass<"mantissa-fuse-elementwise-keeping-products", "::mlir::func::FuncOp"> {
  let summary = "Fuse single-reader elementwise producers into their readers, except matrix products";
  let description = [{
    On tensors, after `mantissa-widen-bf16-products`: linalg's elementwise
    fusion (`linalg-fuse-elementwise-ops`) of each all-parallel
    `linalg.generic` whose result has one reader into that reader, unless
    the reader is a matrix product (a contraction with rows and columns),
    which stays a contraction for `mantissa-call-gemm-library`. The widening
    turns bf16 products into fp32 ones and gives operands fp32 copies; what
    is left fuses then: a product's rounding to bf16 and the widening of
    that bf16 value into an fp32 gradient become one loop. Each element is
    computed by the same operations, so the results do not change.

    Before:
    ```mlir
    %r = linalg.generic ... ins(%p : tensor<8xf32>) outs(%e : tensor<8xbf16>) { truncf }
    %g = linalg.generic ... ins(%r : tensor<8xbf16>) outs(%f : tensor<8xf32>) { extf }
    ```
    After:
    ```mlir
    %g = linalg.generic ... ins(%p : tensor<8xf32>) outs(%f : tensor<8xf32>) { truncf, extf }
    ```
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
}

def MergeEqualGenericsPass
    : Pass<"mantissa-merge-equal-generics", "::mlir::func::FuncOp"> {
  let summary = "Compute what two equal linalg.generics compute once";
  let description = [{
    On tensors: a `linalg.generic` with the same inputs, indexing maps,
    iterators, result types and body as an earlier one of the same block,
    whose outputs (like the earlier one's) are `tensor.empty` values the
    body does not read, is replaced by the earlier one's results. torch's
    autocast casts an activation to bf16 once per product that reads it
    (the query, key and value projections each cast the normed input), and
    mantissa-widen-bf16-products makes each cast an fp32 widening: three
    equal loops over the same tensor. `cse` would merge these too, but it
    also merges the `tensor.empty` outputs of unrelated ops, which
    bufferization then separates with copies.

    Before:
    ```mlir
    %a = linalg.generic ... ins(%x : tensor<8xf32>) outs(%e1 : tensor<8xf32>) { truncf, extf }
    %b = linalg.generic ... ins(%x : tensor<8xf32>) outs(%e2 : tensor<8xf32>) { truncf, extf }
    ```
    After: `%b`'s readers read `%a`.
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
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
    product the runtime's GEMM computes (include/mantissa/Runtime/CpuGemm.h,
    descriptor in include/mantissa/Format/CpuGemmAbi.h)
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
    of CpuGemmAbi.h, version in its first element); the call passes the
    descriptor's and the operands' addresses as `index` values. Other
    contractions are left to the loops, unchanged.

    The library adds its sum to the output, as the op does, but in its own
    order (blocked, FMA), so results differ from the loops by fp32
    accumulation-order rounding. mantissa-train-cpu-pipeline runs this pass
    unless `gemm=loops`.

    Where the output was filled with +0.0 just before (a `linalg.fill`, or
    the input-less generic fusion makes of one, in the same block, on all
    of the output, with no op in between that uses the buffer or a view of
    it, makes a call, or, for an output that is an argument, touches a
    global: the step's argument and result buffers never overlap), the
    fill goes and the descriptor's
    field kGemmAccumulate says to write the sum instead of adding it (0):
    the same bits, except that a sum of -0.0 stays -0.0 where +0.0 + -0.0
    is +0.0. Other fills (-0.0, nonzero, part of the output) stay, and the
    product adds (1).

    A written output that is a temporary whose one reader is a later
    elementwise op of the block copying it rounded to bf16 and widened back
    (`extf(truncf(x))`, identity maps, into an f32 buffer of the same
    shape: under `compute: bf16` with widened products, a weight's fp32
    gradient, or a product's result widened for the next product), with
    nothing in between touching the copy's output, becomes the copy's
    output: the product writes there, the descriptor's last field,
    kGemmRoundC, says the library rounds each sum so (1), and the copy and
    the temporary go. The library rounds each tile right after computing
    it, while it is in the cache, with the copy's bits (to nearest even,
    NaN to 0x7fc0). A copy that rounds it into a bf16 buffer instead
    (`truncf(x)`, identity maps, the same layout: under `compute: bf16`,
    the bf16 activation the elementwise ops after a product read) makes the
    product write that buffer alike: the descriptor's C type is bf16, with
    kGemmRoundC 1, and the library stores each sum rounded. A copy's output
    allocated between the product and the copy (`memref.alloc` without
    operands) has its allocation moved before the product.

    Before:
    ```mlir
    linalg.matmul ins(%a, %b : memref<128x64xbf16>, memref<64x32xbf16>)
                  outs(%c : memref<128x32xf32>)
    ```
    After:
    ```mlir
    memref.global "private" constant @__mantissa_gemm_0 : memref<19xi64> =
        dense<[4, 1, 1, 0, 1, 128, 32, 64, 8192, 64, 1, 2048, 32, 1, 4096, 32, 1, 1, 0]>
    ...
    %d = memref.get_global @__mantissa_gemm_0 : memref<19xi64>
    %dp = memref.extract_aligned_pointer_as_index %d : memref<19xi64> -> index
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

    A memref argument gets `llvm.noalias` when its base buffer (through
    views) is a temporary, a constant global or an argument of the calling
    function (whose buffers never overlap: the step's ABI,
    docs/architecture.md), unless another argument views the same base and
    the op writes it.
    Without it, LLVM checks at run time that each store leaves what later
    loads read unchanged before it vectorises, or does not vectorise a
    loop it fully unrolled.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
}

def TileTransposedReadsPass
    : Pass<"mantissa-tile-transposed-reads", "::mlir::func::FuncOp"> {
  let summary = "Compute ops that read an input transposed a cache line of output at a time";
  let description = [{
    Runs on the functions mantissa-outline-linalg-ops makes. An all-parallel
    linalg op on static buffers whose outputs are written along its
    innermost loop O, and which reads some input along O at another
    dimension than the input's last (a transpose, a rounding or widening
    in another layout), is computed in strips of O one cache line of its
    narrowest output wide (16 f32, 32 bf16): an `scf.for` over the strips
    outermost.

    Untiled, the innermost loop of such an op loads each element from
    another cache line, and with power-of-two row lengths (512 f32 rows
    are 2 KiB apart) those lines fall into a few cache sets, so they are
    evicted before the next iteration of the outer loop uses their next
    element. In a strip, the loop reads as many lines as the strip is wide
    and uses each of them again on the outer loop's next iterations.

    On a CPU with AVX2 (`cpu`, MANTISSA_CPU_TARGET's names; empty: none
    assumed), such an op whose operands are all f32, bf16 or f16 in
    memory, each read along O, along one loop I (the transposed inputs'
    last dimension) with O at another dimension, or at an element that
    depends on neither I nor O, with O a multiple of the strip width and I
    of 8, and whose body is arith and math ops, is computed in 8x8 blocks
    of (I, O) instead: each transposed input's 8 vectors along I are
    transposed in registers by AVX2 shuffles
    (`x86vector::avx2::transpose8x8xf32`; 16-bit elements ride in the low
    halves of 32-bit lanes, so their bits arrive unchanged), the body runs
    on the block's 8 rows as vectors along O, and each row is stored along
    O. Otherwise (sizes that are not multiples of 8 or of the strip), the
    op is tiled into strips (`linalg` tiling), each still a scalar loop that
    LLVM vectorises where it can.

    Either way every element is computed by the same body from the same
    operands, so results do not change.

    Before:
    ```mlir
    linalg.transpose ins(%x : memref<128x512xf32>)
                     outs(%y : memref<512x128xf32>) permutation = [1, 0]
    ```
    After, without AVX2:
    ```mlir
    scf.for %j = %c0 to %c128 step %c16 {
      %xs = memref.subview %x[%j, 0] [16, 512] [1, 1] ...
      %ys = memref.subview %y[0, %j] [512, 16] [1, 1] ...
      linalg.transpose ins(%xs : ...) outs(%ys : ...) permutation = [1, 0]
    }
    ```
    With AVX2: for each strip of 16 columns `%j`, each 8 rows `%i` and
    each 8 columns `%b` of the strip, 8 `vector.load`s of `%x` along its
    rows, the shuffles, and 8 `vector.store`s into rows `%i` to `%i + 7`
    of `%y`.
  }];
  let options = [
    Option<"cpu", "cpu", "std::string", /*default=*/"\"\"",
           "The CPU the step is compiled for (MANTISSA_CPU_TARGET's names; "
           "empty: no AVX2 assumed)">,
  ];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::arith::ArithDialect",
    "::mlir::LLVM::LLVMDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::vector::VectorDialect",
  ];
}

def PackCpuArenaPass
    : Pass<"mantissa-pack-cpu-arena", "::mlir::func::FuncOp"> {
  let summary = "Place a function's temporaries in one allocation, reusing the bytes of dead ones";
  let description = [{
    Bufferization gives every temporary of a step its own `memref.alloc`
    and `memref.dealloc`: hundreds of malloc and free calls per step call.
    This pass places each temporary of the function's body (a
    `memref.alloc` of static shape and identity layout in the entry block,
    freed only by `memref.dealloc`s of that block) in one arena allocated
    when the function starts and freed before it returns, as a
    `memref.view` at an offset (a multiple of 64 bytes). A temporary lives
    from the first to the last op of the body that uses it or anything
    derived from it (views, its pointer as an index for a library call);
    the ops of the body run one after the other (an OpenMP loop is one
    op), so first fit, in the order lifetimes start, may give a temporary
    the bytes of any that died before it was first used. Temporaries that
    are simultaneously alive never overlap, so no op sees two of its
    operands alias where they did not before.

    Before:
    ```mlir
    %a = memref.alloc() {alignment = 64 : i64} : memref<4xf32>
    linalg.fill ins(%c : f32) outs(%a : memref<4xf32>)
    ...
    memref.dealloc %a : memref<4xf32>
    ```
    After:
    ```mlir
    %arena = memref.alloc() {alignment = 64 : i64} : memref<1024xi8>
    %a = memref.view %arena[%c0][] : memref<1024xi8> to memref<4xf32>
    linalg.fill ins(%c : f32) outs(%a : memref<4xf32>)
    ...
    memref.dealloc %arena : memref<1024xi8>
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::memref::MemRefDialect"];
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
    polynomial approximations need none. sin and cos are the exception: f32
    sin and cos become f64 libm calls rounded once, since the approximations
    reduce large arguments (a timestep sinusoid's 1e3 radians) inexactly.
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

def AccessNarrowFloatsAsIntegersPass
    : Pass<"mantissa-access-narrow-floats-as-integers", "::mlir::ModuleOp"> {
  let summary = "Load and store bf16 and f16 as i16";
  let description = [{
    On the LLVM dialect: every `llvm.load` of a bf16 or f16 value (or a
    vector of them) loads the i16 of the same bits and bitcasts it, and
    every `llvm.store` of one stores its bitcast to i16. The CPU step
    computes bf16 in f32 and rounds with integer code (arith-expand), so
    these types only cross memory; without AVX512-BF16, LLVM's x86 backend
    has no legal bf16 vector, and its vectorisers treated a vector of bf16
    stores as scalar ones: the loop that rounds an fp32 product to bf16
    (autocast's matmul result) kept its NaN test and its stores one
    element at a time. The bits moved are the same.

    Before:
    ```mlir
    %v = llvm.load %p : !llvm.ptr -> bf16
    llvm.store %w, %q : bf16, !llvm.ptr
    ```
    After:
    ```mlir
    %i = llvm.load %p : !llvm.ptr -> i16
    %v = llvm.bitcast %i : i16 to bf16
    %j = llvm.bitcast %w : bf16 to i16
    llvm.store %j, %q : i16, !llvm.ptr
    ```
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

#endif // MANTISSA_CONVERSION_TRAINTOLINALG_PASSES_TD
