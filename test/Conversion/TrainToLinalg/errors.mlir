// RUN: mantissa-opt %s -split-input-file -verify-diagnostics --mantissa-lower-train-to-linalg

// An op without a lowering fails the pass by name; nothing is dropped.
train.step @unsupported(%x: tensor<2x4xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = f32>},
                        %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<2x4xf32> {train.result = #train.result<user_output>}) {
  // expected-error @+1 {{'train.rms_norm' op has no lowering to linalg (mantissa-lower-train-to-linalg)}}
  %0:2 = train.rms_norm %x {normalized_rank = 1 : i64} : tensor<2x4xf32> -> tensor<2x4xf32>, tensor<2x1xf32>
  train.return %loss, %0#0 : tensor<f32>, tensor<2x4xf32>
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
