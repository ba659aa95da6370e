// RUN: mantissa-opt %s --pass-pipeline='builtin.module(mantissa-train-cpu-pipeline)' | FileCheck %s --check-prefix=LIBRARY
// RUN: mantissa-opt %s --pass-pipeline='builtin.module(mantissa-train-cpu-pipeline{gemm=loops})' | FileCheck %s --check-prefix=LOOPS
// RUN: mantissa-opt %s --pass-pipeline='builtin.module(mantissa-train-cpu-pipeline)' --dump-pass-pipeline -o /dev/null 2>&1 | FileCheck %s --check-prefix=PIPELINE
// RUN: not mantissa-opt %s --pass-pipeline='builtin.module(mantissa-train-cpu-pipeline{gemm=blas})' 2>&1 | FileCheck %s --check-prefix=BAD

// The whole CPU pipeline on a bf16 product (bf16 operands, fp32
// accumulation, rounded once to the bf16 result): with the library, the
// product is an indirect call through the exported hook the loader binds
// (CpuGemm.h), its descriptor a constant: it writes the bf16 result
// itself, rounded (C type 1, kGemmRoundC 1), over the zeros its fill
// wrote, and the fill and the rounding go; what remains outlined is the
// loss's copy. With gemm=loops there is no hook and the product and its
// rounding are outlined loop nests.

// LIBRARY: llvm.mlir.global external @mantissa_cpu_gemm_hook() {{.*}} : !llvm.ptr {
// LIBRARY: llvm.mlir.zero : !llvm.ptr
// LIBRARY: llvm.mlir.global private constant @__mantissa_gemm_0(dense<[4, 1, 1, 1, 1, 2, 3, 4, 8, 4, 1, 12, 3, 1, 6, 3, 1, 0, 1]> : tensor<19xi64>)
// LIBRARY-NOT: llvm.func @mantissa_cpu_gemm(
// LIBRARY-LABEL: llvm.func @mm_bf16(
// LIBRARY: %[[HOOK:.*]] = llvm.mlir.addressof @mantissa_cpu_gemm_hook : !llvm.ptr
// LIBRARY: %[[FUNCTION:.*]] = llvm.load %[[HOOK]] : !llvm.ptr -> !llvm.ptr
// LIBRARY: llvm.call %[[FUNCTION]](%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : !llvm.ptr, (i64, i64, i64, i64) -> ()
// LIBRARY-NOT: _generic
// LIBRARY: llvm.call @mm_bf16__{{[0-9]+}}_copy(
// LIBRARY-NOT: _generic
// LIBRARY: llvm.func @mm_bf16__{{[0-9]+}}_copy({{.*}}) attributes {passthrough = ["noinline"], sym_visibility = "private"}
// LIBRARY-NOT: _generic

// LOOPS-NOT: mantissa_cpu_gemm
// LOOPS-LABEL: llvm.func @mm_bf16(
// LOOPS: llvm.call @mm_bf16__{{[0-9]+}}_generic(
// LOOPS: llvm.call @mm_bf16__{{[0-9]+}}_generic(
// LOOPS-NOT: mantissa_cpu_gemm

// After bufferization, copies fold into the ops that compute what they
// copy and unread outputs go (test/Conversion/GPU tests both passes);
// the ops are outlined, those that read an input transposed cut into
// strips, and the temporaries go into one arena, before the loops
// (tile-transposed-reads.mlir and pack-cpu-arena.mlir test the passes).
// PIPELINE: mantissa-convert-copies-to-linalg,func.func(mantissa-fold-copies-into-producers,mantissa-drop-unread-outputs),mantissa-call-gemm-library
// PIPELINE: mantissa-outline-linalg-ops,func.func(mantissa-tile-transposed-reads{cpu=},mantissa-pack-cpu-arena),func.func(convert-linalg-to-loops)

// BAD: for the --gemm option: Cannot find option named 'blas'!
// BAD: failed to add `mantissa-train-cpu-pipeline` with options `gemm=blas`

train.step @mm_bf16(%a: tensor<2x4xbf16> {train.tensor = #train.tensor<user_input, fqn = "a", module = "", shape = [2, 4], dtype = bf16>},
    %b: tensor<4x3xbf16> {train.tensor = #train.tensor<user_input, fqn = "b", module = "", shape = [4, 3], dtype = bf16>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<2x3xbf16> {train.result = #train.result<user_output>}) {
  %0 = train.mm %a, %b : tensor<2x4xbf16>, tensor<4x3xbf16> -> tensor<2x3xbf16>
  train.return %loss, %0 : tensor<f32>, tensor<2x3xbf16>
}
