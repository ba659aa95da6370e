// RUN: mantissa-opt %s -split-input-file -verify-diagnostics --allow-unregistered-dialect

// expected-error @+1 {{'train.step' op argument #0 has no 'train.tensor' metadata}}
train.step @no_metadata(%w: tensor<4xf32>) {
  train.return
}

// -----

// expected-error @+1 {{argument #0 ('w') must be a ranked tensor, got 'f32'}}
train.step @not_a_tensor(%w: f32 {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [], dtype = f32>}) {
  train.return
}

// -----

// expected-error @+1 {{argument #0 ('fc.weight') has shape [4, 2] but its metadata says [2, 4]}}
train.step @shape_mismatch(%w: tensor<4x2xf32> {train.tensor = #train.tensor<parameter, fqn = "fc.weight", module = "fc", shape = [2, 4], dtype = f32>}) {
  train.return
}

// -----

// expected-error @+1 {{tensor 'fc.weight' is declared twice (arguments #0 and #1)}}
train.step @duplicate_fqn(
    %a: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "fc.weight", module = "fc", shape = [4], dtype = f32>},
    %b: tensor<4xf32> {train.tensor = #train.tensor<buffer, fqn = "fc.weight", module = "fc", shape = [4], dtype = f32>}) {
  train.return
}

// -----

// expected-error @+1 {{tensor 'x' is a user_input and cannot have a precision plan}}
train.step @plan_on_input(%x: tensor<4xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [4], dtype = f32>,
                                             train.plan = #train.plan<master = fp32, gather = bf16>}) {
  train.return
}

// -----

// expected-error @+1 {{parameter 'w' has a plan without reduce and moments dtypes}}
train.step @parameter_plan_without_reduce(%w: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4], dtype = f32>,
                                                             train.plan = #train.plan<master = fp32, gather = bf16>}) {
  train.return
}

// -----

// expected-error @+1 {{buffer 'b' has a plan with reduce and moments dtypes}}
train.step @buffer_plan_with_moments(%b: tensor<4xf32> {train.tensor = #train.tensor<buffer, fqn = "b", module = "", shape = [4], dtype = f32>,
                                                        train.plan = #train.plan<master = fp32, gather = bf16, reduce = bf16, moments = fp32>}) {
  train.return
}

// -----

// expected-error @+1 {{result #0 has no 'train.result' role}}
train.step @no_role() -> tensor<f32> {
  %0 = "test.loss"() : () -> tensor<f32>
  train.return %0 : tensor<f32>
}

// -----

// expected-error @+1 {{result #0 must be a ranked tensor, got 'f32'}}
train.step @result_not_tensor() -> (f32 {train.result = #train.result<loss>}) {
  %0 = "test.loss"() : () -> f32
  train.return %0 : f32
}

// -----

// expected-error @+1 {{has more than one loss result (result #1)}}
train.step @two_losses() -> (tensor<f32> {train.result = #train.result<loss>}, tensor<f32> {train.result = #train.result<loss>}) {
  %0 = "test.loss"() : () -> tensor<f32>
  train.return %0, %0 : tensor<f32>, tensor<f32>
}

// -----

// expected-error @+1 {{loss result #0 must hold one element, got 'tensor<2xf32>'}}
train.step @loss_not_scalar() -> (tensor<2xf32> {train.result = #train.result<loss>}) {
  %0 = "test.loss"() : () -> tensor<2xf32>
  train.return %0 : tensor<2xf32>
}

// -----

// expected-error @+1 {{has no loss result}}
train.step @no_loss(%w: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4], dtype = f32>})
    -> (tensor<4xf32> {train.result = #train.result<gradient, fqn = "w">}) {
  train.return %w : tensor<4xf32>
}

// -----

// expected-error @+1 {{results #1 and #2 are both the gradient of 'w'}}
train.step @two_gradients(%w: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<4xf32> {train.result = #train.result<gradient, fqn = "w">},
        tensor<4xf32> {train.result = #train.result<gradient, fqn = "w">}) {
  %0 = "test.loss"() : () -> tensor<f32>
  train.return %0, %w, %w : tensor<f32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// expected-error @+1 {{gradient result #1 names 'b', which is not a parameter of this step}}
train.step @gradient_of_buffer(%b: tensor<4xf32> {train.tensor = #train.tensor<buffer, fqn = "b", module = "", shape = [4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<4xf32> {train.result = #train.result<gradient, fqn = "b">}) {
  %0 = "test.loss"() : () -> tensor<f32>
  train.return %0, %b : tensor<f32>, tensor<4xf32>
}

// -----

// expected-error @+1 {{buffer mutation result #1 names 'w', which is not a buffer of this step}}
train.step @mutation_of_parameter(%w: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<4xf32> {train.result = #train.result<buffer_mutation, fqn = "w">}) {
  %0 = "test.loss"() : () -> tensor<f32>
  train.return %0, %w : tensor<f32>, tensor<4xf32>
}

// -----

// expected-error @+1 {{gradient of 'w' has shape [2, 2] but the parameter has [4]}}
train.step @gradient_shape(%w: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<2x2xf32> {train.result = #train.result<gradient, fqn = "w">}) {
  %0 = "test.loss"() : () -> tensor<f32>
  %1 = "test.grad"() : () -> tensor<2x2xf32>
  train.return %0, %1 : tensor<f32>, tensor<2x2xf32>
}

// -----

train.step @return_count() -> (tensor<f32> {train.result = #train.result<loss>}) {
  // expected-error @+1 {{returns 0 values but the step has 1 results}}
  train.return
}

// -----

train.step @return_type() -> (tensor<f32> {train.result = #train.result<loss>}) {
  %0 = "test.loss"() : () -> tensor<bf16>
  // expected-error @+1 {{operand #0 has type 'tensor<bf16>' but step result #0 is 'tensor<f32>'}}
  train.return %0 : tensor<bf16>
}

// -----

// The fused attention (mantissa-fuse-attention) checks its operands.
func.func @attention_inputs(%q: tensor<1x2x32x16xbf16>, %m: tensor<32x32xi1>, %o: tensor<1x2x32x16xbf16>, %l: tensor<1x2x32xf32>) {
  // expected-error @+1 {{'train.attention_kernel' op takes 4 inputs and 2 outputs forward}}
  %r:2 = train.attention_kernel {scale = 0.25 : f64} ins(%q, %q, %m : tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<32x32xi1>) outs(%o, %l : tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>) -> tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>
  return
}

// -----

func.func @attention_unmasked_inputs(%q: tensor<1x2x32x16xbf16>, %m: tensor<32x32xi1>, %o: tensor<1x2x32x16xbf16>, %l: tensor<1x2x32xf32>) {
  // expected-error @+1 {{'train.attention_kernel' op takes 3 inputs and 2 outputs forward unmasked}}
  %r:2 = train.attention_kernel {scale = 0.25 : f64, unmasked} ins(%q, %q, %q, %m : tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<32x32xi1>) outs(%o, %l : tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>) -> tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>
  return
}

// -----

func.func @attention_mask(%q: tensor<1x2x32x16xbf16>, %m: tensor<32x16xi1>, %o: tensor<1x2x32x16xbf16>, %l: tensor<1x2x32xf32>) {
  // expected-error @+1 {{the mask is 'tensor<32x16xi1>'; expected an i1 or f32 [32, 32] or [1 or 1, 2 or 1, 32 or 1, 32]}}
  %r:2 = train.attention_kernel {scale = 0.25 : f64} ins(%q, %q, %q, %m : tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<32x16xi1>) outs(%o, %l : tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>) -> tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>
  return
}

// -----

func.func @attention_lse(%q: tensor<1x2x32x16xbf16>, %m: tensor<32x32xi1>, %o: tensor<1x2x32x16xbf16>, %l: tensor<1x2x32xbf16>) {
  // expected-error @+1 {{the log-sum-exp is 'tensor<1x2x32xbf16>'; expected a [1, 2, 32] of 'f32'}}
  %r:2 = train.attention_kernel {scale = 0.25 : f64} ins(%q, %q, %q, %m : tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<32x32xi1>) outs(%o, %l : tensor<1x2x32x16xbf16>, tensor<1x2x32xbf16>) -> tensor<1x2x32x16xbf16>, tensor<1x2x32xbf16>
  return
}

// -----

func.func @attention_mixed(%q: tensor<1x2x32x16xbf16>, %m: tensor<32x32xi1>, %o: memref<1x2x32x16xbf16>, %l: memref<1x2x32xf32>) {
  // expected-error @+1 {{mixes tensors and memrefs}}
  train.attention_kernel {scale = 0.25 : f64} ins(%q, %q, %q, %m : tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<32x32xi1>) outs(%o, %l : memref<1x2x32x16xbf16>, memref<1x2x32xf32>)
  return
}

// -----

func.func @attention_rounded_forward(%q: tensor<1x2x32x16xbf16>, %m: tensor<32x32xi1>, %o: tensor<1x2x32x16xbf16>, %l: tensor<1x2x32xf32>) {
  // expected-error @+1 {{rounds the scores' gradient (rounded_gradient) but is not the backward}}
  %r:2 = train.attention_kernel {rounded_gradient, scale = 0.25 : f64} ins(%q, %q, %q, %m : tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<32x32xi1>) outs(%o, %l : tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>) -> tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>
  return
}
