// RUN: cd %S/Inputs && mantissa-opt %s --mantissa-precision=spec=no-such-spec.yaml -verify-diagnostics

// expected-error@+2 {{cannot read precision spec 'no-such-spec.yaml': cannot open: No such file or directory}}
// expected-note@+1 {{the spec is a YAML file given by path}}
train.step @missing_spec(
    %w: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "l.proj.weight", module = "l.proj", shape = [4, 4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}) {
  %loss = train.sum %w {dims = array<i64>} : tensor<4x4xf32> -> tensor<f32>
  train.return %loss : tensor<f32>
}
