// RUN: mantissa-opt %s --split-input-file --mantissa-outline-linalg-ops | FileCheck %s
// RUN: mantissa-opt %s --split-input-file --mantissa-outline-linalg-ops | FileCheck %s --check-prefix=NOALIAS

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
// CHECK: func.func private @step__0_generic(%{{.*}}: memref<512x512xf32> {llvm.noalias}, %{{.*}}: memref<512x512xf32> {llvm.noalias}, %{{.*}}: f32) attributes {mantissa.parallel_outer_loop}
// CHECK: arith.constant 2.000000e+00
// CHECK: linalg.generic
// CHECK: func.func private @step__1_fill(%{{.*}}: memref<4xf32> {llvm.noalias}) {
// CHECK: linalg.fill
// CHECK: func.func private @step__2_generic(%{{.*}}: memref<512x512xf32> {llvm.noalias}, %{{.*}}: memref<512xf32> {llvm.noalias}) {
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

// -----

// Arguments get `llvm.noalias` (LLVM may then vectorise without checking
// at run time that stores do not change what later loads read) unless
// another argument views the same buffer and one of them is written
// (slices of one buffer read and written). An op computed in place gets
// its buffer once; two views of a buffer that is only read keep it, and
// so does a temporary.

// NOALIAS-LABEL: func.func private @aliases__0_generic
// NOALIAS-SAME: (%{{.*}}: memref<8xf32> {llvm.noalias}) {
// NOALIAS-LABEL: func.func private @aliases__1_copy
// NOALIAS-SAME: (%{{.*}}: memref<4xf32, strided<[1]>>, %{{.*}}: memref<4xf32, strided<[1], offset: 4>>)
// NOALIAS-LABEL: func.func private @aliases__2_generic
// NOALIAS-SAME: (%{{.*}}: memref<4xf32, strided<[1]>> {llvm.noalias}, %{{.*}}: memref<4xf32, strided<[1], offset: 4>> {llvm.noalias}, %{{.*}}: memref<4xf32> {llvm.noalias})
#id = affine_map<(d0) -> (d0)>
func.func @aliases(%x: memref<8xf32>, %y: memref<8xf32>) {
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : memref<8xf32>) outs(%x : memref<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %m = arith.mulf %a, %a : f32
    linalg.yield %m : f32
  }
  %lo = memref.subview %y[0] [4] [1] : memref<8xf32> to memref<4xf32, strided<[1]>>
  %hi = memref.subview %y[4] [4] [1] : memref<8xf32> to memref<4xf32, strided<[1], offset: 4>>
  linalg.copy ins(%lo : memref<4xf32, strided<[1]>>) outs(%hi : memref<4xf32, strided<[1], offset: 4>>)
  %t = memref.alloc() : memref<4xf32>
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%lo, %hi : memref<4xf32, strided<[1]>>, memref<4xf32, strided<[1], offset: 4>>) outs(%t : memref<4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  }
  memref.dealloc %t : memref<4xf32>
  return
}

// -----

// Globals: a constant one is never written, so it overlaps nothing that
// is; two memref.get_global of a global the op writes may be one buffer.

// NOALIAS-LABEL: func.func private @globals__0_generic
// NOALIAS-SAME: (%{{.*}}: memref<4xf32> {llvm.noalias}, %{{.*}}: memref<4xf32>, %{{.*}}: memref<4xf32>)
#id = affine_map<(d0) -> (d0)>
memref.global "private" constant @k : memref<4xf32> = dense<1.0>
memref.global "private" @g : memref<4xf32> = dense<0.0>
func.func @globals() {
  %k = memref.get_global @k : memref<4xf32>
  %read = memref.get_global @g : memref<4xf32>
  %written = memref.get_global @g : memref<4xf32>
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%k, %read : memref<4xf32>, memref<4xf32>) outs(%written : memref<4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  }
  return
}
