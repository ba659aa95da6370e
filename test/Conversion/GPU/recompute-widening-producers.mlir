// RUN: mantissa-opt %s --pass-pipeline='builtin.module(func.func(mantissa-recompute-widening-producers))' --split-input-file | FileCheck %s

// Masked bf16 scores widened to fp32, read by a row max and by the
// exponentials: each reader computes the widening itself from the bf16
// scores and the mask (3 bytes an element instead of 4), and the fp32
// tensor is gone.

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @scores
// CHECK-SAME: %[[S:[^:]*]]: tensor<4x512xbf16>, %[[M:[^:]*]]: tensor<4x512xi1>
// CHECK: %[[MAX:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[S]], %[[M]] : tensor<4x512xbf16>, tensor<4x512xi1>)
// CHECK: arith.select
// CHECK: arith.extf
// CHECK: arith.maximumf
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]} ins(%[[S]], %[[M]], %[[MAX]] : tensor<4x512xbf16>, tensor<4x512xi1>, tensor<4xf32>)
// CHECK: arith.select
// CHECK: arith.extf
// CHECK: math.exp
// CHECK-NOT: linalg.generic
func.func @scores(%s: tensor<4x512xbf16>, %m: tensor<4x512xi1>) -> tensor<4x512xf32> {
  %ninf = arith.constant 0xFF80 : bf16
  %e = tensor.empty() : tensor<4x512xf32>
  %wide = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%s, %m : tensor<4x512xbf16>, tensor<4x512xi1>) outs(%e : tensor<4x512xf32>) {
  ^bb0(%x: bf16, %masked: i1, %o: f32):
    %v = arith.select %masked, %ninf, %x : bf16
    %w = arith.extf %v : bf16 to f32
    linalg.yield %w : f32
  } -> tensor<4x512xf32>
  %lowest = arith.constant 0xFF800000 : f32
  %r = tensor.empty() : tensor<4xf32>
  %init = linalg.fill ins(%lowest : f32) outs(%r : tensor<4xf32>) -> tensor<4xf32>
  %max = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%wide : tensor<4x512xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.maximumf %x, %o : f32
    linalg.yield %y : f32
  } -> tensor<4xf32>
  %exp = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%wide, %max : tensor<4x512xf32>, tensor<4xf32>) outs(%e : tensor<4x512xf32>) {
  ^bb0(%x: f32, %mx: f32, %o: f32):
    %d = arith.subf %x, %mx : f32
    %y = math.exp %d : f32
    linalg.yield %y : f32
  } -> tensor<4x512xf32>
  return %exp : tensor<4x512xf32>
}

// -----

// An fp32 input that the producer only rounds to bf16 counts at bf16 (the
// GPU program rounds it once where it is written): the scaled scores are
// recomputed in both readers. A matrix product keeps reading the widened
// tensor, which stays for it alone.

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#a = affine_map<(d0, d1, d2) -> (d0, d2)>
#b = affine_map<(d0, d1, d2) -> (d2, d1)>
#c = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @rounded_sums
// CHECK-SAME: %[[P:[^:]*]]: tensor<4x512xf32>
// CHECK: %[[WIDE:.*]] = linalg.generic {{.*}} ins(%[[P]] : tensor<4x512xf32>)
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[WIDE]], %{{.*}} : tensor<4x512xf32>, tensor<512x8xf32>)
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[P]] : tensor<4x512xf32>)
// CHECK: arith.truncf
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]} ins(%[[P]] : tensor<4x512xf32>)
// CHECK: arith.truncf
func.func @rounded_sums(%p: tensor<4x512xf32>, %w: tensor<512x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4x512xf32>) {
  %scale = arith.constant 1.250000e-01 : f32
  %e = tensor.empty() : tensor<4x512xf32>
  %wide = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%p : tensor<4x512xf32>) outs(%e : tensor<4x512xf32>) {
  ^bb0(%x: f32, %o: f32):
    %r = arith.truncf %x : f32 to bf16
    %v = arith.extf %r : bf16 to f32
    %y = arith.mulf %v, %scale : f32
    linalg.yield %y : f32
  } -> tensor<4x512xf32>
  %zero = arith.constant 0.0 : f32
  %ce = tensor.empty() : tensor<4x8xf32>
  %cz = linalg.fill ins(%zero : f32) outs(%ce : tensor<4x8xf32>) -> tensor<4x8xf32>
  %mm = linalg.generic {indexing_maps = [#a, #b, #c], iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%wide, %w : tensor<4x512xf32>, tensor<512x8xf32>) outs(%cz : tensor<4x8xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %m = arith.mulf %x, %y : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<4x8xf32>
  %r = tensor.empty() : tensor<4xf32>
  %init = linalg.fill ins(%zero : f32) outs(%r : tensor<4xf32>) -> tensor<4xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%wide : tensor<4x512xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.addf %x, %o : f32
    linalg.yield %y : f32
  } -> tensor<4xf32>
  %neg = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%wide : tensor<4x512xf32>) outs(%e : tensor<4x512xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.negf %x : f32
    linalg.yield %y : f32
  } -> tensor<4x512xf32>
  return %mm, %sum, %neg : tensor<4x8xf32>, tensor<4xf32>, tensor<4x512xf32>
}

// -----

// A product of bf16 and fp32 read by two ops that read nothing else:
// recomputed, they would read 6 + 6 bytes an element where the step writes
// 4 and reads 4 + 4; it is computed once, as before.

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @narrowing
// CHECK: %[[PROD:.*]] = linalg.generic
// CHECK: arith.mulf
// CHECK: linalg.generic {{.*}} ins(%[[PROD]] : tensor<4x512xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[PROD]] : tensor<4x512xf32>)
func.func @narrowing(%a: tensor<4x512xbf16>, %b: tensor<4x512xf32>) -> (tensor<4xf32>, tensor<4x512xf32>) {
  %e = tensor.empty() : tensor<4x512xf32>
  %prod = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : tensor<4x512xbf16>, tensor<4x512xf32>) outs(%e : tensor<4x512xf32>) {
  ^bb0(%x: bf16, %y: f32, %o: f32):
    %v = arith.extf %x : bf16 to f32
    %m = arith.mulf %v, %y : f32
    linalg.yield %m : f32
  } -> tensor<4x512xf32>
  %zero = arith.constant 0.0 : f32
  %r = tensor.empty() : tensor<4xf32>
  %init = linalg.fill ins(%zero : f32) outs(%r : tensor<4xf32>) -> tensor<4xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%prod : tensor<4x512xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.addf %x, %o : f32
    linalg.yield %y : f32
  } -> tensor<4xf32>
  %neg = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%prod : tensor<4x512xf32>) outs(%e : tensor<4x512xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.negf %x : f32
    linalg.yield %y : f32
  } -> tensor<4x512xf32>
  return %sum, %neg : tensor<4xf32>, tensor<4x512xf32>
}

// -----

// The softmax backward: the fp32 product of the bf16 gradient and the fp32
// probabilities, read by the row sum and by the op that also reads the
// probabilities. Recomputed in both, the step reads 6 + 6 bytes an element
// where it wrote 4 and read 4 + 8: the product is not written.

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @softmax_backward
// CHECK-SAME: %[[G:[^:]*]]: tensor<4x512xbf16>, %[[P:[^:]*]]: tensor<4x512xf32>
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[G]], %[[P]] : tensor<4x512xbf16>, tensor<4x512xf32>)
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]} ins(%[[G]], %[[P]], %[[P]], %[[SUM]] : tensor<4x512xbf16>, tensor<4x512xf32>, tensor<4x512xf32>, tensor<4xf32>)
// CHECK-NOT: linalg.generic
func.func @softmax_backward(%g: tensor<4x512xbf16>, %p: tensor<4x512xf32>) -> tensor<4x512xf32> {
  %e = tensor.empty() : tensor<4x512xf32>
  %prod = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%g, %p : tensor<4x512xbf16>, tensor<4x512xf32>) outs(%e : tensor<4x512xf32>) {
  ^bb0(%x: bf16, %y: f32, %o: f32):
    %v = arith.extf %x : bf16 to f32
    %m = arith.mulf %v, %y : f32
    linalg.yield %m : f32
  } -> tensor<4x512xf32>
  %zero = arith.constant 0.0 : f32
  %r = tensor.empty() : tensor<4xf32>
  %init = linalg.fill ins(%zero : f32) outs(%r : tensor<4xf32>) -> tensor<4xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%prod : tensor<4x512xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.addf %x, %o : f32
    linalg.yield %y : f32
  } -> tensor<4xf32>
  %grad = linalg.generic {indexing_maps = [#id, #id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%prod, %p, %sum : tensor<4x512xf32>, tensor<4x512xf32>, tensor<4xf32>) outs(%e : tensor<4x512xf32>) {
  ^bb0(%x: f32, %y: f32, %s: f32, %o: f32):
    %t = arith.mulf %y, %s : f32
    %d = arith.subf %x, %t : f32
    linalg.yield %d : f32
  } -> tensor<4x512xf32>
  return %grad : tensor<4x512xf32>
}

// -----

// A row's scale broadcast over the row (RMSNorm's x * rsqrt(mean)), the
// product read by a row sum and by an elementwise op that reads x already:
// the scale is read once a row (4 bytes a row, not an element), so each
// reader computes the product (the sum reading 4 bytes an element instead
// of 4, without the write of 4) and it is not written.

#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @broadcast_scale
// CHECK-SAME: %[[X:[^:]*]]: tensor<4x512xf32>, %[[R:[^:]*]]: tensor<4xf32>
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "reduction"]} ins(%[[X]], %[[R]] : tensor<4x512xf32>, tensor<4xf32>)
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]} ins(%[[X]], %[[R]], %[[X]] : tensor<4x512xf32>, tensor<4xf32>, tensor<4x512xf32>)
// CHECK-NOT: linalg.generic
func.func @broadcast_scale(%x: tensor<4x512xf32>, %r: tensor<4xf32>) -> (tensor<4xf32>, tensor<4x512xf32>) {
  %e = tensor.empty() : tensor<4x512xf32>
  %n = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %r : tensor<4x512xf32>, tensor<4xf32>) outs(%e : tensor<4x512xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %m = arith.mulf %a, %b : f32
    linalg.yield %m : f32
  } -> tensor<4x512xf32>
  %zero = arith.constant 0.0 : f32
  %s = tensor.empty() : tensor<4xf32>
  %init = linalg.fill ins(%zero : f32) outs(%s : tensor<4xf32>) -> tensor<4xf32>
  %sum = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%n : tensor<4x512xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %y = arith.addf %a, %o : f32
    linalg.yield %y : f32
  } -> tensor<4xf32>
  %out = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%n, %x : tensor<4x512xf32>, tensor<4x512xf32>) outs(%e : tensor<4x512xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %y = arith.subf %a, %b : f32
    linalg.yield %y : f32
  } -> tensor<4x512xf32>
  return %sum, %out : tensor<4xf32>, tensor<4x512xf32>
}

// -----

// A bias added to a matrix product's rows, read by two ops: the GEMM's
// epilogue takes it (no bytes at all), so its bias counts once an element
// and it stays where it is.

#id = affine_map<(d0, d1) -> (d0, d1)>
#col = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @bias_epilogue
// CHECK: %[[MM:.*]] = linalg.matmul
// CHECK: %[[BIASED:.*]] = linalg.generic {{.*}} ins(%[[MM]], %{{.*}} : tensor<4x8xf32>, tensor<8xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[BIASED]] : tensor<4x8xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[BIASED]] : tensor<4x8xf32>)
func.func @bias_epilogue(%a: tensor<4x16xf32>, %w: tensor<16x8xf32>, %bias: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %init = linalg.fill ins(%zero : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
  %mm = linalg.matmul ins(%a, %w : tensor<4x16xf32>, tensor<16x8xf32>) outs(%init : tensor<4x8xf32>) -> tensor<4x8xf32>
  %biased = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%mm, %bias : tensor<4x8xf32>, tensor<8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %b: f32, %o: f32):
    %y = arith.addf %x, %b : f32
    linalg.yield %y : f32
  } -> tensor<4x8xf32>
  %neg = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%biased : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.negf %x : f32
    linalg.yield %y : f32
  } -> tensor<4x8xf32>
  %exp = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%biased : tensor<4x8xf32>) outs(%e : tensor<4x8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = math.exp %x : f32
    linalg.yield %y : f32
  } -> tensor<4x8xf32>
  return %neg, %exp : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// RMSNorm's fp32 `x * rstd` (the per-row rstd read at column 0 of its
// keepdim dimension), read by the gain's forward product and, through an
// expand_shape that adds unit dimensions, by the gain gradient's row-by-row
// dot product with the bf16 output gradient (a contraction without rows
// and columns: not a GEMM). Both recompute it from x and rstd (4 bytes an
// element each, against 12 for writing and reading it twice): the
// gradient's copy computed in the expanded shape, x expanded likewise,
// rstd's unit dimension still read at 0. The fp32 tensor is gone.

// CHECK-DAG: #[[$ROW:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, 0)>
// CHECK-LABEL: func.func @norm_output
// CHECK-SAME: %[[X:[^:]*]]: tensor<4x512xf32>, %[[R:[^:]*]]: tensor<4x1xf32>
// CHECK: linalg.generic {{.*}} ins(%[[X]], %[[R]], %{{.*}} : tensor<4x512xf32>, tensor<4x1xf32>, tensor<512xf32>)
// CHECK: arith.mulf
// CHECK: arith.truncf
// CHECK: %[[XV:.*]] = tensor.expand_shape %[[X]] {{\[}}[0], [1, 2, 3]] output_shape [4, 1, 1, 512] : tensor<4x512xf32> into tensor<4x1x1x512xf32>
// CHECK: linalg.generic {indexing_maps = [#{{.*}}, #{{.*}}, #[[$ROW]], #{{.*}}], iterator_types = ["reduction", "parallel", "parallel", "parallel"]} ins(%{{.*}}, %[[XV]], %[[R]] : tensor<4x1x1x512xbf16>, tensor<4x1x1x512xf32>, tensor<4x1xf32>)
// CHECK: %[[N:.*]] = arith.mulf
// CHECK: %[[D:.*]] = arith.extf
// CHECK: arith.mulf %[[D]], %[[N]]
// CHECK: arith.addf
// CHECK-NOT: linalg.generic
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0, 0)>
#col = affine_map<(d0, d1) -> (d1)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#gain = affine_map<(d0, d1, d2, d3) -> (d1, d2, d3)>
func.func @norm_output(%x: tensor<4x512xf32>, %rstd: tensor<4x1xf32>, %w: tensor<512xf32>, %dy: tensor<4x512xbf16>) -> (tensor<4x512xbf16>, tensor<1x1x512xf32>) {
  %e = tensor.empty() : tensor<4x512xf32>
  %normed = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %rstd : tensor<4x512xf32>, tensor<4x1xf32>) outs(%e : tensor<4x512xf32>) {
  ^bb0(%v: f32, %r: f32, %o: f32):
    %y = arith.mulf %v, %r : f32
    linalg.yield %y : f32
  } -> tensor<4x512xf32>
  %eb = tensor.empty() : tensor<4x512xbf16>
  %out = linalg.generic {indexing_maps = [#id, #col, #id], iterator_types = ["parallel", "parallel"]}
      ins(%normed, %w : tensor<4x512xf32>, tensor<512xf32>) outs(%eb : tensor<4x512xbf16>) {
  ^bb0(%v: f32, %g: f32, %o: bf16):
    %y = arith.mulf %v, %g : f32
    %t = arith.truncf %y : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x512xbf16>
  %dyv = tensor.expand_shape %dy [[0], [1, 2, 3]] output_shape [4, 1, 1, 512] : tensor<4x512xbf16> into tensor<4x1x1x512xbf16>
  %nv = tensor.expand_shape %normed [[0], [1, 2, 3]] output_shape [4, 1, 1, 512] : tensor<4x512xf32> into tensor<4x1x1x512xf32>
  %zero = arith.constant 0.0 : f32
  %eg = tensor.empty() : tensor<1x1x512xf32>
  %init = linalg.fill ins(%zero : f32) outs(%eg : tensor<1x1x512xf32>) -> tensor<1x1x512xf32>
  %dw = linalg.generic {indexing_maps = [#id4, #id4, #gain], iterator_types = ["reduction", "parallel", "parallel", "parallel"]}
      ins(%dyv, %nv : tensor<4x1x1x512xbf16>, tensor<4x1x1x512xf32>) outs(%init : tensor<1x1x512xf32>) {
  ^bb0(%d: bf16, %n: f32, %o: f32):
    %dd = arith.extf %d : bf16 to f32
    %p = arith.mulf %dd, %n : f32
    %s = arith.addf %p, %o : f32
    linalg.yield %s : f32
  } -> tensor<1x1x512xf32>
  return %out, %dw : tensor<4x512xbf16>, tensor<1x1x512xf32>
}
