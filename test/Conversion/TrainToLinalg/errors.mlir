// RUN: mantissa-opt %s -split-input-file -verify-diagnostics --mantissa-lower-train-to-linalg

// An op the pass cannot lower fails it with an error on the op; nothing is
// dropped.
train.step @boolean_clamp(%x: tensor<2x4xi1> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = i1>},
                          %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<2x4xi1> {train.result = #train.result<user_output>}) {
  // expected-error @+1 {{'train.clamp' op has no lowering for boolean tensors}}
  %0 = train.clamp %x {min = 0 : i64} : tensor<2x4xi1> -> tensor<2x4xi1>
  train.return %loss, %0 : tensor<f32>, tensor<2x4xi1>
}

// -----

train.step @integer_mm(%a: tensor<2x3xi64> {train.tensor = #train.tensor<user_input, fqn = "a", module = "", shape = [2, 3], dtype = i64>},
    %b: tensor<3x4xi64> {train.tensor = #train.tensor<user_input, fqn = "b", module = "", shape = [3, 4], dtype = i64>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<2x4xi64> {train.result = #train.result<user_output>}) {
  // expected-error @+1 {{'train.mm' op has no lowering for integer matrices}}
  %0 = train.mm %a, %b : tensor<2x3xi64>, tensor<3x4xi64> -> tensor<2x4xi64>
  train.return %loss, %0 : tensor<f32>, tensor<2x4xi64>
}

// -----

train.step @integer_pow(%a: tensor<4xi64> {train.tensor = #train.tensor<user_input, fqn = "a", module = "", shape = [4], dtype = i64>},
    %b: tensor<4xi64> {train.tensor = #train.tensor<user_input, fqn = "b", module = "", shape = [4], dtype = i64>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<4xi64> {train.result = #train.result<user_output>}) {
  // expected-error @+1 {{'train.pow' op has no lowering for integer results}}
  %0 = train.pow %a, %b : tensor<4xi64>, tensor<4xi64> -> tensor<4xi64>
  train.return %loss, %0 : tensor<f32>, tensor<4xi64>
}

// -----

train.step @boolean_add(%a: tensor<4xi1> {train.tensor = #train.tensor<user_input, fqn = "a", module = "", shape = [4], dtype = i1>},
    %b: tensor<4xi1> {train.tensor = #train.tensor<user_input, fqn = "b", module = "", shape = [4], dtype = i1>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<4xi1> {train.result = #train.result<user_output>}) {
  // expected-error @+1 {{'train.add' op has no lowering for boolean arithmetic}}
  %0 = train.add %a, %b : tensor<4xi1>, tensor<4xi1> -> tensor<4xi1>
  train.return %loss, %0 : tensor<f32>, tensor<4xi1>
}
