// RUN: mantissa-opt %s --mantissa-call-gemm-library --split-input-file | FileCheck %s

// Under `compute: bf16` with widened products, a weight's gradient is the
// product's sum rounded to bf16 and widened back into the fp32 gradient
// (the out-parameter %g). The product then writes %g and the library
// rounds it (the descriptor's last field, kGemmRoundC, is 1; it writes:
// kGemmAccumulate 0): the rounding copy and the temporary go.

// CHECK: memref.global "private" constant @__mantissa_gemm_0 : memref<19xi64> = dense<[4, 0, 0, 0, 1, 128, 32, 64, 8192, 64, 1, 2048, 32, 1, 4096, 32, 1, 0, 1]>
// CHECK-LABEL: func.func @gradient
// CHECK-SAME: (%{{.*}}: memref<128x64xf32>, %{{.*}}: memref<64x32xf32>, %[[G:.*]]: memref<128x32xf32>)
// CHECK-NOT: memref.alloc
// CHECK-NOT: linalg
// CHECK: %[[C:.*]] = memref.extract_aligned_pointer_as_index %[[G]]
// CHECK: call @mantissa_cpu_gemm({{.*}}, %[[C]])
// CHECK-NOT: linalg
// CHECK-NOT: memref.dealloc
// CHECK: return
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @gradient(%a: memref<128x64xf32>, %b: memref<64x32xf32>, %g: memref<128x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %t = memref.alloc() {alignment = 64 : i64} : memref<128x32xf32>
  linalg.fill ins(%zero : f32) outs(%t : memref<128x32xf32>)
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%t : memref<128x32xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t : memref<128x32xf32>) outs(%g : memref<128x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.truncf %in : f32 to bf16
    %w = arith.extf %r : bf16 to f32
    linalg.yield %w : f32
  }
  memref.dealloc %t : memref<128x32xf32>
  return
}

// -----

// Left as they were (the product writes the temporary, kGemmRoundC 0,
// the copy stays): the sum is also read as it is (by %s); the copy rounds
// to f16; the copy's output is read between the product and the copy;
// the product adds to its output (no fill).

// CHECK: memref.global "private" constant @__mantissa_gemm_0 : memref<19xi64> = dense<[4, {{.*}}, 0, 0]>
// CHECK-NEXT: memref.global "private" constant @__mantissa_gemm_1 : memref<19xi64> = dense<[4, {{.*}}, 1, 0]>
// CHECK-LABEL: func.func @kept
// CHECK: call @mantissa_cpu_gemm
// CHECK: linalg.copy
// CHECK: arith.extf %{{.*}} : bf16 to f32
// CHECK: call @mantissa_cpu_gemm
// CHECK: arith.extf %{{.*}} : f16 to f32
// CHECK: call @mantissa_cpu_gemm
// CHECK: linalg.copy
// CHECK: arith.extf %{{.*}} : bf16 to f32
// CHECK: call @mantissa_cpu_gemm
// CHECK: arith.extf %{{.*}} : bf16 to f32
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @kept(%a: memref<128x64xf32>, %b: memref<64x32xf32>, %g: memref<128x32xf32>, %s: memref<128x32xf32>, %u: memref<128x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %t0 = memref.alloc() {alignment = 64 : i64} : memref<128x32xf32>
  linalg.fill ins(%zero : f32) outs(%t0 : memref<128x32xf32>)
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%t0 : memref<128x32xf32>)
  linalg.copy ins(%t0 : memref<128x32xf32>) outs(%s : memref<128x32xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t0 : memref<128x32xf32>) outs(%g : memref<128x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.truncf %in : f32 to bf16
    %w = arith.extf %r : bf16 to f32
    linalg.yield %w : f32
  }
  %t1 = memref.alloc() {alignment = 64 : i64} : memref<128x32xf32>
  linalg.fill ins(%zero : f32) outs(%t1 : memref<128x32xf32>)
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%t1 : memref<128x32xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t1 : memref<128x32xf32>) outs(%g : memref<128x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.truncf %in : f32 to f16
    %w = arith.extf %r : f16 to f32
    linalg.yield %w : f32
  }
  %t2 = memref.alloc() {alignment = 64 : i64} : memref<128x32xf32>
  linalg.fill ins(%zero : f32) outs(%t2 : memref<128x32xf32>)
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%t2 : memref<128x32xf32>)
  linalg.copy ins(%g : memref<128x32xf32>) outs(%u : memref<128x32xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t2 : memref<128x32xf32>) outs(%g : memref<128x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.truncf %in : f32 to bf16
    %w = arith.extf %r : bf16 to f32
    linalg.yield %w : f32
  }
  %t3 = memref.alloc() {alignment = 64 : i64} : memref<128x32xf32>
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%t3 : memref<128x32xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t3 : memref<128x32xf32>) outs(%g : memref<128x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.truncf %in : f32 to bf16
    %w = arith.extf %r : bf16 to f32
    linalg.yield %w : f32
  }
  memref.dealloc %t0 : memref<128x32xf32>
  memref.dealloc %t1 : memref<128x32xf32>
  memref.dealloc %t2 : memref<128x32xf32>
  memref.dealloc %t3 : memref<128x32xf32>
  return
}

// -----

// In fp32 a weight's gradient is the product's sum copied unchanged into
// the out-parameter (a generic yielding its input, or linalg.copy). The
// product then writes the out-parameter (kGemmAccumulate 0, kGemmRoundC
// 0): the copy and the temporary go, and so does the pass over the
// gradient that the copy was.

// CHECK: memref.global "private" constant @__mantissa_gemm_0 : memref<19xi64> = dense<[4, 0, 0, 0, 1, 128, 32, 64, 8192, 64, 1, 2048, 32, 1, 4096, 32, 1, 0, 0]>
// CHECK-LABEL: func.func @copied_gradients
// CHECK-SAME: (%{{.*}}: memref<128x64xf32>, %{{.*}}: memref<64x32xf32>, %[[G:.*]]: memref<128x32xf32>, %[[H:.*]]: memref<128x32xf32>)
// CHECK-NOT: memref.alloc
// CHECK-NOT: linalg
// CHECK: %[[C:.*]] = memref.extract_aligned_pointer_as_index %[[G]]
// CHECK: call @mantissa_cpu_gemm({{.*}}, %[[C]])
// CHECK-NOT: linalg
// CHECK: %[[D:.*]] = memref.extract_aligned_pointer_as_index %[[H]]
// CHECK: call @mantissa_cpu_gemm({{.*}}, %[[D]])
// CHECK-NOT: linalg
// CHECK-NOT: memref.dealloc
// CHECK: return
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @copied_gradients(%a: memref<128x64xf32>, %b: memref<64x32xf32>, %g: memref<128x32xf32>, %h: memref<128x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %t = memref.alloc() {alignment = 64 : i64} : memref<128x32xf32>
  linalg.fill ins(%zero : f32) outs(%t : memref<128x32xf32>)
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%t : memref<128x32xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t : memref<128x32xf32>) outs(%g : memref<128x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  memref.dealloc %t : memref<128x32xf32>
  %u = memref.alloc() {alignment = 64 : i64} : memref<128x32xf32>
  linalg.fill ins(%zero : f32) outs(%u : memref<128x32xf32>)
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%u : memref<128x32xf32>)
  linalg.copy ins(%u : memref<128x32xf32>) outs(%h : memref<128x32xf32>)
  memref.dealloc %u : memref<128x32xf32>
  return
}

// -----

// Copies that stay: the product adds to its output (no fill); the copy
// reads the output transposed; the copy yields something else than its
// input; the copy's output is one of the product's inputs.

// CHECK-LABEL: func.func @kept_copies
// CHECK: call @mantissa_cpu_gemm
// CHECK: linalg.generic
// CHECK: call @mantissa_cpu_gemm
// CHECK: linalg.transpose
// CHECK: call @mantissa_cpu_gemm
// CHECK: linalg.generic
// CHECK: arith.negf
// CHECK: call @mantissa_cpu_gemm
// CHECK: linalg.copy
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @kept_copies(%a: memref<64x64xf32>, %b: memref<64x64xf32>, %g: memref<64x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %t0 = memref.alloc() {alignment = 64 : i64} : memref<64x64xf32>
  linalg.matmul ins(%a, %b : memref<64x64xf32>, memref<64x64xf32>) outs(%t0 : memref<64x64xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t0 : memref<64x64xf32>) outs(%g : memref<64x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  %t1 = memref.alloc() {alignment = 64 : i64} : memref<64x64xf32>
  linalg.fill ins(%zero : f32) outs(%t1 : memref<64x64xf32>)
  linalg.matmul ins(%a, %b : memref<64x64xf32>, memref<64x64xf32>) outs(%t1 : memref<64x64xf32>)
  linalg.transpose ins(%t1 : memref<64x64xf32>) outs(%g : memref<64x64xf32>) permutation = [1, 0]
  %t2 = memref.alloc() {alignment = 64 : i64} : memref<64x64xf32>
  linalg.fill ins(%zero : f32) outs(%t2 : memref<64x64xf32>)
  linalg.matmul ins(%a, %b : memref<64x64xf32>, memref<64x64xf32>) outs(%t2 : memref<64x64xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t2 : memref<64x64xf32>) outs(%g : memref<64x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %n = arith.negf %in : f32
    linalg.yield %n : f32
  }
  %t3 = memref.alloc() {alignment = 64 : i64} : memref<64x64xf32>
  linalg.fill ins(%zero : f32) outs(%t3 : memref<64x64xf32>)
  linalg.matmul ins(%a, %g : memref<64x64xf32>, memref<64x64xf32>) outs(%t3 : memref<64x64xf32>)
  linalg.copy ins(%t3 : memref<64x64xf32>) outs(%g : memref<64x64xf32>)
  memref.dealloc %t0 : memref<64x64xf32>
  memref.dealloc %t1 : memref<64x64xf32>
  memref.dealloc %t2 : memref<64x64xf32>
  memref.dealloc %t3 : memref<64x64xf32>
  return
}

// -----

// Under `compute: bf16` a product's result that elementwise ops read as a
// bf16 activation is rounded into a bf16 buffer, allocated after the
// product. The product then writes that buffer itself (kGemmTypeC 1, bf16;
// kGemmRoundC 1; kGemmAccumulate 0): the library sums each tile in fp32
// and stores it rounded to bf16. The narrowing copy and the fp32 temporary
// go; the bf16 buffer's allocation moves before the call.

// CHECK: memref.global "private" constant @__mantissa_gemm_0 : memref<19xi64> = dense<[4, 0, 0, 1, 1, 128, 32, 64, 8192, 64, 1, 2048, 32, 1, 4096, 32, 1, 0, 1]>
// CHECK-LABEL: func.func @activation
// CHECK-NOT: linalg
// CHECK: %[[N:.*]] = memref.alloc() {alignment = 64 : i64} : memref<128x32xbf16>
// CHECK-NOT: linalg
// CHECK: %[[C:.*]] = memref.extract_aligned_pointer_as_index %[[N]]
// CHECK: call @mantissa_cpu_gemm({{.*}}, %[[C]])
// CHECK-NOT: memref.alloc
// CHECK: linalg.generic
// CHECK-SAME: ins(%[[N]] : memref<128x32xbf16>)
// CHECK: memref.dealloc %[[N]]
// CHECK-NOT: memref.dealloc
// CHECK: return
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @activation(%a: memref<128x64xf32>, %b: memref<64x32xf32>, %s: memref<128x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %t = memref.alloc() {alignment = 64 : i64} : memref<128x32xf32>
  linalg.fill ins(%zero : f32) outs(%t : memref<128x32xf32>)
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%t : memref<128x32xf32>)
  %n = memref.alloc() {alignment = 64 : i64} : memref<128x32xbf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t : memref<128x32xf32>) outs(%n : memref<128x32xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.truncf %in : f32 to bf16
    linalg.yield %r : bf16
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%n : memref<128x32xbf16>) outs(%s : memref<128x32xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %w = arith.extf %in : bf16 to f32
    %m = arith.mulf %w, %w : f32
    linalg.yield %m : f32
  }
  memref.dealloc %t : memref<128x32xf32>
  memref.dealloc %n : memref<128x32xbf16>
  return
}

// -----

// Narrowing copies that stay (the product writes its fp32 temporary,
// kGemmRoundC 0): the copy rounds to f16; it rounds toward zero (a
// rounding mode); it also negates; the fp32 sum is read as it is too.
// All four keep one descriptor: fp32 C, written, not rounded.

// CHECK: memref.global "private" constant @__mantissa_gemm_0 : memref<19xi64> = dense<[4, 0, 0, 0, {{.*}}, 0, 0]>
// CHECK-NOT: memref.global
// CHECK-LABEL: func.func @kept_narrowings
// CHECK: call @mantissa_cpu_gemm
// CHECK: arith.truncf %{{.*}} : f32 to f16
// CHECK: call @mantissa_cpu_gemm
// CHECK: arith.truncf %{{.*}} toward_zero : f32 to bf16
// CHECK: call @mantissa_cpu_gemm
// CHECK: arith.negf
// CHECK: call @mantissa_cpu_gemm
// CHECK: arith.truncf %{{.*}} : f32 to bf16
// CHECK: linalg.copy
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @kept_narrowings(%a: memref<128x64xf32>, %b: memref<64x32xf32>, %h: memref<128x32xf16>, %n: memref<128x32xbf16>, %s: memref<128x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %t0 = memref.alloc() {alignment = 64 : i64} : memref<128x32xf32>
  linalg.fill ins(%zero : f32) outs(%t0 : memref<128x32xf32>)
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%t0 : memref<128x32xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t0 : memref<128x32xf32>) outs(%h : memref<128x32xf16>) {
  ^bb0(%in: f32, %out: f16):
    %r = arith.truncf %in : f32 to f16
    linalg.yield %r : f16
  }
  %t1 = memref.alloc() {alignment = 64 : i64} : memref<128x32xf32>
  linalg.fill ins(%zero : f32) outs(%t1 : memref<128x32xf32>)
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%t1 : memref<128x32xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t1 : memref<128x32xf32>) outs(%n : memref<128x32xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.truncf %in toward_zero : f32 to bf16
    linalg.yield %r : bf16
  }
  %t2 = memref.alloc() {alignment = 64 : i64} : memref<128x32xf32>
  linalg.fill ins(%zero : f32) outs(%t2 : memref<128x32xf32>)
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%t2 : memref<128x32xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t2 : memref<128x32xf32>) outs(%n : memref<128x32xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %m = arith.negf %in : f32
    %r = arith.truncf %m : f32 to bf16
    linalg.yield %r : bf16
  }
  %t3 = memref.alloc() {alignment = 64 : i64} : memref<128x32xf32>
  linalg.fill ins(%zero : f32) outs(%t3 : memref<128x32xf32>)
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%t3 : memref<128x32xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t3 : memref<128x32xf32>) outs(%n : memref<128x32xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.truncf %in : f32 to bf16
    linalg.yield %r : bf16
  }
  linalg.copy ins(%t3 : memref<128x32xf32>) outs(%s : memref<128x32xf32>)
  memref.dealloc %t0 : memref<128x32xf32>
  memref.dealloc %t1 : memref<128x32xf32>
  memref.dealloc %t2 : memref<128x32xf32>
  memref.dealloc %t3 : memref<128x32xf32>
  return
}
