// The last matching rule wins, axis by axis; rules given as options come
// after the file's.

// RUN: mantissa-opt %s --mantissa-precision=spec=%S/Inputs/last-match.yaml | FileCheck %s --check-prefix=FILE
// RUN: mantissa-opt %s --mantissa-precision='spec=%S/Inputs/last-match.yaml rules=*norm*:gather=fp32,"head.*:master=fp32,moments=fp32"' | FileCheck %s --check-prefix=FLAGS

// Only the first rule matches the projection; the second overrides the
// norm's master but not its gather; the third overrides the head's gather,
// reduce and moments but not its master.
// FILE-LABEL: train.step @last_match(
// FILE-SAME: tensor<4x4xbf16> {train.plan = #train.plan<master = bf16, gather = bf16, reduce = bf16, moments = fp32>, train.tensor = #train.tensor<parameter, fqn = "layers.0.proj.weight"
// FILE-SAME: tensor<4xf32> {train.plan = #train.plan<master = fp32, gather = bf16, reduce = bf16, moments = fp32>, train.tensor = #train.tensor<parameter, fqn = "layers.0.norm.weight"
// FILE-SAME: tensor<4x4xbf16> {train.plan = #train.plan<master = bf16, gather = fp16, reduce = fp32, moments = bf16>, train.tensor = #train.tensor<parameter, fqn = "head.weight"
// FILE-SAME: tensor<4xbf16> {train.plan = #train.plan<master = bf16, gather = bf16>, train.tensor = #train.tensor<buffer, fqn = "layers.0.rope.cos"

// The flag rules come last: the norm is gathered in fp32, the head's master
// and moments are fp32 again.
// FLAGS-LABEL: train.step @last_match(
// FLAGS-SAME: tensor<4x4xbf16> {train.plan = #train.plan<master = bf16, gather = bf16, reduce = bf16, moments = fp32>, train.tensor = #train.tensor<parameter, fqn = "layers.0.proj.weight"
// FLAGS-SAME: tensor<4xf32> {train.plan = #train.plan<master = fp32, gather = fp32, reduce = fp32, moments = fp32>, train.tensor = #train.tensor<parameter, fqn = "layers.0.norm.weight"
// FLAGS-SAME: tensor<4x4xf32> {train.plan = #train.plan<master = fp32, gather = fp16, reduce = fp32, moments = fp32>, train.tensor = #train.tensor<parameter, fqn = "head.weight"

train.step @last_match(
    %w: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "layers.0.proj.weight", module = "layers.0.proj", shape = [4, 4], dtype = f32>},
    %g: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "layers.0.norm.weight", module = "layers.0.norm", shape = [4], dtype = f32>},
    %h: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "head.weight", module = "head", shape = [4, 4], dtype = f32>},
    %cos: tensor<4xf32> {train.tensor = #train.tensor<buffer, fqn = "layers.0.rope.cos", module = "layers.0.rope", shape = [4], dtype = f32, persistent = false>},
    %x: tensor<2x4xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<4x4xf32> {train.result = #train.result<gradient, fqn = "layers.0.proj.weight">},
        tensor<4xf32> {train.result = #train.result<gradient, fqn = "layers.0.norm.weight">},
        tensor<4x4xf32> {train.result = #train.result<gradient, fqn = "head.weight">}) {
  %0 = train.mm %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %1 = train.mul %0, %g : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %2 = train.mul %1, %cos : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %3 = train.mm %2, %h : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %loss = train.sum %3 {dims = array<i64>} : tensor<2x4xf32> -> tensor<f32>
  %gw = train.mul %w, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %gg = train.mul %g, %g : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %gh = train.mul %h, %h : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  train.return %loss, %gw, %gg, %gh : tensor<f32>, tensor<4x4xf32>, tensor<4xf32>, tensor<4x4xf32>
}
