// RUN: mantissa-opt %s --pass-pipeline='builtin.module(func.func(mantissa-fuse-parallel-kernels))' --split-input-file | FileCheck %s

// A producer with two readers and the cast of its result for a matrix
// product: one generic writes both, the second reads the first's element as
// a value, and the op between them (a reduction over another buffer) stays.

// CHECK-LABEL: func.func @chain
// CHECK: linalg.generic
// CHECK-SAME: ins(%{{.*}} : memref<4x8xf32>) outs(%[[A:.*]], %[[B:.*]] : memref<4x8xf32>, memref<4x8xbf16>)
// CHECK: %[[E:.*]] = math.exp
// CHECK: %[[T:.*]] = arith.truncf %[[E]]
// CHECK: linalg.yield %[[E]], %[[T]]
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "reduction"]
// CHECK-NOT: linalg.generic
// CHECK: return
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @chain(%x: memref<4x8xf32>, %y: memref<4x8xf32>, %s: memref<4xf32>,
                 %a: memref<4x8xf32>) -> memref<4x8xbf16> {
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<4x8xf32>) outs(%a : memref<4x8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%y : memref<4x8xf32>) outs(%s : memref<4xf32>) {
  ^bb0(%in: f32, %o: f32):
    %sum = arith.addf %in, %o : f32
    linalg.yield %sum : f32
  }
  %b = memref.alloc() : memref<4x8xbf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : memref<4x8xf32>) outs(%b : memref<4x8xbf16>) {
  ^bb0(%in: f32, %o: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  }
  return %b : memref<4x8xbf16>
}

// -----

// Not merged: the op between (a row sum) writes what the third reads, so
// the third cannot move up to the first; an elementwise op reading what the
// one before it wrote, element for element, joins it.

// CHECK-LABEL: func.func @blocked
// CHECK: linalg.generic
// CHECK-SAME: outs(%{{.*}}, %{{.*}} : memref<8xf32>, memref<8xf32>)
// CHECK: math.exp
// CHECK: math.log
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "reduction"]
// CHECK: linalg.generic
// CHECK: math.sqrt
// CHECK-NOT: linalg.generic
#id = affine_map<(d0) -> (d0)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @blocked(%x: memref<8xf32>, %y: memref<8x4xf32>, %a: memref<8xf32>,
                   %b: memref<8xf32>, %c: memref<8xf32>, %d: memref<8xf32>) {
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : memref<8xf32>) outs(%a : memref<8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : memref<8xf32>) outs(%d : memref<8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %e = math.log %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#id2, #row], iterator_types = ["parallel", "reduction"]}
      ins(%y : memref<8x4xf32>) outs(%b : memref<8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %sum = arith.addf %in, %o : f32
    linalg.yield %sum : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%b : memref<8xf32>) outs(%c : memref<8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %e = math.sqrt %in : f32
    linalg.yield %e : f32
  }
  return
}

// -----

// Not merged: the second reads the first's output at another element (a
// reversed view), which another thread writes.

// CHECK-LABEL: func.func @shifted
// CHECK-COUNT-2: linalg.generic
#id = affine_map<(d0) -> (d0)>
#rev = affine_map<(d0) -> (7 - d0)>
func.func @shifted(%x: memref<8xf32>, %a: memref<8xf32>, %b: memref<8xf32>) {
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : memref<8xf32>) outs(%a : memref<8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#rev, #id], iterator_types = ["parallel"]}
      ins(%a : memref<8xf32>) outs(%b : memref<8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %e = math.sqrt %in : f32
    linalg.yield %e : f32
  }
  return
}

// -----

// Not merged: the second writes what the first reads (another thread's
// element would be overwritten before it is read), and a zero fill stays
// on its own for the GEMM after it.

// CHECK-LABEL: func.func @antidependence
// CHECK-COUNT-3: linalg.generic
#id = affine_map<(d0) -> (d0)>
func.func @antidependence(%x: memref<8xf32>, %a: memref<8xf32>, %z: memref<8xf32>) {
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : memref<8xf32>) outs(%a : memref<8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : memref<8xf32>) outs(%x : memref<8xf32>) {
  ^bb0(%in: f32, %o: f32):
    %e = math.sqrt %in : f32
    linalg.yield %e : f32
  }
  %zero = arith.constant 0.0 : f32
  linalg.generic {indexing_maps = [#id], iterator_types = ["parallel"]}
      outs(%z : memref<8xf32>) {
  ^bb0(%o: f32):
    linalg.yield %zero : f32
  }
  return
}
