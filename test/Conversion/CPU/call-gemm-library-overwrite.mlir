// RUN: mantissa-opt %s --mantissa-call-gemm-library --split-input-file | FileCheck %s

// A product whose output is filled with +0.0 just before writes its sum
// instead of adding it (the descriptor's last field, kGemmAccumulate, is 0)
// and the fill goes. Anything that could see the buffer between the two,
// or a fill of anything but +0.0 or of only part of the output, keeps the
// fill and the accumulation (1).

// CHECK: memref.global "private" constant @__mantissa_gemm_0 : memref<19xi64> = dense<[4, 0, 0, 0, 1, 128, 32, 64, 8192, 64, 1, 2048, 32, 1, 4096, 32, 1, 0, 0]>
// CHECK-LABEL: func.func @overwrite
// CHECK-NOT: linalg.fill
// CHECK: memref.get_global @__mantissa_gemm_0
// CHECK: call @mantissa_cpu_gemm
// CHECK-NOT: linalg
func.func @overwrite(%a: memref<128x64xf32>, %b: memref<64x32xf32>, %c: memref<128x32xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<128x32xf32>)
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%c : memref<128x32xf32>)
  return
}

// -----

// The fill as tensor fusion leaves it (a generic without inputs), on the
// whole buffer the product writes through a reshape; in between, an op on
// other memory and a view of the inputs.

// CHECK: memref.global "private" constant @__mantissa_gemm_0 : memref<19xi64> = dense<[4, 0, 0, 0, 1, 128, 32, 64, {{.*}}, 0, 0]>
// CHECK-LABEL: func.func @fused_fill
// CHECK: memref.alloc() {{.*}} : memref<4x32x32xf32>
// CHECK-NEXT: linalg.generic
// CHECK-SAME: ins(%{{.*}} : memref<32xf32>) outs(%{{.*}} : memref<32xf32>)
// CHECK-NOT: linalg.generic
// CHECK: call @mantissa_cpu_gemm
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#id1 = affine_map<(d0) -> (d0)>
func.func @fused_fill(%a: memref<4x32x64xf32>, %b: memref<64x32xf32>, %x: memref<32xf32>, %y: memref<32xf32>) {
  %zero = arith.constant 0.0 : f32
  %c = memref.alloc() {alignment = 64 : i64} : memref<4x32x32xf32>
  linalg.generic {indexing_maps = [#id3], iterator_types = ["parallel", "parallel", "parallel"]} outs(%c : memref<4x32x32xf32>) {
  ^bb0(%out: f32):
    linalg.yield %zero : f32
  }
  linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]} ins(%x : memref<32xf32>) outs(%y : memref<32xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }
  %a2 = memref.collapse_shape %a [[0, 1], [2]] : memref<4x32x64xf32> into memref<128x64xf32>
  %c2 = memref.collapse_shape %c [[0, 1], [2]] : memref<4x32x32xf32> into memref<128x32xf32>
  linalg.matmul ins(%a2, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%c2 : memref<128x32xf32>)
  memref.dealloc %c : memref<4x32x32xf32>
  return
}

// -----

// The buffer is read (through a view) between the fill and the product.

// CHECK: memref.global "private" constant @__mantissa_gemm_0 : memref<19xi64> = dense<[4, {{.*}}, 1, 0]>
// CHECK-LABEL: func.func @read_between
// CHECK: linalg.fill
// CHECK: linalg.generic
// CHECK: call @mantissa_cpu_gemm
#row = affine_map<(d0, d1) -> (d0, d1)>
#sum = affine_map<(d0, d1) -> (d0)>
func.func @read_between(%a: memref<128x64xf32>, %b: memref<64x32xf32>, %c: memref<128x32xf32>, %s: memref<4xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<128x32xf32>)
  %view = memref.subview %c[0, 0] [4, 32] [1, 1] : memref<128x32xf32> to memref<4x32xf32, strided<[32, 1]>>
  linalg.generic {indexing_maps = [#row, #sum], iterator_types = ["parallel", "reduction"]} ins(%view : memref<4x32xf32, strided<[32, 1]>>) outs(%s : memref<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.addf %in, %out : f32
    linalg.yield %0 : f32
  }
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%c : memref<128x32xf32>)
  return
}

// -----

// Fills the product adds to: -0.0 (a sum of -0.0 terms added to it stays
// -0.0), 1.0, and +0.0 on only part of the output.

// CHECK: memref.global "private" constant @__mantissa_gemm_0 : memref<19xi64> = dense<[4, {{.*}}, 1, 0]>
// CHECK-NOT: memref.global
// CHECK-LABEL: func.func @kept
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : memref<128x32xf32>)
// CHECK: call @mantissa_cpu_gemm
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : memref<128x32xf32>)
// CHECK: call @mantissa_cpu_gemm
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : memref<64x32xf32, strided<[32, 1]>>)
// CHECK: call @mantissa_cpu_gemm
func.func @kept(%a: memref<128x64xf32>, %b: memref<64x32xf32>, %c: memref<128x32xf32>) {
  %negative = arith.constant -0.0 : f32
  %one = arith.constant 1.0 : f32
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%negative : f32) outs(%c : memref<128x32xf32>)
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%c : memref<128x32xf32>)
  linalg.fill ins(%one : f32) outs(%c : memref<128x32xf32>)
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%c : memref<128x32xf32>)
  %half = memref.subview %c[0, 0] [64, 32] [1, 1] : memref<128x32xf32> to memref<64x32xf32, strided<[32, 1]>>
  linalg.fill ins(%zero : f32) outs(%half : memref<64x32xf32, strided<[32, 1]>>)
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%c : memref<128x32xf32>)
  return
}

// -----

// An output that is an argument: a call in between may touch it; a write
// to another argument (the step's buffers never overlap) or to a buffer of
// the function's own may not. The last product writes to the one before's
// output: its fill is that product's.

// CHECK-DAG: memref.global "private" constant @__mantissa_gemm_[[$ADD:[0-9]]] : memref<19xi64> = dense<[4, {{.*}}, 1, 0]>
// CHECK-DAG: memref.global "private" constant @__mantissa_gemm_[[$WRITE:[0-9]]] : memref<19xi64> = dense<[4, {{.*}}, 0, 0]>
// CHECK-LABEL: func.func @argument
// CHECK: linalg.fill
// CHECK-NEXT: call @opaque
// CHECK: memref.get_global @__mantissa_gemm_[[$ADD]]
// CHECK-NOT: linalg.fill ins(%{{.*}} : f32) outs(%arg2
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%arg3
// CHECK-NOT: linalg.fill
// CHECK: memref.get_global @__mantissa_gemm_[[$WRITE]]
// CHECK: %[[LOCAL:.*]] = memref.alloc
// CHECK-NOT: linalg.fill ins(%{{.*}} : f32) outs(%arg2
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[LOCAL]]
// CHECK-NOT: linalg.fill
// CHECK: memref.get_global @__mantissa_gemm_[[$WRITE]]
// CHECK: memref.get_global @__mantissa_gemm_[[$ADD]]
func.func private @opaque()
func.func @argument(%a: memref<128x64xf32>, %b: memref<64x32xf32>, %c: memref<128x32xf32>, %other: memref<128x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<128x32xf32>)
  call @opaque() : () -> ()
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%c : memref<128x32xf32>)
  linalg.fill ins(%zero : f32) outs(%c : memref<128x32xf32>)
  linalg.fill ins(%one : f32) outs(%other : memref<128x32xf32>)
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%c : memref<128x32xf32>)
  %local = memref.alloc() : memref<128x32xf32>
  linalg.fill ins(%zero : f32) outs(%c : memref<128x32xf32>)
  linalg.fill ins(%one : f32) outs(%local : memref<128x32xf32>)
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%c : memref<128x32xf32>)
  linalg.matmul ins(%a, %b : memref<128x64xf32>, memref<64x32xf32>) outs(%c : memref<128x32xf32>)
  memref.dealloc %local : memref<128x32xf32>
  return
}

// -----

// A fill in another block, and a product that reads its own output as an
// input.

// CHECK-LABEL: func.func @not_before
// CHECK: linalg.fill
// CHECK: scf.if
// CHECK: call @mantissa_cpu_gemm
// CHECK: linalg.fill
// CHECK: call @mantissa_cpu_gemm
func.func @not_before(%flag: i1, %a: memref<32x32xf32>, %b: memref<32x32xf32>, %c: memref<32x32xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<32x32xf32>)
  scf.if %flag {
    linalg.matmul ins(%a, %b : memref<32x32xf32>, memref<32x32xf32>) outs(%c : memref<32x32xf32>)
  }
  linalg.fill ins(%zero : f32) outs(%c : memref<32x32xf32>)
  linalg.matmul ins(%c, %b : memref<32x32xf32>, memref<32x32xf32>) outs(%c : memref<32x32xf32>)
  return
}
