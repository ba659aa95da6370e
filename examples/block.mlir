// One transformer block's parameters after the precision pass: an fp32
// master for every parameter, projections gathered in bf16 and the norm gain
// kept in fp32 in a nested shard group. mantissa-opt verifies the plan and
// folds the redundant casts (the bf16 -> fp32 -> bf16 round trip).
train.step @block(
    %wq: tensor<8x8xf32> {train.tensor = #train.tensor<parameter, fqn = "layers.0.attn.wq.weight", module = "layers.0.attn", shape = [8, 8], dtype = f32>,
                          train.plan = #train.plan<master = fp32, gather = bf16, reduce = bf16, moments = fp32>},
    %norm: tensor<8xf32> {train.tensor = #train.tensor<parameter, fqn = "layers.0.attn_norm.weight", module = "layers.0.attn_norm", shape = [8], dtype = f32>,
                          train.plan = #train.plan<master = fp32, gather = fp32, reduce = fp32, moments = fp32>},
    %mask: tensor<8x8xf32> {train.tensor = #train.tensor<buffer, fqn = "layers.0.attn.mask", module = "layers.0.attn", shape = [8, 8], dtype = f32, persistent = false>,
                            train.plan = #train.plan<master = fp32, gather = fp32>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<8x8xbf16> {train.result = #train.result<user_output>}) {
  train.shard_group "layers.0" unit "layers.0" gather bf16 reshard_after_forward members ["layers.0.attn.wq.weight"] {
    train.shard_group "layers.0/fp32" unit "layers.0" gather fp32 members ["layers.0.attn_norm.weight"]
  }
  %gathered = train.cast %wq : tensor<8x8xf32> to tensor<8x8xbf16>
  %widened = train.cast %gathered : tensor<8x8xbf16> to tensor<8x8xf32>
  %again = train.cast %widened : tensor<8x8xf32> to tensor<8x8xbf16>
  train.return %loss, %again : tensor<f32>, tensor<8x8xbf16>
}
