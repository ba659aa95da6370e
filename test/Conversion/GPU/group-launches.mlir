// RUN: mantissa-opt %s --pass-pipeline='builtin.module(func.func(mantissa-group-launches))' --split-input-file | FileCheck %s

// Kernels join the latest launch they may run in. exp and tanh are
// independent: one launch. The square reads the element of %t that its own
// thread wrote: it joins too, on the same threads. The sum reads %t
// transposed (an element another thread wrote): a launch of its own.

// CHECK-LABEL: func.func @chain
// CHECK: ins(%arg0 {{.*}} outs(%[[T:.*]] : memref<64x64xf32>)
// CHECK-SAME: {mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 0 : i64, mantissa.gpu_thread_stride = 1 : i64}
// CHECK: math.exp
// CHECK: ins(%arg1
// CHECK-SAME: {mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 1 : i64, mantissa.gpu_thread_stride = 1 : i64}
// CHECK: math.tanh
// CHECK: ins(%[[T]]
// CHECK-SAME: {mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 2 : i64, mantissa.gpu_thread_stride = 1 : i64}
// CHECK: arith.mulf
// CHECK: ins(%[[T]]
// CHECK-SAME: {mantissa.gpu_launch = 1 : i64, mantissa.gpu_member = 0 : i64, mantissa.gpu_thread_stride = 1 : i64}
// CHECK: arith.addf
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
func.func @chain(%x: memref<64x64xf32>, %y: memref<64x64xf32>, %a: memref<64x64xf32>, %b: memref<64x64xf32>, %c: memref<64x64xf32>) {
  %t = memref.alloc() : memref<64x64xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<64x64xf32>) outs(%t : memref<64x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : memref<64x64xf32>) outs(%a : memref<64x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.tanh %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t : memref<64x64xf32>) outs(%b : memref<64x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = arith.mulf %in, %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t : memref<64x64xf32>) outs(%c : memref<64x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = arith.addf %in, %in : f32
    linalg.yield %e : f32
  }
  memref.dealloc %t : memref<64x64xf32>
  return
}

// -----

// A GEMM runs alone, with the zero fill of its output (beta = 0): neither
// is marked. The tanh, independent of the GEMM, looks back past it into the
// exp's launch; the exp of the product waits for the GEMM.

// CHECK-LABEL: func.func @gemm
// CHECK: ins(%arg2 {{.*}} outs(%arg3
// CHECK-SAME: mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 0 : i64
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[P:.*]] : memref<64x64xf32>){{$}}
// CHECK: linalg.matmul ins({{.*}}) outs(%[[P]] : memref<64x64xf32>){{$}}
// CHECK: ins(%arg2 {{.*}} outs(%arg4
// CHECK-SAME: mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 1 : i64
// CHECK: ins(%[[P]] {{.*}} outs(%arg5
// CHECK-SAME: mantissa.gpu_launch = 1 : i64, mantissa.gpu_member = 0 : i64
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @gemm(%x: memref<64x64xf32>, %w: memref<64x64xf32>, %y: memref<64x64xf32>, %a: memref<64x64xf32>, %b: memref<64x64xf32>, %c: memref<64x64xf32>) {
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : memref<64x64xf32>) outs(%a : memref<64x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  %zero = arith.constant 0.0 : f32
  %p = memref.alloc() : memref<64x64xf32>
  linalg.fill ins(%zero : f32) outs(%p : memref<64x64xf32>)
  linalg.matmul ins(%x, %w : memref<64x64xf32>, memref<64x64xf32>) outs(%p : memref<64x64xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : memref<64x64xf32>) outs(%b : memref<64x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.tanh %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%p : memref<64x64xf32>) outs(%c : memref<64x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  memref.dealloc %p : memref<64x64xf32>
  return
}

// -----

// A split row sum (mantissa-split-reductions' output): the fold of 32
// partials per row joins the partials' launch on 32 threads per row (its
// lanes shuffle what each computed), and the fill of the row sums, which
// only the fold's thread for the same row touches, moves behind the
// partials onto the fold's threads.

// CHECK-LABEL: func.func @row_sum
// CHECK: linalg.fill {mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 2 : i64, mantissa.gpu_thread_stride = 32 : i64} ins(%{{.*}} : f32) outs(%arg1 : memref<4xf32>)
// CHECK: linalg.fill {mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 0 : i64, mantissa.gpu_thread_stride = 1 : i64} ins(%{{.*}} : f32) outs(%[[P:.*]] : memref<4x32xf32>)
// CHECK: outs(%[[P]]
// CHECK-SAME: {mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 1 : i64, mantissa.gpu_thread_stride = 1 : i64}
// CHECK: ins(%[[P]]
// CHECK-SAME: {mantissa.gpu_fold_parts = 32 : i64, mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 3 : i64, mantissa.gpu_thread_stride = 32 : i64}
#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2) -> (d0, d2)>
#map2 = affine_map<(d0, d1) -> (d0, d1)>
#map3 = affine_map<(d0, d1) -> (d0)>
func.func @row_sum(%arg0: memref<4x512xf32>, %arg1: memref<4xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%cst : f32) outs(%arg1 : memref<4xf32>)
  %alloc = memref.alloc() : memref<4x32xf32>
  %cst_0 = arith.constant -0.000000e+00 : f32
  linalg.fill ins(%cst_0 : f32) outs(%alloc : memref<4x32xf32>)
  %expand_shape = memref.expand_shape %arg0 [[0], [1, 2]] output_shape [4, 16, 32] : memref<4x512xf32> into memref<4x16x32xf32>
  linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction", "parallel"]} ins(%expand_shape : memref<4x16x32xf32>) outs(%alloc : memref<4x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = math.exp %in : f32
    %1 = arith.addf %0, %out : f32
    linalg.yield %1 : f32
  }
  linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%alloc : memref<4x32xf32>) outs(%arg1 : memref<4xf32>) attrs =  {mantissa.gpu_fold_parts = 32 : i64} {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  }
  memref.dealloc %alloc : memref<4x32xf32>
  return
}

// -----

// The same fold where a kernel in between reads the row sums' buffer: the
// fill cannot move behind it, so the fold starts a launch of its own.

// CHECK-LABEL: func.func @fold_after_reader
// CHECK: linalg.fill {mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 0 : i64, mantissa.gpu_thread_stride = 1 : i64} ins(%{{.*}} : f32) outs(%arg1 : memref<4xf32>)
// CHECK: ins(%arg1 : memref<4xf32>) outs(%arg2
// CHECK-SAME: mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 1 : i64
// CHECK: mantissa.gpu_fold_parts = 32 : i64, mantissa.gpu_launch = 1 : i64, mantissa.gpu_member = 0 : i64, mantissa.gpu_thread_stride = 32 : i64
#map = affine_map<(d0, d1) -> (d0, d1)>
#map3 = affine_map<(d0, d1) -> (d0)>
#vec = affine_map<(d0) -> (d0)>
func.func @fold_after_reader(%partials: memref<4x32xf32>, %arg1: memref<4xf32>, %copy: memref<4xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%cst : f32) outs(%arg1 : memref<4xf32>)
  linalg.generic {indexing_maps = [#vec, #vec], iterator_types = ["parallel"]} ins(%arg1 : memref<4xf32>) outs(%copy : memref<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  linalg.generic {indexing_maps = [#map, #map3], iterator_types = ["parallel", "reduction"]} ins(%partials : memref<4x32xf32>) outs(%arg1 : memref<4xf32>) attrs =  {mantissa.gpu_fold_parts = 32 : i64} {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  }
  return
}

// -----

// An elementwise op that reads each row's sum joins the fold's launch by
// rows: row r on the fold's 32 lanes for r, each lane a strided share of
// the 512 columns (after a barrier: what it reads, lane 0 wrote). Writing
// the rows back over the input instead, which the partials of other lanes
// still read, it stays out.

// CHECK-LABEL: func.func @by_rows
// CHECK: ins(%[[P:.*]] : memref<4x32xf32>) outs(%arg1
// CHECK-SAME: mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 3 : i64, mantissa.gpu_thread_stride = 32 : i64
// CHECK: ins(%arg0, %arg1 : memref<4x512xf32>, memref<4xf32>) outs(%arg2
// CHECK-SAME: mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 4 : i64, mantissa.gpu_row_columns = 512 : i64, mantissa.gpu_thread_stride = 32 : i64
// CHECK: ins(%arg1 : memref<4xf32>) outs(%arg0
// CHECK-SAME: mantissa.gpu_launch = 1 : i64, mantissa.gpu_member = 0 : i64, mantissa.gpu_thread_stride = 1 : i64
#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2) -> (d0, d2)>
#map2 = affine_map<(d0, d1) -> (d0, d1)>
#map3 = affine_map<(d0, d1) -> (d0)>
func.func @by_rows(%arg0: memref<4x512xf32>, %arg1: memref<4xf32>, %arg2: memref<4x512xf32>) {
  %cst = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%cst : f32) outs(%arg1 : memref<4xf32>)
  %alloc = memref.alloc() : memref<4x32xf32>
  %cst_0 = arith.constant -0.000000e+00 : f32
  linalg.fill ins(%cst_0 : f32) outs(%alloc : memref<4x32xf32>)
  %expand_shape = memref.expand_shape %arg0 [[0], [1, 2]] output_shape [4, 16, 32] : memref<4x512xf32> into memref<4x16x32xf32>
  linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "reduction", "parallel"]} ins(%expand_shape : memref<4x16x32xf32>) outs(%alloc : memref<4x32xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.mulf %in, %in : f32
    %1 = arith.addf %0, %out : f32
    linalg.yield %1 : f32
  }
  linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%alloc : memref<4x32xf32>) outs(%arg1 : memref<4xf32>) attrs =  {mantissa.gpu_fold_parts = 32 : i64} {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [#map2, #map3, #map2], iterator_types = ["parallel", "parallel"]} ins(%arg0, %arg1 : memref<4x512xf32>, memref<4xf32>) outs(%arg2 : memref<4x512xf32>) {
  ^bb0(%x: f32, %s: f32, %out: f32):
    %0 = arith.mulf %x, %s : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [#map3, #map2], iterator_types = ["parallel", "parallel"]} ins(%arg1 : memref<4xf32>) outs(%arg0 : memref<4x512xf32>) {
  ^bb0(%s: f32, %out: f32):
    %0 = arith.mulf %out, %s : f32
    linalg.yield %0 : f32
  }
  memref.dealloc %alloc : memref<4x32xf32>
  return
}

// -----

// A second reduction's partials that read the first's row sums (a
// LayerNorm's variance after its mean): by rows of 32 columns, one per
// lane, they run on the threads their fill ran on, so they may also write
// what it zeroed, and the second fold joins them (its output's fill moving
// onto the fold's threads).

// CHECK-LABEL: func.func @chained
// CHECK: linalg.fill {mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 3 : i64, mantissa.gpu_thread_stride = 32 : i64} ins(%{{.*}} : f32) outs(%arg2 : memref<4xf32>)
// CHECK: linalg.fill {mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 1 : i64, mantissa.gpu_thread_stride = 1 : i64} ins(%{{.*}} : f32) outs(%[[Q:.*]] : memref<4x32xf32>)
// CHECK: ins(%arg0, %arg1 : memref<4x16x32xf32>, memref<4xf32>) outs(%[[Q]]
// CHECK-SAME: mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 2 : i64, mantissa.gpu_row_columns = 32 : i64, mantissa.gpu_thread_stride = 32 : i64
// CHECK: ins(%[[Q]] : memref<4x32xf32>) outs(%arg2
// CHECK-SAME: mantissa.gpu_fold_parts = 32 : i64, mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 4 : i64, mantissa.gpu_thread_stride = 32 : i64
#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2) -> (d0, d2)>
#row3 = affine_map<(d0, d1, d2) -> (d0)>
#map2 = affine_map<(d0, d1) -> (d0, d1)>
#map3 = affine_map<(d0, d1) -> (d0)>
func.func @chained(%arg0: memref<4x16x32xf32>, %arg1: memref<4xf32>, %arg2: memref<4xf32>, %p: memref<4x32xf32>) {
  linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%p : memref<4x32xf32>) outs(%arg1 : memref<4xf32>) attrs =  {mantissa.gpu_fold_parts = 32 : i64} {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  }
  %cst = arith.constant 0.000000e+00 : f32
  linalg.fill ins(%cst : f32) outs(%arg2 : memref<4xf32>)
  %q = memref.alloc() : memref<4x32xf32>
  %cst_0 = arith.constant -0.000000e+00 : f32
  linalg.fill ins(%cst_0 : f32) outs(%q : memref<4x32xf32>)
  linalg.generic {indexing_maps = [#map, #row3, #map1], iterator_types = ["parallel", "reduction", "parallel"]} ins(%arg0, %arg1 : memref<4x16x32xf32>, memref<4xf32>) outs(%q : memref<4x32xf32>) {
  ^bb0(%x: f32, %m: f32, %out: f32):
    %0 = arith.subf %x, %m : f32
    %1 = arith.mulf %0, %0 : f32
    %2 = arith.addf %1, %out : f32
    linalg.yield %2 : f32
  }
  linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "reduction"]} ins(%q : memref<4x32xf32>) outs(%arg2 : memref<4xf32>) attrs =  {mantissa.gpu_fold_parts = 32 : i64} {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  }
  memref.dealloc %q : memref<4x32xf32>
  return
}

// -----

// Two kernels that write the two halves of one buffer (the parts of a
// concatenation) do not conflict: one launch. A kernel that reads, through
// another subview, columns that both wrote (an element another thread
// wrote: its rows transposed) does: a launch of its own.

// CHECK-LABEL: func.func @halves
// CHECK: ins(%arg0
// CHECK-SAME: {mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 0 : i64
// CHECK: math.exp
// CHECK: ins(%arg1
// CHECK-SAME: {mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 1 : i64
// CHECK: math.tanh
// CHECK: ins(%subview
// CHECK-SAME: {mantissa.gpu_launch = 1 : i64, mantissa.gpu_member = 0 : i64
// CHECK: arith.addf
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
func.func @halves(%x: memref<16x16xf32>, %y: memref<16x16xf32>, %z: memref<16x16xf32>) {
  %t = memref.alloc() : memref<16x32xf32>
  %a = memref.subview %t[0, 0] [16, 16] [1, 1] : memref<16x32xf32> to memref<16x16xf32, strided<[32, 1]>>
  %b = memref.subview %t[0, 16] [16, 16] [1, 1] : memref<16x32xf32> to memref<16x16xf32, strided<[32, 1], offset: 16>>
  %c = memref.subview %t[0, 8] [16, 16] [1, 1] : memref<16x32xf32> to memref<16x16xf32, strided<[32, 1], offset: 8>>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<16x16xf32>) outs(%a : memref<16x16xf32, strided<[32, 1]>>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : memref<16x16xf32>) outs(%b : memref<16x16xf32, strided<[32, 1], offset: 16>>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.tanh %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c : memref<16x16xf32, strided<[32, 1], offset: 8>>) outs(%z : memref<16x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = arith.addf %in, %in : f32
    linalg.yield %e : f32
  }
  memref.dealloc %t : memref<16x32xf32>
  return
}

// -----

// The same through a transposed view of the buffer (the halves of RoPE's
// backward written into the projections' layout): the two halves of the
// view's last dimension are disjoint parts of the buffer, one launch; a
// reader of the buffer's first rows, which both wrote, a launch of its own.

// CHECK-LABEL: func.func @transposed_halves
// CHECK: ins(%arg0
// CHECK-SAME: {mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 0 : i64
// CHECK: math.exp
// CHECK: ins(%arg1
// CHECK-SAME: {mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 1 : i64
// CHECK: math.tanh
// CHECK: ins(%subview
// CHECK-SAME: {mantissa.gpu_launch = 1 : i64, mantissa.gpu_member = 0 : i64
// CHECK: arith.addf
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @transposed_halves(%x: memref<8x4xf32>, %y: memref<8x4xf32>, %z: memref<2x8xf32>) {
  %t = memref.alloc() : memref<8x8xf32>
  %v = memref.transpose %t (d0, d1) -> (d1, d0) : memref<8x8xf32> to memref<8x8xf32, strided<[1, 8]>>
  %a = memref.subview %v[0, 0] [8, 4] [1, 1] : memref<8x8xf32, strided<[1, 8]>> to memref<8x4xf32, strided<[1, 8]>>
  %b = memref.subview %v[0, 4] [8, 4] [1, 1] : memref<8x8xf32, strided<[1, 8]>> to memref<8x4xf32, strided<[1, 8], offset: 32>>
  %c = memref.subview %t[0, 0] [2, 8] [1, 1] : memref<8x8xf32> to memref<2x8xf32, strided<[8, 1]>>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<8x4xf32>) outs(%a : memref<8x4xf32, strided<[1, 8]>>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : memref<8x4xf32>) outs(%b : memref<8x4xf32, strided<[1, 8], offset: 32>>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.tanh %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c : memref<2x8xf32, strided<[8, 1]>>) outs(%z : memref<2x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = arith.addf %in, %in : f32
    linalg.yield %e : f32
  }
  memref.dealloc %t : memref<8x8xf32>
  return
}

// -----

// Partials that also write the elements they fold (a residual add fused
// into an RMSNorm's sum, mantissa-fuse-producers-into-partials): lane l of
// row r writes columns l, l + 32, ... of row r, so the scaling that reads
// row r on the same lanes after the barrier joins the launch. One that
// reads row 0 for every row (what other rows' lanes wrote) does not.

// CHECK-LABEL: func.func @rows_written_by_partials
// CHECK: outs(%[[P:.*]], %{{.*}} : memref<4x32xf32>, memref<4x16x32xf32>)
// CHECK-SAME: mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 1 : i64, mantissa.gpu_thread_stride = 1 : i64
// CHECK: ins(%[[P]] : memref<4x32xf32>) outs(%arg2
// CHECK-SAME: mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 2 : i64, mantissa.gpu_thread_stride = 32 : i64
// CHECK: ins(%[[X:.*]], %arg2 : memref<4x512xf32>, memref<4xf32>) outs(%arg3
// CHECK-SAME: mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 3 : i64, mantissa.gpu_row_columns = 512 : i64, mantissa.gpu_thread_stride = 32 : i64
// CHECK: ins(%[[X]], %arg2 : memref<4x512xf32>, memref<4xf32>) outs(%arg4
// CHECK-SAME: mantissa.gpu_launch = 1 : i64
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#part = affine_map<(d0, d1, d2) -> (d0, d2)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#first = affine_map<(d0, d1) -> (0, d1)>
func.func @rows_written_by_partials(%a: memref<4x512xf32>, %b: memref<4x512xf32>, %s: memref<4xf32>, %y: memref<4x512xf32>, %z: memref<4x512xf32>) {
  %x = memref.alloc() : memref<4x512xf32>
  %p = memref.alloc() : memref<4x32xf32>
  %identity = arith.constant -0.000000e+00 : f32
  linalg.fill ins(%identity : f32) outs(%p : memref<4x32xf32>)
  %xv = memref.expand_shape %x [[0], [1, 2]] output_shape [4, 16, 32] : memref<4x512xf32> into memref<4x16x32xf32>
  %av = memref.expand_shape %a [[0], [1, 2]] output_shape [4, 16, 32] : memref<4x512xf32> into memref<4x16x32xf32>
  %bv = memref.expand_shape %b [[0], [1, 2]] output_shape [4, 16, 32] : memref<4x512xf32> into memref<4x16x32xf32>
  linalg.generic {indexing_maps = [#id3, #id3, #part, #id3], iterator_types = ["parallel", "reduction", "parallel"]} ins(%av, %bv : memref<4x16x32xf32>, memref<4x16x32xf32>) outs(%p, %xv : memref<4x32xf32>, memref<4x16x32xf32>) {
  ^bb0(%in: f32, %in2: f32, %acc: f32, %out: f32):
    %0 = arith.addf %in, %in2 : f32
    %1 = arith.mulf %0, %0 : f32
    %2 = arith.addf %1, %acc : f32
    linalg.yield %2, %0 : f32, f32
  }
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]} ins(%p : memref<4x32xf32>) outs(%s : memref<4xf32>) attrs =  {mantissa.gpu_fold_parts = 32 : i64} {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %s : memref<4x512xf32>, memref<4xf32>) outs(%y : memref<4x512xf32>) {
  ^bb0(%v: f32, %sum: f32, %out: f32):
    %0 = arith.mulf %v, %sum : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [#first, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %s : memref<4x512xf32>, memref<4xf32>) outs(%z : memref<4x512xf32>) {
  ^bb0(%v: f32, %sum: f32, %out: f32):
    %0 = arith.mulf %v, %sum : f32
    linalg.yield %0 : f32
  }
  memref.dealloc %p : memref<4x32xf32>
  memref.dealloc %x : memref<4x512xf32>
  return
}
