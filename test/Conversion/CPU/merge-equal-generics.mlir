// RUN: mantissa-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mantissa-merge-equal-generics))" | FileCheck %s

// autocast's cast of one activation for each of three products, as
// mantissa-widen-bf16-products leaves them: three equal roundings of %x.
// The second and third go; their readers read the first. The rounding of
// another tensor, the rounding in another layout and the op whose output
// is not a fresh tensor stay.

#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
// CHECK-LABEL: func.func @three_casts
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[Y:.*]]: tensor<4x8xf32>, %[[Z:.*]]: tensor<4x8xf32>)
// CHECK: %[[A:.*]] = linalg.generic {{.*}} ins(%[[X]] : tensor<4x8xf32>)
// CHECK-NOT: ins(%[[X]] : tensor<4x8xf32>) outs(%{{.*}} : tensor<4x8xf32>)
// CHECK: %[[B:.*]] = linalg.generic {{.*}} ins(%[[Y]] : tensor<4x8xf32>)
// CHECK: %[[T:.*]] = linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}], {{.*}} ins(%[[X]] : tensor<4x8xf32>) outs(%{{.*}} : tensor<8x4xf32>)
// CHECK: %[[D:.*]] = linalg.generic {{.*}} ins(%[[X]] : tensor<4x8xf32>) outs(%[[Z]] : tensor<4x8xf32>)
// CHECK: return %[[A]], %[[A]], %[[A]], %[[B]], %[[T]], %[[D]]
func.func @three_casts(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>, %z: tensor<4x8xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x8xf32>) {
  %e0 = tensor.empty() : tensor<4x8xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x8xf32>) outs(%e0 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.truncf %in : f32 to bf16
    %w = arith.extf %t : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<4x8xf32>
  %e1 = tensor.empty() : tensor<4x8xf32>
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : tensor<4x8xf32>) outs(%e1 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.truncf %in : f32 to bf16
    %w = arith.extf %t : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<4x8xf32>
  %e2 = tensor.empty() : tensor<4x8xf32>
  %c = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x8xf32>) outs(%e2 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.truncf %in : f32 to bf16
    %w = arith.extf %t : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<4x8xf32>
  %e3 = tensor.empty() : tensor<8x4xf32>
  %t = linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x8xf32>) outs(%e3 : tensor<8x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.truncf %in : f32 to bf16
    %w = arith.extf %r : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<8x4xf32>
  %e4 = tensor.empty() : tensor<4x8xf32>
  %d = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x8xf32>) outs(%e4 : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.truncf %in : f32 to bf16
    %w = arith.extf %r : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<4x8xf32>
  // Reads its output (%z): not the same as %a.
  %z2 = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<4x8xf32>) outs(%z : tensor<4x8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %r = arith.truncf %in : f32 to bf16
    %w = arith.extf %r : bf16 to f32
    %s = arith.addf %w, %out : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  return %a, %c, %d, %b, %t, %z2 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x8xf32>
}

// -----

// Equal bodies up to a constant: not merged.
#id = affine_map<(d0) -> (d0)>
// CHECK-LABEL: func.func @different_bodies
// CHECK-COUNT-2: linalg.generic
// CHECK: return
func.func @different_bodies(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %two = arith.constant 2.0 : f32
  %three = arith.constant 3.0 : f32
  %e0 = tensor.empty() : tensor<8xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<8xf32>) outs(%e0 : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %two : f32
    linalg.yield %m : f32
  } -> tensor<8xf32>
  %e1 = tensor.empty() : tensor<8xf32>
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<8xf32>) outs(%e1 : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %three : f32
    linalg.yield %m : f32
  } -> tensor<8xf32>
  return %a, %b : tensor<8xf32>, tensor<8xf32>
}
