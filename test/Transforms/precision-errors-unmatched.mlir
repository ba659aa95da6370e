// Rules and shard units that match nothing are errors with the rule's
// file:line; a note lists what the step has. Integer buffers take no plan, so
// a rule that matches only them matches nothing.

// RUN: cd %S/Inputs && mantissa-opt %s --mantissa-precision=spec=unmatched.yaml -verify-diagnostics

// expected-error@+6 {{rule {match: "*nrom*", master: fp32} at unmatched.yaml:3 matches no parameter or buffer of step @unmatched}}
// expected-note@+5 {{step @unmatched has 2 parameters and 0 floating-point buffers: 'layers.0.norm.weight', 'layers.0.proj.weight'}}
// expected-error@+4 {{rule {match: "*.mask", gather: fp32} at unmatched.yaml:5 matches no parameter or buffer of step @unmatched}}
// expected-note@+3 {{it matches only 'layers.0.attn.mask', which takes no precision plan (not floating point)}}
// expected-error@+2 {{shard unit 'blocks.*' at unmatched.yaml:1 matches no module of step @unmatched}}
// expected-note@+1 {{its modules are 'layers', 'layers.0', 'layers.0.norm', 'layers.0.proj', 'layers.0.attn' ('*' matches within one segment of a module path, '**' across segments)}}
train.step @unmatched(
    %g: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "layers.0.norm.weight", module = "layers.0.norm", shape = [4], dtype = f32>},
    %w: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "layers.0.proj.weight", module = "layers.0.proj", shape = [4, 4], dtype = f32>},
    %mask: tensor<4xi1> {train.tensor = #train.tensor<buffer, fqn = "layers.0.attn.mask", module = "layers.0.attn", shape = [4], dtype = i1, persistent = false>})
    -> (tensor<f32> {train.result = #train.result<loss>}) {
  %0 = train.mul %w, %g : tensor<4x4xf32>, tensor<4xf32> -> tensor<4x4xf32>
  %loss = train.sum %0 {dims = array<i64>} : tensor<4x4xf32> -> tensor<f32>
  train.return %loss : tensor<f32>
}
