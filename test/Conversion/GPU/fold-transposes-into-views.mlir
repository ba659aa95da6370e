// RUN: mantissa-opt %s --pass-pipeline='builtin.module(func.func(mantissa-fold-transposes-into-views))' --split-input-file | FileCheck %s

// A transpose into a temporary that is only read: the reader reads a
// strided view of the input instead, and the copy is gone.

// CHECK-LABEL: func.func @transposed_read
// CHECK-SAME: %[[X:[^:]*]]: memref<8x16xf32>, %[[Y:[^:]*]]: memref<16x8xf32>
// CHECK-NOT: memref.alloc
// CHECK-NOT: linalg.transpose
// CHECK: %[[T:.*]] = memref.transpose %[[X]] (d0, d1) -> (d1, d0) : memref<8x16xf32> to memref<16x8xf32, strided<[1, 16]>>
// CHECK: linalg.generic {{.*}} ins(%[[T]] : memref<16x8xf32, strided<[1, 16]>>) outs(%[[Y]] : memref<16x8xf32>)
// CHECK-NOT: memref.dealloc
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @transposed_read(%x: memref<8x16xf32>, %y: memref<16x8xf32>) {
  %t = memref.alloc() : memref<16x8xf32>
  linalg.transpose ins(%x : memref<8x16xf32>) outs(%t : memref<16x8xf32>) permutation = [1, 0]
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t : memref<16x8xf32>) outs(%y : memref<16x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  memref.dealloc %t : memref<16x8xf32>
  return
}

// -----

// A matrix product reading the transposed weight: the view, which the GEMM
// takes as transb.

// CHECK-LABEL: func.func @transposed_gemm_operand
// CHECK-SAME: %[[X:[^:]*]]: memref<4x8xf32>, %[[W:[^:]*]]: memref<16x8xf32>
// CHECK: %[[T:.*]] = memref.transpose %[[W]] (d0, d1) -> (d1, d0)
// CHECK: linalg.matmul ins(%[[X]], %[[T]] : memref<4x8xf32>, memref<8x16xf32, strided<[1, 8]>>)
func.func @transposed_gemm_operand(%x: memref<4x8xf32>, %w: memref<16x8xf32>, %y: memref<4x16xf32>) {
  %t = memref.alloc() : memref<8x16xf32>
  linalg.transpose ins(%w : memref<16x8xf32>) outs(%t : memref<8x16xf32>) permutation = [1, 0]
  linalg.matmul ins(%x, %t : memref<4x8xf32>, memref<8x16xf32>) outs(%y : memref<4x16xf32>)
  memref.dealloc %t : memref<8x16xf32>
  return
}

// -----

// The input is written after the transpose: the copy must stay.

// CHECK-LABEL: func.func @input_written_later
// CHECK: linalg.transpose
// CHECK: linalg.fill
// CHECK-NOT: memref.transpose
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @input_written_later(%x: memref<8x16xf32>, %y: memref<16x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %t = memref.alloc() : memref<16x8xf32>
  linalg.transpose ins(%x : memref<8x16xf32>) outs(%t : memref<16x8xf32>) permutation = [1, 0]
  linalg.fill ins(%zero : f32) outs(%x : memref<8x16xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t : memref<16x8xf32>) outs(%y : memref<16x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  memref.dealloc %t : memref<16x8xf32>
  return
}

// -----

// The same transpose as a generic (how a permute reaches the GPU passes
// after elementwise fusion generalized it): input map (d1, d2, d0), output
// identity, a body that yields the input. The weight gradient's GEMM reads
// the collapsed view as a transposed operand.

// CHECK-LABEL: func.func @generic_transpose
// CHECK-SAME: %[[X:[^:]*]]: memref<4x32x344xbf16>
// CHECK-NOT: linalg.generic
// CHECK: %[[T:.*]] = memref.transpose %[[X]] (d0, d1, d2) -> (d2, d0, d1) : memref<4x32x344xbf16> to memref<344x4x32xbf16, strided<[1, 11008, 344]>>
// CHECK: %[[C:.*]] = memref.collapse_shape %[[T]] {{\[}}[0], [1, 2]] : memref<344x4x32xbf16, strided<[1, 11008, 344]>> into memref<344x128xbf16, strided<[1, 344]>>
// CHECK: linalg.matmul ins(%[[C]], %{{.*}} : memref<344x128xbf16, strided<[1, 344]>>, memref<128x128xbf16>)
#perm = affine_map<(d0, d1, d2) -> (d1, d2, d0)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @generic_transpose(%x: memref<4x32x344xbf16>, %w: memref<128x128xbf16>, %y: memref<344x128xf32>) {
  %t = memref.alloc() : memref<344x4x32xbf16>
  linalg.generic {indexing_maps = [#perm, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : memref<4x32x344xbf16>) outs(%t : memref<344x4x32xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    linalg.yield %in : bf16
  }
  %c = memref.collapse_shape %t [[0], [1, 2]] : memref<344x4x32xbf16> into memref<344x128xbf16>
  linalg.matmul ins(%c, %w : memref<344x128xbf16>, memref<128x128xbf16>) outs(%y : memref<344x128xf32>)
  memref.dealloc %t : memref<344x4x32xbf16>
  return
}

// -----

// A generic that also rounds (not a copy) stays.

// CHECK-LABEL: func.func @rounding_transpose
// CHECK: linalg.generic
// CHECK: arith.truncf
#perm = affine_map<(d0, d1) -> (d1, d0)>
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @rounding_transpose(%x: memref<8x16xf32>, %y: memref<16x8xbf16>) {
  %t = memref.alloc() : memref<16x8xbf16>
  linalg.generic {indexing_maps = [#perm, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<8x16xf32>) outs(%t : memref<16x8xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.truncf %in : f32 to bf16
    linalg.yield %r : bf16
  }
  linalg.copy ins(%t : memref<16x8xbf16>) outs(%y : memref<16x8xbf16>)
  memref.dealloc %t : memref<16x8xbf16>
  return
}

// -----

// A transpose of a transpose: folding the first moves the second's input
// onto a view, which the second then folds through too; the reader reads
// %x itself, through two views.

// CHECK-LABEL: func.func @transpose_of_transpose
// CHECK-SAME: %[[X:[^:]*]]: memref<8x16xf32>
// CHECK-NOT: linalg.generic {{.*}} -> (d1, d0)
// CHECK: %[[A:.*]] = memref.transpose %[[X]] (d0, d1) -> (d1, d0) : memref<8x16xf32> to memref<16x8xf32, strided<[1, 16]>>
// CHECK: %[[B:.*]] = memref.transpose %[[A]] (d0, d1) -> (d1, d0) : memref<16x8xf32, strided<[1, 16]>> to memref<8x16xf32, strided<[16, 1]>>
// CHECK: linalg.generic {{.*}} ins(%[[B]] : memref<8x16xf32, strided<[16, 1]>>)
// CHECK: math.exp
#perm = affine_map<(d0, d1) -> (d1, d0)>
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @transpose_of_transpose(%x: memref<8x16xf32>, %y: memref<8x16xf32>) {
  %t1 = memref.alloc() : memref<16x8xf32>
  linalg.generic {indexing_maps = [#perm, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<8x16xf32>) outs(%t1 : memref<16x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  %t2 = memref.alloc() : memref<8x16xf32>
  linalg.generic {indexing_maps = [#perm, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t1 : memref<16x8xf32>) outs(%t2 : memref<8x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t2 : memref<8x16xf32>) outs(%y : memref<8x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  memref.dealloc %t1 : memref<16x8xf32>
  memref.dealloc %t2 : memref<8x16xf32>
  return
}

// -----

// Read through static windows (RoPE's halves of the head dimension): the
// windows are rebuilt on the transposed view, with its strides.

// CHECK-LABEL: func.func @windows_of_transpose
// CHECK-SAME: %[[X:[^:]*]]: memref<4x8x2x16xf32>
// CHECK: %[[T:.*]] = memref.transpose %[[X]] (d0, d1, d2, d3) -> (d0, d2, d1, d3) : memref<4x8x2x16xf32> to memref<4x2x8x16xf32, strided<[256, 16, 32, 1]>>
// CHECK: %[[L:.*]] = memref.subview %[[T]][0, 0, 0, 0] [4, 2, 8, 8] [1, 1, 1, 1] : memref<4x2x8x16xf32, strided<[256, 16, 32, 1]>> to memref<4x2x8x8xf32, strided<[256, 16, 32, 1]>>
// CHECK: %[[H:.*]] = memref.subview %[[T]][0, 0, 0, 8] [4, 2, 8, 8] [1, 1, 1, 1] : memref<4x2x8x16xf32, strided<[256, 16, 32, 1]>> to memref<4x2x8x8xf32, strided<[256, 16, 32, 1], offset: 8>>
// CHECK: linalg.generic {{.*}} ins(%[[L]], %[[H]] :
#perm = affine_map<(d0, d1, d2, d3) -> (d0, d2, d1, d3)>
#id = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @windows_of_transpose(%x: memref<4x8x2x16xf32>, %y: memref<4x2x8x8xf32>) {
  %t = memref.alloc() : memref<4x2x8x16xf32>
  linalg.generic {indexing_maps = [#perm, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x : memref<4x8x2x16xf32>) outs(%t : memref<4x2x8x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  %lo = memref.subview %t[0, 0, 0, 0] [4, 2, 8, 8] [1, 1, 1, 1] : memref<4x2x8x16xf32> to memref<4x2x8x8xf32, strided<[256, 128, 16, 1]>>
  %hi = memref.subview %t[0, 0, 0, 8] [4, 2, 8, 8] [1, 1, 1, 1] : memref<4x2x8x16xf32> to memref<4x2x8x8xf32, strided<[256, 128, 16, 1], offset: 8>>
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%lo, %hi : memref<4x2x8x8xf32, strided<[256, 128, 16, 1]>>, memref<4x2x8x8xf32, strided<[256, 128, 16, 1], offset: 8>>) outs(%y : memref<4x2x8x8xf32>) {
  ^bb0(%a: f32, %b: f32, %out: f32):
    %s = arith.subf %a, %b : f32
    linalg.yield %s : f32
  }
  memref.dealloc %t : memref<4x2x8x16xf32>
  return
}

// -----

// The values of an attention, [batch, sequence, heads, dim] as their
// projection leaves them, permuted to [batch, heads, sequence, dim]: the
// attention kernels (forward and backward) read them through the view.

// CHECK-LABEL: func.func @attention_operand
// CHECK-SAME: %[[VT:[^:]*]]: memref<1x32x2x16xbf16>
// CHECK-NOT: linalg.transpose
// CHECK: %[[V:.*]] = memref.transpose %[[VT]] (d0, d1, d2, d3) -> (d0, d2, d1, d3) : memref<1x32x2x16xbf16> to memref<1x2x32x16xbf16, strided<[1024, 16, 32, 1]>>
// CHECK: train.attention_kernel {scale = 2.500000e-01 : f64} ins(%{{.*}}, %{{.*}}, %[[V]], %{{.*}} :
// CHECK: train.attention_kernel {backward, scale = 2.500000e-01 : f64} ins(%{{.*}}, %{{.*}}, %[[V]], %{{.*}} :
func.func @attention_operand(%q: memref<1x2x32x16xbf16>, %k: memref<1x2x32x16xbf16>, %vt: memref<1x32x2x16xbf16>, %mask: memref<32x32xi1>, %out: memref<1x2x32x16xbf16>, %lse: memref<1x2x32xf32>, %dout: memref<1x2x32x16xbf16>, %dq: memref<1x2x32x16xbf16>, %dk: memref<1x2x32x16xbf16>, %dv: memref<1x2x32x16xbf16>, %delta: memref<1x2x32xf32>) {
  %v = memref.alloc() : memref<1x2x32x16xbf16>
  linalg.transpose ins(%vt : memref<1x32x2x16xbf16>) outs(%v : memref<1x2x32x16xbf16>) permutation = [0, 2, 1, 3]
  train.attention_kernel {scale = 2.500000e-01 : f64} ins(%q, %k, %v, %mask : memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<32x32xi1>) outs(%out, %lse : memref<1x2x32x16xbf16>, memref<1x2x32xf32>)
  train.attention_kernel {backward, scale = 2.500000e-01 : f64} ins(%q, %k, %v, %mask, %out, %lse, %dout : memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<32x32xi1>, memref<1x2x32x16xbf16>, memref<1x2x32xf32>, memref<1x2x32x16xbf16>) outs(%dq, %dk, %dv, %delta : memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32xf32>)
  memref.dealloc %v : memref<1x2x32x16xbf16>
  return
}
