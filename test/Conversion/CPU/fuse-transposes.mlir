// RUN: mantissa-opt %s --pass-pipeline='builtin.module(mantissa-lower-train-to-linalg,func.func(mantissa-fuse-transposes))' | FileCheck %s --check-prefix=PASS
// RUN: mantissa-opt %s --pass-pipeline='builtin.module(mantissa-train-cpu-pipeline)' --mlir-print-ir-after=mantissa-call-gemm-library -o /dev/null 2>&1 | FileCheck %s --check-prefix=GEMM

// `x @ w^T` (a Linear's forward): the transpose fuses into the product, so
// the runtime's GEMM reads w in place (B's strides: K 1, N 4) and the step
// makes no transposed copy of w.

// PASS-DAG: #[[$WT:map[0-9]*]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// PASS-LABEL: func.func @linear(
// PASS-NOT: linalg.transpose
// PASS-NOT: linalg.matmul
// PASS: linalg.generic {indexing_maps = [#{{.*}}, #[[$WT]], #{{.*}}], iterator_types = ["parallel", "parallel", "reduction"]} ins(%{{.*}}, %arg1 : tensor<2x4xf32>, tensor<3x4xf32>)
// PASS-NOT: linalg.generic
// PASS: return

// GEMM-DAG: memref.global "private" constant @__mantissa_gemm_{{[0-9]+}} : memref<19xi64> = dense<[4, 0, 0, 0, 1, 2, 3, 4, 8, 4, 1, 12, 1, 4, 6, 3, 1, 0, 0]>
// GEMM-LABEL: func.func @linear(
// GEMM-NOT: linalg.generic
// GEMM: call @mantissa_cpu_gemm(
// GEMM-NOT: linalg.generic
// GEMM: return

train.step @linear(%x: tensor<2x4xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = f32>},
    %w: tensor<3x4xf32> {train.tensor = #train.tensor<user_input, fqn = "w", module = "", shape = [3, 4], dtype = f32>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<2x3xf32> {train.result = #train.result<user_output>}) {
  %wt = train.permute %w {dims = array<i64: 1, 0>} : tensor<3x4xf32> -> tensor<4x3xf32>
  %0 = train.mm %x, %wt : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
  train.return %loss, %0 : tensor<f32>, tensor<2x3xf32>
}

// Attention's heads ([batch, token, head, dim] to [batch, head, token, dim])
// read in place would give the product a batch (batch, head) that no one
// stride walks: that transpose stays a copy and the product the GEMM's.

// PASS-LABEL: func.func @heads(
// PASS: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%arg0 : tensor<2x3x2x4xf32>) outs(%{{.*}} : tensor<2x2x3x4xf32>)
// PASS: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%{{.*}}, %arg1 : tensor<4x3x4xf32>, tensor<4x4x3xf32>)

// GEMM-LABEL: func.func @heads(
// GEMM: linalg.generic {{.*}} ins(%arg0 : memref<2x3x2x4xf32>) outs(%{{.*}} : memref<2x2x3x4xf32>)
// GEMM: call @mantissa_cpu_gemm(
// GEMM-NOT: linalg.generic
// GEMM: return

train.step @heads(%q: tensor<2x3x2x4xf32> {train.tensor = #train.tensor<user_input, fqn = "q", module = "", shape = [2, 3, 2, 4], dtype = f32>},
    %k: tensor<4x4x3xf32> {train.tensor = #train.tensor<user_input, fqn = "k", module = "", shape = [4, 4, 3], dtype = f32>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<4x3x3xf32> {train.result = #train.result<user_output>}) {
  %qt = train.permute %q {dims = array<i64: 0, 2, 1, 3>} : tensor<2x3x2x4xf32> -> tensor<2x2x3x4xf32>
  %qv = train.view %qt : tensor<2x2x3x4xf32> -> tensor<4x3x4xf32>
  %0 = train.bmm %qv, %k : tensor<4x3x4xf32>, tensor<4x4x3xf32> -> tensor<4x3x3xf32>
  train.return %loss, %0 : tensor<f32>, tensor<4x3x3xf32>
}
