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

// -----

// The cross-entropy backward: the one-hot gradient scaled by 1 / N and
// negated, and its row sum (the log_softmax backward's), kept and not, and
// the one-hot's own row sum. Each sum becomes, on the target's [3, 1] and computed once, the scaled value
// where the target is in range (0 <= t < 5) plus the scaled 0 that stands
// for the row's other elements, plus +0 (where the sum starts).

// CHECK-LABEL: train.step @one_hot_sum(
// CHECK-SAME: %[[T:[^:]+]]: tensor<3x1xi64>
// CHECK: %[[N:.+]] = train.div
// CHECK: %[[V:.+]] = train.full {value = -1.000000e+00 : f64} : tensor<f32>
// CHECK: %[[W:.+]] = train.where %{{.+}}, %[[V]], %{{.+}} : tensor<3x5xi1>
// CHECK: %[[Z:.+]] = train.full {value = 0 : i64} : tensor<3x1xf32>
// CHECK: %[[LT:.+]] = train.lt_scalar %[[T]] {scalar = 5 : i64} : tensor<3x1xi64> -> tensor<3x1xi1>
// CHECK: %[[GE:.+]] = train.ge_scalar %[[T]] {scalar = 0 : i64} : tensor<3x1xi64> -> tensor<3x1xi1>
// CHECK: %[[A:.+]] = train.where %[[GE]], %[[V]], %[[Z]] : tensor<3x1xi1>, tensor<f32>, tensor<3x1xf32> -> tensor<3x1xf32>
// CHECK: %[[H:.+]] = train.where %[[LT]], %[[A]], %[[Z]]
// CHECK: %[[HZ:.+]] = train.add %[[H]], %[[Z]]
// CHECK: %[[HS:.+]] = train.add %[[HZ]], %{{.+}}
// CHECK: %[[S:.+]] = train.mul %[[W]], %[[N]]
// CHECK: %[[G:.+]] = train.neg %[[S]]
// CHECK: %[[M:.+]] = train.mul %[[H]], %[[N]] : tensor<3x1xf32>, tensor<f32> -> tensor<3x1xf32>
// CHECK: %[[FH:.+]] = train.neg %[[M]] : tensor<3x1xf32> -> tensor<3x1xf32>
// CHECK: %[[M0:.+]] = train.mul %[[Z]], %[[N]] : tensor<3x1xf32>, tensor<f32> -> tensor<3x1xf32>
// CHECK: %[[F0:.+]] = train.neg %[[M0]]
// CHECK: %[[P:.+]] = train.add %[[FH]], %[[F0]]
// CHECK: %[[Z2:.+]] = train.full {value = 0 : i64} : tensor<3x1xf32>
// CHECK: %[[R:.+]] = train.add %[[P]], %[[Z2]]
// CHECK-NOT: train.sum
// CHECK: %[[D:.+]] = train.sub %[[G]], %[[R]] : tensor<3x5xf32>, tensor<3x1xf32>
// CHECK: %[[U:.+]] = train.view %[[R]] : tensor<3x1xf32> -> tensor<3xf32>
// CHECK: train.return %{{.*}}, %[[D]], %[[U]], %[[HS]]
train.step @one_hot_sum(%t: tensor<3x1xi64> {train.tensor = #train.tensor<user_input, fqn = "t", module = "", shape = [3, 1], dtype = i64>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<3x5xf32> {train.result = #train.result<user_output>},
        tensor<3xf32> {train.result = #train.result<user_output>},
        tensor<3x1xf32> {train.result = #train.result<user_output>}) {
  %one = train.full {value = 1 : i64} : tensor<f32>
  %three = train.full {value = 3.000000e+00 : f64} : tensor<f32>
  %n = train.div %one, %three : tensor<f32>, tensor<f32> -> tensor<f32>
  %z = train.full {value = 0 : i64} : tensor<3x5xf32>
  %s = train.scatter_value %z, %t {dim = 1 : i64, value = -1.000000e+00 : f64} : tensor<3x5xf32>, tensor<3x1xi64> -> tensor<3x5xf32>
  %m = train.mul %s, %n : tensor<3x5xf32>, tensor<f32> -> tensor<3x5xf32>
  %g = train.neg %m : tensor<3x5xf32> -> tensor<3x5xf32>
  %k = train.sum %g {dims = array<i64: 1>, keepdim} : tensor<3x5xf32> -> tensor<3x1xf32>
  %d = train.sub %g, %k : tensor<3x5xf32>, tensor<3x1xf32> -> tensor<3x5xf32>
  %u = train.sum %g {dims = array<i64: 1>} : tensor<3x5xf32> -> tensor<3xf32>
  %h = train.sum %s {dims = array<i64: 1>, keepdim} : tensor<3x5xf32> -> tensor<3x1xf32>
  %l = train.full {value = 0 : i64} : tensor<f32>
  train.return %l, %d, %u, %h : tensor<f32>, tensor<3x5xf32>, tensor<3xf32>, tensor<3x1xf32>
}

// -----

// torch's cross-entropy with ignore_index: the one-hot gradient times one
// weight per row ([3, 1]: 1 / count, or 0 where the target is ignored). A
// row of one element has no other elements to stand for.

// CHECK-LABEL: train.step @row_weights(
// CHECK-SAME: %[[T:[^:]+]]: tensor<3x1xi64>
// CHECK-SAME: %[[W:[^:]+]]: tensor<3x1xf32>
// CHECK: %[[Z:.+]] = train.full {value = 0 : i64} : tensor<3x1xf32>
// CHECK: %[[H:.+]] = train.where %{{.+}}, %{{.+}}, %[[Z]] : tensor<3x1xi1>, tensor<3x1xf32>, tensor<3x1xf32>
// CHECK: %[[M:.+]] = train.mul %[[H]], %[[W]] : tensor<3x1xf32>, tensor<3x1xf32> -> tensor<3x1xf32>
// CHECK: %[[M0:.+]] = train.mul %[[Z]], %[[W]]
// CHECK: %[[P:.+]] = train.add %[[M]], %[[M0]]
// CHECK: train.add %[[P]], %{{.+}}
// CHECK-NOT: train.sum
// CHECK: train.lt_scalar %[[T]] {scalar = 1 : i64}
// CHECK: %[[H1:.+]] = train.where %{{.+}}, %{{.+}}, %{{.+}} : tensor<3x1xi1>, tensor<3x1xf32>, tensor<3x1xf32>
// CHECK: %[[M1:.+]] = train.mul %[[W]], %[[H1]]
// CHECK-NOT: train.mul
// CHECK: train.add %[[M1]], %{{.+}}
// CHECK-NOT: train.sum
train.step @row_weights(%t: tensor<3x1xi64> {train.tensor = #train.tensor<user_input, fqn = "t", module = "", shape = [3, 1], dtype = i64>},
                        %w: tensor<3x1xf32> {train.tensor = #train.tensor<user_input, fqn = "w", module = "", shape = [3, 1], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<3x1xf32> {train.result = #train.result<user_output>},
        tensor<3x1xf32> {train.result = #train.result<user_output>}) {
  %z = train.full {value = 0 : i64} : tensor<3x5xf32>
  %s = train.scatter_value %z, %t {dim = 1 : i64, value = -1.000000e+00 : f64} : tensor<3x5xf32>, tensor<3x1xi64> -> tensor<3x5xf32>
  %m = train.mul %s, %w : tensor<3x5xf32>, tensor<3x1xf32> -> tensor<3x5xf32>
  %k = train.sum %m {dims = array<i64: 1>, keepdim} : tensor<3x5xf32> -> tensor<3x1xf32>
  %z1 = train.full {value = 0 : i64} : tensor<3x1xf32>
  %s1 = train.scatter_value %z1, %t {dim = 1 : i64, value = -1.000000e+00 : f64} : tensor<3x1xf32>, tensor<3x1xi64> -> tensor<3x1xf32>
  %m1 = train.mul %w, %s1 : tensor<3x1xf32>, tensor<3x1xf32> -> tensor<3x1xf32>
  %k1 = train.sum %m1 {dims = array<i64: 1>, keepdim} : tensor<3x1xf32> -> tensor<3x1xf32>
  %l = train.full {value = 0 : i64} : tensor<f32>
  train.return %l, %k, %k1 : tensor<f32>, tensor<3x1xf32>, tensor<3x1xf32>
}

// -----

// Sums left alone: along the other dimension, over every dimension, after
// a product with a tensor that varies along the row, and of a scatter into
// a tensor that is not zeros.

// CHECK-LABEL: train.step @sums_kept(
// CHECK-COUNT-4: train.sum
// CHECK-NOT: train.lt_scalar
train.step @sums_kept(%t: tensor<3x1xi64> {train.tensor = #train.tensor<user_input, fqn = "t", module = "", shape = [3, 1], dtype = i64>},
                      %a: tensor<3x5xf32> {train.tensor = #train.tensor<user_input, fqn = "a", module = "", shape = [3, 5], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<1x5xf32> {train.result = #train.result<user_output>},
        tensor<f32> {train.result = #train.result<user_output>},
        tensor<3x1xf32> {train.result = #train.result<user_output>},
        tensor<3x1xf32> {train.result = #train.result<user_output>}) {
  %z = train.full {value = 0 : i64} : tensor<3x5xf32>
  %s = train.scatter_value %z, %t {dim = 1 : i64, value = -1.000000e+00 : f64} : tensor<3x5xf32>, tensor<3x1xi64> -> tensor<3x5xf32>
  %c = train.sum %s {dims = array<i64: 0>, keepdim} : tensor<3x5xf32> -> tensor<1x5xf32>
  %e = train.sum %s {dims = array<i64>} : tensor<3x5xf32> -> tensor<f32>
  %m = train.mul %s, %a : tensor<3x5xf32>, tensor<3x5xf32> -> tensor<3x5xf32>
  %k = train.sum %m {dims = array<i64: 1>, keepdim} : tensor<3x5xf32> -> tensor<3x1xf32>
  %i = train.scatter_value %a, %t {dim = 1 : i64, value = -1.000000e+00 : f64} : tensor<3x5xf32>, tensor<3x1xi64> -> tensor<3x5xf32>
  %j = train.sum %i {dims = array<i64: 1>, keepdim} : tensor<3x5xf32> -> tensor<3x1xf32>
  %l = train.full {value = 0 : i64} : tensor<f32>
  train.return %l, %c, %e, %k, %j : tensor<f32>, tensor<1x5xf32>, tensor<f32>, tensor<3x1xf32>, tensor<3x1xf32>
}
