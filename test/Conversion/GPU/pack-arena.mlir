// RUN: mantissa-opt %s --pass-pipeline='builtin.module(func.func(mantissa-pack-arena))' --split-input-file --verify-diagnostics | FileCheck %s

// Two temporaries, one dead before the other is first written: the same
// bytes. Offsets and sizes are multiples of 256 (400 bytes take 512).

// CHECK-LABEL: func.func @reuse
// CHECK-SAME: attributes {mantissa.gpu_arena_bytes = 512 : i64}
// CHECK: memref.alloc() {mantissa.gpu_arena_offset = 0 : i64} : memref<100xf32>
// CHECK: memref.alloc() {mantissa.gpu_arena_offset = 0 : i64} : memref<64xf32>
#id = affine_map<(d0) -> (d0)>
func.func @reuse(%x: memref<64xf32>, %a: memref<64xf32>, %b: memref<64xf32>) {
  %t1 = memref.alloc() : memref<100xf32>
  %v1 = memref.subview %t1[0] [64] [1] : memref<100xf32> to memref<64xf32, strided<[1]>>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : memref<64xf32>) outs(%v1 : memref<64xf32, strided<[1]>>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%v1 : memref<64xf32, strided<[1]>>) outs(%a : memref<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.tanh %in : f32
    linalg.yield %e : f32
  }
  %t2 = memref.alloc() : memref<64xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : memref<64xf32>) outs(%t2 : memref<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%t2 : memref<64xf32>) outs(%b : memref<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.tanh %in : f32
    linalg.yield %e : f32
  }
  memref.dealloc %t1 : memref<100xf32>
  memref.dealloc %t2 : memref<64xf32>
  return
}

// -----

// The same step with all four kernels in one launch (as
// mantissa-group-launches marks them): the launch runs where its first
// member is, so the second temporary is written while the first is alive,
// and takes the bytes after it.

// CHECK-LABEL: func.func @launch
// CHECK-SAME: attributes {mantissa.gpu_arena_bytes = 768 : i64}
// CHECK: memref.alloc() {mantissa.gpu_arena_offset = 0 : i64} : memref<100xf32>
// CHECK: memref.alloc() {mantissa.gpu_arena_offset = 512 : i64} : memref<64xf32>
#id = affine_map<(d0) -> (d0)>
func.func @launch(%x: memref<64xf32>, %a: memref<64xf32>, %b: memref<64xf32>) {
  %t1 = memref.alloc() : memref<100xf32>
  %v1 = memref.subview %t1[0] [64] [1] : memref<100xf32> to memref<64xf32, strided<[1]>>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : memref<64xf32>) outs(%v1 : memref<64xf32, strided<[1]>>)
      attrs = {mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 0 : i64, mantissa.gpu_thread_stride = 1 : i64} {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%v1 : memref<64xf32, strided<[1]>>) outs(%a : memref<64xf32>)
      attrs = {mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 1 : i64, mantissa.gpu_thread_stride = 1 : i64} {
  ^bb0(%in: f32, %out: f32):
    %e = math.tanh %in : f32
    linalg.yield %e : f32
  }
  %t2 = memref.alloc() : memref<64xf32>
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : memref<64xf32>) outs(%t2 : memref<64xf32>)
      attrs = {mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 2 : i64, mantissa.gpu_thread_stride = 1 : i64} {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%t2 : memref<64xf32>) outs(%b : memref<64xf32>)
      attrs = {mantissa.gpu_launch = 0 : i64, mantissa.gpu_member = 3 : i64, mantissa.gpu_thread_stride = 1 : i64} {
  ^bb0(%in: f32, %out: f32):
    %e = math.tanh %in : f32
    linalg.yield %e : f32
  }
  memref.dealloc %t1 : memref<100xf32>
  memref.dealloc %t2 : memref<64xf32>
  return
}

// -----

// A GEMM that rounds its product into the epilogue's bf16 output (cuBLASLt)
// never touches the fp32 temporary of the unfused product: it has no place
// in the arena.

// CHECK-LABEL: func.func @epilogue
// CHECK-SAME: attributes {mantissa.gpu_arena_bytes = 0 : i64}
// CHECK: memref.alloc() : memref<64x64xf32>
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @epilogue(%x: memref<64x64xbf16>, %w: memref<64x64xbf16>, %y: memref<64x64xbf16>) {
  %zero = arith.constant 0.0 : f32
  %p = memref.alloc() : memref<64x64xf32>
  linalg.fill ins(%zero : f32) outs(%p : memref<64x64xf32>)
  linalg.matmul ins(%x, %w : memref<64x64xbf16>, memref<64x64xbf16>) outs(%p : memref<64x64xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%p : memref<64x64xf32>) outs(%y : memref<64x64xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.truncf %in : f32 to bf16
    linalg.yield %r : bf16
  }
  memref.dealloc %p : memref<64x64xf32>
  return
}

// -----

// The same GEMM read again after its epilogue: then the product must be
// kept, and the GEMM writes it (beta = 0) for a kernel to round.

// CHECK-LABEL: func.func @kept_product
// CHECK-SAME: attributes {mantissa.gpu_arena_bytes = 16384 : i64}
// CHECK: memref.alloc() {mantissa.gpu_arena_offset = 0 : i64} : memref<64x64xf32>
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @kept_product(%x: memref<64x64xbf16>, %w: memref<64x64xbf16>, %y: memref<64x64xbf16>, %z: memref<64x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %p = memref.alloc() : memref<64x64xf32>
  linalg.fill ins(%zero : f32) outs(%p : memref<64x64xf32>)
  linalg.matmul ins(%x, %w : memref<64x64xbf16>, memref<64x64xbf16>) outs(%p : memref<64x64xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%p : memref<64x64xf32>) outs(%y : memref<64x64xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.truncf %in : f32 to bf16
    linalg.yield %r : bf16
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%p : memref<64x64xf32>) outs(%z : memref<64x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  memref.dealloc %p : memref<64x64xf32>
  return
}

// -----

// A dynamic shape cannot be placed ahead of time.

func.func @dynamic(%n: index) {
  // expected-error @below {{has a dynamic shape the GPU program cannot allocate ahead of time}}
  %t = memref.alloc(%n) : memref<?xf32>
  memref.dealloc %t : memref<?xf32>
  return
}
