// RUN: mantissa-opt %s --mantissa-add-into-slices --split-input-file | FileCheck %s

// RoPE's backward: the gradient of each half of rotate_half, padded with
// zeros to the full head and added. Each half is added into the range it
// covers instead: no zeros, no full-width adds.

// CHECK-LABEL: train.step @rope_backward(
// CHECK-SAME: %[[A:[^:]+]]: tensor<2x8xf32>
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x4xf32>
// CHECK-SAME: %[[Y:[^:]+]]: tensor<2x4xf32>
// CHECK-NOT: train.full
// CHECK: %[[S1:.+]] = train.slice %[[A]] {dim = 1 : i64, end = 8 : i64, start = 4 : i64} : tensor<2x8xf32> -> tensor<2x4xf32>
// CHECK: %[[T1:.+]] = train.add %[[S1]], %[[X]] : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
// CHECK: %[[R1:.+]] = train.slice_scatter %[[A]], %[[T1]] {dim = 1 : i64, end = 8 : i64, start = 4 : i64}
// CHECK: %[[S2:.+]] = train.slice %[[R1]] {dim = 1 : i64, end = 4 : i64, start = 0 : i64}
// CHECK: %[[T2:.+]] = train.add %[[Y]], %[[S2]]
// CHECK: %[[R2:.+]] = train.slice_scatter %[[R1]], %[[T2]] {dim = 1 : i64, end = 4 : i64, start = 0 : i64}
// CHECK: train.return %{{.*}}, %[[R2]]
train.step @rope_backward(%a: tensor<2x8xf32> {train.tensor = #train.tensor<user_input, fqn = "a", module = "", shape = [2, 8], dtype = f32>},
                          %x: tensor<2x4xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = f32>},
                          %y: tensor<2x4xf32> {train.tensor = #train.tensor<user_input, fqn = "y", module = "", shape = [2, 4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<2x8xf32> {train.result = #train.result<user_output>}) {
  %z = train.full {value = 0 : i64} : tensor<2x8xf32>
  %p = train.slice_scatter %z, %x {dim = 1 : i64, end = 8 : i64, start = 4 : i64} : tensor<2x8xf32>, tensor<2x4xf32> -> tensor<2x8xf32>
  %s = train.add %a, %p : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %z2 = train.full {value = 0 : i64} : tensor<2x8xf32>
  %q = train.slice_scatter %z2, %y {dim = 1 : i64, end = 4 : i64, start = 0 : i64} : tensor<2x8xf32>, tensor<2x4xf32> -> tensor<2x8xf32>
  %t = train.add %q, %s : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %l = train.mean %t {dims = array<i64>} : tensor<2x8xf32> -> tensor<f32>
  train.return %l, %t : tensor<f32>, tensor<2x8xf32>
}

// -----

// Left alone: padding with ones, a padded slice something else reads too,
// and a sum that promotes (bf16 + fp32).

// CHECK-LABEL: train.step @kept(
// CHECK-COUNT-3: train.slice_scatter
// CHECK-NOT: train.slice_scatter
// CHECK-NOT: train.slice %
train.step @kept(%a: tensor<2x8xf32> {train.tensor = #train.tensor<user_input, fqn = "a", module = "", shape = [2, 8], dtype = f32>},
                 %b: tensor<2x8xbf16> {train.tensor = #train.tensor<user_input, fqn = "b", module = "", shape = [2, 8], dtype = bf16>},
                 %x: tensor<2x4xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<2x8xf32> {train.result = #train.result<user_output>},
        tensor<2x8xf32> {train.result = #train.result<user_output>},
        tensor<2x8xf32> {train.result = #train.result<user_output>},
        tensor<2x8xf32> {train.result = #train.result<user_output>}) {
  %ones = train.full {value = 1.0 : f64} : tensor<2x8xf32>
  %p = train.slice_scatter %ones, %x {dim = 1 : i64, end = 4 : i64, start = 0 : i64} : tensor<2x8xf32>, tensor<2x4xf32> -> tensor<2x8xf32>
  %s = train.add %a, %p : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %z = train.full {value = 0 : i64} : tensor<2x8xf32>
  %q = train.slice_scatter %z, %x {dim = 1 : i64, end = 8 : i64, start = 4 : i64} : tensor<2x8xf32>, tensor<2x4xf32> -> tensor<2x8xf32>
  %t = train.add %a, %q : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %z2 = train.full {value = 0 : i64} : tensor<2x8xf32>
  %r = train.slice_scatter %z2, %x {dim = 1 : i64, end = 8 : i64, start = 4 : i64} : tensor<2x8xf32>, tensor<2x4xf32> -> tensor<2x8xf32>
  %u = train.add %b, %r : tensor<2x8xbf16>, tensor<2x8xf32> -> tensor<2x8xf32>
  %l = train.mean %s {dims = array<i64>} : tensor<2x8xf32> -> tensor<f32>
  train.return %l, %s, %t, %q, %u : tensor<f32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>
}
