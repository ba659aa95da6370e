// RUN: mantissa-opt %s --mantissa-log-softmax-as-differences --split-input-file | FileCheck %s

// The cross-entropy as torch exports it: log_softmax of the logits (bf16
// widened to fp32), the target's log-probability gathered per row, and the
// backward's exp of the log-probabilities. The log_softmax becomes the
// differences its lowering computes (the maximum, the log of the sum of
// exp(x - max)); the gather goes through them and the widening to the bf16
// logits, one per row, less the row's maximum and log-sum; the backward's
// exp reads its own difference of the logits.

// CHECK-LABEL: train.step @cross_entropy(
// CHECK-SAME: %[[L:[^:]+]]: tensor<4x16xbf16>
// CHECK-SAME: %[[T:[^:]+]]: tensor<4x1xi64>
// CHECK: %[[X:.+]] = train.cast %[[L]] : tensor<4x16xbf16> to tensor<4x16xf32>
// CHECK: %[[M:.+]] = train.amax %[[X]] {dims = array<i64: 1>, keepdim} : tensor<4x16xf32> -> tensor<4x1xf32>
// CHECK: %[[D1:.+]] = train.sub %[[X]], %[[M]] : tensor<4x16xf32>, tensor<4x1xf32> -> tensor<4x16xf32>
// CHECK: %[[E:.+]] = train.exp %[[D1]]
// CHECK: %[[S:.+]] = train.sum %[[E]] {dims = array<i64: 1>, keepdim} : tensor<4x16xf32> -> tensor<4x1xf32>
// CHECK: %[[LS:.+]] = train.log %[[S]] : tensor<4x1xf32> -> tensor<4x1xf32>
// CHECK: %[[D2:.+]] = train.sub %[[X]], %[[M]] : tensor<4x16xf32>, tensor<4x1xf32> -> tensor<4x16xf32>
// CHECK: %[[Y:.+]] = train.sub %[[D2]], %[[LS]] : tensor<4x16xf32>, tensor<4x1xf32> -> tensor<4x16xf32>
// CHECK: %[[G:.+]] = train.gather %[[L]], %[[T]] {dim = 1 : i64} : tensor<4x16xbf16>, tensor<4x1xi64> -> tensor<4x1xbf16>
// CHECK: %[[GX:.+]] = train.cast %[[G]] : tensor<4x1xbf16> to tensor<4x1xf32>
// CHECK: %[[GD:.+]] = train.sub %[[GX]], %[[M]] : tensor<4x1xf32>, tensor<4x1xf32> -> tensor<4x1xf32>
// CHECK: %[[GY:.+]] = train.sub %[[GD]], %[[LS]] : tensor<4x1xf32>, tensor<4x1xf32> -> tensor<4x1xf32>
// CHECK: %[[P:.+]] = train.exp %[[Y]] : tensor<4x16xf32> -> tensor<4x16xf32>
// CHECK-NOT: train.log_softmax
// CHECK: train.return %{{.*}}, %[[GY]], %[[P]]
train.step @cross_entropy(%logits: tensor<4x16xbf16> {train.tensor = #train.tensor<user_input, fqn = "logits", module = "", shape = [4, 16], dtype = bf16>},
                          %target: tensor<4x1xi64> {train.tensor = #train.tensor<user_input, fqn = "target", module = "", shape = [4, 1], dtype = i64>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<4x1xf32> {train.result = #train.result<user_output>},
        tensor<4x16xf32> {train.result = #train.result<user_output>}) {
  %x = train.cast %logits : tensor<4x16xbf16> to tensor<4x16xf32>
  %y = train.log_softmax %x {dim = 1 : i64} : tensor<4x16xf32> -> tensor<4x16xf32>
  %g = train.gather %y, %target {dim = 1 : i64} : tensor<4x16xf32>, tensor<4x1xi64> -> tensor<4x1xf32>
  %p = train.exp %y : tensor<4x16xf32> -> tensor<4x16xf32>
  %l = train.full {value = 0 : i64} : tensor<f32>
  train.return %l, %g, %p : tensor<f32>, tensor<4x1xf32>, tensor<4x16xf32>
}

// -----

// Left alone: a bf16 log_softmax (computed in fp32 and rounded once, which
// the pieces would round at each step), and a gather of an elementwise op
// one of whose operands has neither its shape nor a row's (a column
// broadcast along the rows would have to be gathered too).

// CHECK-LABEL: train.step @kept(
// CHECK: train.log_softmax %{{.*}} : tensor<4x16xbf16> -> tensor<4x16xbf16>
// CHECK: %[[A:.+]] = train.add
// CHECK: train.gather %[[A]]
train.step @kept(%x: tensor<4x16xbf16> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [4, 16], dtype = bf16>},
                 %c: tensor<16xf32> {train.tensor = #train.tensor<user_input, fqn = "c", module = "", shape = [16], dtype = f32>},
                 %f: tensor<4x16xf32> {train.tensor = #train.tensor<user_input, fqn = "f", module = "", shape = [4, 16], dtype = f32>},
                 %target: tensor<4x1xi64> {train.tensor = #train.tensor<user_input, fqn = "target", module = "", shape = [4, 1], dtype = i64>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<4x16xbf16> {train.result = #train.result<user_output>},
        tensor<4x1xf32> {train.result = #train.result<user_output>}) {
  %y = train.log_softmax %x {dim = 1 : i64} : tensor<4x16xbf16> -> tensor<4x16xbf16>
  %a = train.add %f, %c : tensor<4x16xf32>, tensor<16xf32> -> tensor<4x16xf32>
  %g = train.gather %a, %target {dim = 1 : i64} : tensor<4x16xf32>, tensor<4x1xi64> -> tensor<4x1xf32>
  %l = train.full {value = 0 : i64} : tensor<f32>
  train.return %l, %y, %g : tensor<f32>, tensor<4x16xbf16>, tensor<4x1xf32>
}
