// RUN: mantissa-opt %s --pass-pipeline='builtin.module(func.func(mantissa-fold-transposes-into-views))' --split-input-file | FileCheck %s

// A transpose into a temporary that is only read: the reader reads a
// strided view of the input instead, and the copy is gone.

// CHECK-LABEL: func.func @transposed_read
// CHECK-SAME: %[[X:[^:]*]]: memref<8x16xf32>, %[[Y:[^:]*]]: memref<16x8xf32>
// CHECK-NOT: memref.alloc
// CHECK-NOT: linalg.transpose
// CHECK: %[[T:.*]] = memref.transpose %[[X]] (d0, d1) -> (d1, d0) : memref<8x16xf32> to memref<16x8xf32, strided<[1, 16]>>
// CHECK: linalg.generic {{.*}} ins(%[[T]] : memref<16x8xf32, strided<[1, 16]>>) outs(%[[Y]] : memref<16x8xf32>)
// CHECK-NOT: memref.dealloc
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @transposed_read(%x: memref<8x16xf32>, %y: memref<16x8xf32>) {
  %t = memref.alloc() : memref<16x8xf32>
  linalg.transpose ins(%x : memref<8x16xf32>) outs(%t : memref<16x8xf32>) permutation = [1, 0]
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t : memref<16x8xf32>) outs(%y : memref<16x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  memref.dealloc %t : memref<16x8xf32>
  return
}

// -----

// A matrix product reading the transposed weight: the view, which the GEMM
// takes as transb.

// CHECK-LABEL: func.func @transposed_gemm_operand
// CHECK-SAME: %[[X:[^:]*]]: memref<4x8xf32>, %[[W:[^:]*]]: memref<16x8xf32>
// CHECK: %[[T:.*]] = memref.transpose %[[W]] (d0, d1) -> (d1, d0)
// CHECK: linalg.matmul ins(%[[X]], %[[T]] : memref<4x8xf32>, memref<8x16xf32, strided<[1, 8]>>)
func.func @transposed_gemm_operand(%x: memref<4x8xf32>, %w: memref<16x8xf32>, %y: memref<4x16xf32>) {
  %t = memref.alloc() : memref<8x16xf32>
  linalg.transpose ins(%w : memref<16x8xf32>) outs(%t : memref<8x16xf32>) permutation = [1, 0]
  linalg.matmul ins(%x, %t : memref<4x8xf32>, memref<8x16xf32>) outs(%y : memref<4x16xf32>)
  memref.dealloc %t : memref<8x16xf32>
  return
}

// -----

// The input is written after the transpose: the copy must stay.

// CHECK-LABEL: func.func @input_written_later
// CHECK: linalg.transpose
// CHECK: linalg.fill
// CHECK-NOT: memref.transpose
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @input_written_later(%x: memref<8x16xf32>, %y: memref<16x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %t = memref.alloc() : memref<16x8xf32>
  linalg.transpose ins(%x : memref<8x16xf32>) outs(%t : memref<16x8xf32>) permutation = [1, 0]
  linalg.fill ins(%zero : f32) outs(%x : memref<8x16xf32>)
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%t : memref<16x8xf32>) outs(%y : memref<16x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %e = math.exp %in : f32
    linalg.yield %e : f32
  }
  memref.dealloc %t : memref<16x8xf32>
  return
}
