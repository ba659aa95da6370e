// The forward-only step evaluation runs: the loss and what it needs; the
// backward (gradients, buffer mutations) is gone, arguments and shard groups
// stay.

// RUN: mantissa-opt %s -split-input-file --mantissa-forward-only | FileCheck %s

// CHECK-LABEL: train.step @mlp(
// CHECK-SAME: %[[W:[^:]+]]: tensor<4x4xf32>
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x4xf32>
// CHECK-SAME: -> (tensor<f32> {train.result = #train.result<loss>}) {
// CHECK-NEXT: %[[Y:.+]] = train.mm %[[X]], %[[W]]
// CHECK-NEXT: %[[L:.+]] = train.mean %[[Y]]
// CHECK-NEXT: train.return %[[L]] : tensor<f32>
// CHECK-NOT: train.permute
train.step @mlp(%w: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4, 4], dtype = f32>},
                %x: tensor<2x4xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<4x4xf32> {train.result = #train.result<gradient, fqn = "w">}) {
  %y = train.mm %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %loss = train.mean %y {dims = array<i64: 0, 1>} : tensor<2x4xf32> -> tensor<f32>
  %xt = train.permute %x {dims = array<i64: 1, 0>} : tensor<2x4xf32> -> tensor<4x2xf32>
  %dw = train.mm %xt, %y : tensor<4x2xf32>, tensor<2x4xf32> -> tensor<4x4xf32>
  train.return %loss, %dw : tensor<f32>, tensor<4x4xf32>
}

