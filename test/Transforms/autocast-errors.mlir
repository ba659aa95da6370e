// Compute precision applies once, and names what is wrong.

// RUN: mantissa-opt %s --mantissa-autocast=compute=bf16 --mantissa-autocast=compute=bf16 -verify-diagnostics -split-input-file
// RUN: not mantissa-opt %s --mantissa-autocast=compute=int8 2>&1 | FileCheck %s --check-prefix=DTYPE

// DTYPE: mantissa-autocast: unknown compute dtype 'int8'; expected fp32, bf16 or fp16

// expected-error @+1 {{'train.step' op already computes in bf16; compute precision applies once per step}}
train.step @twice(%x: tensor<2x2xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 2], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}) {
  %y = train.mm %x, %x : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
  %loss = train.sum %y {dims = array<i64: 0, 1>} : tensor<2x2xf32> -> tensor<f32>
  train.return %loss : tensor<f32>
}
