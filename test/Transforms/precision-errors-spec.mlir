// Problems in the spec itself are all reported at once, each naming the rule
// as written and its file:line, with a note saying what was expected. The IR
// is left untouched.

// RUN: cd %S/Inputs && mantissa-opt %s --mantissa-precision=spec=bad-spec.yaml -verify-diagnostics

// Every problem is reported, not only the first (notes with the same text
// on one line are matched once).
// expected-error@+13 {{unknown dtype 'fp8' for default_dtype at bad-spec.yaml:1}}
// expected-note@+12 {{expected fp32, bf16 or fp16 (or torch's float32, bfloat16, float16)}}
// expected-error@+11 {{invalid shard unit glob 'layers.[' at bad-spec.yaml:2: }}
// expected-note@+10 {{shard units are globs over module paths, matched segment by segment}}
// expected-error@+9 {{unknown precision axis 'mastr' in rule {match: "*norm*", mastr: fp32} at bad-spec.yaml:5}}
// expected-note@+8 {{expected master, gather, reduce or moments}}
// expected-error@+7 {{unknown dtype 'fp33' for gather in rule {match: "*proj*", gather: fp33} at bad-spec.yaml:7}}
// expected-error@+6 {{rule {master: fp32} at bad-spec.yaml:8 has no 'match'}}
// expected-note@+5 {{every rule names the tensors it applies to with match: GLOB}}
// expected-error@+4 {{rule {match: "*"} at bad-spec.yaml:9 sets no precision axis}}
// expected-note@+3 {{a rule sets at least one of master, gather, reduce, moments}}
// expected-error@+2 {{invalid glob 'layers.[0' in rule {match: "layers.[0", master: fp32} at bad-spec.yaml:10: }}
// expected-note@+1 {{match is a glob over FQNs: * ? [...] {a,b}}}
train.step @spec_errors(
    %w: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "l.proj.weight", module = "l.proj", shape = [4, 4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}) {
  %loss = train.sum %w {dims = array<i64>} : tensor<4x4xf32> -> tensor<f32>
  train.return %loss : tensor<f32>
}
