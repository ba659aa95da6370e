// RUN: mantissa-opt %s --mantissa-parallelize-outer-loops | FileCheck %s

// The outer loop of a marked function becomes an scf.parallel (its body
// unchanged, the mark removed); unmarked functions and loops with results
// keep their scf.for.

// CHECK-LABEL: func.func private @marked
// CHECK-NOT: mantissa.parallel_outer_loop
// CHECK: scf.parallel (%[[I:.*]]) = (%c0) to (%c8) step (%c1) {
// CHECK: scf.for
// CHECK: memref.store
// CHECK-NOT: scf.yield
// CHECK: scf.reduce
func.func private @marked(%x: memref<8x8xf32>) attributes {mantissa.parallel_outer_loop} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %v = arith.constant 1.0 : f32
  scf.for %i = %c0 to %c8 step %c1 {
    scf.for %j = %c0 to %c8 step %c1 {
      memref.store %v, %x[%i, %j] : memref<8x8xf32>
    }
  }
  return
}

// CHECK-LABEL: func.func private @unmarked
// CHECK-NOT: scf.parallel
// CHECK: scf.for
func.func private @unmarked(%x: memref<8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %v = arith.constant 1.0 : f32
  scf.for %i = %c0 to %c8 step %c1 {
    memref.store %v, %x[%i] : memref<8xf32>
  }
  return
}

// CHECK-LABEL: func.func private @with_result
// CHECK-NOT: scf.parallel
// CHECK: scf.for
func.func private @with_result(%x: memref<8xf32>) -> f32 attributes {mantissa.parallel_outer_loop} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.0 : f32
  %s = scf.for %i = %c0 to %c8 step %c1 iter_args(%acc = %zero) -> f32 {
    %e = memref.load %x[%i] : memref<8xf32>
    %n = arith.addf %acc, %e : f32
    scf.yield %n : f32
  }
  return %s : f32
}
