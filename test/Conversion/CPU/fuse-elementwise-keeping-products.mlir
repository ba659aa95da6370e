// RUN: mantissa-opt %s --pass-pipeline="builtin.module(func.func(mantissa-fuse-elementwise-keeping-products))" | FileCheck %s

// After mantissa-widen-bf16-products: an fp32 product of widened operands
// (%wx, %ww), whose bf16 result is widened again into an fp32 gradient.
// The rounding and the widening become one op reading the product; the
// widened operands, though each has one reader, stay out of the product,
// which call-gemm-library must still see as a contraction.

#id = affine_map<(d0, d1) -> (d0, d1)>
#a = affine_map<(d0, d1, d2) -> (d0, d2)>
#b = affine_map<(d0, d1, d2) -> (d2, d1)>
#c = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @gradient
// CHECK: %[[WX:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<4x8xf32>)
// CHECK: %[[WW:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<8x16xf32>)
// CHECK: %[[P:.*]] = linalg.generic {{.*}} ins(%[[WX]], %[[WW]] : tensor<4x8xf32>, tensor<8x16xf32>)
// CHECK-NEXT: ^bb0(%{{.*}}: f32, %{{.*}}: f32, %{{.*}}: f32):
// CHECK-NEXT: arith.mulf
// CHECK-NEXT: arith.addf
// CHECK-NEXT: linalg.yield
// CHECK: %[[G:.*]] = linalg.generic {{.*}} ins(%[[P]] : tensor<4x16xf32>) outs(%{{.*}} : tensor<4x16xf32>)
// CHECK-NEXT: ^bb0(%[[IN:.*]]: f32, %{{.*}}: f32):
// CHECK-NEXT: %[[T:.*]] = arith.truncf %[[IN]] : f32 to bf16
// CHECK-NEXT: %[[E:.*]] = arith.extf %[[T]] : bf16 to f32
// CHECK-NEXT: linalg.yield %[[E]] : f32
// CHECK-NOT: linalg.generic
// CHECK: return %[[G]]
func.func @gradient(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %zero = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<4x8xf32>
  %wx = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x8xf32>) outs(%e0 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.truncf %in : f32 to bf16
    %v = arith.extf %t : bf16 to f32
    linalg.yield %v : f32
  } -> tensor<4x8xf32>
  %e1 = tensor.empty() : tensor<8x16xf32>
  %ww = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w : tensor<8x16xf32>) outs(%e1 : tensor<8x16xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.truncf %in : f32 to bf16
    %v = arith.extf %t : bf16 to f32
    linalg.yield %v : f32
  } -> tensor<8x16xf32>
  %e2 = tensor.empty() : tensor<4x16xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e2 : tensor<4x16xf32>) -> tensor<4x16xf32>
  %p = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%wx, %ww : tensor<4x8xf32>, tensor<8x16xf32>) outs(%z : tensor<4x16xf32>) {
  ^bb0(%l: f32, %r: f32, %o: f32):
    %m = arith.mulf %l, %r : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  %e3 = tensor.empty() : tensor<4x16xbf16>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%p : tensor<4x16xf32>) outs(%e3 : tensor<4x16xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %t = arith.truncf %in : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x16xbf16>
  %e4 = tensor.empty() : tensor<4x16xf32>
  %g = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%r : tensor<4x16xbf16>) outs(%e4 : tensor<4x16xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %v = arith.extf %in : bf16 to f32
    linalg.yield %v : f32
  } -> tensor<4x16xf32>
  return %g : tensor<4x16xf32>
}
