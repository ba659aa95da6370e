// RUN: mantissa-opt %s --pass-pipeline='builtin.module(func.func(mantissa-pack-cpu-arena))' --split-input-file | FileCheck %s
// RUN: mantissa-opt %s --pass-pipeline='builtin.module(func.func(mantissa-pack-cpu-arena),expand-strided-metadata)' --split-input-file | FileCheck %s --check-prefix=POINTER

// Three temporaries: %a dies (its last use) before %c is first used, so %c
// takes %a's bytes; %b is alive with both and sits after %a. One malloc of
// 64-byte multiples, one free before the return, no per-temporary ones.

// CHECK-LABEL: func.func @reuse
// CHECK-SAME: (%[[X:.*]]: memref<16xf32>, %[[OUT:.*]]: memref<16xf32>)
// CHECK: %[[ARENA:.*]] = memref.alloc() {alignment = 64 : i64} : memref<128xi8>
// CHECK: %[[C0:.*]] = arith.constant 0 : index
// CHECK: %[[A:.*]] = memref.view %[[ARENA]][%[[C0]]][] : memref<128xi8> to memref<16xf32>
// CHECK: %[[C64:.*]] = arith.constant 64 : index
// CHECK: %[[B:.*]] = memref.view %[[ARENA]][%[[C64]]][] : memref<128xi8> to memref<16xf32>
// CHECK: linalg.copy ins(%[[X]] : memref<16xf32>) outs(%[[A]] : memref<16xf32>)
// CHECK: linalg.copy ins(%[[A]] : memref<16xf32>) outs(%[[B]] : memref<16xf32>)
// CHECK: %[[C0B:.*]] = arith.constant 0 : index
// CHECK: %[[C:.*]] = memref.view %[[ARENA]][%[[C0B]]][] : memref<128xi8> to memref<16xf32>
// CHECK: linalg.copy ins(%[[B]] : memref<16xf32>) outs(%[[C]] : memref<16xf32>)
// CHECK: linalg.copy ins(%[[C]] : memref<16xf32>) outs(%[[OUT]] : memref<16xf32>)
// CHECK-NOT: memref.dealloc %[[A]]
// CHECK-NOT: memref.dealloc %[[B]]
// CHECK-NOT: memref.dealloc %[[C]]
// CHECK: memref.dealloc %[[ARENA]] : memref<128xi8>
// CHECK-NEXT: return
func.func @reuse(%x: memref<16xf32>, %out: memref<16xf32>) {
  %a = memref.alloc() {alignment = 64 : i64} : memref<16xf32>
  %b = memref.alloc() {alignment = 64 : i64} : memref<16xf32>
  linalg.copy ins(%x : memref<16xf32>) outs(%a : memref<16xf32>)
  linalg.copy ins(%a : memref<16xf32>) outs(%b : memref<16xf32>)
  memref.dealloc %a : memref<16xf32>
  %c = memref.alloc() {alignment = 64 : i64} : memref<16xf32>
  linalg.copy ins(%b : memref<16xf32>) outs(%c : memref<16xf32>)
  memref.dealloc %b : memref<16xf32>
  linalg.copy ins(%c : memref<16xf32>) outs(%out : memref<16xf32>)
  memref.dealloc %c : memref<16xf32>
  return
}

// -----

// A temporary whose pointer a library call takes (through a view) lives
// until that call, not until the extraction: %b, first used after the
// extraction but before the call, does not take %a's bytes (nor %flag's,
// read at the end). The extracted
// pointer is the arena's plus the view's offset, which survives
// expand-strided-metadata (it folds an extraction through a view-like op
// into its source's, dropping a memref.view's offset).

func.func private @gemm(index)

// CHECK-LABEL: func.func @pointer
// CHECK: %[[ARENA:.*]] = memref.alloc() {alignment = 64 : i64} : memref<640xi8>
// CHECK: %[[C0:.*]] = arith.constant 0 : index
// CHECK: memref.view %[[ARENA]][%[[C0]]][] : memref<640xi8> to memref<1xi1>
// CHECK: %[[C64:.*]] = arith.constant 64 : index
// CHECK: memref.view %[[ARENA]][%[[C64]]][] : memref<640xi8> to memref<4x32xf32>
// CHECK: %[[BASE:.*]] = memref.extract_aligned_pointer_as_index %[[ARENA]]
// CHECK: %[[ADDRESS:.*]] = arith.addi %[[BASE]], %[[C64]] : index
// CHECK: %[[C576:.*]] = arith.constant 576 : index
// CHECK: memref.view %[[ARENA]][%[[C576]]][] : memref<640xi8> to memref<4xf32>
// CHECK: call @gemm(%[[ADDRESS]])

// POINTER-LABEL: func.func @pointer
// POINTER: %[[ARENA:.*]] = memref.alloc() {alignment = 64 : i64} : memref<640xi8>
// POINTER: %[[BASE:.*]] = memref.extract_aligned_pointer_as_index %[[ARENA]]
// POINTER: %[[ADDRESS:.*]] = arith.addi %[[BASE]], %{{.*}} : index
// POINTER: call @gemm(%[[ADDRESS]])
func.func @pointer(%x: memref<4x32xf32>, %out: memref<4xf32>) -> i1 {
  %flag = memref.alloc() : memref<1xi1>
  %a = memref.alloc() {alignment = 64 : i64} : memref<4x32xf32>
  %true = arith.constant true
  %c0 = arith.constant 0 : index
  memref.store %true, %flag[%c0] : memref<1xi1>
  linalg.copy ins(%x : memref<4x32xf32>) outs(%a : memref<4x32xf32>)
  %collapsed = memref.collapse_shape %a [[0, 1]] : memref<4x32xf32> into memref<128xf32>
  %pointer = memref.extract_aligned_pointer_as_index %collapsed : memref<128xf32> -> index
  %b = memref.alloc() {alignment = 64 : i64} : memref<4xf32>
  linalg.copy ins(%out : memref<4xf32>) outs(%b : memref<4xf32>)
  call @gemm(%pointer) : (index) -> ()
  linalg.copy ins(%b : memref<4xf32>) outs(%out : memref<4xf32>)
  %set = memref.load %flag[%c0] : memref<1xi1>
  memref.dealloc %a : memref<4x32xf32>
  memref.dealloc %b : memref<4xf32>
  memref.dealloc %flag : memref<1xi1>
  return %set : i1
}

// -----

// What the arena cannot hold stays allocated on its own: a dynamic shape,
// and a temporary the function returns.

// CHECK-LABEL: func.func @kept
// CHECK-NOT: memref.view
// CHECK: memref.alloc(%{{.*}}) : memref<?xf32>
// CHECK: memref.alloc() : memref<4xf32>
// CHECK-NOT: memref.view
// CHECK: return
func.func @kept(%x: memref<?xf32>) -> memref<4xf32> {
  %c0 = arith.constant 0 : index
  %n = memref.dim %x, %c0 : memref<?xf32>
  %d = memref.alloc(%n) : memref<?xf32>
  linalg.copy ins(%x : memref<?xf32>) outs(%d : memref<?xf32>)
  memref.dealloc %d : memref<?xf32>
  %r = memref.alloc() : memref<4xf32>
  return %r : memref<4xf32>
}
