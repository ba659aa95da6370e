// Compute precision as torch.autocast: matrix products read the compute
// dtype and produce it, the fp32 list reads fp32, everything else promotes,
// and the step's results keep their declared types.

// RUN: mantissa-opt %s -split-input-file --mantissa-autocast=compute=bf16 | FileCheck %s
// RUN: mantissa-opt %s -split-input-file --mantissa-autocast=compute=fp16 | FileCheck %s --check-prefix=FP16
// RUN: mantissa-opt %s -split-input-file --mantissa-autocast=compute=fp32 | FileCheck %s --check-prefix=FP32

// CHECK-LABEL: train.step @mlp(
// CHECK-SAME: %[[W:[^:]+]]: tensor<4x4xf32>
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x4xf32>
// CHECK-SAME: attributes {train.compute = "bf16"}
// CHECK-DAG: %[[X16:.+]] = train.cast %[[X]] : tensor<2x4xf32> to tensor<2x4xbf16>
// CHECK-DAG: %[[W16:.+]] = train.cast %[[W]] : tensor<4x4xf32> to tensor<4x4xbf16>
// CHECK: %[[Y:.+]] = train.mm %[[X16]], %[[W16]] : tensor<2x4xbf16>, tensor<4x4xbf16> -> tensor<2x4xbf16>
// The residual is fp32: the sum promotes to it.
// CHECK: %[[R:.+]] = train.add %[[Y]], %[[X]] : tensor<2x4xbf16>, tensor<2x4xf32> -> tensor<2x4xf32>
// Elementwise ops of bf16 values stay bf16.
// CHECK: %[[S:.+]] = train.silu %[[Y]] : tensor<2x4xbf16> -> tensor<2x4xbf16>
// CHECK: %[[G:.+]] = train.mul %[[S]], %[[Y]] : tensor<2x4xbf16>, tensor<2x4xbf16> -> tensor<2x4xbf16>
// Shape ops keep their input's element type.
// CHECK: %[[V:.+]] = train.view %[[G]] : tensor<2x4xbf16> -> tensor<8xbf16>
// fp32 list: the reduction reads fp32.
// CHECK: %[[V32:.+]] = train.cast %[[V]] : tensor<8xbf16> to tensor<8xf32>
// CHECK: %[[L:.+]] = train.mean %[[V32]] {{.*}} : tensor<8xf32> -> tensor<f32>
// The backward's product runs in bf16 too (autograd runs it in the
// forward's dtype); its result is cast back to the declared gradient type.
// CHECK: %[[XT:.+]] = train.permute %[[X]] {{.*}} : tensor<2x4xf32> -> tensor<4x2xf32>
// CHECK: %[[XT16:.+]] = train.cast %[[XT]] : tensor<4x2xf32> to tensor<4x2xbf16>
// CHECK: %[[DW:.+]] = train.mm %[[XT16]], %[[Y]] : tensor<4x2xbf16>, tensor<2x4xbf16> -> tensor<4x4xbf16>
// CHECK: %[[DW32:.+]] = train.cast %[[DW]] : tensor<4x4xbf16> to tensor<4x4xf32>
// CHECK: train.return %[[L]], %[[DW32]], %[[R]] : tensor<f32>, tensor<4x4xf32>, tensor<2x4xf32>

// FP16-LABEL: train.step @mlp(
// FP16: train.mm {{.*}} : tensor<2x4xf16>, tensor<4x4xf16> -> tensor<2x4xf16>
// FP16: train.mean {{.*}} : tensor<8xf32> -> tensor<f32>

// fp32 is the exported computation: nothing changes, no mark.
// FP32-LABEL: train.step @mlp(
// FP32-NOT: train.compute
// FP32-NOT: train.cast
// FP32: train.mm %{{.*}} : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
train.step @mlp(%w: tensor<4x4xf32> {train.tensor = #train.tensor<parameter, fqn = "w", module = "", shape = [4, 4], dtype = f32>},
                %x: tensor<2x4xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<4x4xf32> {train.result = #train.result<gradient, fqn = "w">},
        tensor<2x4xf32> {train.result = #train.result<user_output>}) {
  %y = train.mm %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %r = train.add %y, %x : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %s = train.silu %y : tensor<2x4xf32> -> tensor<2x4xf32>
  %g = train.mul %s, %y : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %v = train.view %g : tensor<2x4xf32> -> tensor<8xf32>
  %loss = train.mean %v {dims = array<i64: 0>} : tensor<8xf32> -> tensor<f32>
  %xt = train.permute %x {dims = array<i64: 1, 0>} : tensor<2x4xf32> -> tensor<4x2xf32>
  %dw = train.mm %xt, %y : tensor<4x2xf32>, tensor<2x4xf32> -> tensor<4x4xf32>
  train.return %loss, %dw, %r : tensor<f32>, tensor<4x4xf32>, tensor<2x4xf32>
}

// -----

// Softmax is on the fp32 list: the scores' bf16 product is cast up, and the
// probabilities are cast down again only where the next product reads them.
// An op that needs equal operand dtypes (scatter_add) gets the widest, and
// a value cast once is reused by every op that needs it in that dtype.

// CHECK-LABEL: train.step @attention(
// CHECK-SAME: %[[Q:[^:]+]]: tensor<2x3x3xf32>
// CHECK: %[[Q16:.+]] = train.cast %[[Q]] : tensor<2x3x3xf32> to tensor<2x3x3xbf16>
// CHECK-NOT: train.cast %[[Q]]
// CHECK: %[[S:.+]] = train.bmm %[[Q16]], %[[Q16]] : tensor<2x3x3xbf16>, tensor<2x3x3xbf16> -> tensor<2x3x3xbf16>
// CHECK: %[[S32:.+]] = train.cast %[[S]] : tensor<2x3x3xbf16> to tensor<2x3x3xf32>
// CHECK: %[[P:.+]] = train.softmax %[[S32]] {dim = 2 : i64} : tensor<2x3x3xf32> -> tensor<2x3x3xf32>
// CHECK: %[[P16:.+]] = train.cast %[[P]] : tensor<2x3x3xf32> to tensor<2x3x3xbf16>
// CHECK: %[[O:.+]] = train.bmm %[[P16]], %[[Q16]] {{.*}} -> tensor<2x3x3xbf16>
// CHECK: %[[O32:.+]] = train.cast %[[O]] : tensor<2x3x3xbf16> to tensor<2x3x3xf32>
// CHECK: train.scatter %[[P]], %{{.+}}, %[[O32]] {{.*}} : tensor<2x3x3xf32>, tensor<2x3x3xi64>, tensor<2x3x3xf32> -> tensor<2x3x3xf32>
train.step @attention(%q: tensor<2x3x3xf32> {train.tensor = #train.tensor<user_input, fqn = "q", module = "", shape = [2, 3, 3], dtype = f32>},
                      %i: tensor<2x3x3xi64> {train.tensor = #train.tensor<user_input, fqn = "i", module = "", shape = [2, 3, 3], dtype = i64>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<2x3x3xf32> {train.result = #train.result<user_output>}) {
  %s = train.bmm %q, %q : tensor<2x3x3xf32>, tensor<2x3x3xf32> -> tensor<2x3x3xf32>
  %p = train.softmax %s {dim = 2 : i64} : tensor<2x3x3xf32> -> tensor<2x3x3xf32>
  %o = train.bmm %p, %q : tensor<2x3x3xf32>, tensor<2x3x3xf32> -> tensor<2x3x3xf32>
  %w = train.scatter %p, %i, %o {dim = 2 : i64, reduce = "add"} : tensor<2x3x3xf32>, tensor<2x3x3xi64>, tensor<2x3x3xf32> -> tensor<2x3x3xf32>
  %loss = train.sum %w {dims = array<i64: 0, 1, 2>} : tensor<2x3x3xf32> -> tensor<f32>
  train.return %loss, %w : tensor<f32>, tensor<2x3x3xf32>
}

// -----

// Ops of torch's fused kernels that the importer decomposes and that those
// kernels run in fp32 on operands in the compute dtype (SDPA's scores,
// marked train.fp32_accumulate): the operands are rounded to bf16 and
// widened back, and the result stays fp32; an unmarked product of the same
// operands is a bf16 product.

// CHECK-LABEL: train.step @fused_kernel_parts(
// CHECK-SAME: %[[Q:[^:]+]]: tensor<2x3x3xf32>
// CHECK: %[[Q16:.+]] = train.cast %[[Q]] : tensor<2x3x3xf32> to tensor<2x3x3xbf16>
// CHECK: %[[QW:.+]] = train.cast %[[Q16]] : tensor<2x3x3xbf16> to tensor<2x3x3xf32>
// CHECK: %[[S:.+]] = train.bmm %[[QW]], %[[QW]] {train.fp32_accumulate} : tensor<2x3x3xf32>, tensor<2x3x3xf32> -> tensor<2x3x3xf32>
// CHECK: %[[P:.+]] = train.softmax %[[S]] {dim = 2 : i64} : tensor<2x3x3xf32> -> tensor<2x3x3xf32>
// CHECK: %[[P16:.+]] = train.cast %[[P]] : tensor<2x3x3xf32> to tensor<2x3x3xbf16>
// CHECK: train.bmm %[[P16]], %[[Q16]] : tensor<2x3x3xbf16>, tensor<2x3x3xbf16> -> tensor<2x3x3xbf16>
// CHECK: %[[D:.+]] = train.mul %[[QW]], %[[QW]] {train.fp32_accumulate} : tensor<2x3x3xf32>, tensor<2x3x3xf32> -> tensor<2x3x3xf32>
train.step @fused_kernel_parts(%q: tensor<2x3x3xf32> {train.tensor = #train.tensor<user_input, fqn = "q", module = "", shape = [2, 3, 3], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}) {
  %s = train.bmm %q, %q {train.fp32_accumulate} : tensor<2x3x3xf32>, tensor<2x3x3xf32> -> tensor<2x3x3xf32>
  %p = train.softmax %s {dim = 2 : i64} : tensor<2x3x3xf32> -> tensor<2x3x3xf32>
  %o = train.bmm %p, %q : tensor<2x3x3xf32>, tensor<2x3x3xf32> -> tensor<2x3x3xf32>
  %d = train.mul %q, %q {train.fp32_accumulate} : tensor<2x3x3xf32>, tensor<2x3x3xf32> -> tensor<2x3x3xf32>
  %od = train.add %o, %d : tensor<2x3x3xf32>, tensor<2x3x3xf32> -> tensor<2x3x3xf32>
  %loss = train.sum %od {dims = array<i64: 0, 1, 2>} : tensor<2x3x3xf32> -> tensor<f32>
  train.return %loss : tensor<f32>
}
