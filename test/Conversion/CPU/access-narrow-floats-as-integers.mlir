// RUN: mantissa-opt %s --mantissa-access-narrow-floats-as-integers | FileCheck %s

// bf16 and f16 cross memory as i16 (scalars and vectors), with their
// attributes; f32 and i16 accesses are left as they are.

// CHECK-LABEL: llvm.func @round
// CHECK-SAME: (%[[P:.*]]: !llvm.ptr, %[[Q:.*]]: !llvm.ptr, %[[X:.*]]: f32)
// CHECK: %[[T:.*]] = llvm.fptrunc %[[X]] : f32 to bf16
// CHECK: %[[I:.*]] = llvm.bitcast %[[T]] : bf16 to i16
// CHECK: llvm.store %[[I]], %[[P]] {alignment = 2 : i64} : i16, !llvm.ptr
// CHECK: %[[L:.*]] = llvm.load %[[Q]] {alignment = 16 : i64} : !llvm.ptr -> vector<8xi16>
// CHECK: %[[V:.*]] = llvm.bitcast %[[L]] : vector<8xi16> to vector<8xf16>
// CHECK: %[[W:.*]] = llvm.fpext %[[V]] : vector<8xf16> to vector<8xf32>
// CHECK: %[[F:.*]] = llvm.load %[[P]] : !llvm.ptr -> f32
// CHECK: llvm.store %[[X]], %[[Q]] : f32, !llvm.ptr
// CHECK: %[[N:.*]] = llvm.load %[[P]] : !llvm.ptr -> i16
// CHECK-NOT: llvm.bitcast
// CHECK: llvm.return %[[W]]
llvm.func @round(%p: !llvm.ptr, %q: !llvm.ptr, %x: f32) -> vector<8xf32> {
  %t = llvm.fptrunc %x : f32 to bf16
  llvm.store %t, %p {alignment = 2 : i64} : bf16, !llvm.ptr
  %h = llvm.load %q {alignment = 16 : i64} : !llvm.ptr -> vector<8xf16>
  %w = llvm.fpext %h : vector<8xf16> to vector<8xf32>
  %f = llvm.load %p : !llvm.ptr -> f32
  llvm.store %x, %q : f32, !llvm.ptr
  %n = llvm.load %p : !llvm.ptr -> i16
  llvm.return %w : vector<8xf32>
}
