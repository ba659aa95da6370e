// RUN: mantissa-opt %s --pass-pipeline='builtin.module(func.func(mantissa-round-products-once))' --split-input-file | FileCheck %s

// bf16 scores as an fp32 product that each reader rounds on the way in
// (one of them through a reshape): one rounding right after the product,
// which the readers (and the reshape) read in bf16.

#a = affine_map<(d0, d1, d2) -> (d0, d2)>
#b = affine_map<(d0, d1, d2) -> (d2, d1)>
#c = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @scores
// CHECK: %[[S:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]
// CHECK: %[[R:.*]] = linalg.generic {{.*}} ins(%[[S]] : tensor<8x16xf32>) outs(%{{.*}} : tensor<8x16xbf16>)
// CHECK-NEXT: ^bb0(%[[IN:.*]]: f32, %{{.*}}: bf16):
// CHECK-NEXT: %[[T:.*]] = arith.truncf %[[IN]] : f32 to bf16
// CHECK-NEXT: linalg.yield %[[T]] : bf16
// CHECK: linalg.generic {{.*}} ins(%[[R]] : tensor<8x16xbf16>)
// CHECK-NEXT: ^bb0(%{{.*}}: bf16, %{{.*}}: f32):
// CHECK-NOT: arith.truncf
// CHECK: arith.maximumf
// CHECK: %[[E:.*]] = tensor.expand_shape %[[R]] {{.*}} : tensor<8x16xbf16> into tensor<2x4x16xbf16>
// CHECK: linalg.generic {{.*}} ins(%[[E]] : tensor<2x4x16xbf16>)
// CHECK-NOT: arith.truncf
// CHECK: arith.extf
func.func @scores(%q: tensor<8x4xf32>, %k: tensor<4x16xf32>) -> (tensor<8xf32>, tensor<2x4x16xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x16xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<8x16xf32>) -> tensor<8x16xf32>
  %s = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<8x4xf32>, tensor<4x16xf32>) outs(%z : tensor<8x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %m = arith.mulf %x, %y : f32
    %a = arith.addf %o, %m : f32
    linalg.yield %a : f32
  } -> tensor<8x16xf32>
  %lowest = arith.constant 0xFF800000 : f32
  %r = tensor.empty() : tensor<8xf32>
  %init = linalg.fill ins(%lowest : f32) outs(%r : tensor<8xf32>) -> tensor<8xf32>
  %max = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%s : tensor<8x16xf32>) outs(%init : tensor<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %t = arith.truncf %x : f32 to bf16
    %w = arith.extf %t : bf16 to f32
    %y = arith.maximumf %w, %o : f32
    linalg.yield %y : f32
  } -> tensor<8xf32>
  %v = tensor.expand_shape %s [[0, 1], [2]] output_shape [2, 4, 16] : tensor<8x16xf32> into tensor<2x4x16xf32>
  %e3 = tensor.empty() : tensor<2x4x16xf32>
  %w = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%v : tensor<2x4x16xf32>) outs(%e3 : tensor<2x4x16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %t = arith.truncf %x : f32 to bf16
    %y = arith.extf %t : bf16 to f32
    linalg.yield %y : f32
  } -> tensor<2x4x16xf32>
  return %max, %w : tensor<8xf32>, tensor<2x4x16xf32>
}

// -----

// The graph's own rounding of the product becomes the one rounding; the
// other reader, which rounded on the way in, reads it.

#a = affine_map<(d0, d1, d2) -> (d0, d2)>
#b = affine_map<(d0, d1, d2) -> (d2, d1)>
#c = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @own_rounding
// CHECK: %[[S:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]
// CHECK: %[[R:.*]] = linalg.generic {{.*}} ins(%[[S]] : tensor<8x16xf32>) outs(%{{.*}} : tensor<8x16xbf16>)
// CHECK: %[[N:.*]] = linalg.generic {{.*}} ins(%[[R]] : tensor<8x16xbf16>)
// CHECK-NOT: linalg.generic
// CHECK: return %[[R]], %[[N]]
func.func @own_rounding(%q: tensor<8x4xf32>, %k: tensor<4x16xf32>) -> (tensor<8x16xbf16>, tensor<8x16xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x16xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<8x16xf32>) -> tensor<8x16xf32>
  %s = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<8x4xf32>, tensor<4x16xf32>) outs(%z : tensor<8x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %m = arith.mulf %x, %y : f32
    %a = arith.addf %o, %m : f32
    linalg.yield %a : f32
  } -> tensor<8x16xf32>
  %eb = tensor.empty() : tensor<8x16xbf16>
  %own = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s : tensor<8x16xf32>) outs(%eb : tensor<8x16xbf16>) {
  ^bb0(%x: f32, %o: bf16):
    %t = arith.truncf %x : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<8x16xbf16>
  %neg = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s : tensor<8x16xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %t = arith.truncf %x : f32 to bf16
    %w = arith.extf %t : bf16 to f32
    %y = arith.negf %w : f32
    linalg.yield %y : f32
  } -> tensor<8x16xf32>
  return %own, %neg : tensor<8x16xbf16>, tensor<8x16xf32>
}

// -----

// A reader that uses the fp32 sums themselves: left alone.

#a = affine_map<(d0, d1, d2) -> (d0, d2)>
#b = affine_map<(d0, d1, d2) -> (d2, d1)>
#c = affine_map<(d0, d1, d2) -> (d0, d1)>
#id = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @fp32_reader
// CHECK-NOT: tensor<8x16xbf16>
func.func @fp32_reader(%q: tensor<8x4xf32>, %k: tensor<4x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x16xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<8x16xf32>) -> tensor<8x16xf32>
  %s = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%q, %k : tensor<8x4xf32>, tensor<4x16xf32>) outs(%z : tensor<8x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %m = arith.mulf %x, %y : f32
    %a = arith.addf %o, %m : f32
    linalg.yield %a : f32
  } -> tensor<8x16xf32>
  %rounded = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s : tensor<8x16xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %t = arith.truncf %x : f32 to bf16
    %w = arith.extf %t : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<8x16xf32>
  %neg = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s : tensor<8x16xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.negf %x : f32
    linalg.yield %y : f32
  } -> tensor<8x16xf32>
  return %rounded, %neg : tensor<8x16xf32>, tensor<8x16xf32>
}

// -----

// A named product of bf16 operands (nothing fused into it: a weight
// gradient of operands already bf16) whose one reader rounds and widens it
// for the fp32 gradient: rounded once, right after it, the same way.
#id = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @named
// CHECK: %[[P:.*]] = linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<8x4xbf16>, tensor<4x16xbf16>) outs(%{{.*}} : tensor<8x16xf32>)
// CHECK: %[[R:.*]] = linalg.generic {{.*}} ins(%[[P]] : tensor<8x16xf32>) outs(%{{.*}} : tensor<8x16xbf16>)
// CHECK: arith.truncf
// CHECK: linalg.generic {{.*}} ins(%[[R]] : tensor<8x16xbf16>)
// CHECK-NEXT: ^bb0(%[[IN:.*]]: bf16, %{{.*}}: f32):
// CHECK-NEXT: arith.extf %[[IN]] : bf16 to f32
func.func @named(%x: tensor<8x4xbf16>, %dy: tensor<4x16xbf16>) -> tensor<8x16xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x16xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<8x16xf32>) -> tensor<8x16xf32>
  %p = linalg.matmul ins(%x, %dy : tensor<8x4xbf16>, tensor<4x16xbf16>) outs(%z : tensor<8x16xf32>) -> tensor<8x16xf32>
  %g = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%p : tensor<8x16xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%in: f32, %o: f32):
    %t = arith.truncf %in : f32 to bf16
    %w = arith.extf %t : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<8x16xf32>
  return %g : tensor<8x16xf32>
}
