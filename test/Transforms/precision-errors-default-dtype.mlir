// A default dtype given both by option and by the file must agree.

// RUN: cd %S/Inputs && mantissa-opt %s --mantissa-precision='spec=default-bf16.yaml default-dtype=fp16' -verify-diagnostics
// RUN: cd %S/Inputs && mantissa-opt %s --mantissa-precision='spec=default-bf16.yaml default-dtype=bfloat16' -split-input-file | FileCheck %s

// expected-error@+2 {{--precision-default-dtype=fp16 conflicts with default_dtype: bf16 at default-bf16.yaml:1}}
// expected-note@+1 {{default-bf16.yaml:1 sets default_dtype: bf16; give the default dtype once, or the same value in both places}}
train.step @default_dtype(
    %w: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "l.proj.weight", module = "l.proj", shape = [4, 4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}) {
  %loss = train.sum %w {dims = array<i64>} : tensor<4x4xf32> -> tensor<f32>
  train.return %loss : tensor<f32>
}

// The same value twice is fine.
// CHECK: train.plan = #train.plan<master = fp32, gather = bf16, reduce = bf16, moments = fp32>
