// RUN: mantissa-opt %s --mantissa-scatters-as-comparisons --split-input-file | FileCheck %s

// The cross-entropy backward's one-hot: -1 at each row's target, into zeros
// (rows of 5 classes). It becomes a comparison of the column with the
// target, elementwise, and the input where it does not hit.

// CHECK-LABEL: train.step @one_hot(
// CHECK-SAME: %[[T:[^:]+]]: tensor<3x1xi64>
// CHECK-NOT: train.scatter_value
// CHECK: %[[Z:.+]] = train.full {value = 0 : i64} : tensor<3x5xf32>
// CHECK: %[[R:.+]] = train.arange {end = 5 : i64, start = 0 : i64, step = 1 : i64} : tensor<5xi64>
// CHECK: %[[C:.+]] = train.view %[[R]] : tensor<5xi64> -> tensor<1x5xi64>
// CHECK: %[[H:.+]] = train.eq %[[C]], %[[T]] : tensor<1x5xi64>, tensor<3x1xi64> -> tensor<3x5xi1>
// CHECK: %[[V:.+]] = train.full {value = -1.000000e+00 : f64} : tensor<f32>
// CHECK: %[[W:.+]] = train.where %[[H]], %[[V]], %[[Z]] : tensor<3x5xi1>, tensor<f32>, tensor<3x5xf32> -> tensor<3x5xf32>
// CHECK: train.return %{{.*}}, %[[W]]
train.step @one_hot(%t: tensor<3x1xi64> {train.tensor = #train.tensor<user_input, fqn = "t", module = "", shape = [3, 1], dtype = i64>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<3x5xf32> {train.result = #train.result<user_output>}) {
  %z = train.full {value = 0 : i64} : tensor<3x5xf32>
  %s = train.scatter_value %z, %t {dim = 1 : i64, value = -1.000000e+00 : f64} : tensor<3x5xf32>, tensor<3x1xi64> -> tensor<3x5xf32>
  %l = train.mean %s {dims = array<i64>} : tensor<3x5xf32> -> tensor<f32>
  train.return %l, %s : tensor<f32>, tensor<3x5xf32>
}

// -----

// Along the first dimension, into an input that is not zeros: one position
// per column.

// CHECK-LABEL: train.step @columns(
// CHECK-SAME: %[[A:[^:]+]]: tensor<4x2xbf16>
// CHECK-SAME: %[[I:[^:]+]]: tensor<1x2xi64>
// CHECK: %[[R:.+]] = train.arange {end = 4 : i64, start = 0 : i64, step = 1 : i64} : tensor<4xi64>
// CHECK: %[[C:.+]] = train.view %[[R]] : tensor<4xi64> -> tensor<4x1xi64>
// CHECK: %[[H:.+]] = train.eq %[[C]], %[[I]] : tensor<4x1xi64>, tensor<1x2xi64> -> tensor<4x2xi1>
// CHECK: %[[V:.+]] = train.full {value = 2.500000e+00 : f64} : tensor<bf16>
// CHECK: train.where %[[H]], %[[V]], %[[A]] : tensor<4x2xi1>, tensor<bf16>, tensor<4x2xbf16> -> tensor<4x2xbf16>
train.step @columns(%a: tensor<4x2xbf16> {train.tensor = #train.tensor<user_input, fqn = "a", module = "", shape = [4, 2], dtype = bf16>},
                    %i: tensor<1x2xi64> {train.tensor = #train.tensor<user_input, fqn = "i", module = "", shape = [1, 2], dtype = i64>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<4x2xbf16> {train.result = #train.result<user_output>}) {
  %s = train.scatter_value %a, %i {dim = 0 : i64, value = 2.500000e+00 : f64} : tensor<4x2xbf16>, tensor<1x2xi64> -> tensor<4x2xbf16>
  %l = train.full {value = 0 : i64} : tensor<f32>
  train.return %l, %s : tensor<f32>, tensor<4x2xbf16>
}

// -----

// Left alone: two positions per row (an index of extent 2), and an index
// narrower than the input along another dimension.

// CHECK-LABEL: train.step @kept(
// CHECK-COUNT-2: train.scatter_value
// CHECK-NOT: train.where
train.step @kept(%a: tensor<3x5xf32> {train.tensor = #train.tensor<user_input, fqn = "a", module = "", shape = [3, 5], dtype = f32>},
                 %i: tensor<3x2xi64> {train.tensor = #train.tensor<user_input, fqn = "i", module = "", shape = [3, 2], dtype = i64>},
                 %j: tensor<2x1xi64> {train.tensor = #train.tensor<user_input, fqn = "j", module = "", shape = [2, 1], dtype = i64>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<3x5xf32> {train.result = #train.result<user_output>},
        tensor<3x5xf32> {train.result = #train.result<user_output>}) {
  %s = train.scatter_value %a, %i {dim = 1 : i64, value = 1.000000e+00 : f64} : tensor<3x5xf32>, tensor<3x2xi64> -> tensor<3x5xf32>
  %r = train.scatter_value %a, %j {dim = 1 : i64, value = 1.000000e+00 : f64} : tensor<3x5xf32>, tensor<2x1xi64> -> tensor<3x5xf32>
  %l = train.full {value = 0 : i64} : tensor<f32>
  train.return %l, %s, %r : tensor<f32>, tensor<3x5xf32>, tensor<3x5xf32>
}
