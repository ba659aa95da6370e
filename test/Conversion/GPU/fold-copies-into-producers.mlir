// RUN: mantissa-opt %s --pass-pipeline='builtin.module(func.func(mantissa-fold-copies-into-producers))' --split-input-file | FileCheck %s

// The cast of a gradient, transposed twice (a view, then a copy) into its
// result: the cast writes the result directly (the permutations cancel).

// CHECK-LABEL: func.func @transposed_twice
// CHECK-SAME: %[[G:.*]]: memref<4x8xf32>, %[[OUT:.*]]: memref<4x8xbf16>
// CHECK-NOT: memref.alloc
// CHECK: linalg.generic {{.*}} ins(%[[G]] : memref<4x8xf32>) outs(%[[OUT]] : memref<4x8xbf16>)
// CHECK-NOT: linalg.transpose
// CHECK: return
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @transposed_twice(%g: memref<4x8xf32>, %out: memref<4x8xbf16>) {
  %t = memref.alloc() : memref<4x8xbf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%g : memref<4x8xf32>) outs(%t : memref<4x8xbf16>) {
  ^bb0(%in: f32, %o: bf16):
    %c = arith.truncf %in : f32 to bf16
    linalg.yield %c : bf16
  }
  %v = memref.transpose %t (d0, d1) -> (d1, d0) : memref<4x8xbf16> to memref<8x4xbf16, strided<[1, 8]>>
  linalg.transpose ins(%v : memref<8x4xbf16, strided<[1, 8]>>) outs(%out : memref<4x8xbf16>) permutation = [1, 0]
  memref.dealloc %t : memref<4x8xbf16>
  return
}

// -----

// One transpose: the producer writes through a transposed view of the
// destination; and a half of a concatenation is computed in its slice (the
// slice's view moves up to the producer).

// CHECK-LABEL: func.func @transpose_and_slice
// CHECK-SAME: %[[X:.*]]: memref<4x8xf32>, %[[OUT:.*]]: memref<8x4xf32>, %[[CAT:.*]]: memref<4x16xf32>
// CHECK: %[[W:.*]] = memref.transpose %[[OUT]] (d0, d1) -> (d1, d0)
// CHECK: linalg.generic {{.*}} outs(%[[W]] : memref<4x8xf32, strided<[1, 4]>>)
// CHECK: math.exp
// CHECK: %[[S:.*]] = memref.subview %[[CAT]][0, 8] [4, 8] [1, 1]
// CHECK: linalg.generic {{.*}} outs(%[[S]] : memref<4x8xf32, strided<[16, 1], offset: 8>>)
// CHECK: math.log
// CHECK-NOT: linalg.transpose
// CHECK-NOT: linalg.copy
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @transpose_and_slice(%x: memref<4x8xf32>, %out: memref<8x4xf32>, %cat: memref<4x16xf32>) {
  %t = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<4x8xf32>) outs(%t : memref<4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  linalg.transpose ins(%t : memref<4x8xf32>) outs(%out : memref<8x4xf32>) permutation = [1, 0]
  %u = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<4x8xf32>) outs(%u : memref<4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %e = math.log %in : f32
    linalg.yield %e : f32
  }
  %slice = memref.subview %cat[0, 8] [4, 8] [1, 1] : memref<4x16xf32> to memref<4x8xf32, strided<[16, 1], offset: 8>>
  linalg.copy ins(%u : memref<4x8xf32>) outs(%slice : memref<4x8xf32, strided<[16, 1], offset: 8>>)
  memref.dealloc %t : memref<4x8xf32>
  memref.dealloc %u : memref<4x8xf32>
  return
}

// -----

// Kept: an op between the producer and the copy reads the destination
// (which the producer would overwrite too early); the temporary has a
// second reader; a contraction's output would be transposed.

// CHECK-LABEL: func.func @kept
// CHECK-COUNT-3: linalg.copy
// CHECK: linalg.transpose
#id = affine_map<(d0, d1) -> (d0, d1)>
#a = affine_map<(d0, d1, d2) -> (d0, d2)>
#b = affine_map<(d0, d1, d2) -> (d2, d1)>
#c = affine_map<(d0, d1, d2) -> (d0, d1)>
func.func @kept(%x: memref<4x8xf32>, %out: memref<4x8xf32>, %other: memref<4x8xf32>,
                %y: memref<4x8xf32>, %w: memref<8x8xf32>, %outT: memref<8x4xf32>) {
  %t = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<4x8xf32>) outs(%t : memref<4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  linalg.copy ins(%out : memref<4x8xf32>) outs(%other : memref<4x8xf32>)
  linalg.copy ins(%t : memref<4x8xf32>) outs(%out : memref<4x8xf32>)
  %u = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<4x8xf32>) outs(%u : memref<4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %e = math.log %in : f32
    linalg.yield %e : f32
  }
  linalg.copy ins(%u : memref<4x8xf32>) outs(%y : memref<4x8xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%u : memref<4x8xf32>) outs(%y : memref<4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %e = math.sqrt %in : f32
    linalg.yield %e : f32
  }
  %p = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<4x8xf32>, memref<8x8xf32>) outs(%p : memref<4x8xf32>) {
  ^bb0(%l: f32, %r: f32, %o: f32):
    %m = arith.mulf %l, %r : f32
    linalg.yield %m : f32
  }
  linalg.transpose ins(%p : memref<4x8xf32>) outs(%outT : memref<8x4xf32>) permutation = [1, 0]
  memref.dealloc %t : memref<4x8xf32>
  memref.dealloc %u : memref<4x8xf32>
  memref.dealloc %p : memref<4x8xf32>
  return
}

// -----

// The query gradient of an attention, permuted back to [batch, sequence,
// heads, dim] for its projection's backward: the attention kernel writes it
// there, through the transposed view.

// CHECK-LABEL: func.func @attention_output
// CHECK-SAME: %[[DQT:[^:]*]]: memref<1x32x2x16xbf16>
// CHECK-NOT: linalg.transpose
// CHECK: %[[DQ:.*]] = memref.transpose %[[DQT]] (d0, d1, d2, d3) -> (d0, d2, d1, d3)
// CHECK: train.attention_kernel {backward, scale = 2.500000e-01 : f64} ins({{.*}}) outs(%[[DQ]], %{{.*}}, %{{.*}}, %{{.*}} : memref<1x2x32x16xbf16, strided<[1024, 16, 32, 1]>>, memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32xf32>)
// CHECK-NOT: memref.alloc
func.func @attention_output(%q: memref<1x2x32x16xbf16>, %k: memref<1x2x32x16xbf16>, %v: memref<1x2x32x16xbf16>, %mask: memref<32x32xi1>, %out: memref<1x2x32x16xbf16>, %lse: memref<1x2x32xf32>, %dout: memref<1x2x32x16xbf16>, %dqt: memref<1x32x2x16xbf16>, %dk: memref<1x2x32x16xbf16>, %dv: memref<1x2x32x16xbf16>, %delta: memref<1x2x32xf32>) {
  %dq = memref.alloc() : memref<1x2x32x16xbf16>
  train.attention_kernel {backward, scale = 2.500000e-01 : f64} ins(%q, %k, %v, %mask, %out, %lse, %dout : memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<32x32xi1>, memref<1x2x32x16xbf16>, memref<1x2x32xf32>, memref<1x2x32x16xbf16>) outs(%dq, %dk, %dv, %delta : memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32xf32>)
  linalg.transpose ins(%dq : memref<1x2x32x16xbf16>) outs(%dqt : memref<1x32x2x16xbf16>) permutation = [0, 2, 1, 3]
  memref.dealloc %dq : memref<1x2x32x16xbf16>
  return
}

// -----

// The attention's output, transposed into the output projection's layout
// and read by the backward (delta = rowsum(dout * out)): the forward writes
// it in that layout, and the backward reads it through the same view. A
// write of the destination between the copy and the backward would keep
// them apart (@attention_output_overwritten).

// CHECK-LABEL: func.func @attention_output_read
// CHECK-SAME: %[[OT:[^:]*]]: memref<1x32x2x16xbf16>
// CHECK-NOT: memref.alloc
// CHECK: %[[O:.*]] = memref.transpose %[[OT]] (d0, d1, d2, d3) -> (d0, d2, d1, d3)
// CHECK: train.attention_kernel {scale = 2.500000e-01 : f64} ins({{.*}}) outs(%[[O]], %{{.*}} : memref<1x2x32x16xbf16, strided<[1024, 16, 32, 1]>>, memref<1x2x32xf32>)
// CHECK-NOT: linalg.transpose
// CHECK: train.attention_kernel {backward, scale = 2.500000e-01 : f64} ins(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[O]], %{{.*}}, %{{.*}} :
func.func @attention_output_read(%q: memref<1x2x32x16xbf16>, %mask: memref<32x32xi1>, %lse: memref<1x2x32xf32>, %ot: memref<1x32x2x16xbf16>, %g: memref<1x2x32x16xbf16>, %delta: memref<1x2x32xf32>) {
  %out = memref.alloc() : memref<1x2x32x16xbf16>
  train.attention_kernel {scale = 2.500000e-01 : f64} ins(%q, %q, %q, %mask : memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<32x32xi1>) outs(%out, %lse : memref<1x2x32x16xbf16>, memref<1x2x32xf32>)
  linalg.transpose ins(%out : memref<1x2x32x16xbf16>) outs(%ot : memref<1x32x2x16xbf16>) permutation = [0, 2, 1, 3]
  train.attention_kernel {backward, scale = 2.500000e-01 : f64} ins(%q, %q, %q, %mask, %out, %lse, %q : memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<32x32xi1>, memref<1x2x32x16xbf16>, memref<1x2x32xf32>, memref<1x2x32x16xbf16>) outs(%g, %g, %g, %delta : memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32xf32>)
  memref.dealloc %out : memref<1x2x32x16xbf16>
  return
}

// -----

// CHECK-LABEL: func.func @attention_output_overwritten
// CHECK: memref.alloc
// CHECK: linalg.transpose
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @attention_output_overwritten(%q: memref<1x2x32x16xbf16>, %mask: memref<32x32xi1>, %lse: memref<1x2x32xf32>, %ot: memref<1x32x2x16xbf16>, %g: memref<1x2x32x16xbf16>, %delta: memref<1x2x32xf32>) {
  %out = memref.alloc() : memref<1x2x32x16xbf16>
  train.attention_kernel {scale = 2.500000e-01 : f64} ins(%q, %q, %q, %mask : memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<32x32xi1>) outs(%out, %lse : memref<1x2x32x16xbf16>, memref<1x2x32xf32>)
  linalg.transpose ins(%out : memref<1x2x32x16xbf16>) outs(%ot : memref<1x32x2x16xbf16>) permutation = [0, 2, 1, 3]
  linalg.generic {indexing_maps = [#id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} outs(%ot : memref<1x32x2x16xbf16>) {
  ^bb0(%o: bf16):
    %z = arith.constant 0.0 : bf16
    linalg.yield %z : bf16
  }
  train.attention_kernel {backward, scale = 2.500000e-01 : f64} ins(%q, %q, %q, %mask, %out, %lse, %q : memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<32x32xi1>, memref<1x2x32x16xbf16>, memref<1x2x32xf32>, memref<1x2x32x16xbf16>) outs(%g, %g, %g, %delta : memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32xf32>)
  memref.dealloc %out : memref<1x2x32x16xbf16>
  return
}

// -----

// A concatenation whose halves two ops write (RoPE's backward), then
// transposed into the projections' layout: each half is written through
// the same subview of a transposed view of the destination, and the
// temporary and the transpose go.

// CHECK-LABEL: func.func @parts_transposed
// CHECK-SAME: %[[X:.*]]: memref<2x4x3xf32>, %[[Y:.*]]: memref<2x4x3xf32>, %[[OUT:.*]]: memref<4x2x6xbf16>
// CHECK-NOT: memref.alloc
// CHECK: %[[W:.*]] = memref.transpose %[[OUT]] (d0, d1, d2) -> (d1, d0, d2)
// CHECK: %[[A:.*]] = memref.subview %[[W]][0, 0, 0] [2, 4, 3] [1, 1, 1]
// CHECK: linalg.generic {{.*}} ins(%[[X]] : memref<2x4x3xf32>) outs(%[[A]] :
// CHECK: %[[B:.*]] = memref.subview %[[W]][0, 0, 3] [2, 4, 3] [1, 1, 1]
// CHECK: linalg.generic {{.*}} ins(%[[Y]] : memref<2x4x3xf32>) outs(%[[B]] :
// CHECK-NOT: linalg.transpose
// CHECK: return
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @parts_transposed(%x: memref<2x4x3xf32>, %y: memref<2x4x3xf32>, %out: memref<4x2x6xbf16>) {
  %t = memref.alloc() : memref<2x4x6xbf16>
  %a = memref.subview %t[0, 0, 0] [2, 4, 3] [1, 1, 1] : memref<2x4x6xbf16> to memref<2x4x3xbf16, strided<[24, 6, 1]>>
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : memref<2x4x3xf32>) outs(%a : memref<2x4x3xbf16, strided<[24, 6, 1]>>) {
  ^bb0(%in: f32, %o: bf16):
    %c = arith.truncf %in : f32 to bf16
    linalg.yield %c : bf16
  }
  %b = memref.subview %t[0, 0, 3] [2, 4, 3] [1, 1, 1] : memref<2x4x6xbf16> to memref<2x4x3xbf16, strided<[24, 6, 1], offset: 3>>
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%y : memref<2x4x3xf32>) outs(%b : memref<2x4x3xbf16, strided<[24, 6, 1], offset: 3>>) {
  ^bb0(%in: f32, %o: bf16):
    %n = arith.negf %in : f32
    %c = arith.truncf %n : f32 to bf16
    linalg.yield %c : bf16
  }
  linalg.transpose ins(%t : memref<2x4x6xbf16>) outs(%out : memref<4x2x6xbf16>) permutation = [1, 0, 2]
  memref.dealloc %t : memref<2x4x6xbf16>
  return
}

// -----

// Left alone: a part of the temporary that something reads before the
// copy (the copy would no longer be the temporary's only reader).

// CHECK-LABEL: func.func @part_read
// CHECK: memref.alloc
// CHECK: linalg.transpose
#id2 = affine_map<(d0, d1) -> (d0, d1)>
func.func @part_read(%x: memref<4x3xf32>, %out: memref<6x4xf32>, %z: memref<4x3xf32>) {
  %t = memref.alloc() : memref<4x6xf32>
  %a = memref.subview %t[0, 0] [4, 3] [1, 1] : memref<4x6xf32> to memref<4x3xf32, strided<[6, 1]>>
  linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<4x3xf32>) outs(%a : memref<4x3xf32, strided<[6, 1]>>) {
  ^bb0(%in: f32, %o: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%a : memref<4x3xf32, strided<[6, 1]>>) outs(%z : memref<4x3xf32>) {
  ^bb0(%in: f32, %o: f32):
    linalg.yield %in : f32
  }
  linalg.transpose ins(%t : memref<4x6xf32>) outs(%out : memref<6x4xf32>) permutation = [1, 0]
  memref.dealloc %t : memref<4x6xf32>
  return
}
