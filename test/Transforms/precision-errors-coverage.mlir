// Coverage: a tensor exported in a dtype no plan holds needs a rule that sets
// its master; the error sits on the argument that declares it.

// RUN: mantissa-opt %s -split-input-file --mantissa-precision -verify-diagnostics
// RUN: mantissa-opt %s -split-input-file --mantissa-precision='rules=w:master=fp32' | FileCheck %s

train.step @coverage(
    // expected-error@+2 {{parameter 'w' is left without a precision plan: it was exported as f64, which no plan can hold, and no rule sets its master}}
    // expected-note@+1 {{'w' is declared here; add a rule matching it with master: fp32, bf16 or fp16}}
    %w: tensor<4xf64> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4], dtype = f64>})
    -> (tensor<f64> {train.result = #train.result<loss>}) {
  %loss = train.sum %w {dims = array<i64>} : tensor<4xf64> -> tensor<f64>
  train.return %loss : tensor<f64>
}

// With a rule, the fp32 master is cast to f64 where the graph computes in it.
// CHECK-LABEL: train.step @coverage(
// CHECK-SAME: %[[W:[^:]+]]: tensor<4xf32> {train.plan = #train.plan<master = fp32, gather = fp32, reduce = fp32, moments = fp32>
// CHECK: %[[W64:.+]] = train.cast %[[W]] : tensor<4xf32> to tensor<4xf64>
// CHECK: train.sum %[[W64]]
