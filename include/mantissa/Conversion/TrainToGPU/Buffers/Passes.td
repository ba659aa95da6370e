//===- Passes.td - The GPU step's buffer passes ------------*- tablegen -*-===//
//
// The GPU step's passes on linalg (lib/Conversion/TrainToGPU/Buffers;
// buildTrainGpuBufferPipeline), in the order they run: two on tensors
// before bufferization, then the ones on the bufferized step that shape its
// kernels, ending with the launches and the arena the program writer reads.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_TRAINTOGPU_BUFFERS_PASSES_TD
#define MANTISSA_CONVERSION_TRAINTOGPU_BUFFERS_PASSES_TD

include "mlir/Pass/PassBase.td"

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

#endif // MANTISSA_CONVERSION_TRAINTOGPU_BUFFERS_PASSES_TD
