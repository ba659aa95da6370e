// RUN: mantissa-opt %s --pass-pipeline='builtin.module(func.func(mantissa-split-reductions))' --split-input-file | FileCheck %s

// A row sum over 512 elements: 32 partials per row, partial p summing
// elements p, p + 32, ... from -0.0, then each row folding its partials
// into its running value in order (the fold marked mantissa.gpu_fold_parts,
// which the GPU program runs as a tree of warp shuffles).

// CHECK-LABEL: func.func @row_sum
// CHECK-SAME: %[[X:[^:]*]]: memref<4x512xf32>, %[[S:[^:]*]]: memref<4xf32>
// CHECK: %[[P:.*]] = memref.alloc() : memref<4x32xf32>
// CHECK: %[[ID:.*]] = arith.constant -0.000000e+00 : f32
// CHECK: linalg.fill ins(%[[ID]] : f32) outs(%[[P]] : memref<4x32xf32>)
// CHECK: %[[V:.*]] = memref.expand_shape %[[X]] {{\[}}[0], [1, 2]] output_shape [4, 16, 32]
// CHECK: linalg.generic {indexing_maps = [#[[IN:.*]], #[[PART:.*]]], iterator_types = ["parallel", "reduction", "parallel"]} ins(%[[V]] : memref<4x16x32xf32>) outs(%[[P]] : memref<4x32xf32>)
// CHECK: math.exp
// CHECK: arith.addf
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[P]] : memref<4x32xf32>) outs(%[[S]] : memref<4xf32>)
// CHECK-SAME: attrs = {mantissa.gpu_fold_parts = 32 : i64}
// CHECK: arith.addf
// CHECK: memref.dealloc %[[P]]
#in = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @row_sum(%x: memref<4x512xf32>, %s: memref<4xf32>) {
  linalg.generic {indexing_maps = [#in, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<4x512xf32>) outs(%s : memref<4xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %e = math.exp %in : f32
    %sum = arith.addf %e, %acc : f32
    linalg.yield %sum : f32
  }
  return
}

// -----

// A column max over 256 rows (the reduction loop outermost): -inf
// partials, the broadcast operand untouched.

// CHECK-LABEL: func.func @column_max
// CHECK: arith.constant 0xFF800000 : f32
// CHECK: memref.expand_shape %{{.*}} {{\[}}[0, 1], [2]] output_shape [8, 32, 8]
// CHECK: iterator_types = ["reduction", "parallel", "parallel"]
// CHECK: arith.maximumf
// CHECK: iterator_types = ["parallel", "reduction"]
// CHECK-SAME: mantissa.gpu_fold_parts = 32 : i64
// CHECK: arith.maximumf
#in = affine_map<(d0, d1) -> (d0, d1)>
#bias = affine_map<(d0, d1) -> (d1)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @column_max(%x: memref<256x8xf32>, %b: memref<8xf32>, %m: memref<8xf32>) {
  linalg.generic {indexing_maps = [#in, #bias, #col], iterator_types = ["reduction", "parallel"]}
      ins(%x, %b : memref<256x8xf32>, memref<8xf32>) outs(%m : memref<8xf32>) {
  ^bb0(%in: f32, %bias: f32, %acc: f32):
    %v = arith.addf %in, %bias : f32
    %max = arith.maximumf %acc, %v : f32
    linalg.yield %max : f32
  }
  return
}

// -----

// Kept: a short row (64), a product (not combined last with the running
// value alone), and a body that reads its own position.

// CHECK-LABEL: func.func @kept
// CHECK-NOT: linalg.fill
// CHECK-COUNT-3: linalg.generic
// CHECK-NOT: linalg.generic
#in = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @kept(%short: memref<4x64xf32>, %x: memref<4x512xf32>, %s: memref<4xf32>) {
  linalg.generic {indexing_maps = [#in, #row], iterator_types = ["parallel", "reduction"]}
      ins(%short : memref<4x64xf32>) outs(%s : memref<4xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %sum = arith.addf %in, %acc : f32
    linalg.yield %sum : f32
  }
  linalg.generic {indexing_maps = [#in, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<4x512xf32>) outs(%s : memref<4xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %sum = arith.addf %in, %acc : f32
    %twice = arith.mulf %sum, %sum : f32
    linalg.yield %twice : f32
  }
  linalg.generic {indexing_maps = [#in, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<4x512xf32>) outs(%s : memref<4xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %i = linalg.index 1 : index
    %c = arith.index_cast %i : index to i64
    %f = arith.sitofp %c : i64 to f32
    %v = arith.mulf %in, %f : f32
    %sum = arith.addf %v, %acc : f32
    linalg.yield %sum : f32
  }
  return
}
