// The stall lint compares updates with spacings: the learning rate must be
// positive.

// RUN: mantissa-opt %s --mantissa-precision=lr=0 -verify-diagnostics

// expected-error@+1 {{'train.step' op needs a positive learning rate for the stall lint, got 0}}
train.step @zero_lr(
    %w: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}) {
  %loss = train.sum %w {dims = array<i64>} : tensor<4xf32> -> tensor<f32>
  train.return %loss : tensor<f32>
}
