// `master: fp32_split` (Transformer Engine's store_param_remainders): an
// fp32 master kept as the bf16 parameter plus its low 16 bits. The plan says
// so; the step holds the fp32 master and gathers it in bf16, as with
// `master: fp32`. Only a bf16 gather dtype has a value to complete: another
// gather dtype, or a buffer, is an error naming the rule and the tensor.

// RUN: mantissa-opt %s --mantissa-precision=spec=%S/Inputs/split-master.yaml | FileCheck %s
// RUN: mantissa-opt %s --mantissa-precision='rules=*:gather=bf16,*:master=fp32_split,*norm*:master=fp32;gather=fp32' | FileCheck %s
// RUN: not mantissa-opt %s --mantissa-precision=spec=%S/Inputs/split-master-fp32-gather.yaml 2>&1 | FileCheck %s --check-prefix=GATHER
// RUN: not mantissa-opt %s --mantissa-precision='rules=*:master=fp32_split' 2>&1 | FileCheck %s --check-prefix=FP32
// RUN: not mantissa-opt %s --mantissa-precision='rules=*:master=fp16_split' 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// CHECK-LABEL: train.step @split(
// CHECK-SAME: %{{.*}}: tensor<4x4xf32> {train.plan = #train.plan<master = fp32_split, gather = bf16, reduce = bf16, moments = fp32>, train.tensor = #train.tensor<parameter, fqn = "proj.weight"
// CHECK-SAME: %{{.*}}: tensor<4xf32> {train.plan = #train.plan<master = fp32, gather = fp32, reduce = fp32, moments = fp32>, train.tensor = #train.tensor<parameter, fqn = "norm.weight"
// CHECK: train.cast %{{.*}} : tensor<4x4xf32> to tensor<4x4xbf16>

// The plan attribute reads back.
// RUN: mantissa-opt %s --mantissa-precision=spec=%S/Inputs/split-master.yaml | mantissa-opt | FileCheck %s

// GATHER: error: rule {match: "*", master: fp32_split} at {{.*}}split-master-fp32-gather.yaml:7 gives parameter 'norm.weight' master fp32_split, but it is gathered in fp32 ({{.*}}split-master-fp32-gather.yaml:5)
// GATHER: note: fp32_split keeps an fp32 master as the bf16 parameter plus its low 16 bits, so it needs gather: bf16

// Without a default dtype the gather dtype is the master's, fp32.
// FP32: error: --precision-rule[0] '*:master=fp32_split' gives parameter 'proj.weight' master fp32_split, but it is gathered in fp32 (--precision-rule[0])

// UNKNOWN: error: unknown dtype 'fp16_split' for master in --precision-rule[0] '*:master=fp16_split'
// UNKNOWN: note: expected fp32, fp32_split, bf16 or fp16

train.step @split(
    %w: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "proj.weight", module = "proj", shape = [4, 4], dtype = f32>},
    %g: tensor<4xf32> {train.tensor = #train.tensor<parameter, fqn = "norm.weight", module = "norm", shape = [4], dtype = f32>},
    %x: tensor<2x4xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<4x4xf32> {train.result = #train.result<gradient, fqn = "proj.weight">},
        tensor<4xf32> {train.result = #train.result<gradient, fqn = "norm.weight">}) {
  %0 = train.mm %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %1 = train.mul %0, %g : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %loss = train.sum %1 {dims = array<i64>} : tensor<2x4xf32> -> tensor<f32>
  %gw = train.mul %w, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %gg = train.mul %g, %g : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  train.return %loss, %gw, %gg : tensor<f32>, tensor<4x4xf32>, tensor<4xf32>
}
