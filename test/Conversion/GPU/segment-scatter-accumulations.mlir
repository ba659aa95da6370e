// RUN: mantissa-opt %s --pass-pipeline='builtin.module(func.func(mantissa-segment-scatter-accumulations))' --split-input-file | FileCheck %s

// An embedding backward as the step lowers it (index_put with
// accumulation): 2 x 32 token ids, rows of 8 features. The 64 index
// iterations are ranked in (key, iteration) order in 8 partial counts of 8
// comparisons each, the partials summed, the ranks inverted into the sorted
// order, and one thread per sorted position and feature folds each run of
// equal ids into its row, starting from the row's value, in order.

// CHECK-LABEL: func.func @embedding_backward
// CHECK-SAME: %[[IDS:[^:]*]]: memref<2x32xi64>, %[[G:[^:]*]]: memref<2x32x8xf32>, %[[W:[^:]*]]: memref<16x8xf32>
// CHECK: %[[PART:.*]] = memref.alloc() : memref<64x8xi32>
// CHECK: %[[RANK:.*]] = memref.alloc() : memref<64xi32>
// CHECK: %[[ORDER:.*]] = memref.alloc() : memref<64xi32>
// 1. The rank's partial counts: 64 x 8 threads, 8 comparisons each.
// CHECK: scf.for %[[T:.*]] = %{{.*}} to %{{.*}} step
// CHECK: scf.for %[[P:.*]] = %{{.*}} to %{{.*}} step
// CHECK: memref.load %[[IDS]]
// CHECK: scf.for {{.*}} iter_args
// CHECK: memref.load %[[IDS]]
// CHECK: arith.cmpi ult
// CHECK: arith.cmpi eq
// CHECK: arith.cmpi ult
// CHECK: arith.andi
// CHECK: arith.ori
// CHECK: arith.extui
// CHECK: memref.store %{{.*}}, %[[PART]][%[[T]], %[[P]]]
// CHECK: } {mantissa.gpu_parallel_loops = 2 : i64, mantissa.gpu_serial_iterations = 8 : i64}
// 2. The partials summed.
// CHECK: memref.load %[[PART]]
// CHECK: memref.store %{{.*}}, %[[RANK]]
// CHECK: } {mantissa.gpu_parallel_loops = 1 : i64, mantissa.gpu_serial_iterations = 8 : i64}
// 3. order[rank[t]] = t.
// CHECK: %[[R:.*]] = memref.load %[[RANK]]
// CHECK: %[[RI:.*]] = arith.index_cast %[[R]] : i32 to index
// CHECK: memref.store %{{.*}}, %[[ORDER]][%[[RI]]]
// CHECK: } {mantissa.gpu_parallel_loops = 1 : i64}
// 4. The runs, one thread per sorted position and feature.
// CHECK: scf.for %[[S:.*]] = %{{.*}} to %{{.*}} step
// CHECK: scf.for %[[F:.*]] = %{{.*}} to %{{.*}} step
// CHECK: memref.load %[[ORDER]][%[[S]]]
// CHECK: arith.maxui %[[S]]
// CHECK: scf.if
// CHECK: %[[OLD:.*]] = memref.load %[[W]][%[[KEY:.*]], %[[F]]]
// CHECK: %[[FOLD:.*]]:2 = scf.while ({{.*}} = %[[OLD]], {{.*}} = %[[S]])
// CHECK: scf.condition
// CHECK: } do {
// CHECK: memref.load %[[G]]
// CHECK: arith.addf
// CHECK: scf.yield
// CHECK: memref.store %[[FOLD]]#0, %[[W]][%[[KEY]], %[[F]]]
// CHECK: } {mantissa.gpu_parallel_loops = 2 : i64}
// CHECK-NOT: scf.for
// CHECK: memref.dealloc %[[PART]]
// CHECK: memref.dealloc %[[RANK]]
// CHECK: memref.dealloc %[[ORDER]]
func.func @embedding_backward(%ids: memref<2x32xi64>, %g: memref<2x32x8xf32>,
                              %w: memref<16x8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %c32 = arith.constant 32 : index
  %c0_i64 = arith.constant 0 : i64
  %c16_i64 = arith.constant 16 : i64
  scf.for %i = %c0 to %c2 step %c1 {
    scf.for %j = %c0 to %c32 step %c1 {
      scf.for %f = %c0 to %c8 step %c1 {
        %id = memref.load %ids[%i, %j] : memref<2x32xi64>
        %negative = arith.cmpi slt, %id, %c0_i64 : i64
        %wrapped = arith.addi %id, %c16_i64 : i64
        %row64 = arith.select %negative, %wrapped, %id : i64
        %row = arith.index_cast %row64 : i64 to index
        %value = memref.load %g[%i, %j, %f] : memref<2x32x8xf32>
        %old = memref.load %w[%row, %f] : memref<16x8xf32>
        %sum = arith.addf %old, %value : f32
        memref.store %sum, %w[%row, %f] : memref<16x8xf32>
      }
    }
  }
  return
}

// -----

// Fewer than 32 index iterations: the serial loop is short already.

// CHECK-LABEL: func.func @few_ids
// CHECK-NOT: mantissa.gpu_parallel_loops
// CHECK: return
func.func @few_ids(%ids: memref<16xi64>, %g: memref<16x8xf32>,
                   %w: memref<16x8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  scf.for %j = %c0 to %c16 step %c1 {
    scf.for %f = %c0 to %c8 step %c1 {
      %id = memref.load %ids[%j] : memref<16xi64>
      %row = arith.index_cast %id : i64 to index
      %value = memref.load %g[%j, %f] : memref<16x8xf32>
      %old = memref.load %w[%row, %f] : memref<16x8xf32>
      %sum = arith.addf %old, %value : f32
      memref.store %sum, %w[%row, %f] : memref<16x8xf32>
    }
  }
  return
}

// -----

// A key that depends on a feature loop, and a scatter that overwrites
// (no accumulation): left alone.

// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: mantissa.gpu_parallel_loops
// CHECK: return
func.func @left_alone(%ids: memref<64x8xi64>, %g: memref<64x8xf32>,
                      %w: memref<16x8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c64 = arith.constant 64 : index
  scf.for %j = %c0 to %c64 step %c1 {
    scf.for %f = %c0 to %c8 step %c1 {
      %id = memref.load %ids[%j, %f] : memref<64x8xi64>
      %row = arith.index_cast %id : i64 to index
      %value = memref.load %g[%j, %f] : memref<64x8xf32>
      %old = memref.load %w[%row, %f] : memref<16x8xf32>
      %sum = arith.addf %old, %value : f32
      memref.store %sum, %w[%row, %f] : memref<16x8xf32>
    }
  }
  scf.for %j = %c0 to %c64 step %c1 {
    scf.for %f = %c0 to %c8 step %c1 {
      %id = memref.load %ids[%j, %c0] : memref<64x8xi64>
      %row = arith.index_cast %id : i64 to index
      %value = memref.load %g[%j, %f] : memref<64x8xf32>
      memref.store %value, %w[%row, %f] : memref<16x8xf32>
    }
  }
  return
}
