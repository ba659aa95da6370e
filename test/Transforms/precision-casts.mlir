// Cast placement and folding: a parameter lives in its master dtype, is cast
// once to its gather dtype at the top of the step, and cast back to the dtype
// the exported graph computes in; chains that change nothing fold away and
// every use shares one cast.

// RUN: mantissa-opt %s -split-input-file --mantissa-precision=spec=%S/Inputs/casts.yaml | FileCheck %s

// An fp32 export: the operations keep computing in fp32.
// CHECK-LABEL: train.step @fp32_export(
// CHECK-SAME: %[[P:[^:]+]]: tensor<4x4xf32> {train.plan = #train.plan<master = fp32, gather = bf16, reduce = bf16, moments = fp32>
// CHECK-SAME: %[[N:[^:]+]]: tensor<4xbf16> {train.plan = #train.plan<master = bf16, gather = fp32, reduce = fp32, moments = fp32>
// CHECK-SAME: %[[H:[^:]+]]: tensor<4x4xbf16> {train.plan = #train.plan<master = bf16, gather = bf16, reduce = bf16, moments = fp32>
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x4xf32>
// CHECK-SAME: -> (tensor<f32> {{.+}}, tensor<4x4xbf16> {{.+}}, tensor<4xf32> {{.+}}, tensor<4x4xbf16> {{.+}})
// CHECK-NEXT: train.shard_group "root" unit "" gather bf16 members ["l.proj.weight", "l.head.weight"] {
// CHECK-NEXT:   train.shard_group "root/fp32" unit "" gather fp32 members ["l.norm.weight"]
// CHECK-NEXT: }
// master fp32 -> gather bf16 (the wire) -> fp32 (what mm computes in).
// CHECK-NEXT: %[[P_WIRE:.+]] = train.cast %[[P]] : tensor<4x4xf32> to tensor<4x4xbf16>
// CHECK-NEXT: %[[P_USE:.+]] = train.cast %[[P_WIRE]] : tensor<4x4xbf16> to tensor<4x4xf32>
// master bf16 -> gather fp32, which is what mul computes in.
// CHECK-NEXT: %[[N_USE:.+]] = train.cast %[[N]] : tensor<4xbf16> to tensor<4xf32>
// master = gather bf16 -> fp32 for mm.
// CHECK-NEXT: %[[H_USE:.+]] = train.cast %[[H]] : tensor<4x4xbf16> to tensor<4x4xf32>
// CHECK-NOT: train.cast
// CHECK: %[[A:.+]] = train.mm %[[X]], %[[P_USE]] : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
// CHECK: %[[B:.+]] = train.mm %[[A]], %[[P_USE]] : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
// CHECK: train.mul %[[B]], %[[N_USE]] : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
// CHECK: train.mm %{{.+}}, %[[H_USE]] : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
// Gradients leave in the gather dtype, which here is the reduce dtype too.
// CHECK: %[[GP:.+]] = train.cast %{{.+}} : tensor<4x4xf32> to tensor<4x4xbf16>
// CHECK-NEXT: %[[GH:.+]] = train.cast %{{.+}} : tensor<4x4xf32> to tensor<4x4xbf16>
// CHECK-NEXT: train.return %{{.+}}, %[[GP]], %{{.+}}, %[[GH]] : tensor<f32>, tensor<4x4xbf16>, tensor<4xf32>, tensor<4x4xbf16>

train.step @fp32_export(
    %p: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "l.proj.weight", module = "l.proj", shape = [4, 4], dtype = f32>},
    %n: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "l.norm.weight", module = "l.norm", shape = [4], dtype = f32>},
    %h: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "l.head.weight", module = "l.head", shape = [4, 4], dtype = f32>},
    %x: tensor<2x4xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<4x4xf32> {train.result = #train.result<gradient, fqn = "l.proj.weight">},
        tensor<4xf32> {train.result = #train.result<gradient, fqn = "l.norm.weight">},
        tensor<4x4xf32> {train.result = #train.result<gradient, fqn = "l.head.weight">}) {
  %0 = train.mm %x, %p : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %1 = train.mm %0, %p : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %2 = train.mul %1, %n : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %3 = train.mm %2, %h : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %loss = train.sum %3 {dims = array<i64>} : tensor<2x4xf32> -> tensor<f32>
  %gp = train.mul %p, %p : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %gn = train.mul %n, %n : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %gh = train.mul %h, %h : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  train.return %loss, %gp, %gn, %gh : tensor<f32>, tensor<4x4xf32>, tensor<4xf32>, tensor<4x4xf32>
}

// -----

// A bf16 export: the operations keep computing in bf16.
// CHECK-LABEL: train.step @bf16_export(
// CHECK-SAME: %[[P:[^:]+]]: tensor<4x4xf32> {train.plan = #train.plan<master = fp32, gather = bf16, reduce = bf16, moments = fp32>
// CHECK-SAME: %[[N:[^:]+]]: tensor<4xbf16> {train.plan = #train.plan<master = bf16, gather = fp32, reduce = fp32, moments = fp32>
// CHECK-SAME: %[[H:[^:]+]]: tensor<4x4xbf16> {train.plan = #train.plan<master = bf16, gather = bf16, reduce = bf16, moments = fp32>
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x4xbf16>
// CHECK-SAME: -> (tensor<bf16> {{.+}}, tensor<4x4xbf16> {{.+}}, tensor<4xf32> {{.+}}, tensor<4x4xbf16> {{.+}})
// CHECK-NEXT: train.shard_group "root" unit "" gather bf16 members ["l.proj.weight", "l.head.weight"] {
// CHECK-NEXT:   train.shard_group "root/fp32" unit "" gather fp32 members ["l.norm.weight"]
// CHECK-NEXT: }
// fp32 master -> bf16 on the wire, which is what mm computes in.
// CHECK-NEXT: %[[P_USE:.+]] = train.cast %[[P]] : tensor<4x4xf32> to tensor<4x4xbf16>
// bf16 -> fp32 -> bf16 is the identity: folded, the master is used as is.
// CHECK-NOT: train.cast
// CHECK: %[[A:.+]] = train.mm %[[X]], %[[P_USE]] : tensor<2x4xbf16>, tensor<4x4xbf16> -> tensor<2x4xbf16>
// CHECK: train.mul %{{.+}}, %[[N]] : tensor<2x4xbf16>, tensor<4xbf16> -> tensor<2x4xbf16>
// CHECK: train.mm %{{.+}}, %[[H]] : tensor<2x4xbf16>, tensor<4x4xbf16> -> tensor<2x4xbf16>
// The norm's gradient leaves in its gather dtype, fp32 (exactly).
// CHECK: %[[GN:.+]] = train.cast %{{.+}} : tensor<4xbf16> to tensor<4xf32>
// CHECK-NEXT: train.return %{{.+}}, %{{.+}}, %[[GN]], %{{.+}} : tensor<bf16>, tensor<4x4xbf16>, tensor<4xf32>, tensor<4x4xbf16>

train.step @bf16_export(
    %p: tensor<4x4xbf16> {train.tensor = #train.tensor<parameter, fqn = "l.proj.weight", module = "l.proj", shape = [4, 4], dtype = bf16>},
    %n: tensor<4xbf16> {train.tensor = #train.tensor<parameter, fqn = "l.norm.weight", module = "l.norm", shape = [4], dtype = bf16>},
    %h: tensor<4x4xbf16> {train.tensor = #train.tensor<parameter, fqn = "l.head.weight", module = "l.head", shape = [4, 4], dtype = bf16>},
    %x: tensor<2x4xbf16> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = bf16>})
    -> (tensor<bf16> {train.result = #train.result<loss>},
        tensor<4x4xbf16> {train.result = #train.result<gradient, fqn = "l.proj.weight">},
        tensor<4xbf16> {train.result = #train.result<gradient, fqn = "l.norm.weight">},
        tensor<4x4xbf16> {train.result = #train.result<gradient, fqn = "l.head.weight">}) {
  %0 = train.mm %x, %p : tensor<2x4xbf16>, tensor<4x4xbf16> -> tensor<2x4xbf16>
  %1 = train.mul %0, %n : tensor<2x4xbf16>, tensor<4xbf16> -> tensor<2x4xbf16>
  %2 = train.mm %1, %h : tensor<2x4xbf16>, tensor<4x4xbf16> -> tensor<2x4xbf16>
  %loss = train.sum %2 {dims = array<i64>} : tensor<2x4xbf16> -> tensor<bf16>
  %gp = train.mul %p, %p : tensor<4x4xbf16>, tensor<4x4xbf16> -> tensor<4x4xbf16>
  %gn = train.mul %n, %n : tensor<4xbf16>, tensor<4xbf16> -> tensor<4xbf16>
  %gh = train.mul %h, %h : tensor<4x4xbf16>, tensor<4x4xbf16> -> tensor<4x4xbf16>
  train.return %loss, %gp, %gn, %gh : tensor<bf16>, tensor<4x4xbf16>, tensor<4xbf16>, tensor<4x4xbf16>
}
