// RUN: mantissa-opt %s --mantissa-route-gemm-calls-through-hook --split-input-file --verify-diagnostics | FileCheck %s

// Calls of the runtime's GEMM go through the exported hook, a null pointer
// until the loader stores mantissa_rt_cpu_gemm there; the declaration goes.

// CHECK: llvm.mlir.global external @mantissa_cpu_gemm_hook() {{.*}} : !llvm.ptr {
// CHECK:   %[[NULL:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK:   llvm.return %[[NULL]] : !llvm.ptr
// CHECK-NOT: llvm.func @mantissa_cpu_gemm(
// CHECK-LABEL: llvm.func @step(
// CHECK-SAME: %[[D:.*]]: i64, %[[A:.*]]: i64, %[[B:.*]]: i64, %[[C:.*]]: i64)
// CHECK: %[[HOOK:.*]] = llvm.mlir.addressof @mantissa_cpu_gemm_hook : !llvm.ptr
// CHECK: %[[F:.*]] = llvm.load %[[HOOK]] : !llvm.ptr -> !llvm.ptr
// CHECK: llvm.call %[[F]](%[[D]], %[[A]], %[[B]], %[[C]]) : !llvm.ptr, (i64, i64, i64, i64) -> ()
// CHECK: %[[HOOK2:.*]] = llvm.mlir.addressof @mantissa_cpu_gemm_hook : !llvm.ptr
// CHECK: %[[F2:.*]] = llvm.load %[[HOOK2]] : !llvm.ptr -> !llvm.ptr
// CHECK: llvm.call %[[F2]](%[[D]], %[[C]], %[[B]], %[[A]])
llvm.func @mantissa_cpu_gemm(i64, i64, i64, i64)
llvm.func @step(%d: i64, %a: i64, %b: i64, %c: i64) {
  llvm.call @mantissa_cpu_gemm(%d, %a, %b, %c) : (i64, i64, i64, i64) -> ()
  llvm.call @mantissa_cpu_gemm(%d, %c, %b, %a) : (i64, i64, i64, i64) -> ()
  llvm.return
}

// -----

// Without calls of it, nothing changes: no hook.

// CHECK-NOT: mantissa_cpu_gemm_hook
// CHECK-LABEL: llvm.func @no_products
llvm.func @no_products() {
  llvm.return
}

// -----

// expected-error @below {{@mantissa_cpu_gemm is the runtime's; the step must not define it}}
llvm.func @mantissa_cpu_gemm(%d: i64, %a: i64, %b: i64, %c: i64) {
  llvm.return
}
