// RUN: mantissa-opt %s --pass-pipeline='builtin.module(func.func(mantissa-compute-results-in-place))' --split-input-file | FileCheck %s

// The temporary that bufferization copies into the out-parameter is
// replaced by the out-parameter: no copy, no temporary.

// CHECK-LABEL: func.func @result
// CHECK-SAME: (%[[X:.*]]: memref<4xf32>, %[[OUT:.*]]: memref<4xf32>)
// CHECK-NOT: memref.alloc
// CHECK: linalg.generic {{.*}} ins(%[[X]] : memref<4xf32>) outs(%[[OUT]] : memref<4xf32>)
// CHECK-NOT: memref.copy
// CHECK-NOT: memref.dealloc
// CHECK: return
#id = affine_map<(d0) -> (d0)>
func.func @result(%x: memref<4xf32>, %out: memref<4xf32>) {
  %t = memref.alloc() : memref<4xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : memref<4xf32>) outs(%t : memref<4xf32>) {
  ^bb0(%in: f32, %o: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  memref.copy %t, %out : memref<4xf32> to memref<4xf32>
  memref.dealloc %t : memref<4xf32>
  return
}

// -----

// Kept: the temporary is read after the copy, and the second one has a
// different type (a view of it is copied).

// CHECK-LABEL: func.func @kept
// CHECK-COUNT-2: memref.alloc
// CHECK: memref.copy
// CHECK: memref.copy
func.func @kept(%x: memref<4xf32>, %out: memref<4xf32>, %out2: memref<2xf32>, %sink: memref<4xf32>) {
  %t = memref.alloc() : memref<4xf32>
  %u = memref.alloc() : memref<4xf32>
  linalg.copy ins(%x : memref<4xf32>) outs(%t : memref<4xf32>)
  linalg.copy ins(%x : memref<4xf32>) outs(%u : memref<4xf32>)
  memref.copy %t, %out : memref<4xf32> to memref<4xf32>
  linalg.copy ins(%t : memref<4xf32>) outs(%sink : memref<4xf32>)
  %v = memref.subview %u[0] [2] [1] : memref<4xf32> to memref<2xf32, strided<[1]>>
  memref.copy %v, %out2 : memref<2xf32, strided<[1]>> to memref<2xf32>
  memref.dealloc %t : memref<4xf32>
  memref.dealloc %u : memref<4xf32>
  return
}
