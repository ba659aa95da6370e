// RUN: mantissa-opt %s -split-input-file -verify-diagnostics

train.step @not_a_parameter(%b: tensor<4xf32> {train.tensor = #train.tensor<buffer, fqn = "b", module = "", shape = [4], dtype = f32>}) {
  // expected-error @+1 {{shard group 'root' names 'b', which is not a parameter of step @not_a_parameter}}
  train.shard_group "root" unit "" gather fp32 members ["b"]
  train.return
}

// -----

train.step @unknown_member() {
  // expected-error @+1 {{shard group 'root' names 'missing.weight', which is not a parameter of step @unknown_member}}
  train.shard_group "root" unit "" gather fp32 members ["missing.weight"]
  train.return
}

// -----

train.step @two_gather_dtypes(
    %wq: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "layers.0.wq", module = "layers.0", shape = [4], dtype = f32>,
                        train.plan = #train.plan<master = fp32, gather = bf16, reduce = bf16, moments = fp32>},
    %norm: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "layers.0.norm", module = "layers.0", shape = [4], dtype = f32>,
                          train.plan = #train.plan<master = fp32, gather = fp32, reduce = fp32, moments = fp32>}) {
  // expected-error @+1 {{shard group 'layers.0' has members that need two gather dtypes: 'layers.0.wq' needs bf16, 'layers.0.norm' needs fp32}}
  train.shard_group "layers.0" unit "layers.0" gather bf16 members ["layers.0.wq", "layers.0.norm"]
  train.return
}

// -----

// Without a plan, a member is gathered in its exported dtype.
train.step @gather_differs(%w: tensor<4xbf16> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4], dtype = bf16>}) {
  // expected-error @+1 {{shard group 'root' gathers in fp32 but its members need bf16 (e.g. 'w')}}
  train.shard_group "root" unit "" gather fp32 members ["w"]
  train.return
}

// -----

train.step @ungatherable(%w: tensor<4xf64> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4], dtype = f64>}) {
  // expected-error @+1 {{member 'w' has dtype 'f64', which cannot be gathered}}
  train.shard_group "root" unit "" gather fp32 members ["w"]
  train.return
}

// -----

train.step @two_groups(%w: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4], dtype = f32>}) {
  // expected-note @+1 {{'w' is first claimed here}}
  train.shard_group "root" unit "" gather fp32 members ["w"] {
    // expected-error @+1 {{'train.shard_group' op tensor 'w' belongs to two shard groups: 'root' and 'inner'}}
    train.shard_group "inner" unit "" gather fp32 members ["w"]
  }
  train.return
}

// -----

train.step @duplicate_group_name(
    %a: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "a", module = "", shape = [4], dtype = f32>},
    %b: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "b", module = "", shape = [4], dtype = f32>}) {
  // expected-note @+1 {{first used here}}
  train.shard_group "root" unit "" gather fp32 members ["a"]
  // expected-error @+1 {{name 'root' is used by two shard groups}}
  train.shard_group "root" unit "" gather fp32 members ["b"]
  train.return
}

// -----

train.step @foreign_op_in_group(%w: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4], dtype = f32>}) {
  train.shard_group "root" unit "" gather fp32 members ["w"] {
    // expected-error @+1 {{cannot be nested in shard group 'root'; only shard groups can}}
    %0 = train.cast %w : tensor<4xf32> to tensor<4xbf16>
  }
  train.return
}

// -----

// expected-error @+1 {{expects parent op to be one of 'train.step, train.shard_group'}}
train.shard_group "orphan" unit "" gather fp32 members []
