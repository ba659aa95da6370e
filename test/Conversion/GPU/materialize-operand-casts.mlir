// RUN: mantissa-opt %s --pass-pipeline='builtin.module(func.func(mantissa-materialize-operand-casts))' --split-input-file | FileCheck %s

// A bf16 product whose fp32 operand's rounding elementwise fusion folded
// into the contraction: the rounding gets its own op writing a bf16
// temporary, and the contraction reads it (a bf16 GEMM again).

// CHECK-LABEL: func.func @rounded_operand
// CHECK-SAME: %[[X:[^:]*]]: memref<4x8xf32>, %[[W:[^:]*]]: memref<8x16xbf16>, %[[Y:[^:]*]]: memref<4x16xf32>
// CHECK: %[[R:.*]] = memref.alloc() : memref<4x8xbf16>
// CHECK: linalg.generic {{.*}} ins(%[[X]] : memref<4x8xf32>) outs(%[[R]] : memref<4x8xbf16>)
// CHECK: arith.truncf
// CHECK: linalg.generic {{.*}} ins(%[[R]], %[[W]] : memref<4x8xbf16>, memref<8x16xbf16>) outs(%[[Y]] : memref<4x16xf32>)
// CHECK-NEXT: ^bb0(%{{.*}}: bf16, %{{.*}}: bf16, %{{.*}}: f32):
// CHECK-NOT: arith.truncf
// CHECK: linalg.yield
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
func.func @rounded_operand(%x: memref<4x8xf32>, %w: memref<8x16xbf16>, %y: memref<4x16xf32>) {
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<4x8xf32>, memref<8x16xbf16>) outs(%y : memref<4x16xf32>) {
  ^bb0(%in: f32, %in_w: bf16, %acc: f32):
    %r = arith.truncf %in : f32 to bf16
    %e = arith.extf %r : bf16 to f32
    %f = arith.extf %in_w : bf16 to f32
    %p = arith.mulf %e, %f : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Accumulating in bf16, it would not be a GEMM even so: left as it is.

// CHECK-LABEL: func.func @not_a_gemm
// CHECK-NOT: memref.alloc
// CHECK: linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : memref<4x8xf32>, memref<8x16xbf16>)
// CHECK: arith.truncf
#a = affine_map<(m, n, k) -> (m, k)>
#b = affine_map<(m, n, k) -> (k, n)>
#c = affine_map<(m, n, k) -> (m, n)>
func.func @not_a_gemm(%x: memref<4x8xf32>, %w: memref<8x16xbf16>, %y: memref<4x16xbf16>) {
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<4x8xf32>, memref<8x16xbf16>) outs(%y : memref<4x16xbf16>) {
  ^bb0(%in: f32, %in_w: bf16, %acc: bf16):
    %r = arith.truncf %in : f32 to bf16
    %p = arith.mulf %r, %in_w : bf16
    %s = arith.addf %acc, %p : bf16
    linalg.yield %s : bf16
  }
  return
}
