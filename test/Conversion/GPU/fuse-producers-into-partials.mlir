// RUN: mantissa-opt %s --pass-pipeline='builtin.module(func.func(mantissa-fuse-producers-into-partials))' --split-input-file | FileCheck %s

// A residual add, then an RMSNorm's sum of squares split in 32 partials
// (as mantissa-split-reductions leaves it), reading the sum through a
// keepdim view and the split's view: the partials compute the add on the
// inputs' elements expanded as the sum's views expand it, fold the square,
// and write the element through the same views. The add goes; the fold
// and the scaling, which read the sum and the element, stay as they were.

// CHECK-LABEL: func.func @residual_rms
// CHECK-SAME: %[[A:[^:]*]]: memref<4x512xf32>, %[[B:[^:]*]]: memref<4x512xbf16>
// CHECK: %[[X:.*]] = memref.alloc() : memref<4x512xf32>
// CHECK-NOT: arith.extf
// CHECK: %[[P:.*]] = memref.alloc() : memref<4x1x32xf32>
// CHECK: linalg.fill
// CHECK: %[[XK:.*]] = memref.expand_shape %[[X]]
// CHECK: %[[XV:.*]] = memref.expand_shape %[[XK]] {{\[}}[0], [1], [2, 3]] output_shape [4, 1, 16, 32]
// CHECK: %[[AV:.*]] = memref.expand_shape %[[A]] {{\[}}[0, 1], [2, 3]] output_shape [4, 1, 16, 32] : memref<4x512xf32> into memref<4x1x16x32xf32>
// CHECK: %[[BV:.*]] = memref.expand_shape %[[B]] {{\[}}[0, 1], [2, 3]] output_shape [4, 1, 16, 32] : memref<4x512xbf16> into memref<4x1x16x32xbf16>
// CHECK: linalg.generic {indexing_maps = [#[[ID:.*]], #[[ID]], #[[PART:.*]], #[[ID]]], iterator_types = ["parallel", "parallel", "reduction", "parallel"]}
// CHECK-SAME: ins(%[[AV]], %[[BV]] : memref<4x1x16x32xf32>, memref<4x1x16x32xbf16>) outs(%[[P]], %[[XV]] : memref<4x1x32xf32>, memref<4x1x16x32xf32>)
// CHECK: ^bb0(%[[IA:.*]]: f32, %[[IB:.*]]: bf16, %[[ACC:.*]]: f32, %{{.*}}: f32):
// CHECK: %[[E:.*]] = arith.extf %[[IB]]
// CHECK: %[[SUM:.*]] = arith.addf %[[IA]], %[[E]]
// CHECK: %[[SQ:.*]] = arith.mulf %[[SUM]], %[[SUM]]
// CHECK: %[[NEXT:.*]] = arith.addf %[[SQ]], %[[ACC]]
// CHECK: linalg.yield %[[NEXT]], %[[SUM]] : f32, f32
// CHECK: mantissa.gpu_fold_parts = 32
// CHECK: ins(%[[X]], %{{.*}}, %{{.*}} : memref<4x512xf32>, memref<4x1xf32>, memref<512xf32>)
// CHECK: math.rsqrt
#id = affine_map<(d0, d1) -> (d0, d1)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#part = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#p3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#o3 = affine_map<(d0, d1, d2) -> (d0, d1)>
#rs = affine_map<(d0, d1) -> (d0, 0)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @residual_rms(%a: memref<4x512xf32>, %b: memref<4x512xbf16>, %w: memref<512xf32>, %s: memref<4x1xf32>, %y: memref<4x512xf32>) {
  %x = memref.alloc() : memref<4x512xf32>
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : memref<4x512xf32>, memref<4x512xbf16>) outs(%x : memref<4x512xf32>) {
  ^bb0(%in: f32, %in2: bf16, %out: f32):
    %e = arith.extf %in2 : bf16 to f32
    %sum = arith.addf %in, %e : f32
    linalg.yield %sum : f32
  }
  %p = memref.alloc() : memref<4x1x32xf32>
  %identity = arith.constant -0.0 : f32
  linalg.fill ins(%identity : f32) outs(%p : memref<4x1x32xf32>)
  %xk = memref.expand_shape %x [[0, 1], [2]] output_shape [4, 1, 512] : memref<4x512xf32> into memref<4x1x512xf32>
  %xv = memref.expand_shape %xk [[0], [1], [2, 3]] output_shape [4, 1, 16, 32] : memref<4x1x512xf32> into memref<4x1x16x32xf32>
  linalg.generic {indexing_maps = [#id4, #part], iterator_types = ["parallel", "parallel", "reduction", "parallel"]}
      ins(%xv : memref<4x1x16x32xf32>) outs(%p : memref<4x1x32xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %sq = arith.mulf %in, %in : f32
    %sum = arith.addf %sq, %acc : f32
    linalg.yield %sum : f32
  }
  linalg.generic {indexing_maps = [#p3, #o3], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%p : memref<4x1x32xf32>) outs(%s : memref<4x1xf32>) attrs = {mantissa.gpu_fold_parts = 32 : i64} {
  ^bb0(%in: f32, %acc: f32):
    %sum = arith.addf %in, %acc : f32
    linalg.yield %sum : f32
  }
  memref.dealloc %p : memref<4x1x32xf32>
  linalg.generic {indexing_maps = [#id, #rs, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %s, %w : memref<4x512xf32>, memref<4x1xf32>, memref<512xf32>) outs(%y : memref<4x512xf32>) {
  ^bb0(%in: f32, %sum: f32, %gain: f32, %out: f32):
    %r = math.rsqrt %sum : f32
    %n = arith.mulf %in, %r : f32
    %g = arith.mulf %n, %gain : f32
    linalg.yield %g : f32
  }
  memref.dealloc %x : memref<4x512xf32>
  return
}

// -----

// A producer with a broadcast operand (a gain per column, a value per row
// read at column 0): the gain's one dimension is the split one, expanded
// like it; the per-row value keeps its unit dimension, indexed by 0.

// CHECK-DAG: #[[$GAIN:.*]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-DAG: #[[$ROW:.*]] = affine_map<(d0, d1, d2) -> (d0, 0)>
// CHECK-LABEL: func.func @broadcasts
// CHECK-SAME: %[[X:[^:]*]]: memref<4x512xf32>, %[[G:[^:]*]]: memref<512xf32>, %[[R:[^:]*]]: memref<4x1xf32>
// CHECK: %[[GV:.*]] = memref.expand_shape %[[G]] {{\[}}[0, 1]] output_shape [16, 32]
// CHECK: linalg.generic {indexing_maps = [#[[ID:.*]], #[[$GAIN]], #[[$ROW]], #[[PART:.*]], #[[ID]]]
// CHECK-SAME: ins(%{{.*}}, %[[GV]], %[[R]] : memref<4x16x32xf32>, memref<16x32xf32>, memref<4x1xf32>)
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: arith.maximumf
#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
#row = affine_map<(d0, d1) -> (d0, 0)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#part = affine_map<(d0, d1, d2) -> (d0, d2)>
#p2 = affine_map<(d0, d1) -> (d0, d1)>
#o2 = affine_map<(d0, d1) -> (d0)>
func.func @broadcasts(%in: memref<4x512xf32>, %g: memref<512xf32>, %r: memref<4x1xf32>, %m: memref<4xf32>) {
  %x = memref.alloc() : memref<4x512xf32>
  linalg.generic {indexing_maps = [#id, #col, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%in, %g, %r : memref<4x512xf32>, memref<512xf32>, memref<4x1xf32>) outs(%x : memref<4x512xf32>) {
  ^bb0(%v: f32, %gain: f32, %bias: f32, %out: f32):
    %scaled = arith.mulf %v, %gain : f32
    %sum = arith.addf %scaled, %bias : f32
    linalg.yield %sum : f32
  }
  %p = memref.alloc() : memref<4x32xf32>
  %identity = arith.constant 0xFF800000 : f32
  linalg.fill ins(%identity : f32) outs(%p : memref<4x32xf32>)
  %xv = memref.expand_shape %x [[0], [1, 2]] output_shape [4, 16, 32] : memref<4x512xf32> into memref<4x16x32xf32>
  linalg.generic {indexing_maps = [#id3, #part], iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%xv : memref<4x16x32xf32>) outs(%p : memref<4x32xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %max = arith.maximumf %v, %acc : f32
    linalg.yield %max : f32
  }
  linalg.generic {indexing_maps = [#p2, #o2], iterator_types = ["parallel", "reduction"]}
      ins(%p : memref<4x32xf32>) outs(%m : memref<4xf32>) attrs = {mantissa.gpu_fold_parts = 32 : i64} {
  ^bb0(%v: f32, %acc: f32):
    %max = arith.maximumf %v, %acc : f32
    linalg.yield %max : f32
  }
  memref.dealloc %p : memref<4x32xf32>
  memref.dealloc %x : memref<4x512xf32>
  return
}

// -----

// Kept: the producer's input is written between the two (the partials
// would see the new value); the temporary is read between them (it would
// not be written yet); the producer reads its position (linalg.index);
// the reduction is not split (its one thread per row would write the row
// alone, column after column).

// CHECK-LABEL: func.func @kept
// CHECK-COUNT-4: arith.negf
// CHECK-NOT: outs(%{{.*}}, %{{.*}} :
#id = affine_map<(d0, d1) -> (d0, d1)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#part = affine_map<(d0, d1, d2) -> (d0, d2)>
#p2 = affine_map<(d0, d1) -> (d0, d1)>
#o2 = affine_map<(d0, d1) -> (d0)>
func.func @kept(%in: memref<4x512xf32>, %other: memref<4x512xf32>, %m: memref<4xf32>, %copy: memref<4x512xf32>) {
  %zero = arith.constant 0.0 : f32
  %p = memref.alloc() : memref<4x32xf32>

  %x1 = memref.alloc() : memref<4x512xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%in : memref<4x512xf32>) outs(%x1 : memref<4x512xf32>) {
  ^bb0(%v: f32, %out: f32):
    %n = arith.negf %v : f32
    linalg.yield %n : f32
  }
  linalg.fill ins(%zero : f32) outs(%in : memref<4x512xf32>)
  %v1 = memref.expand_shape %x1 [[0], [1, 2]] output_shape [4, 16, 32] : memref<4x512xf32> into memref<4x16x32xf32>
  linalg.generic {indexing_maps = [#id3, #part], iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%v1 : memref<4x16x32xf32>) outs(%p : memref<4x32xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %sum = arith.addf %v, %acc : f32
    linalg.yield %sum : f32
  }
  linalg.generic {indexing_maps = [#p2, #o2], iterator_types = ["parallel", "reduction"]}
      ins(%p : memref<4x32xf32>) outs(%m : memref<4xf32>) attrs = {mantissa.gpu_fold_parts = 32 : i64} {
  ^bb0(%v: f32, %acc: f32):
    %sum = arith.addf %v, %acc : f32
    linalg.yield %sum : f32
  }

  %x2 = memref.alloc() : memref<4x512xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%other : memref<4x512xf32>) outs(%x2 : memref<4x512xf32>) {
  ^bb0(%v: f32, %out: f32):
    %n = arith.negf %v : f32
    linalg.yield %n : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x2 : memref<4x512xf32>) outs(%copy : memref<4x512xf32>) {
  ^bb0(%v: f32, %out: f32):
    linalg.yield %v : f32
  }
  %v2 = memref.expand_shape %x2 [[0], [1, 2]] output_shape [4, 16, 32] : memref<4x512xf32> into memref<4x16x32xf32>
  linalg.generic {indexing_maps = [#id3, #part], iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%v2 : memref<4x16x32xf32>) outs(%p : memref<4x32xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %sum = arith.addf %v, %acc : f32
    linalg.yield %sum : f32
  }
  linalg.generic {indexing_maps = [#p2, #o2], iterator_types = ["parallel", "reduction"]}
      ins(%p : memref<4x32xf32>) outs(%m : memref<4xf32>) attrs = {mantissa.gpu_fold_parts = 32 : i64} {
  ^bb0(%v: f32, %acc: f32):
    %sum = arith.addf %v, %acc : f32
    linalg.yield %sum : f32
  }

  %x3 = memref.alloc() : memref<4x512xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%other : memref<4x512xf32>) outs(%x3 : memref<4x512xf32>) {
  ^bb0(%v: f32, %out: f32):
    %i = linalg.index 1 : index
    %c = arith.index_cast %i : index to i32
    %f = arith.sitofp %c : i32 to f32
    %s = arith.addf %v, %f : f32
    %n = arith.negf %s : f32
    linalg.yield %n : f32
  }
  %v3 = memref.expand_shape %x3 [[0], [1, 2]] output_shape [4, 16, 32] : memref<4x512xf32> into memref<4x16x32xf32>
  linalg.generic {indexing_maps = [#id3, #part], iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%v3 : memref<4x16x32xf32>) outs(%p : memref<4x32xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %sum = arith.addf %v, %acc : f32
    linalg.yield %sum : f32
  }
  linalg.generic {indexing_maps = [#p2, #o2], iterator_types = ["parallel", "reduction"]}
      ins(%p : memref<4x32xf32>) outs(%m : memref<4xf32>) attrs = {mantissa.gpu_fold_parts = 32 : i64} {
  ^bb0(%v: f32, %acc: f32):
    %sum = arith.addf %v, %acc : f32
    linalg.yield %sum : f32
  }

  %x4 = memref.alloc() : memref<4x512xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%other : memref<4x512xf32>) outs(%x4 : memref<4x512xf32>) {
  ^bb0(%v: f32, %out: f32):
    %n = arith.negf %v : f32
    linalg.yield %n : f32
  }
  linalg.generic {indexing_maps = [#id, #o2], iterator_types = ["parallel", "reduction"]}
      ins(%x4 : memref<4x512xf32>) outs(%m : memref<4xf32>) {
  ^bb0(%v: f32, %acc: f32):
    %sum = arith.addf %v, %acc : f32
    linalg.yield %sum : f32
  }
  memref.dealloc %x1 : memref<4x512xf32>
  memref.dealloc %x2 : memref<4x512xf32>
  memref.dealloc %x3 : memref<4x512xf32>
  memref.dealloc %x4 : memref<4x512xf32>
  memref.dealloc %p : memref<4x32xf32>
  return
}
