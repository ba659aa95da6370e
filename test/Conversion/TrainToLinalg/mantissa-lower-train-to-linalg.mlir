// RUN: mantissa-opt %s -split-input-file --mantissa-lower-train-to-linalg | FileCheck %s

// A bf16 op computes in f32 inside the generic body and rounds once; the step
// becomes a func.func of the same signature.
// CHECK-LABEL: func.func @unary_bf16(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x4xbf16>, %[[L:[^:]+]]: tensor<f32>) -> (tensor<f32>, tensor<2x4xbf16>)
// CHECK-NOT: train.
// CHECK: %[[E:.+]] = tensor.empty() : tensor<2x4xbf16>
// CHECK: %[[R:.+]] = linalg.generic
// CHECK-SAME: ins(%[[X]] : tensor<2x4xbf16>) outs(%[[E]] : tensor<2x4xbf16>)
// CHECK: arith.extf %{{.+}} : bf16 to f32
// CHECK: math.exp %{{.+}} : f32
// CHECK: arith.truncf %{{.+}} : f32 to bf16
// CHECK: return %[[L]], %[[R]] : tensor<f32>, tensor<2x4xbf16>
train.step @unary_bf16(%x: tensor<2x4xbf16> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = bf16>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<2x4xbf16> {train.result = #train.result<user_output>}) {
  %0 = train.exp %x : tensor<2x4xbf16> -> tensor<2x4xbf16>
  train.return %loss, %0 : tensor<f32>, tensor<2x4xbf16>
}

// -----

// Broadcasting reads size-1 and missing dimensions through the indexing map.
// CHECK-DAG: #[[$ROW:.+]] = affine_map<(d0, d1) -> (d1)>
// CHECK-DAG: #[[$ID:.+]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @broadcast_add(
// CHECK: linalg.generic {indexing_maps = [#[[$ID]], #[[$ROW]], #[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK: arith.addf %{{.+}}, %{{.+}} : f32
train.step @broadcast_add(%x: tensor<2x4xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = f32>},
                          %b: tensor<4xf32> {train.tensor = #train.tensor<user_input, fqn = "b", module = "", shape = [4], dtype = f32>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<2x4xf32> {train.result = #train.result<user_output>}) {
  %0 = train.add %x, %b : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  train.return %loss, %0 : tensor<f32>, tensor<2x4xf32>
}

// -----

// mm accumulates bf16 products in f32 through the named op, then rounds.
// CHECK-LABEL: func.func @mm_bf16(
// CHECK: %[[Z:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK: %[[A:.+]] = linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<2x4xbf16>, tensor<4x3xbf16>) outs(%[[Z]] : tensor<2x3xf32>) -> tensor<2x3xf32>
// CHECK: linalg.generic {{.+}} ins(%[[A]] : tensor<2x3xf32>) outs(%{{.+}} : tensor<2x3xbf16>)
// CHECK: arith.truncf
train.step @mm_bf16(%a: tensor<2x4xbf16> {train.tensor = #train.tensor<user_input, fqn = "a", module = "", shape = [2, 4], dtype = bf16>},
                    %b: tensor<4x3xbf16> {train.tensor = #train.tensor<user_input, fqn = "b", module = "", shape = [4, 3], dtype = bf16>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<2x3xbf16> {train.result = #train.result<user_output>}) {
  %0 = train.mm %a, %b : tensor<2x4xbf16>, tensor<4x3xbf16> -> tensor<2x3xbf16>
  train.return %loss, %0 : tensor<f32>, tensor<2x3xbf16>
}

// -----

// A product of two operands widened from bf16 (SDPA's scores under
// compute: bf16, which torch keeps in fp32) reads the bf16 values: the
// named op widens them, no f32 copy is read, and the result stays f32. One
// widened operand alone is read as it is.
// CHECK-LABEL: func.func @bmm_widened(
// CHECK-SAME: %[[A:[^:]+]]: tensor<2x2x4xbf16>, %[[B:[^:]+]]: tensor<2x4x3xbf16>, %[[C:[^:]+]]: tensor<2x4x3xf32>
// CHECK: %[[AW:.+]] = linalg.generic {{.+}} ins(%[[A]] : tensor<2x2x4xbf16>) outs(%{{.+}} : tensor<2x2x4xf32>)
// CHECK: %[[P:.+]] = linalg.batch_matmul ins(%[[A]], %[[B]] : tensor<2x2x4xbf16>, tensor<2x4x3xbf16>) outs(%{{.+}} : tensor<2x2x3xf32>) -> tensor<2x2x3xf32>
// CHECK: %[[M:.+]] = linalg.batch_matmul ins(%[[AW]], %[[C]] : tensor<2x2x4xf32>, tensor<2x4x3xf32>) outs(%{{.+}} : tensor<2x2x3xf32>) -> tensor<2x2x3xf32>
// CHECK: return %{{.+}}, %[[P]], %[[M]]
train.step @bmm_widened(%a: tensor<2x2x4xbf16> {train.tensor = #train.tensor<user_input, fqn = "a", module = "", shape = [2, 2, 4], dtype = bf16>},
                        %b: tensor<2x4x3xbf16> {train.tensor = #train.tensor<user_input, fqn = "b", module = "", shape = [2, 4, 3], dtype = bf16>},
                        %c: tensor<2x4x3xf32> {train.tensor = #train.tensor<user_input, fqn = "c", module = "", shape = [2, 4, 3], dtype = f32>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<2x2x3xf32> {train.result = #train.result<user_output>}, tensor<2x2x3xf32> {train.result = #train.result<user_output>}) {
  %aw = train.cast %a : tensor<2x2x4xbf16> to tensor<2x2x4xf32>
  %bw = train.cast %b : tensor<2x4x3xbf16> to tensor<2x4x3xf32>
  %0 = train.bmm %aw, %bw {train.fp32_accumulate} : tensor<2x2x4xf32>, tensor<2x4x3xf32> -> tensor<2x2x3xf32>
  %1 = train.bmm %aw, %c : tensor<2x2x4xf32>, tensor<2x4x3xf32> -> tensor<2x2x3xf32>
  train.return %loss, %0, %1 : tensor<f32>, tensor<2x2x3xf32>, tensor<2x2x3xf32>
}

// -----

// Shape ops: view through collapse/expand, permute as linalg.transpose,
// slice as extract_slice.
// CHECK-LABEL: func.func @shapes(
// CHECK: tensor.collapse_shape %{{.+}} {{\[\[}}0, 1]] : tensor<2x6xf32> into tensor<12xf32>
// CHECK: tensor.expand_shape %{{.+}} {{\[\[}}0, 1]] output_shape [3, 4] : tensor<12xf32> into tensor<3x4xf32>
// CHECK: linalg.transpose ins(%{{.+}} : tensor<3x4xf32>) outs(%{{.+}} : tensor<4x3xf32>) permutation = [1, 0]
// CHECK: tensor.extract_slice %{{.+}}[0, 1] [4, 2] [1, 1] : tensor<4x3xf32> to tensor<4x2xf32>
train.step @shapes(%x: tensor<2x6xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 6], dtype = f32>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<4x2xf32> {train.result = #train.result<user_output>}) {
  %0 = train.view %x : tensor<2x6xf32> -> tensor<3x4xf32>
  %1 = train.permute %0 {dims = array<i64: 1, 0>} : tensor<3x4xf32> -> tensor<4x3xf32>
  %2 = train.slice %1 {dim = 1 : i64, start = 1 : i64, end = 3 : i64} : tensor<4x3xf32> -> tensor<4x2xf32>
  train.return %loss, %2 : tensor<f32>, tensor<4x2xf32>
}

// -----

// A bf16 sum accumulates in f32 over a reduction iterator, rounds once, and
// keepdim restores the size-1 dimension with a reshape.
// CHECK-LABEL: func.func @sum_keepdim(
// CHECK: %[[Z:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<3xf32>) -> tensor<3xf32>
// CHECK: %[[S:.+]] = linalg.generic {{.+}} iterator_types = ["parallel", "reduction"]} ins(%{{.+}} : tensor<3x4xbf16>) outs(%[[Z]] : tensor<3xf32>)
// CHECK: arith.extf %{{.+}} : bf16 to f32
// CHECK: arith.addf
// CHECK: %[[R:.+]] = linalg.generic {{.+}} ins(%[[S]] : tensor<3xf32>) outs(%{{.+}} : tensor<3xbf16>)
// CHECK: arith.truncf
// CHECK: tensor.expand_shape %[[R]] {{\[\[}}0, 1]] output_shape [3, 1] : tensor<3xbf16> into tensor<3x1xbf16>
train.step @sum_keepdim(%x: tensor<3x4xbf16> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [3, 4], dtype = bf16>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<3x1xbf16> {train.result = #train.result<user_output>}) {
  %0 = train.sum %x {dims = array<i64: 1>, keepdim} : tensor<3x4xbf16> -> tensor<3x1xbf16>
  train.return %loss, %0 : tensor<f32>, tensor<3x1xbf16>
}
// -----

// softmax_backward: one fp32 row sum of grad * output, then
// (grad - sum) * output per element, rounded once to bf16.
// CHECK-DAG: #[[$SBID:.+]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[$SBROW:.+]] = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @softmax_backward_bf16(
// CHECK: %[[Z:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<2xf32>) -> tensor<2xf32>
// CHECK: %[[S:.+]] = linalg.generic {indexing_maps = [#[[$SBID]], #[[$SBID]], #[[$SBROW]]], iterator_types = ["parallel", "reduction"]}
// CHECK-SAME: outs(%[[Z]] : tensor<2xf32>)
// CHECK: arith.mulf %{{.+}}, %{{.+}} : f32
// CHECK: arith.addf %{{.+}}, %{{.+}} : f32
// CHECK: linalg.generic {indexing_maps = [#[[$SBID]], #[[$SBID]], #[[$SBROW]], #[[$SBID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME: ins(%{{.+}}, %{{.+}}, %[[S]] : tensor<2x4xbf16>, tensor<2x4xbf16>, tensor<2xf32>)
// CHECK: arith.subf %{{.+}}, %{{.+}} : f32
// CHECK: arith.mulf %{{.+}}, %{{.+}} : f32
// CHECK: arith.truncf %{{.+}} : f32 to bf16
train.step @softmax_backward_bf16(%g: tensor<2x4xbf16> {train.tensor = #train.tensor<user_input, fqn = "g", module = "", shape = [2, 4], dtype = bf16>},
    %y: tensor<2x4xbf16> {train.tensor = #train.tensor<user_input, fqn = "y", module = "", shape = [2, 4], dtype = bf16>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<2x4xbf16> {train.result = #train.result<user_output>}) {
  %0 = train.softmax_backward %g, %y {dim = 1 : i64} : tensor<2x4xbf16>, tensor<2x4xbf16> -> tensor<2x4xbf16>
  train.return %loss, %0 : tensor<f32>, tensor<2x4xbf16>
}

// -----

// gelu_backward (tanh): elementwise in f32, one rounding.
// CHECK-LABEL: func.func @gelu_backward_tanh(
// CHECK: linalg.generic
// CHECK-SAME: ins(%{{.+}}, %{{.+}} : tensor<2x4xbf16>, tensor<2x4xbf16>) outs(%{{.+}} : tensor<2x4xbf16>)
// CHECK: math.tanh %{{.+}} : f32
// CHECK: arith.truncf %{{.+}} : f32 to bf16
// CHECK-NOT: linalg.generic
train.step @gelu_backward_tanh(%g: tensor<2x4xbf16> {train.tensor = #train.tensor<user_input, fqn = "g", module = "", shape = [2, 4], dtype = bf16>},
    %x: tensor<2x4xbf16> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = bf16>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<2x4xbf16> {train.result = #train.result<user_output>}) {
  %0 = train.gelu_backward %g, %x {approximate = "tanh"} : tensor<2x4xbf16>, tensor<2x4xbf16> -> tensor<2x4xbf16>
  train.return %loss, %0 : tensor<f32>, tensor<2x4xbf16>
}

// -----

// silu_backward: one generic in f32 (the sigmoid's exp, no rounding inside),
// one rounding of the result, as eager torch's one kernel.
// CHECK-LABEL: func.func @silu_backward(
// CHECK: linalg.generic
// CHECK-SAME: ins(%{{.+}}, %{{.+}} : tensor<2x4xbf16>, tensor<2x4xbf16>) outs(%{{.+}} : tensor<2x4xbf16>)
// CHECK-COUNT-2: arith.extf %{{.+}} : bf16 to f32
// CHECK-NOT: arith.truncf
// CHECK: math.exp %{{.+}} : f32
// CHECK-NOT: arith.truncf
// CHECK: arith.truncf %{{.+}} : f32 to bf16
// CHECK-NEXT: linalg.yield
// CHECK-NOT: linalg.generic
train.step @silu_backward(%g: tensor<2x4xbf16> {train.tensor = #train.tensor<user_input, fqn = "g", module = "", shape = [2, 4], dtype = bf16>},
    %x: tensor<2x4xbf16> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = bf16>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<2x4xbf16> {train.result = #train.result<user_output>}) {
  %0 = train.silu_backward %g, %x : tensor<2x4xbf16>, tensor<2x4xbf16> -> tensor<2x4xbf16>
  train.return %loss, %0 : tensor<f32>, tensor<2x4xbf16>
}

// -----

// layer_norm: fp32 row sum and two-pass squared deviations, then the
// normalised, scaled and shifted result; mean and rstd come back reshaped
// to the input's rank.
// CHECK-LABEL: func.func @layer_norm(
// CHECK-COUNT-2: iterator_types = ["parallel", "reduction"]
// CHECK: math.sqrt %{{.+}} : f32
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "parallel"]
// CHECK-SAME: ins(%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} : tensor<2x4xbf16>, tensor<2xf32>, tensor<2xf32>, tensor<4xbf16>, tensor<4xbf16>)
// CHECK: arith.truncf %{{.+}} : f32 to bf16
// CHECK: tensor.expand_shape %{{.+}} {{\[\[}}0, 1]] output_shape [2, 1] : tensor<2xbf16> into tensor<2x1xbf16>
// CHECK: tensor.expand_shape %{{.+}} {{\[\[}}0, 1]] output_shape [2, 1] : tensor<2xbf16> into tensor<2x1xbf16>
train.step @layer_norm(%x: tensor<2x4xbf16> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = bf16>},
    %w: tensor<4xbf16> {train.tensor = #train.tensor<user_input, fqn = "w", module = "", shape = [4], dtype = bf16>},
    %b: tensor<4xbf16> {train.tensor = #train.tensor<user_input, fqn = "b", module = "", shape = [4], dtype = bf16>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<2x4xbf16> {train.result = #train.result<user_output>},
        tensor<2x1xbf16> {train.result = #train.result<user_output>}, tensor<2x1xbf16> {train.result = #train.result<user_output>}) {
  %0:3 = train.layer_norm %x weight %w : tensor<4xbf16> bias %b : tensor<4xbf16> {normalized_rank = 1 : i64, eps = 1.0e-05 : f64} : tensor<2x4xbf16> -> tensor<2x4xbf16>, tensor<2x1xbf16>, tensor<2x1xbf16>
  train.return %loss, %0#0, %0#1, %0#2 : tensor<f32>, tensor<2x4xbf16>, tensor<2x1xbf16>, tensor<2x1xbf16>
}

// -----

// clamp keeps NaN: compare-and-select rather than maximumf/minimumf.
// CHECK-LABEL: func.func @clamp(
// CHECK: arith.cmpf olt, %{{.+}}, %{{.+}} : f32
// CHECK: arith.select
// CHECK: arith.cmpf ogt, %{{.+}}, %{{.+}} : f32
// CHECK: arith.select
// CHECK-NOT: arith.maximumf
train.step @clamp(%x: tensor<2x4xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 4], dtype = f32>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<2x4xf32> {train.result = #train.result<user_output>}) {
  %0 = train.clamp %x {min = -1.0 : f64, max = 1.0 : f64} : tensor<2x4xf32> -> tensor<2x4xf32>
  train.return %loss, %0 : tensor<f32>, tensor<2x4xf32>
}

// -----

// arange: start + index * step from linalg.index, in i64 for integer bounds.
// CHECK-LABEL: func.func @arange(
// CHECK: linalg.generic
// CHECK-SAME: outs(%{{.+}} : tensor<5xi64>)
// CHECK: linalg.index 0 : index
// CHECK: arith.muli
// CHECK: arith.addi
train.step @arange(%loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>}, tensor<5xi64> {train.result = #train.result<user_output>}) {
  %0 = train.arange {start = 1 : i64, end = 11 : i64, step = 2 : i64} : tensor<5xi64>
  train.return %loss, %0 : tensor<f32>, tensor<5xi64>
}
