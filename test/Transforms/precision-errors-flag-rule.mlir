// Rules given as options are checked like the file's and named by their
// position.

// RUN: mantissa-opt %s --mantissa-precision='rules=*proj*:master=fp32,*:mastr=bf16,*:master=fp8,*norm*,:master=fp32,*: default-dtype=fp8' -verify-diagnostics

// Notes with the same text on the same line are matched once.
// expected-error@+11 {{unknown precision axis 'mastr' in --precision-rule[1] '*:mastr=bf16'}}
// expected-note@+10 {{expected master, gather, reduce or moments}}
// expected-error@+9 {{unknown dtype 'fp8' for master in --precision-rule[2] '*:master=fp8'}}
// expected-note@+8 {{expected fp32, fp32_split, bf16 or fp16 (or torch's float32, bfloat16, float16)}}
// expected-error@+7 {{missing ':' between the glob and the axes in --precision-rule[3] '*norm*'}}
// expected-note@+6 {{a flag rule is GLOB:AXIS=DTYPE[,AXIS=DTYPE...], e.g. '*norm*:master=fp32,gather=fp32'}}
// expected-error@+5 {{empty glob in --precision-rule[4] ':master=fp32'}}
// expected-error@+4 {{no axis set in --precision-rule[5] '*:'}}
// expected-error@+3 {{unknown dtype 'fp8' in --precision-default-dtype}}
// expected-note@+2 {{expected fp32, bf16 or fp16 (or torch's float32, bfloat16, float16)}}
// The first rule is fine.
train.step @flag_rules(
    %w: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "l.proj.weight", module = "l.proj", shape = [4, 4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}) {
  %loss = train.sum %w {dims = array<i64>} : tensor<4x4xf32> -> tensor<f32>
  train.return %loss : tensor<f32>
}
