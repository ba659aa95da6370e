// RUN: mantissa-opt %s --mantissa-outline-linalg-ops | FileCheck %s

// Each linalg op on buffers moves into a private function of its own,
// called in its place; constants are cloned into it, other captured values
// become arguments. The large elementwise op (2^18 iterations, outer loop
// parallel and indexing the output) is marked for the OpenMP threads; the
// small one and the reduction over the outer loop are not.

// CHECK-LABEL: func.func @step
// CHECK-SAME: (%[[X:.*]]: memref<512x512xf32>, %[[S:.*]]: f32, %[[Y:.*]]: memref<512x512xf32>, %[[Z:.*]]: memref<4xf32>, %[[R:.*]]: memref<512xf32>)
// CHECK: call @step__0_generic(%[[X]], %[[Y]], %[[S]])
// CHECK: call @step__1_fill(%[[Z]])
// CHECK: call @step__2_generic(%[[X]], %[[R]])
// CHECK: return
// CHECK: func.func private @step__0_generic(%{{.*}}: memref<512x512xf32>, %{{.*}}: memref<512x512xf32>, %{{.*}}: f32) attributes {mantissa.parallel_outer_loop}
// CHECK: arith.constant 2.000000e+00
// CHECK: linalg.generic
// CHECK: func.func private @step__1_fill(%{{.*}}: memref<4xf32>) {
// CHECK: linalg.fill
// CHECK: func.func private @step__2_generic(%{{.*}}: memref<512x512xf32>, %{{.*}}: memref<512xf32>) {
#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
func.func @step(%x: memref<512x512xf32>, %s: f32, %y: memref<512x512xf32>, %z: memref<4xf32>, %r: memref<512xf32>) {
  %two = arith.constant 2.0 : f32
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<512x512xf32>) outs(%y : memref<512x512xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.mulf %a, %two : f32
    %p = arith.addf %m, %s : f32
    linalg.yield %p : f32
  }
  linalg.fill ins(%two : f32) outs(%z : memref<4xf32>)
  linalg.generic {indexing_maps = [#id, #col], iterator_types = ["reduction", "parallel"]}
      ins(%x : memref<512x512xf32>) outs(%r : memref<512xf32>) {
  ^bb0(%a: f32, %o: f32):
    %p = arith.addf %o, %a : f32
    linalg.yield %p : f32
  }
  return
}
