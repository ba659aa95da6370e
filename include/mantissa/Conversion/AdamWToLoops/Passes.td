//===- Passes.td - The AdamW update lowered ----------------*- tablegen -*-===//
//
// The pass that expands `train.adamw_update` into the fused master-weight
// update of a shard group, as a CPU loop or a GPU kernel
// (lib/Conversion/AdamWToLoops).
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_ADAMWTOLOOPS_PASSES_TD
#define MANTISSA_CONVERSION_ADAMWTOLOOPS_PASSES_TD

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

#endif // MANTISSA_CONVERSION_ADAMWTOLOOPS_PASSES_TD
