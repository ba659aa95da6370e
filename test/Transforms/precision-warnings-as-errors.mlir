// With warnings-as-errors the lints fail the pass and the step is untouched.

// RUN: cd %S/Inputs && mantissa-opt %s --mantissa-precision='spec=pure-bf16.yaml warnings-as-errors=true' -verify-diagnostics

// expected-error@+2 {{rule {match: "*", master: bf16, moments: bf16} at pure-bf16.yaml:2 keeps the Adam moments of 3 parameters in bf16}}
// expected-note@+1 {{keep the moments in fp32}}
train.step @lints(
    // expected-error@+4 {{parameter 'l.norm.weight' would stall: its master is bf16 (pure-bf16.yaml:2)}}
    // expected-note@+3 {{keep the master of 'l.norm.weight' in fp32}}
    // Norm gains start at 1.0: bf16 values there are 2^-7 apart, and half
    // of that (0.0039) exceeds lr = 1e-3.
    %g: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "l.norm.weight", module = "l.norm", shape = [4], dtype = f32>, train.init_rms = 1.0 : f64},
    // A projection of RMS 0.05: 2^-12 apart, half is 1.2e-4 < lr.
    %w: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "l.proj.weight", module = "l.proj", shape = [4, 4], dtype = f32>, train.init_rms = 0.05 : f64},
    // Without its RMS the lint cannot judge a tensor.
    %h: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "l.head.weight", module = "l.head", shape = [4, 4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}) {
  %0 = train.mul %w, %g : tensor<4x4xf32>, tensor<4xf32> -> tensor<4x4xf32>
  %1 = train.mm %0, %h : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %loss = train.sum %1 {dims = array<i64>} : tensor<4x4xf32> -> tensor<f32>
  train.return %loss : tensor<f32>
}
