// RUN: mantissa-opt %s | mantissa-opt | FileCheck %s
// RUN: mantissa-opt %s --mlir-print-op-generic | mantissa-opt | FileCheck %s

// A group of three members that differ in every dtype, in static buffers.
// CHECK-LABEL: func.func @mixed
// CHECK-SAME: (%[[G:.+]]: memref<32816xi8>, %[[P:.+]]: memref<32816xi8>, %[[M:.+]]: memref<24608xi8>, %[[M1:.+]]: memref<49200xi8>, %[[M2:.+]]: memref<49200xi8>, %[[LR:.+]]: f64, %[[B1:.+]]: f64, %[[B2:.+]]: f64, %[[EPS:.+]]: f64, %[[WD:.+]]: f64, %[[STEP:.+]]: i64)
// CHECK: train.adamw_update members [
// CHECK-NEXT: "w" 4099 {grad = fp32 at 0, param = fp32 at 0, moments = fp32 at 0},
// CHECK-NEXT: "emb" 4099 {grad = bf16 at 16400, param = bf16 at 16400, master = fp32 at 0, moments = fp32 at 16400},
// CHECK-NEXT: "norm" 4099 {grad = bf16 at 24608, param = bf16 at 24608, master = remainder at 16400, moments = fp32 at 32800}]
// CHECK-SAME: grad(%[[G]] : memref<32816xi8>) param(%[[P]] : memref<32816xi8>) master(%[[M]] : memref<24608xi8>)
// CHECK-SAME: exp_avg(%[[M1]] : memref<49200xi8>) exp_avg_sq(%[[M2]] : memref<49200xi8>)
// CHECK-SAME: lr(%[[LR]]) beta1(%[[B1]]) beta2(%[[B2]]) eps(%[[EPS]]) weight_decay(%[[WD]]) step(%[[STEP]])
// CHECK-NOT: slice
func.func @mixed(%g: memref<32816xi8>, %p: memref<32816xi8>, %m: memref<24608xi8>,
                 %m1: memref<49200xi8>, %m2: memref<49200xi8>,
                 %lr: f64, %b1: f64, %b2: f64, %eps: f64, %wd: f64, %step: i64) {
  train.adamw_update members [
      "w" 4099 {grad = fp32 at 0, param = fp32 at 0, moments = fp32 at 0},
      "emb" 4099 {grad = bf16 at 16400, param = bf16 at 16400, master = fp32 at 0, moments = fp32 at 16400},
      "norm" 4099 {moments = fp32 at 32800, master = remainder at 16400, grad = bf16 at 24608, param = bf16 at 24608}]
    grad(%g : memref<32816xi8>) param(%p : memref<32816xi8>) master(%m : memref<24608xi8>)
    exp_avg(%m1 : memref<49200xi8>) exp_avg_sq(%m2 : memref<49200xi8>)
    lr(%lr) beta1(%b1) beta2(%b2) eps(%eps) weight_decay(%wd) step(%step)
  return
}

// Dynamic buffers, amsgrad and maximize, the pure bf16 arm, and a slice.
// CHECK-LABEL: func.func @amsgrad_slice
// CHECK: train.adamw_update amsgrad maximize members [
// CHECK-NEXT: "p" 100 {grad = bf16 at 0, param = bf16 at 0, moments = bf16 at 0}]
// CHECK-SAME: max_exp_avg_sq(%{{.+}} : memref<?xi8>)
// CHECK-SAME: slice(%{{.+}}, %{{.+}})
func.func @amsgrad_slice(%g: memref<?xi8>, %p: memref<?xi8>, %m1: memref<?xi8>,
                         %m2: memref<?xi8>, %mx: memref<?xi8>, %lr: f64,
                         %step: i64, %part: index, %parts: index) {
  train.adamw_update amsgrad maximize members [
      "p" 100 {grad = bf16 at 0, param = bf16 at 0, moments = bf16 at 0}]
    grad(%g : memref<?xi8>) param(%p : memref<?xi8>)
    exp_avg(%m1 : memref<?xi8>) exp_avg_sq(%m2 : memref<?xi8>) max_exp_avg_sq(%mx : memref<?xi8>)
    lr(%lr) beta1(%lr) beta2(%lr) eps(%lr) weight_decay(%lr) step(%step)
    slice(%part, %parts)
  return
}
