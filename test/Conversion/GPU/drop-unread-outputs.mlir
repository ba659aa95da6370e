// RUN: mantissa-opt %s --pass-pipeline='builtin.module(func.func(mantissa-drop-unread-outputs))' --split-input-file | FileCheck %s

// A generic that writes an fp32 temporary nothing reads (its one reader was
// fused into it) beside a rounding that the function returns: the temporary
// and its output go, the rounding stays. The second generic's only output
// is a temporary nothing reads, through a view: it goes altogether.

// CHECK-LABEL: func.func @unread
// CHECK-NOT: memref.alloc() : memref<4x8xf32>
// CHECK: linalg.generic
// CHECK-SAME: ins(%{{.*}} : memref<4x8xf32>) outs(%[[R:.*]] : memref<4x8xbf16>)
// CHECK: ^bb0(%{{.*}}: f32, %{{.*}}: bf16):
// CHECK: %[[E:.*]] = math.exp
// CHECK: %[[T:.*]] = arith.truncf %[[E]]
// CHECK: linalg.yield %[[T]] : bf16
// CHECK-NOT: linalg.generic
// CHECK-NOT: memref.alloc
// CHECK: return
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @unread(%x: memref<4x8xf32>) -> memref<4x8xbf16> {
  %wide = memref.alloc() : memref<4x8xf32>
  %round = memref.alloc() : memref<4x8xbf16>
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<4x8xf32>) outs(%wide, %round : memref<4x8xf32>, memref<4x8xbf16>) {
  ^bb0(%in: f32, %o: f32, %r: bf16):
    %e = math.exp %in : f32
    %t = arith.truncf %e : f32 to bf16
    linalg.yield %e, %t : f32, bf16
  }
  memref.dealloc %wide : memref<4x8xf32>
  %other = memref.alloc() : memref<32xf32>
  %view = memref.expand_shape %other [[0, 1]] output_shape [4, 8] : memref<32xf32> into memref<4x8xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<4x8xf32>) outs(%view : memref<4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %n = arith.negf %in : f32
    linalg.yield %n : f32
  }
  return %round : memref<4x8xbf16>
}

// -----

// Kept: a temporary read later through a view, an output the op reads
// first (an accumulation), and a function argument (the caller reads it).

// CHECK-LABEL: func.func @kept
// CHECK: linalg.generic
// CHECK-SAME: outs(%{{.*}}, %{{.*}}, %{{.*}} : memref<4x8xf32>, memref<4x8xf32>, memref<4x8xf32>)
// CHECK: linalg.generic
// CHECK-NOT: linalg.generic
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @kept(%x: memref<4x8xf32>, %out: memref<4x8xf32>) -> memref<4xf32> {
  %t = memref.alloc() : memref<4x8xf32>
  %acc = memref.alloc() : memref<4x8xf32>
  linalg.generic {indexing_maps = [#id, #id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<4x8xf32>) outs(%t, %acc, %out : memref<4x8xf32>, memref<4x8xf32>, memref<4x8xf32>) {
  ^bb0(%in: f32, %a: f32, %b: f32, %c: f32):
    %e = math.exp %in : f32
    %s = arith.addf %b, %e : f32
    linalg.yield %e, %s, %e : f32, f32, f32
  }
  %flat = memref.collapse_shape %t [[0, 1]] : memref<4x8xf32> into memref<32xf32>
  %back = memref.expand_shape %flat [[0, 1]] output_shape [4, 8] : memref<32xf32> into memref<4x8xf32>
  %sum = memref.alloc() : memref<4xf32>
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%back : memref<4x8xf32>) outs(%sum : memref<4xf32>) {
  ^bb0(%in: f32, %o: f32):
    %y = arith.addf %in, %o : f32
    linalg.yield %y : f32
  }
  return %sum : memref<4xf32>
}

// -----

// Partials that fold a value per row and also write the element each
// computes from it (an output nothing reads): that output is the only
// operand that names the column loop, which would have no range without
// it, so it stays.

// CHECK-LABEL: func.func @loop_carrier
// CHECK: linalg.generic
// CHECK-SAME: outs(%{{.*}}, %{{.*}} : memref<4x32xf32>, memref<4x16x32xf32>)
#row = affine_map<(d0, d1, d2) -> (d0)>
#part = affine_map<(d0, d1, d2) -> (d0, d2)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @loop_carrier(%r: memref<4xf32>, %p: memref<4x32xf32>) {
  %x = memref.alloc() : memref<4x512xf32>
  %xv = memref.expand_shape %x [[0], [1, 2]] output_shape [4, 16, 32] : memref<4x512xf32> into memref<4x16x32xf32>
  linalg.generic {indexing_maps = [#row, #part, #id3], iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%r : memref<4xf32>) outs(%p, %xv : memref<4x32xf32>, memref<4x16x32xf32>) {
  ^bb0(%v: f32, %acc: f32, %o: f32):
    %e = math.exp %v : f32
    %s = arith.addf %e, %acc : f32
    linalg.yield %s, %e : f32, f32
  }
  memref.dealloc %x : memref<4x512xf32>
  return
}
