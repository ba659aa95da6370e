// Gradients leave backward in their parameter's gather dtype and are cast to
// its reduce dtype; buffer mutations are stored in the buffer's master dtype.

// RUN: mantissa-opt %s --mantissa-precision=spec=%S/Inputs/gradients.yaml | FileCheck %s

// CHECK-LABEL: train.step @grads(
// CHECK-SAME: tensor<4x4xf32> {train.plan = #train.plan<master = fp32, gather = bf16, reduce = fp32, moments = fp32>
// CHECK-SAME: tensor<4xf32> {train.plan = #train.plan<master = fp32, gather = fp32, reduce = bf16, moments = fp32>
// CHECK-SAME: %[[STATS:[^:]+]]: tensor<4xbf16> {train.plan = #train.plan<master = bf16, gather = bf16>
// CHECK-SAME: -> (tensor<f32> {train.result = #train.result<loss>},
// CHECK-SAME: tensor<4x4xf32> {train.result = #train.result<gradient, fqn = "l.proj.weight">},
// CHECK-SAME: tensor<4xbf16> {train.result = #train.result<gradient, fqn = "l.norm.weight">},
// CHECK-SAME: tensor<4xbf16> {train.result = #train.result<buffer_mutation, fqn = "l.stats">})
// CHECK: %[[STATS_USE:.+]] = train.cast %[[STATS]] : tensor<4xbf16> to tensor<4xf32>
// CHECK: %[[NEW_STATS:.+]] = train.add %[[STATS_USE]], %{{.+}} : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
// CHECK: %[[GP:.+]] = train.mul
// CHECK: %[[GN:.+]] = train.mul
// f32 -> bf16 rounds, so the chain back to fp32 does not fold.
// CHECK-NEXT: %[[GP_GATHER:.+]] = train.cast %[[GP]] : tensor<4x4xf32> to tensor<4x4xbf16>
// CHECK-NEXT: %[[GP_REDUCE:.+]] = train.cast %[[GP_GATHER]] : tensor<4x4xbf16> to tensor<4x4xf32>
// CHECK-NEXT: %[[GN_REDUCE:.+]] = train.cast %[[GN]] : tensor<4xf32> to tensor<4xbf16>
// CHECK-NEXT: %[[STATS_OUT:.+]] = train.cast %[[NEW_STATS]] : tensor<4xf32> to tensor<4xbf16>
// CHECK-NEXT: train.return %{{.+}}, %[[GP_REDUCE]], %[[GN_REDUCE]], %[[STATS_OUT]] : tensor<f32>, tensor<4x4xf32>, tensor<4xbf16>, tensor<4xbf16>

train.step @grads(
    %p: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "l.proj.weight", module = "l.proj", shape = [4, 4], dtype = f32>},
    %n: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "l.norm.weight", module = "l.norm", shape = [4], dtype = f32>},
    %s: tensor<4xf32> {train.tensor = #train.tensor<buffer, fqn = "l.stats", module = "l", shape = [4], dtype = f32>},
    %x: tensor<2x4xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<4x4xf32> {train.result = #train.result<gradient, fqn = "l.proj.weight">},
        tensor<4xf32> {train.result = #train.result<gradient, fqn = "l.norm.weight">},
        tensor<4xf32> {train.result = #train.result<buffer_mutation, fqn = "l.stats">}) {
  %0 = train.mm %x, %p : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %1 = train.mul %0, %n : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %loss = train.sum %1 {dims = array<i64>} : tensor<2x4xf32> -> tensor<f32>
  %stats = train.add %s, %n : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %gp = train.mul %p, %p : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %gn = train.mul %n, %n : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  train.return %loss, %gp, %gn, %stats : tensor<f32>, tensor<4x4xf32>, tensor<4xf32>, tensor<4xf32>
}
