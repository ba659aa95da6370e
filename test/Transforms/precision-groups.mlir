// Shard groups: each unit (the root, and every module a shard_units glob
// matches, '*' within one path segment) owns the parameters beneath it that
// no inner unit owns, and forms a main group in the dtype holding most of its
// elements plus a nested group per other gather dtype. Main groups reshard
// after forward, except the root's; nested groups stay gathered.

// RUN: mantissa-opt %s --mantissa-precision=spec=%S/Inputs/groups.yaml | FileCheck %s

// CHECK-LABEL: train.step @groups(
// CHECK-NEXT: train.shard_group "root" unit "" gather bf16 members ["embed.weight"] {
// CHECK-NEXT:   train.shard_group "root/fp32" unit "" gather fp32 members ["norm.weight"]
// CHECK-NEXT: }
// CHECK-NEXT: train.shard_group "layers.0" unit "layers.0" gather bf16 reshard_after_forward members ["layers.0.attn.weight"] {
// CHECK-NEXT:   train.shard_group "layers.0/fp32" unit "layers.0" gather fp32 members ["layers.0.attn_norm.weight", "layers.0.mlp_norm.weight"]
// CHECK-NEXT: }
// The MLP is a unit of its own inside the layer.
// CHECK-NEXT: train.shard_group "layers.0.mlp" unit "layers.0.mlp" gather bf16 reshard_after_forward members ["layers.0.mlp.up.weight", "layers.0.mlp.down.weight"]{{$}}
// A layer whose only parameters are norms has one group, in fp32.
// CHECK-NEXT: train.shard_group "layers.1" unit "layers.1" gather fp32 reshard_after_forward members ["layers.1.attn_norm.weight"]{{$}}
// CHECK-NOT: train.shard_group

train.step @groups(
    %e: tensor<4x8xf32> {train.tensor = #train.tensor<parameter, fqn = "embed.weight", module = "embed", shape = [4, 8], dtype = f32>},
    %n0: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "layers.0.attn_norm.weight", module = "layers.0.attn_norm", shape = [4], dtype = f32>},
    %a0: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "layers.0.attn.weight", module = "layers.0.attn", shape = [4, 4], dtype = f32>},
    %m0: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "layers.0.mlp_norm.weight", module = "layers.0.mlp_norm", shape = [4], dtype = f32>},
    %u0: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "layers.0.mlp.up.weight", module = "layers.0.mlp.up", shape = [4, 4], dtype = f32>},
    %d0: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "layers.0.mlp.down.weight", module = "layers.0.mlp.down", shape = [4, 4], dtype = f32>},
    %n1: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "layers.1.attn_norm.weight", module = "layers.1.attn_norm", shape = [4], dtype = f32>},
    %f: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "norm.weight", module = "norm", shape = [4], dtype = f32>},
    %x: tensor<2x4xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}) {
  %0 = train.mm %x, %a0 : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %1 = train.mul %0, %n0 : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %2 = train.mul %1, %m0 : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %3 = train.mm %2, %u0 : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %4 = train.mm %3, %d0 : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %5 = train.mul %4, %n1 : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %6 = train.mul %5, %f : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %7 = train.mm %6, %e : tensor<2x4xf32>, tensor<4x8xf32> -> tensor<2x8xf32>
  %loss = train.sum %7 {dims = array<i64>} : tensor<2x8xf32> -> tensor<f32>
  train.return %loss : tensor<f32>
}
