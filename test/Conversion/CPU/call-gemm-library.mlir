// RUN: mantissa-opt %s --mantissa-call-gemm-library --split-input-file | FileCheck %s

// An fp32 product of dense matrices: one call, and its descriptor (the
// layout of mantissa/Format/CpuGemmAbi.h: ABI 2, types A B C, batch, M N K,
// then the strides of A (batch, M, K), B (batch, K, N) and C (batch, M, N),
// then 1: the product adds to C (a product written over a fill of +0.0:
// call-gemm-library-overwrite.mlir).

// CHECK: func.func private @mantissa_cpu_gemm(index, index, index, index)
// CHECK: memref.global "private" constant @__mantissa_gemm_0 : memref<19xi64> = dense<[4, 0, 0, 0, 1, 128, 32, 64, 8192, 64, 1, 2048, 32, 1, 4096, 32, 1, 1, 0]>
// CHECK-LABEL: func.func @matmul
// CHECK-SAME: (%[[A:.*]]: memref<128x64xf32>, %[[B:.*]]: memref<64x32xf32>, %[[C:.*]]: memref<128x32xf32>)
// CHECK: %[[D:.*]] = memref.get_global @__mantissa_gemm_0
// CHECK: %[[DP:.*]] = memref.extract_aligned_pointer_as_index %[[D]]
// CHECK: %[[AP:.*]] = memref.extract_aligned_pointer_as_index %[[A]]
// CHECK: %[[BP:.*]] = memref.extract_aligned_pointer_as_index %[[B]]
// CHECK: %[[CP:.*]] = memref.extract_aligned_pointer_as_index %[[C]]
// CHECK: call @mantissa_cpu_gemm(%[[DP]], %[[AP]], %[[BP]], %[[CP]])
// CHECK-NOT: linalg.matmul
func.func @matmul(%a: memref<128x64xf32>, %b: memref<64x32xf32>, %c: memref<128x32xf32>) {
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%c : memref<128x32xf32>)
  return
}

// -----

// bf16 operands accumulate in fp32 (types 1, 1, 0); B read through a
// transposed view (x @ w^T): K is its unit stride.

// CHECK-LABEL: memref.global "private" constant @__mantissa_gemm_0 : memref<19xi64> = dense<[4, 1, 1, 0, 1, 128, 32, 64, 8192, 64, 1, 2048, 1, 64, 4096, 32, 1, 1, 0]>
// CHECK-LABEL: func.func @matmul_bf16_transposed
// CHECK: call @mantissa_cpu_gemm
// CHECK-NOT: linalg.matmul
func.func @matmul_bf16_transposed(%a: memref<128x64xbf16>, %w: memref<32x64xbf16>, %c: memref<128x32xf32>) {
  %wt = memref.transpose %w (i, j) -> (j, i) : memref<32x64xbf16> to memref<64x32xbf16, strided<[1, 64]>>
  linalg.matmul ins(%a, %wt : memref<128x64xbf16>, memref<64x32xbf16, strided<[1, 64]>>) outs(%c : memref<128x32xf32>)
  return
}

// -----

// What elementwise fusion makes of a linear layer on [4, 32, 128]
// activations: two M loops, which collapse into M = 128; and a batched
// product with two batch loops (heads of each sequence), collapsed into a
// batch of 16, read at an offset (elements) that the address adds in bytes.

// CHECK-DAG: memref.global "private" constant @__mantissa_gemm_{{[0-9]}} : memref<19xi64> = dense<[4, 0, 0, 0, 1, 128, 128, 128, 16384, 128, 1, 16384, 128, 1, 16384, 128, 1, 1, 0]>
// CHECK-DAG: memref.global "private" constant @__mantissa_gemm_{{[0-9]}} : memref<19xi64> = dense<[4, 0, 0, 0, 16, 32, 32, 16, 1024, 32, 1, 512, 32, 1, 1024, 32, 1, 1, 0]>
// CHECK-LABEL: func.func @fused
// CHECK: %[[VIEW:.*]] = memref.subview %arg3[0, 0, 0, 16]
// CHECK: %[[AP:.*]] = memref.extract_aligned_pointer_as_index %[[VIEW]]
// CHECK: %[[BYTES:.*]] = arith.constant 64 : index
// CHECK: %[[OFFSET:.*]] = arith.addi %[[AP]], %[[BYTES]]
// CHECK: call @mantissa_cpu_gemm(%{{.*}}, %[[OFFSET]],
// CHECK-NOT: linalg.generic
#x = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#w = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#y = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#qa = affine_map<(b, h, i, j, k) -> (b, h, i, k)>
#qb = affine_map<(b, h, i, j, k) -> (b, h, k, j)>
#qc = affine_map<(b, h, i, j, k) -> (b, h, i, j)>
func.func @fused(%x: memref<4x32x128xf32>, %w: memref<128x128xf32>, %y: memref<4x32x128xf32>,
                 %q: memref<4x4x32x32xf32>, %k: memref<4x4x16x32xf32>, %s: memref<4x4x32x32xf32>) {
  linalg.generic {indexing_maps = [#x, #w, #y], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<4x32x128xf32>, memref<128x128xf32>) outs(%y : memref<4x32x128xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %0 = arith.mulf %in, %in_0 : f32
    %1 = arith.addf %out, %0 : f32
    linalg.yield %1 : f32
  }
  %qv = memref.subview %q[0, 0, 0, 16] [4, 4, 32, 16] [1, 1, 1, 1] : memref<4x4x32x32xf32> to memref<4x4x32x16xf32, strided<[4096, 1024, 32, 1], offset: 16>>
  linalg.generic {indexing_maps = [#qa, #qb, #qc], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%qv, %k : memref<4x4x32x16xf32, strided<[4096, 1024, 32, 1], offset: 16>>, memref<4x4x16x32xf32>) outs(%s : memref<4x4x32x32xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %0 = arith.mulf %in, %in_0 : f32
    %1 = arith.addf %out, %0 : f32
    linalg.yield %1 : f32
  }
  return
}

// -----

// compute: bf16 on an fp32 weight: elementwise fusion moved the weight's
// cast to bf16 into the product. The weight is rounded once into a bf16
// copy (the same truncf), which the library reads as a dense bf16 operand
// and which is freed after the call.

// CHECK: memref.global "private" constant @__mantissa_gemm_0 : memref<19xi64> = dense<[4, 1, 1, 0, 1, 8, 16, 4, 32, 4, 1, 64, 16, 1, 128, 16, 1, 1, 0]>
// CHECK-LABEL: func.func @rounded_weight
// CHECK-SAME: (%[[A:.*]]: memref<8x4xbf16>, %[[W:.*]]: memref<4x16xf32>, %[[C:.*]]: memref<8x16xf32>)
// CHECK: %[[COPY:.*]] = memref.alloc() {alignment = 64 : i64} : memref<4x16xbf16>
// CHECK: linalg.generic {{.*}} ins(%[[W]] : memref<4x16xf32>) outs(%[[COPY]] : memref<4x16xbf16>)
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: %[[CP:.*]] = memref.extract_aligned_pointer_as_index %[[COPY]]
// CHECK: call @mantissa_cpu_gemm(%{{.*}}, %{{.*}}, %[[CP]], %{{.*}})
// CHECK-NEXT: memref.dealloc %[[COPY]]
#ra = affine_map<(d0, d1, d2) -> (d0, d2)>
#rb = affine_map<(d0, d1, d2) -> (d2, d1)>
#rc = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @rounded_weight(%a: memref<8x4xbf16>, %w: memref<4x16xf32>, %c: memref<8x16xf32>) {
  linalg.generic {indexing_maps = [#ra, #rb, #rc], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%a, %w : memref<8x4xbf16>, memref<4x16xf32>) outs(%c : memref<8x16xf32>) {
  ^bb0(%in: bf16, %in_0: f32, %out: f32):
    %0 = arith.truncf %in_0 : f32 to bf16
    %1 = arith.extf %in : bf16 to f32
    %2 = arith.extf %0 : bf16 to f32
    %3 = arith.mulf %1, %2 : f32
    %4 = arith.addf %out, %3 : f32
    linalg.yield %4 : f32
  }
  return
}

// -----

// Left to the loops: a bf16 output (a bf16 accumulation), mixed operand
// types, an output not contiguous along N, a body that is not a
// multiply-accumulate, and a dot product (M = N = 1, batched over columns:
// a norm gain's gradient).

// CHECK-LABEL: func.func @unchanged
// CHECK-NOT: mantissa_cpu_gemm
// CHECK-COUNT-4: linalg.matmul
// CHECK: linalg.generic
// CHECK: linalg.generic
// CHECK-NOT: mantissa_cpu_gemm
#ma = affine_map<(d0, d1, d2) -> (d0, d2)>
#mb = affine_map<(d0, d1, d2) -> (d2, d1)>
#mc = affine_map<(d0, d1, d2) -> (d0, d1)>
#dx = affine_map<(d0, d1) -> (d0, d1)>
#dy = affine_map<(d0, d1) -> (d1)>
func.func @unchanged(%a: memref<8x4xbf16>, %b: memref<4x8xbf16>, %cb: memref<8x8xbf16>,
                     %af: memref<8x4xf32>, %bf: memref<4x8xf32>, %c: memref<8x8xf32>, %ct: memref<8x8xf32, strided<[1, 8]>>,
                     %x: memref<16x8xf32>, %g: memref<8xf32>) {
  linalg.matmul ins(%a, %b : memref<8x4xbf16>, memref<4x8xbf16>) outs(%cb : memref<8x8xbf16>)
  linalg.matmul ins(%af, %b : memref<8x4xf32>, memref<4x8xbf16>) outs(%c : memref<8x8xf32>)
  linalg.matmul ins(%af, %bf : memref<8x4xf32>, memref<4x8xf32>) outs(%ct : memref<8x8xf32, strided<[1, 8]>>)
  linalg.matmul ins(%a, %b : memref<8x4xbf16>, memref<4x8xbf16>) outs(%cb : memref<8x8xbf16>)
  linalg.generic {indexing_maps = [#ma, #mb, #mc], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%af, %bf : memref<8x4xf32>, memref<4x8xf32>) outs(%c : memref<8x8xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %0 = arith.mulf %in, %in_0 : f32
    %1 = arith.maximumf %out, %0 : f32
    linalg.yield %1 : f32
  }
  linalg.generic {indexing_maps = [#dx, #dx, #dy], iterator_types = ["reduction", "parallel"]}
      ins(%x, %x : memref<16x8xf32>, memref<16x8xf32>) outs(%g : memref<8xf32>) {
  ^bb0(%in: f32, %in_0: f32, %out: f32):
    %0 = arith.mulf %in, %in_0 : f32
    %1 = arith.addf %out, %0 : f32
    linalg.yield %1 : f32
  }
  return
}
