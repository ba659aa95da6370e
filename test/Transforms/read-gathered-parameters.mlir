// RUN: mantissa-opt %s --mantissa-read-gathered-parameters --split-input-file | FileCheck %s

// A weight gathered in bf16 and widened for the step, which autocast
// rounds back to bf16 for the product and for its transpose: the step takes
// it in bf16 and reads it through the transpose, with no widened copy and
// no rounding. The norm gain, gathered in fp32, and the input are left
// alone.

// CHECK-LABEL: train.step @block(
// CHECK-SAME: %[[W:[^:]+]]: tensor<4x8xbf16> {{.*}}fqn = "w"
// CHECK-SAME: %[[G:[^:]+]]: tensor<8xf32> {{.*}}fqn = "g"
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x8xf32>
// CHECK-NOT: train.cast %[[W]]
// CHECK: %[[WT:.+]] = train.permute %[[W]] {dims = array<i64: 1, 0>} : tensor<4x8xbf16> -> tensor<8x4xbf16>
// CHECK: %[[X16:.+]] = train.cast %[[X]] : tensor<2x8xf32> to tensor<2x8xbf16>
// CHECK: train.mm %[[X16]], %[[WT]] : tensor<2x8xbf16>, tensor<8x4xbf16> -> tensor<2x4xbf16>
// CHECK: train.mul %[[X]], %[[G]]
// CHECK-NOT: tensor<4x8xf32>
// CHECK-NOT: tensor<8x4xf32>
train.step @block(%w: tensor<4x8xf32> {train.plan = #train.plan<master = fp32, gather = bf16, reduce = bf16, moments = fp32>, train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4, 8], dtype = f32>},
                  %g: tensor<8xf32> {train.plan = #train.plan<master = fp32, gather = fp32, reduce = fp32, moments = fp32>, train.tensor = #train.tensor<parameter, fqn = "g", module = "", shape = [8], dtype = f32>},
                  %x: tensor<2x8xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 8], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<2x4xbf16> {train.result = #train.result<user_output>}) {
  %w16 = train.cast %w : tensor<4x8xf32> to tensor<4x8xbf16>
  %w32 = train.cast %w16 : tensor<4x8xbf16> to tensor<4x8xf32>
  %wt = train.permute %w32 {dims = array<i64: 1, 0>} : tensor<4x8xf32> -> tensor<8x4xf32>
  %wt16 = train.cast %wt : tensor<8x4xf32> to tensor<8x4xbf16>
  %x16 = train.cast %x : tensor<2x8xf32> to tensor<2x8xbf16>
  %y = train.mm %x16, %wt16 : tensor<2x8xbf16>, tensor<8x4xbf16> -> tensor<2x4xbf16>
  %n = train.mul %x, %g : tensor<2x8xf32>, tensor<8xf32> -> tensor<2x8xf32>
  %l = train.mean %n {dims = array<i64>} : tensor<2x8xf32> -> tensor<f32>
  train.return %l, %y : tensor<f32>, tensor<2x4xbf16>
}

// -----

// A weight the step also reads widened (an fp32 product) keeps its widened
// value for that reader; the argument is bf16 all the same, the widening
// done in the step.

// CHECK-LABEL: train.step @fp32_product(
// CHECK-SAME: %[[W:[^:]+]]: tensor<4x8xbf16>
// CHECK: %[[W32:.+]] = train.cast %[[W]] : tensor<4x8xbf16> to tensor<4x8xf32>
// CHECK: train.permute %[[W32]]
// CHECK: train.mm {{.*}} : tensor<2x8xf32>, tensor<8x4xf32> -> tensor<2x4xf32>
train.step @fp32_product(%w: tensor<4x8xf32> {train.plan = #train.plan<master = fp32, gather = bf16, reduce = bf16, moments = fp32>, train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4, 8], dtype = f32>},
                         %x: tensor<2x8xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 8], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}) {
  %w16 = train.cast %w : tensor<4x8xf32> to tensor<4x8xbf16>
  %w32 = train.cast %w16 : tensor<4x8xbf16> to tensor<4x8xf32>
  %wt = train.permute %w32 {dims = array<i64: 1, 0>} : tensor<4x8xf32> -> tensor<8x4xf32>
  %y = train.mm %x, %wt : tensor<2x8xf32>, tensor<8x4xf32> -> tensor<2x4xf32>
  %l = train.mean %y {dims = array<i64>} : tensor<2x4xf32> -> tensor<f32>
  train.return %l : tensor<f32>
}
