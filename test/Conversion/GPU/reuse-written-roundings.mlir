// RUN: mantissa-opt %s --pass-pipeline='builtin.module(func.func(mantissa-reuse-written-roundings))' --split-input-file | FileCheck %s

// The writer of %x also writes its bf16 rounding %y (a norm backward's
// gradient and its rounding for one GEMM): the transposed rounding for the
// other GEMM becomes a copy of %y through the same map.

// CHECK-LABEL: func.func @written_beside
// CHECK: %[[X:.*]] = memref.alloc() : memref<8x16xf32>
// CHECK: %[[Y:.*]] = memref.alloc() : memref<8x16xbf16>
// CHECK: linalg.generic {{.*}} outs(%[[X]], %[[Y]] :
// CHECK: linalg.generic {indexing_maps = [#[[T:.*]], #[[I:.*]]], iterator_types = ["parallel", "parallel"]} ins(%[[Y]] : memref<8x16xbf16>) outs(%arg1 : memref<16x8xbf16>)
// CHECK-NEXT: ^bb0(%[[IN:.*]]: bf16, %{{.*}}: bf16):
// CHECK-NEXT: linalg.yield %[[IN]] : bf16
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
func.func @written_beside(%a: memref<8x16xf32>, %z: memref<16x8xbf16>, %u: memref<8x16xf32>) {
  %x = memref.alloc() : memref<8x16xf32>
  %y = memref.alloc() : memref<8x16xbf16>
  linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : memref<8x16xf32>) outs(%x, %y : memref<8x16xf32>, memref<8x16xbf16>) {
  ^bb0(%in: f32, %o1: f32, %o2: bf16):
    %e = math.exp %in : f32
    %r = arith.truncf %e : f32 to bf16
    linalg.yield %e, %r : f32, bf16
  }
  linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<8x16xf32>) outs(%z : memref<16x8xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.truncf %in : f32 to bf16
    linalg.yield %r : bf16
  }
  linalg.copy ins(%x : memref<8x16xf32>) outs(%u : memref<8x16xf32>)
  memref.dealloc %x : memref<8x16xf32>
  memref.dealloc %y : memref<8x16xbf16>
  return
}

// -----

// Two roundings of %x, the transposed one first: the one in place (which
// the kernel writing %x can compute in its launch) moves up before it and
// computes; the transposed one copies it.

// CHECK-LABEL: func.func @two_roundings
// CHECK: %[[X:.*]] = memref.alloc() : memref<8x16xf32>
// CHECK: math.exp
// CHECK: %[[P:.*]] = memref.alloc() : memref<8x16xbf16>
// CHECK: linalg.generic {{.*}} ins(%[[X]] : memref<8x16xf32>) outs(%[[P]] : memref<8x16xbf16>)
// CHECK: arith.truncf
// CHECK: linalg.generic {{.*}} ins(%[[P]] : memref<8x16xbf16>) outs(%arg1 : memref<16x8xbf16>)
// CHECK-NOT: arith.truncf
// CHECK: linalg.copy ins(%[[P]]
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
func.func @two_roundings(%a: memref<8x16xf32>, %z: memref<16x8xbf16>, %u: memref<8x16xbf16>) {
  %x = memref.alloc() : memref<8x16xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : memref<8x16xf32>) outs(%x : memref<8x16xf32>) {
  ^bb0(%in: f32, %o: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<8x16xf32>) outs(%z : memref<16x8xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.truncf %in : f32 to bf16
    linalg.yield %r : bf16
  }
  %p = memref.alloc() : memref<8x16xbf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<8x16xf32>) outs(%p : memref<8x16xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.truncf %in : f32 to bf16
    linalg.yield %r : bf16
  }
  linalg.copy ins(%p : memref<8x16xbf16>) outs(%u : memref<8x16xbf16>)
  memref.dealloc %x : memref<8x16xf32>
  memref.dealloc %p : memref<8x16xbf16>
  return
}

// -----

// %x written again between its two roundings: each rounds what it reads.

// CHECK-LABEL: func.func @rewritten
// CHECK-COUNT-2: arith.truncf
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
func.func @rewritten(%a: memref<8x16xf32>, %z: memref<16x8xbf16>, %u: memref<8x16xbf16>) {
  %x = memref.alloc() : memref<8x16xf32>
  linalg.copy ins(%a : memref<8x16xf32>) outs(%x : memref<8x16xf32>)
  %p = memref.alloc() : memref<8x16xbf16>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<8x16xf32>) outs(%p : memref<8x16xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.truncf %in : f32 to bf16
    linalg.yield %r : bf16
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : memref<8x16xf32>) outs(%x : memref<8x16xf32>) {
  ^bb0(%in: f32, %o: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<8x16xf32>) outs(%z : memref<16x8xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.truncf %in : f32 to bf16
    linalg.yield %r : bf16
  }
  linalg.copy ins(%p : memref<8x16xbf16>) outs(%u : memref<8x16xbf16>)
  memref.dealloc %x : memref<8x16xf32>
  memref.dealloc %p : memref<8x16xbf16>
  return
}
