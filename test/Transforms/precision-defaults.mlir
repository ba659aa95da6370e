// Each axis' default: without a spec a tensor keeps its exported dtype on
// master, gather and reduce, and its moments are fp32; a default dtype sets
// the gather (and so the reduce) dtype of parameters only. Integer buffers
// take no plan.

// RUN: mantissa-opt %s --mantissa-precision | FileCheck %s --check-prefix=NONE
// RUN: mantissa-opt %s --mantissa-precision=default-dtype=bf16 | FileCheck %s --check-prefix=BF16

// NONE-LABEL: train.step @tiny(
// NONE-SAME: %{{.+}}: tensor<4x4xf32> {train.plan = #train.plan<master = fp32, gather = fp32, reduce = fp32, moments = fp32>
// NONE-SAME: %{{.+}}: tensor<4xf32> {train.plan = #train.plan<master = fp32, gather = fp32, reduce = fp32, moments = fp32>
// NONE-SAME: %{{.+}}: tensor<4xf32> {train.plan = #train.plan<master = fp32, gather = fp32>
// NONE-SAME: %{{.+}}: tensor<4xi1> {train.tensor =
// NONE-SAME: -> (tensor<f32> {train.result = #train.result<loss>}, tensor<4x4xf32> {{.+}}, tensor<4xf32> {{.+}})
// NONE-NEXT: train.shard_group "root" unit "" gather fp32 members ["layers.0.proj.weight", "layers.0.norm.weight"]{{$}}
// NONE-NOT: train.cast
// NONE: train.return

// BF16-LABEL: train.step @tiny(
// BF16-SAME: %[[W:.+]]: tensor<4x4xf32> {train.plan = #train.plan<master = fp32, gather = bf16, reduce = bf16, moments = fp32>
// BF16-SAME: %[[G:.+]]: tensor<4xf32> {train.plan = #train.plan<master = fp32, gather = bf16, reduce = bf16, moments = fp32>
// BF16-SAME: %[[COS:.+]]: tensor<4xf32> {train.plan = #train.plan<master = fp32, gather = fp32>
// BF16-SAME: -> (tensor<f32> {train.result = #train.result<loss>}, tensor<4x4xbf16> {{.+}}, tensor<4xbf16> {{.+}})
// BF16-NEXT: train.shard_group "root" unit "" gather bf16 members ["layers.0.proj.weight", "layers.0.norm.weight"]{{$}}
// BF16-NEXT: %[[WB:.+]] = train.cast %[[W]] : tensor<4x4xf32> to tensor<4x4xbf16>
// BF16-NEXT: %[[WF:.+]] = train.cast %[[WB]] : tensor<4x4xbf16> to tensor<4x4xf32>
// BF16-NEXT: %[[GB:.+]] = train.cast %[[G]] : tensor<4xf32> to tensor<4xbf16>
// BF16-NEXT: %[[GF:.+]] = train.cast %[[GB]] : tensor<4xbf16> to tensor<4xf32>
// BF16-NOT: train.cast %[[COS]]
// BF16: train.mm %{{.+}}, %[[WF]]
// BF16: train.mul %{{.+}}, %[[GF]]
// BF16: train.mul %{{.+}}, %[[COS]]
// BF16: train.return

train.step @tiny(
    %w: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "layers.0.proj.weight", module = "layers.0.proj", shape = [4, 4], dtype = f32>},
    %g: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "layers.0.norm.weight", module = "layers.0.norm", shape = [4], dtype = f32>},
    %cos: tensor<4xf32> {train.tensor = #train.tensor<buffer, fqn = "layers.0.rope.cos", module = "layers.0.rope", shape = [4], dtype = f32, persistent = false>},
    %mask: tensor<4xi1> {train.tensor = #train.tensor<buffer, fqn = "layers.0.rope.mask", module = "layers.0.rope", shape = [4], dtype = i1, persistent = false>},
    %x: tensor<2x4xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<4x4xf32> {train.result = #train.result<gradient, fqn = "layers.0.proj.weight">},
        tensor<4xf32> {train.result = #train.result<gradient, fqn = "layers.0.norm.weight">}) {
  %0 = train.mm %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %1 = train.mul %0, %g : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %2 = train.mul %1, %cos : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %3 = train.where %mask, %cos, %g : tensor<4xi1>, tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %4 = train.mul %2, %3 : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %loss = train.sum %4 {dims = array<i64>} : tensor<2x4xf32> -> tensor<f32>
  %gw = train.mul %w, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %gg = train.mul %g, %g : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  train.return %loss, %gw, %gg : tensor<f32>, tensor<4x4xf32>, tensor<4xf32>
}
