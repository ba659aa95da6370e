// RUN: mantissa-opt %s --one-shot-bufferize="bufferize-function-boundaries" | FileCheck %s

// The fused attention bufferizes in place on its outputs' buffers and
// keeps its attributes (the scale, and whether the backward rounds the
// scores' gradient before scaling it).

// CHECK-LABEL: func.func @backward
// CHECK: train.attention_kernel {backward, rounded_gradient, scale = 2.500000e-01 : f64} ins({{.*}} : memref<{{.*}}>, {{.*}}) outs({{.*}} : memref<1x2x32x16xbf16{{.*}}>, {{.*}})
// CHECK-NOT: ->
func.func @backward(%q: tensor<1x2x32x16xbf16>, %m: tensor<32x32xi1>, %l: tensor<1x2x32xf32>) -> (tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>) {
  %e = tensor.empty() : tensor<1x2x32x16xbf16>
  %d = tensor.empty() : tensor<1x2x32xf32>
  %r:4 = train.attention_kernel {backward, rounded_gradient, scale = 0.25 : f64} ins(%q, %q, %q, %m, %q, %l, %q : tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<32x32xi1>, tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>, tensor<1x2x32x16xbf16>) outs(%e, %e, %e, %d : tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>) -> tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>
  return %r#0, %r#1, %r#2, %r#3 : tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>
}
