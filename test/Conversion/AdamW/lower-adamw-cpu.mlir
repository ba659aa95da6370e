// RUN: mantissa-opt %s --mantissa-lower-adamw --canonicalize --cse | FileCheck %s
// RUN: mantissa-opt %s --mantissa-lower-adamw --canonicalize --cse | FileCheck %s --check-prefix=LERP
// RUN: mantissa-opt %s --mantissa-lower-adamw="vector-width=4 tile-size=64" | FileCheck %s --check-prefix=WIDTH
// RUN: mantissa-opt %s --mantissa-lower-adamw=test-gpu-element-code | FileCheck %s --check-prefix=GPUCODE
// RUN: not mantissa-opt %s --mantissa-lower-adamw=target=tpu 2>&1 | FileCheck %s --check-prefix=BADTARGET
// RUN: not mantissa-opt %s --mantissa-lower-adamw=tile-size=12 2>&1 | FileCheck %s --check-prefix=BADTILE
// RUN: not mantissa-opt %s --mantissa-lower-adamw="test-gpu-element-code vector-width=4" 2>&1 | FileCheck %s --check-prefix=BADGPUCODE

// BADTARGET: error: mantissa-lower-adamw: unknown target 'tpu' (expected 'cpu' or 'gpu')
// BADTILE: error: mantissa-lower-adamw: tile-size 12 must be a positive multiple of vector-width 8
// BADGPUCODE: error: mantissa-lower-adamw: test-gpu-element-code needs vector-width 8

// An fp32 member and a bf16 member with an fp32 master: the step's scalars
// in f64, typed views, one tile loop with a member lookup, and per kind a
// vector loop and a scalar tail.
// CHECK-LABEL: func.func @two_kinds
// CHECK-SAME: %[[LR:[^:]+]]: f64, %[[B1:[^:]+]]: f64, %[[B2:[^:]+]]: f64, %[[EPS:[^:]+]]: f64, %[[WD:[^:]+]]: f64, %[[STEP:[^:]+]]: i64
// CHECK-NOT: train.adamw_update
// CHECK-DAG: %[[STEPF:.+]] = arith.sitofp %[[STEP]] : i64 to f64
// CHECK-DAG: math.powf %[[B1]], %[[STEPF]] : f64
// CHECK-DAG: math.powf %[[B2]], %[[STEPF]] : f64
// CHECK-DAG: %[[DECAYPRODUCT:.+]] = arith.mulf %[[LR]], %[[WD]] : f64
// CHECK-DAG: memref.view %{{.+}} : memref<32816xi8> to memref<{{.+}}xf32>
// CHECK-DAG: memref.view %{{.+}} : memref<32816xi8> to memref<{{.+}}xbf16>
// CHECK: scf.for %[[TILE:.+]] = %{{.+}} to %{{.+}} step %{{.+}} {
// CHECK: arith.cmpi uge, %[[TILE]], %{{.+}} : index
// CHECK: scf.index_switch
// CHECK: case 0 {
// CHECK: scf.for
// CHECK: vector.load %{{.+}} : memref<{{.+}}xf32>, vector<8xf32>
// CHECK: math.fma %{{.+}} : vector<8xf32>
// CHECK: math.fma %{{.+}} : vector<8xf32>
// CHECK: math.sqrt %{{.+}} : vector<8xf32>
// CHECK: arith.divf
// CHECK: arith.divf
// CHECK: vector.store %{{.+}} : memref<{{.+}}xf32>, vector<8xf32>
// CHECK: scf.for
// CHECK: memref.load %{{.+}} : memref<{{.+}}xf32>
// CHECK: math.sqrt %{{.+}} : f32
// CHECK: default {
// CHECK: vector.load %{{.+}} : memref<{{.+}}xbf16>, vector<8xbf16>
// CHECK: arith.extf %{{.+}} : vector<8xbf16> to vector<8xf32>
// The bf16 copy of the master: round to nearest-even in integer operations.
// CHECK: arith.bitcast %{{.+}} : vector<8xf32> to vector<8xi32>
// CHECK: arith.trunci %{{.+}} : vector<8xi32> to vector<8xi16>
// CHECK: vector.store %{{.+}} : memref<{{.+}}xbf16>, vector<8xbf16>

// WIDTH-LABEL: func.func @two_kinds
// WIDTH: vector.load %{{.+}} : memref<?xf32>, vector<4xf32>

// The GPU kernel's element code in the CPU loop (for testing without GPU).
// GPUCODE-LABEL: func.func @two_kinds
// GPUCODE: memref.load %{{.+}} : memref<?xvector<4xf32>>
// GPUCODE: llvm.call_intrinsic "llvm.sqrt.v8f32"
// GPUCODE: arith.truncf %{{.+}} : vector<8xf32> to vector<8xbf16>
func.func @two_kinds(%g: memref<32816xi8>, %p: memref<32816xi8>, %m: memref<16400xi8>,
                     %m1: memref<32816xi8>, %m2: memref<32816xi8>,
                     %lr: f64, %b1: f64, %b2: f64, %eps: f64, %wd: f64, %step: i64) {
  train.adamw_update members [
      "w" 4099 {grad = fp32 at 0, param = fp32 at 0, moments = fp32 at 0},
      "emb" 4099 {grad = bf16 at 16400, param = bf16 at 16400, master = fp32 at 0, moments = fp32 at 16400}]
    grad(%g : memref<32816xi8>) param(%p : memref<32816xi8>) master(%m : memref<16400xi8>)
    exp_avg(%m1 : memref<32816xi8>) exp_avg_sq(%m2 : memref<32816xi8>)
    lr(%lr) beta1(%b1) beta2(%b2) eps(%eps) weight_decay(%wd) step(%step)
  return
}

// A remainder master: the bf16 parameter and the remainder are handled as
// i16 bits; a slice bounds the tile loop by part * tiles / parts.
// CHECK-LABEL: func.func @remainder_slice
// CHECK-SAME: %[[PART:[^:]+]]: index, %[[PARTS:[^:]+]]: index
// CHECK-DAG: memref.view %{{.+}} : memref<?xi8> to memref<?xi16>
// One tile: the slice starts at tile part * 1 / parts.
// CHECK-DAG: arith.divui %[[PART]], %[[PARTS]] : index
// CHECK: vector.load %{{.+}} : memref<?xi16>, vector<8xi16>
// CHECK: arith.extsi %{{.+}} : vector<8xi16> to vector<8xi32>
// CHECK: arith.bitcast %{{.+}} : vector<8xi32> to vector<8xf32>
// CHECK: arith.cmpf uno
// CHECK: vector.store %{{.+}} : memref<?xi16>, vector<8xi16>
// CHECK: vector.store %{{.+}} : memref<?xi16>, vector<8xi16>
func.func @remainder_slice(%g: memref<?xi8>, %p: memref<?xi8>, %m: memref<?xi8>,
                           %m1: memref<?xi8>, %m2: memref<?xi8>, %s: f64,
                           %step: i64, %part: index, %parts: index) {
  train.adamw_update members [
      "w" 100 {grad = bf16 at 0, param = bf16 at 0, master = remainder at 0, moments = fp32 at 0}]
    grad(%g : memref<?xi8>) param(%p : memref<?xi8>) master(%m : memref<?xi8>)
    exp_avg(%m1 : memref<?xi8>) exp_avg_sq(%m2 : memref<?xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
    slice(%part, %parts)
  return
}

// A gradient scale (clipping) multiplies each bf16 gradient as it is loaded
// and rounds the product to bf16, as the in-place grad.mul_ of
// clip_grad_norm_ rounds, before the moments use it. The rounding stays in
// i32 lanes: NaN is replaced by 0x7FC00000 (2143289344) before it (one
// unordered compare), the rounded bits are masked with 0xFFFF0000 (-65536)
// and used as f32, without a truncation to i16 and back (on AVX2 the loop is
// bound by its instruction count). For a scale of exactly 1 a second version
// of the vector loop only turns NaN into 0x7FC00000 (the same bits).
// CHECK-LABEL: func.func @scaled
// CHECK-SAME: %[[SCALE:[^:]+]]: f32
// CHECK-DAG: %[[MASK:.+]] = arith.constant dense<-65536> : vector<8xi32>
// CHECK-DAG: %[[QNAN:.+]] = arith.constant dense<2143289344> : vector<8xi32>
// CHECK-DAG: %[[ONE:.+]] = arith.constant 1.000000e+00 : f32
// CHECK: %[[ISONE:.+]] = arith.cmpf oeq, %[[SCALE]], %[[ONE]] : f32
// CHECK: scf.if %[[ISONE]] {
// CHECK: scf.for
// CHECK: %[[RAW1:.+]] = vector.load %{{.+}} : memref<?xbf16>, vector<8xbf16>
// CHECK: %[[WIDE1:.+]] = arith.extf %[[RAW1]] : vector<8xbf16> to vector<8xf32>
// CHECK: %[[NAN1:.+]] = arith.cmpf uno, %[[WIDE1]], %[[WIDE1]] : vector<8xf32>
// CHECK: %[[BITS1:.+]] = arith.bitcast %[[WIDE1]] : vector<8xf32> to vector<8xi32>
// CHECK: %[[CANON:.+]] = arith.select %[[NAN1]], %[[QNAN]], %[[BITS1]]
// CHECK: %[[GRAD1:.+]] = arith.bitcast %[[CANON]] : vector<8xi32> to vector<8xf32>
// CHECK-NOT: arith.mulf %[[WIDE1]]
// CHECK: arith.subf %[[GRAD1]]
// CHECK: } else {
// CHECK: scf.for
// CHECK: %[[RAW:.+]] = vector.load %{{.+}} : memref<?xbf16>, vector<8xbf16>
// CHECK: %[[WIDE:.+]] = arith.extf %[[RAW]] : vector<8xbf16> to vector<8xf32>
// CHECK: %[[SPLAT:.+]] = vector.broadcast %[[SCALE]] : f32 to vector<8xf32>
// CHECK: %[[PRODUCT:.+]] = arith.mulf %[[WIDE]], %[[SPLAT]] : vector<8xf32>
// CHECK: %[[NAN:.+]] = arith.cmpf uno, %[[PRODUCT]], %[[PRODUCT]] : vector<8xf32>
// CHECK: %[[BITS:.+]] = arith.bitcast %[[PRODUCT]] : vector<8xf32> to vector<8xi32>
// CHECK: %[[KEPT:.+]] = arith.select %[[NAN]], %[[QNAN]], %[[BITS]]
// CHECK: %[[ROUNDED:.+]] = arith.andi %{{.+}}, %[[MASK]] : vector<8xi32>
// CHECK-NOT: arith.trunci
// CHECK: %[[GRAD:.+]] = arith.bitcast %[[ROUNDED]] : vector<8xi32> to vector<8xf32>
// CHECK: arith.subf %[[GRAD]]
// CHECK: math.fma
// The scalar tail has one version.
// CHECK: scf.for %{{.+}} = %c96 to %c100
// CHECK: arith.mulf %{{.+}}, %[[SCALE]] : f32
// The lerp's branch (|1 - beta1| < 0.5) is uniform: each version of the
// vector loop (scale 1 or not) is itself in two versions, neither with a
// blend of f32 lanes (the scalar tail keeps its scalar select).
// LERP-LABEL: func.func @scaled
// LERP: %[[SMALL:.+]] = arith.andi %{{.+}}, %{{.+}} : i1
// LERP: scf.if
// LERP-NOT: vector<8xi1>, vector<8xf32>
// LERP: scf.if %[[SMALL]] {
// LERP-NOT: vector<8xi1>, vector<8xf32>
// LERP: } else {
// LERP-NOT: vector<8xi1>, vector<8xf32>
// LERP: } else {
// LERP-NOT: vector<8xi1>, vector<8xf32>
// LERP: scf.if %[[SMALL]] {
// LERP-NOT: vector<8xi1>, vector<8xf32>
// LERP: arith.select %[[SMALL]], %{{.+}}, %{{.+}} : f32
func.func @scaled(%g: memref<?xi8>, %p: memref<?xi8>, %m: memref<?xi8>,
                  %m1: memref<?xi8>, %m2: memref<?xi8>, %s: f64,
                  %step: i64, %scale: f32) {
  train.adamw_update members [
      "w" 100 {grad = bf16 at 0, param = bf16 at 0, master = fp32 at 0, moments = fp32 at 0}]
    grad(%g : memref<?xi8>) param(%p : memref<?xi8>) master(%m : memref<?xi8>)
    exp_avg(%m1 : memref<?xi8>) exp_avg_sq(%m2 : memref<?xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
    grad_scale(%scale)
  return
}
