// RUN: mantissa-opt %s --pass-pipeline='builtin.module(func.func(mantissa-share-roundings))' --split-input-file | FileCheck %s

// A weight rounded for its forward product and, transposed, for the
// backward one: one rounding of the whole weight, first in the block, and
// the second product reads its transpose.

// CHECK-LABEL: func.func @weight
// CHECK-SAME: %[[W:[^:]*]]: memref<4x8xf32>
// CHECK: %[[R:.*]] = memref.alloc() : memref<4x8xbf16>
// CHECK: linalg.generic {{.*}} ins(%[[W]] : memref<4x8xf32>) outs(%[[R]] : memref<4x8xbf16>)
// CHECK: arith.truncf
// CHECK-NOT: arith.truncf
// CHECK: linalg.matmul ins(%{{.*}}, %[[R]] : memref<2x4xbf16>, memref<4x8xbf16>)
// CHECK: %[[RT:.*]] = memref.transpose %[[R]] (d0, d1) -> (d1, d0)
// CHECK: linalg.matmul ins(%{{.*}}, %[[RT]] : memref<2x8xbf16>, memref<8x4xbf16, strided<[1, 8]>>)
// CHECK: memref.dealloc %[[R]]
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @weight(%w: memref<4x8xf32>, %x: memref<2x4xbf16>, %dy: memref<2x8xbf16>,
                  %y: memref<2x8xf32>, %dx: memref<2x4xf32>) {
  %a = memref.alloc() : memref<4x8xbf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w : memref<4x8xf32>) outs(%a : memref<4x8xbf16>) {
  ^bb0(%in: f32, %o: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  }
  linalg.matmul ins(%x, %a : memref<2x4xbf16>, memref<4x8xbf16>) outs(%y : memref<2x8xf32>)
  %wt = memref.transpose %w (d0, d1) -> (d1, d0) : memref<4x8xf32> to memref<8x4xf32, strided<[1, 8]>>
  %b = memref.alloc() : memref<8x4xbf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%wt : memref<8x4xf32, strided<[1, 8]>>) outs(%b : memref<8x4xbf16>) {
  ^bb0(%in: f32, %o: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  }
  linalg.matmul ins(%dy, %b : memref<2x8xbf16>, memref<8x4xbf16>) outs(%dx : memref<2x4xf32>)
  memref.dealloc %a : memref<4x8xbf16>
  memref.dealloc %b : memref<8x4xbf16>
  return
}

// -----

// A product's fp32 result rounded (through a reshape) for the next product:
// the rounding goes right after the product, where the GPU program makes it
// the GEMM's epilogue.

// CHECK-LABEL: func.func @product
// CHECK: linalg.matmul
// CHECK-NEXT: %[[R:.*]] = memref.alloc() : memref<2x8xbf16>
// CHECK-NEXT: linalg.generic
// CHECK: arith.truncf
// CHECK: linalg.copy
// CHECK: memref.expand_shape %[[R]]
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func @product(%x: memref<2x4xbf16>, %w: memref<4x8xbf16>, %other: memref<2x8xf32>,
                   %out: memref<2x2x4xf32>) {
  %p = memref.alloc() : memref<2x8xf32>
  linalg.matmul ins(%x, %w : memref<2x4xbf16>, memref<4x8xbf16>) outs(%p : memref<2x8xf32>)
  linalg.copy ins(%p : memref<2x8xf32>) outs(%other : memref<2x8xf32>)
  %v = memref.expand_shape %p [[0], [1, 2]] output_shape [2, 2, 4] : memref<2x8xf32> into memref<2x2x4xf32>
  %a = memref.alloc() : memref<2x2x4xbf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%v : memref<2x2x4xf32>) outs(%a : memref<2x2x4xbf16>) {
  ^bb0(%in: f32, %o: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%a : memref<2x2x4xbf16>) outs(%out : memref<2x2x4xf32>) {
  ^bb0(%in: bf16, %o: f32):
    %e = arith.extf %in : bf16 to f32
    linalg.yield %e : f32
  }
  memref.dealloc %p : memref<2x8xf32>
  memref.dealloc %a : memref<2x2x4xbf16>
  return
}

// -----

// Kept: the buffer is written again after it was rounded, so a copy made
// before would be stale for nothing, and one made after would be wrong.

// CHECK-LABEL: func.func @rewritten
// CHECK-COUNT-2: arith.truncf
#id = affine_map<(d0) -> (d0)>
func.func @rewritten(%x: memref<8xf32>, %buf: memref<8xf32>, %o1: memref<8xbf16>,
                     %o2: memref<8xbf16>) {
  %a = memref.alloc() : memref<8xbf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%buf : memref<8xf32>) outs(%a : memref<8xbf16>) {
  ^bb0(%in: f32, %o: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  }
  linalg.copy ins(%a : memref<8xbf16>) outs(%o1 : memref<8xbf16>)
  linalg.copy ins(%x : memref<8xf32>) outs(%buf : memref<8xf32>)
  %b = memref.alloc() : memref<8xbf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%buf : memref<8xf32>) outs(%b : memref<8xbf16>) {
  ^bb0(%in: f32, %o: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  }
  linalg.copy ins(%b : memref<8xbf16>) outs(%o2 : memref<8xbf16>)
  memref.dealloc %a : memref<8xbf16>
  memref.dealloc %b : memref<8xbf16>
  return
}
