// RUN: mantissa-opt %s --mantissa-interchange-reductions-outward | FileCheck %s

// x @ w^T left to the loops: both operands read along the reduction, so w
// gets a transposed copy (freed after the op) and the output's last index
// (contiguous in every operand now) becomes the innermost loop; the
// reduction moves out, each output element still summed in order.

// CHECK-DAG: #[[$A:.*]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-DAG: #[[$B:.*]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-DAG: #[[$C:.*]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// (@row_sum_kept_dim below.)
// CHECK-DAG: #[[$KI:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
// CHECK-DAG: #[[$KO:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d3, d1)>
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.*]]: memref<8x16xf32>, %[[W:.*]]: memref<4x16xf32>, %[[Y:.*]]: memref<8x4xf32>)
// CHECK: %[[P:.*]] = memref.alloc() {alignment = 64 : i64} : memref<16x4xf32>
// CHECK: linalg.transpose ins(%[[W]] : memref<4x16xf32>) outs(%[[P]] : memref<16x4xf32>) permutation = [1, 0]
// CHECK: linalg.generic {indexing_maps = [#[[$A]], #[[$B]], #[[$C]]], iterator_types = ["parallel", "reduction", "parallel"]}
// CHECK-SAME: ins(%[[X]], %[[P]] : memref<8x16xf32>, memref<16x4xf32>)
// CHECK: memref.dealloc %[[P]]
#x = affine_map<(d0, d1, d2) -> (d0, d2)>
#w = affine_map<(d0, d1, d2) -> (d1, d2)>
#y = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @linear(%x: memref<8x16xf32>, %w: memref<4x16xf32>, %y: memref<8x4xf32>) {
  linalg.generic {indexing_maps = [#x, #w, #y], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<8x16xf32>, memref<4x16xf32>) outs(%y : memref<8x4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  }
  return
}

// A plain matmul: the N loop is already contiguous everywhere, so only the
// loops are interchanged (no copy).

// CHECK-LABEL: func.func @matmul
// CHECK-NOT: memref.alloc
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction", "parallel"]
func.func @matmul(%a: memref<8x16xf32>, %b: memref<16x4xf32>, %c: memref<8x4xf32>) {
  linalg.matmul ins(%a, %b : memref<8x16xf32>, memref<16x4xf32>) outs(%c : memref<8x4xf32>)
  return
}

// A row sum: the output's index becomes contiguous in a transposed copy of
// the input and moves innermost (each sum still runs over j in order).

// CHECK-LABEL: func.func @row_sum
// CHECK: linalg.transpose
// CHECK: iterator_types = ["reduction", "parallel"]
#r_in = affine_map<(d0, d1) -> (d0, d1)>
#r_out = affine_map<(d0, d1) -> (d0)>
func.func @row_sum(%x: memref<8x16xf32>, %s: memref<8xf32>) {
  linalg.generic {indexing_maps = [#r_in, #r_out], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<8x16xf32>) outs(%s : memref<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %o, %a : f32
    linalg.yield %r : f32
  }
  return
}

// A row sum that keeps its dimension ([4, 32, 1] from [4, 32, 1, 128], as
// torch's sum(-1, keepdim=True) and RMSNorm's mean of squares): the rows'
// index is the output's last walked one (the trailing 1 is not walked), so
// the input's transposed copy puts the rows last (a [4, 1, 128, 32] copy,
// not a copy that moves only the 1) and the rows' loop goes innermost.

// CHECK-LABEL: func.func @row_sum_kept_dim
// CHECK: %[[P:.*]] = memref.alloc() {alignment = 64 : i64} : memref<4x1x128x32xf32>
// CHECK: linalg.transpose ins(%{{.*}} : memref<4x32x1x128xf32>) outs(%[[P]] : memref<4x1x128x32xf32>) permutation = [0, 2, 3, 1]
// CHECK: linalg.generic {indexing_maps = [#[[$KI]], #[[$KO]]], iterator_types = ["parallel", "parallel", "reduction", "parallel"]}
#k_in = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#k_out = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
func.func @row_sum_kept_dim(%x: memref<4x32x1x128xf32>, %s: memref<4x32x1xf32>) {
  linalg.generic {indexing_maps = [#k_in, #k_out], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
      ins(%x : memref<4x32x1x128xf32>) outs(%s : memref<4x32x1xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.mulf %a, %a : f32
    %r = arith.addf %o, %m : f32
    linalg.yield %r : f32
  }
  return
}

// A sum into one element ([1, 1] from [1, 1, 64]): the only parallel loops
// have one iteration, which gives the vectorizer nothing; the op stays as it
// is, without a copy of its input.

// CHECK-LABEL: func.func @sum_to_one
// CHECK-NOT: memref.alloc
// CHECK-NOT: linalg.transpose
// CHECK: iterator_types = ["parallel", "parallel", "reduction"]
#o_in = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#o_out = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @sum_to_one(%x: memref<1x1x64xf32>, %s: memref<1x1xf32>) {
  linalg.generic {indexing_maps = [#o_in, #o_out], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : memref<1x1x64xf32>) outs(%s : memref<1x1xf32>) {
  ^bb0(%a: f32, %o: f32):
    %r = arith.addf %o, %a : f32
    linalg.yield %r : f32
  }
  return
}
