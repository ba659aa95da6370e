// RUN: mantissa-opt %s --allow-unregistered-dialect | FileCheck %s
// RUN: mantissa-opt %s --allow-unregistered-dialect | mantissa-opt --allow-unregistered-dialect | FileCheck %s
// RUN: mantissa-opt %s --allow-unregistered-dialect --mlir-print-op-generic | mantissa-opt --allow-unregistered-dialect | FileCheck %s

// A step with every kind of input and result, precision plans, casts and a
// nested shard group survives a print/parse round trip unchanged.

// CHECK-LABEL: train.step @block
// CHECK-SAME: %[[WQ:.+]]: tensor<8x8xf32> {train.plan = #train.plan<master = fp32, gather = bf16, reduce = bf16, moments = fp32>, train.tensor = #train.tensor<parameter, fqn = "layers.0.attn.wq.weight", module = "layers.0.attn", shape = [8, 8], dtype = f32>}
// CHECK-SAME: %[[NORM:.+]]: tensor<8xf32> {train.plan = #train.plan<master = fp32, gather = fp32, reduce = fp32, moments = fp32>, train.tensor = #train.tensor<parameter, fqn = "layers.0.attn_norm.weight", module = "layers.0.attn_norm", shape = [8], dtype = f32>}
// CHECK-SAME: %[[HEAD:.+]]: tensor<4x8xbf16> {train.tensor = #train.tensor<parameter, fqn = "head.weight", module = "head", shape = [4, 8], dtype = bf16>}
// CHECK-SAME: %[[MASK:.+]]: tensor<8x8xf32> {train.plan = #train.plan<master = fp32, gather = fp32>, train.tensor = #train.tensor<buffer, fqn = "layers.0.attn.mask", module = "layers.0.attn", shape = [8, 8], dtype = f32, persistent = false>}
// CHECK-SAME: %[[STEPS:.+]]: tensor<i64> {train.tensor = #train.tensor<buffer, fqn = "num_batches", module = "", shape = [], dtype = i64>}
// CHECK-SAME: %[[ROPE:.+]]: tensor<8xf32> {train.tensor = #train.tensor<constant, fqn = "rope.inv_freq", module = "rope", shape = [8], dtype = f32>}
// CHECK-SAME: %[[X:.+]]: tensor<2x8xi64> {train.tensor = #train.tensor<user_input, fqn = "tokens", module = "", shape = [2, 8], dtype = i64>}
// CHECK-SAME: -> (tensor<f32> {train.result = #train.result<loss>}
// CHECK-SAME: tensor<8x8xf32> {train.result = #train.result<gradient, fqn = "layers.0.attn.wq.weight">}
// CHECK-SAME: tensor<8xf32> {train.result = #train.result<gradient, fqn = "layers.0.attn_norm.weight">}
// CHECK-SAME: tensor<4x8xbf16> {train.result = #train.result<gradient, fqn = "head.weight">}
// CHECK-SAME: tensor<i64> {train.result = #train.result<buffer_mutation, fqn = "num_batches">}
// CHECK-SAME: tensor<2x8xi64> {train.result = #train.result<user_output>})
// CHECK:      train.shard_group "root" unit "" gather bf16 reshard_after_forward members ["head.weight"]
// CHECK-NEXT: train.shard_group "layers.0" unit "layers.0" gather bf16 reshard_after_forward members ["layers.0.attn.wq.weight"] {
// CHECK-NEXT:   train.shard_group "layers.0/fp32" unit "layers.0" gather fp32 members ["layers.0.attn_norm.weight"]
// CHECK-NEXT: }
// CHECK:      %[[CAST:.+]] = train.cast %[[WQ]] : tensor<8x8xf32> to tensor<8x8xbf16>
// CHECK:      train.return %{{.+}}, %[[WQ]], %[[NORM]], %[[HEAD]], %[[STEPS]], %[[X]] : tensor<f32>, tensor<8x8xf32>, tensor<8xf32>, tensor<4x8xbf16>, tensor<i64>, tensor<2x8xi64>
train.step @block(
    %wq: tensor<8x8xf32> {train.tensor = #train.tensor<parameter, fqn = "layers.0.attn.wq.weight", module = "layers.0.attn", shape = [8, 8], dtype = f32>,
                          train.plan = #train.plan<master = fp32, gather = bf16, reduce = bf16, moments = fp32>},
    %norm: tensor<8xf32> {train.tensor = #train.tensor<parameter, fqn = "layers.0.attn_norm.weight", module = "layers.0.attn_norm", shape = [8], dtype = f32>,
                          train.plan = #train.plan<moments = fp32, reduce = fp32, gather = fp32, master = fp32>},
    %head: tensor<4x8xbf16> {train.tensor = #train.tensor<parameter, fqn = "head.weight", module = "head", shape = [4, 8], dtype = bf16>},
    %mask: tensor<8x8xf32> {train.tensor = #train.tensor<buffer, fqn = "layers.0.attn.mask", module = "layers.0.attn", shape = [8, 8], dtype = f32, persistent = false>,
                            train.plan = #train.plan<master = fp32, gather = fp32>},
    %steps: tensor<i64> {train.tensor = #train.tensor<buffer, fqn = "num_batches", module = "", shape = [], dtype = i64, persistent = true>},
    %rope: tensor<8xf32> {train.tensor = #train.tensor<constant, fqn = "rope.inv_freq", module = "rope", shape = [8], dtype = f32>},
    %x: tensor<2x8xi64> {train.tensor = #train.tensor<user_input, fqn = "tokens", module = "", shape = [2, 8], dtype = i64>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<8x8xf32> {train.result = #train.result<gradient, fqn = "layers.0.attn.wq.weight">},
        tensor<8xf32> {train.result = #train.result<gradient, fqn = "layers.0.attn_norm.weight">},
        tensor<4x8xbf16> {train.result = #train.result<gradient, fqn = "head.weight">},
        tensor<i64> {train.result = #train.result<buffer_mutation, fqn = "num_batches">},
        tensor<2x8xi64> {train.result = #train.result<user_output>}) {
  train.shard_group "root" unit "" gather bf16 reshard_after_forward members ["head.weight"]
  train.shard_group "layers.0" unit "layers.0" gather bf16 reshard_after_forward members ["layers.0.attn.wq.weight"] {
    train.shard_group "layers.0/fp32" unit "layers.0" gather fp32 members ["layers.0.attn_norm.weight"]
  }
  %wq_bf16 = train.cast %wq : tensor<8x8xf32> to tensor<8x8xbf16>
  %loss = "test.loss"(%wq_bf16) : (tensor<8x8xbf16>) -> tensor<f32>
  train.return %loss, %wq, %norm, %head, %steps, %x : tensor<f32>, tensor<8x8xf32>, tensor<8xf32>, tensor<4x8xbf16>, tensor<i64>, tensor<2x8xi64>
}

// A step with no results (a forward-only fragment) is a valid container.
// CHECK-LABEL: train.step @empty()
// CHECK-NEXT:    train.return
train.step @empty() {
  train.return
}

// -----

// The fused attention, on tensors (its results its outputs) and on memrefs.
// CHECK-LABEL: func.func @attention_kernel
// CHECK: %{{.*}}:2 = train.attention_kernel {scale = 2.500000e-01 : f64} ins(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<32x32xi1>) outs(%{{.*}}, %{{.*}} : tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>) -> tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>
// CHECK: train.attention_kernel {backward, scale = 2.500000e-01 : f64} ins({{.*}}) outs({{.*}} : memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32xf32>)
// CHECK-NOT: ->
func.func @attention_kernel(%q: tensor<1x2x32x16xbf16>, %m: tensor<32x32xi1>, %o: tensor<1x2x32x16xbf16>, %l: tensor<1x2x32xf32>, %bq: memref<1x2x32x16xbf16>, %bm: memref<32x32xi1>, %bl: memref<1x2x32xf32>) {
  %r:2 = train.attention_kernel {scale = 0.25 : f64} ins(%q, %q, %q, %m : tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<32x32xi1>) outs(%o, %l : tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>) -> tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>
  train.attention_kernel {backward, scale = 0.25 : f64} ins(%bq, %bq, %bq, %bm, %bq, %bl, %bq : memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<32x32xi1>, memref<1x2x32x16xbf16>, memref<1x2x32xf32>, memref<1x2x32x16xbf16>) outs(%bq, %bq, %bq, %bl : memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32x16xbf16>, memref<1x2x32xf32>)
  return
}

// Unmasked (an encoder's attention): no mask operand.
// CHECK-LABEL: func.func @attention_kernel_unmasked
// CHECK: %{{.*}}:2 = train.attention_kernel {scale = 2.500000e-01 : f64, unmasked} ins(%{{.*}}, %{{.*}}, %{{.*}} : tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>) outs(
// CHECK: %{{.*}}:4 = train.attention_kernel {backward, scale = 2.500000e-01 : f64, unmasked} ins(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}#0, %{{.*}}#1, %{{.*}} : tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>, tensor<1x2x32x16xbf16>) outs(
func.func @attention_kernel_unmasked(%q: tensor<1x2x32x16xbf16>, %o: tensor<1x2x32x16xbf16>, %l: tensor<1x2x32xf32>) {
  %r:2 = train.attention_kernel {scale = 0.25 : f64, unmasked} ins(%q, %q, %q : tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>) outs(%o, %l : tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>) -> tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>
  %g:4 = train.attention_kernel {backward, scale = 0.25 : f64, unmasked} ins(%q, %q, %q, %r#0, %r#1, %q : tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>, tensor<1x2x32x16xbf16>) outs(%o, %o, %o, %l : tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>) -> tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32x16xbf16>, tensor<1x2x32xf32>
  return
}
