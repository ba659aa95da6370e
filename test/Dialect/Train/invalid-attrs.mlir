// RUN: mantissa-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{tensor metadata needs a non-empty fqn}}
train.step @empty_fqn(%w: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "", module = "", shape = [4], dtype = f32>}) {
  train.return
}

// -----

// expected-error @+1 {{tensor 'w' has a negative or dynamic dimension}}
train.step @negative_dim(%w: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [-1], dtype = f32>}) {
  train.return
}

// -----

// expected-error @+1 {{tensor 'w' is marked non-persistent but is a parameter; only buffers can be non-persistent}}
train.step @non_persistent_parameter(%w: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4], dtype = f32, persistent = false>}) {
  train.return
}

// -----

// expected-error @+1 {{parameter 'w' has non-floating-point dtype 'i64'}}
train.step @integer_parameter(%w: tensor<4xi64> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4], dtype = i64>}) {
  train.return
}

// -----

// expected-error @+1 {{gradient result must name its tensor with an fqn}}
train.step @gradient_without_fqn() -> (tensor<f32> {train.result = #train.result<gradient>}) {
  %0 = "test.loss"() : () -> tensor<f32>
  train.return %0 : tensor<f32>
}

// -----

// expected-error @+1 {{loss result takes no fqn}}
train.step @loss_with_fqn() -> (tensor<f32> {train.result = #train.result<loss, fqn = "w">}) {
  %0 = "test.loss"() : () -> tensor<f32>
  train.return %0 : tensor<f32>
}

// -----

// expected-error @+2 {{a plan sets both reduce and moments (a parameter) or neither (a buffer)}}
train.step @plan_half(%w: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4], dtype = f32>,
                                         train.plan = #train.plan<master = fp32, gather = bf16, reduce = bf16>}) {
  train.return
}

// -----

// expected-error @+1 {{unknown dtype 'fp8' (expected fp32, bf16 or fp16)}}
train.step @unknown_dtype(%w: tensor<4xf32> {train.plan = #train.plan<master = fp8, gather = bf16>}) {
  train.return
}

// -----

// expected-error @+1 {{unknown precision axis 'storage' (expected master, gather, reduce or moments)}}
train.step @unknown_axis(%w: tensor<4xf32> {train.plan = #train.plan<storage = fp32, gather = bf16>}) {
  train.return
}

// -----

// expected-error @+1 {{precision axis 'gather' given twice}}
train.step @axis_twice(%w: tensor<4xf32> {train.plan = #train.plan<master = fp32, gather = bf16, gather = fp32>}) {
  train.return
}

// -----

// expected-error @+1 {{master fp32_split needs a bf16 gather dtype (the remainder completes a bf16 parameter), got gather fp32}}
train.step @split_fp32_gather(%w: tensor<4xf32> {train.plan = #train.plan<master = fp32_split, gather = fp32, reduce = fp32, moments = fp32>}) {
  train.return
}

// -----

// expected-error @+1 {{master fp32_split is a parameter's (a buffer has no optimizer state)}}
train.step @split_buffer(%w: tensor<4xf32> {train.plan = #train.plan<master = fp32_split, gather = bf16>}) {
  train.return
}

// -----

// expected-error @+1 {{precision axis 'master' given twice}}
train.step @split_twice(%w: tensor<4xf32> {train.plan = #train.plan<master = fp32, gather = bf16, master = fp32_split>}) {
  train.return
}

// -----

// expected-error @+1 {{a plan needs at least master and gather}}
train.step @plan_without_master(%w: tensor<4xf32> {train.plan = #train.plan<gather = bf16>}) {
  train.return
}
