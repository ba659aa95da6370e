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

#endif // MANTISSA_CONVERSION_PASSES_TD
