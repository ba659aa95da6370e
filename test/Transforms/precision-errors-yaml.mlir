// YAML I/O's own errors (here an unknown top-level key) name the file, line
// and column.

// RUN: cd %S/Inputs && mantissa-opt %s --mantissa-precision=spec=bad-yaml.yaml -verify-diagnostics

// expected-error@+2 {{bad-yaml.yaml:2:1: unknown key 'rulez'}}
// expected-note@+1 {{a spec has the keys default_dtype, compute, shard_units and rules; each rule is a mapping with match and the axes it sets}}
train.step @bad_yaml(
    %w: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "l.proj.weight", module = "l.proj", shape = [4, 4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}) {
  %loss = train.sum %w {dims = array<i64>} : tensor<4x4xf32> -> tensor<f32>
  train.return %loss : tensor<f32>
}
