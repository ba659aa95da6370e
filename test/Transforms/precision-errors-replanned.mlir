// The pass runs once per step.

// RUN: mantissa-opt %s -split-input-file --mantissa-precision -verify-diagnostics

// expected-error@+1 {{'train.step' op already has a precision plan; the precision pass runs once per step}}
train.step @planned(
    // expected-note@+1 {{'w' is already planned}}
    %w: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4], dtype = f32>,
                       train.plan = #train.plan<master = fp32, gather = fp32, reduce = fp32, moments = fp32>})
    -> (tensor<f32> {train.result = #train.result<loss>}) {
  %loss = train.sum %w {dims = array<i64>} : tensor<4xf32> -> tensor<f32>
  train.return %loss : tensor<f32>
}

// -----

// expected-error@+1 {{'train.step' op already has shard groups; the precision pass forms them}}
train.step @grouped(
    %w: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}) {
  // expected-note@+1 {{a shard group is here}}
  train.shard_group "root" unit "" gather fp32 members ["w"]
  %loss = train.sum %w {dims = array<i64>} : tensor<4xf32> -> tensor<f32>
  train.return %loss : tensor<f32>
}
