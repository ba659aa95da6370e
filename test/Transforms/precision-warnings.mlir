// The lints: the stall lint warns on each parameter whose bf16/fp16 master
// cannot take an update of lr at its typical magnitude (train.init_rms), and
// rules that keep Adam moments below fp32 get one warning each. Warnings do
// not stop the pass; a larger learning rate silences the stall lint.

// RUN: cd %S/Inputs && mantissa-opt %s --mantissa-precision=spec=pure-bf16.yaml -verify-diagnostics | FileCheck %s
// RUN: cd %S/Inputs && mantissa-opt %s --mantissa-precision='spec=pure-bf16.yaml lr=0.01' 2>&1 | FileCheck %s --check-prefix=FAST --implicit-check-not=stall

// expected-warning@+2 {{rule {match: "*", master: bf16, moments: bf16} at pure-bf16.yaml:2 keeps the Adam moments of 3 parameters in bf16 ('l.norm.weight', 'l.proj.weight', 'l.head.weight'): below fp32, the second moment of small gradients underflows and updates lose precision}}
// expected-note@+1 {{keep the moments in fp32 (moments: fp32), as torch's mixed-precision recipes do}}
train.step @lints(
    // expected-warning@+4 {{parameter 'l.norm.weight' would stall: its master is bf16 (pure-bf16.yaml:2), whose values near its typical magnitude 1 (initial RMS) are 0.0078125 apart, and an Adam step of about lr = 0.001 is less than half of that, so it rounds away}}
    // expected-note@+3 {{keep the master of 'l.norm.weight' in fp32 (master: fp32) so that updates accumulate}}
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

// CHECK: train.step @lints(%{{.+}}: tensor<4xbf16>

// FAST: warning: rule {{.+}} keeps the Adam moments of 3 parameters in bf16
// FAST: train.step @lints(
