// RUN: mantissa-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mantissa-widen-bf16-products{cpu=znver3}))" | FileCheck %s --check-prefix=AVX2
// RUN: mantissa-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mantissa-widen-bf16-products{cpu=sapphirerapids}))" | FileCheck %s --check-prefix=AVX512
// RUN: mantissa-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mantissa-widen-bf16-products{cpu=sapphirerapids library-bf16=false}))" | FileCheck %s --check-prefix=AVX2
// RUN: mantissa-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mantissa-widen-bf16-products{cpu=znver3}),one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map},mantissa-call-gemm-library)" | FileCheck %s --check-prefix=GEMM-AVX2
// RUN: mantissa-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mantissa-widen-bf16-products{cpu=sapphirerapids}),one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map},mantissa-call-gemm-library)" | FileCheck %s --check-prefix=GEMM-AVX512

// A linear layer under `compute: bf16`, as elementwise fusion leaves it:
// the activations rounded to bf16 by the op that makes them (also kept in
// bf16 for another consumer, the returned value), collapsed to a matrix,
// times an fp32 weight that the product itself rounds (x @ w^T).
//
// For an AVX2 CPU (znver3: no AVX-512, so oneDNN has no bf16 matmul), or
// when oneDNN says it has none: the producer also yields the rounded value
// widened to f32, the weight is rounded and widened once by an op of its
// own (just before the product), and the product is an fp32 product of
// them: types 0, 0, 0 in its GEMM descriptor (mantissa/Runtime/CpuGemm.h),
// no bf16 copy.
// For an AVX-512 CPU: nothing changes (types 1, 1, 0).

// AVX2-LABEL: func.func @linear
// AVX2-SAME: (%[[X:.*]]: tensor<4x32x64xf32>, %[[W:.*]]: tensor<32x64xf32>)
// AVX2: %[[R:.*]]:2 = linalg.generic {{.*}} ins(%[[X]] : tensor<4x32x64xf32>) outs(%{{.*}}, %{{.*}} : tensor<4x32x64xbf16>, tensor<4x32x64xf32>)
// AVX2-NEXT: ^bb0(%[[IN2:.*]]: f32, %{{.*}}: bf16, %{{.*}}: f32):
// AVX2-NEXT: %[[M:.*]] = arith.mulf %[[IN2]], %[[IN2]] : f32
// AVX2-NEXT: %[[T2:.*]] = arith.truncf %[[M]] : f32 to bf16
// AVX2-NEXT: %[[E2:.*]] = arith.extf %[[T2]] : bf16 to f32
// AVX2-NEXT: linalg.yield %[[T2]], %[[E2]] : bf16, f32
// AVX2: %[[WIDE_W:.*]] = linalg.generic {{.*}} ins(%[[W]] : tensor<32x64xf32>) outs(%{{.*}} : tensor<32x64xf32>)
// AVX2-NEXT: ^bb0(%[[IN:.*]]: f32, %{{.*}}: f32):
// AVX2-NEXT: %[[T:.*]] = arith.truncf %[[IN]] : f32 to bf16
// AVX2-NEXT: %[[E:.*]] = arith.extf %[[T]] : bf16 to f32
// AVX2-NEXT: linalg.yield %[[E]] : f32
// AVX2: %[[C:.*]] = tensor.collapse_shape %[[R]]#1 {{\[\[}}0, 1], [2]] : tensor<4x32x64xf32> into tensor<128x64xf32>
// AVX2: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[C]], %[[WIDE_W]] : tensor<128x64xf32>, tensor<32x64xf32>) outs(%{{.*}} : tensor<128x32xf32>)
// AVX2-NEXT: ^bb0(%[[A:.*]]: f32, %[[B:.*]]: f32, %[[O:.*]]: f32):
// AVX2-NEXT: %[[P:.*]] = arith.mulf %[[A]], %[[B]] : f32
// AVX2-NEXT: %[[S:.*]] = arith.addf %[[O]], %[[P]] : f32
// AVX2-NEXT: linalg.yield %[[S]] : f32
// AVX2: return %{{.*}}, %[[R]]#0 : tensor<128x32xf32>, tensor<4x32x64xbf16>

// AVX512-LABEL: func.func @linear
// AVX512-NOT: tensor<128x64xf32>
// AVX512: ins(%{{.*}}, %{{.*}} : tensor<128x64xbf16>, tensor<32x64xf32>)
// AVX512: arith.truncf %{{.*}} : f32 to bf16
// AVX512: arith.extf
// AVX512: arith.extf

// GEMM-AVX2: memref.global "private" constant @__mantissa_gemm_0 : memref<19xi64> = dense<[4, 0, 0, 0, 1, 128, 32, 64, 8192, 64, 1, 2048, 1, 64, 4096, 32, 1, 0, 0]>
// GEMM-AVX2-LABEL: func.func @linear
// GEMM-AVX2-NOT: memref<32x64xbf16>
// GEMM-AVX2: call @mantissa_cpu_gemm

// GEMM-AVX512: memref.global "private" constant @__mantissa_gemm_0 : memref<19xi64> = dense<[4, 1, 1, 0, 1, 128, 32, 64, 8192, 64, 1, 2048, 1, 64, 4096, 32, 1, 0, 0]>
// GEMM-AVX512-LABEL: func.func @linear
// GEMM-AVX512: memref.alloc() {{.*}} : memref<32x64xbf16>
// GEMM-AVX512: call @mantissa_cpu_gemm

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#a = affine_map<(m, n, k) -> (m, k)>
#bt = affine_map<(m, n, k) -> (n, k)>
#c = affine_map<(m, n, k) -> (m, n)>
func.func @linear(%x: tensor<4x32x64xf32>, %w: tensor<32x64xf32>) -> (tensor<128x32xf32>, tensor<4x32x64xbf16>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x32x64xbf16>
  %r = linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel", "parallel", "parallel"]} ins(%x : tensor<4x32x64xf32>) outs(%e : tensor<4x32x64xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %m = arith.mulf %in, %in : f32
    %t = arith.truncf %m : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<4x32x64xbf16>
  %rm = tensor.collapse_shape %r [[0, 1], [2]] : tensor<4x32x64xbf16> into tensor<128x64xbf16>
  %ce = tensor.empty() : tensor<128x32xf32>
  %c0 = linalg.fill ins(%zero : f32) outs(%ce : tensor<128x32xf32>) -> tensor<128x32xf32>
  %p = linalg.generic {indexing_maps = [#a, #bt, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%rm, %w : tensor<128x64xbf16>, tensor<32x64xf32>) outs(%c0 : tensor<128x32xf32>) {
  ^bb0(%in: bf16, %in_w: f32, %out: f32):
    %wt = arith.truncf %in_w : f32 to bf16
    %ea = arith.extf %in : bf16 to f32
    %eb = arith.extf %wt : bf16 to f32
    %mul = arith.mulf %ea, %eb : f32
    %add = arith.addf %out, %mul : f32
    linalg.yield %add : f32
  } -> tensor<128x32xf32>
  return %p, %r : tensor<128x32xf32>, tensor<4x32x64xbf16>
}

// -----

// A product of a bf16 argument (a parameter gathered in bf16) and a bf16
// value a named op makes: each widened by an elementwise op of its own,
// once however many products read it; the argument's just before the
// first of them.

// AVX2-LABEL: func.func @arguments
// AVX2: %[[F:.*]] = linalg.fill {{.*}} -> tensor<128x64xbf16>
// AVX2: %[[WF:.*]] = linalg.generic {{.*}} ins(%[[F]] : tensor<128x64xbf16>) outs(%{{.*}} : tensor<128x64xf32>)
// AVX2: %[[WA:.*]] = linalg.generic {{.*}} ins(%arg0 : tensor<64x32xbf16>) outs(%{{.*}} : tensor<64x32xf32>)
// AVX2-NEXT: ^bb0(%[[IN:.*]]: bf16, %{{.*}}: f32):
// AVX2-NEXT: %[[E:.*]] = arith.extf %[[IN]] : bf16 to f32
// AVX2-NEXT: linalg.yield %[[E]] : f32
// AVX2-NEXT: } -> tensor<64x32xf32>
// AVX2-COUNT-2: linalg.generic {{.*}} ins(%[[WF]], %[[WA]] : tensor<128x64xf32>, tensor<64x32xf32>)
// AVX2-NOT: linalg.matmul

// AVX512-LABEL: func.func @arguments
// AVX512-COUNT-2: linalg.matmul ins(%{{.*}}, %arg0 : tensor<128x64xbf16>, tensor<64x32xbf16>)
func.func @arguments(%w: tensor<64x32xbf16>) -> (tensor<128x32xf32>, tensor<128x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %half = arith.constant 0.5 : bf16
  %fe = tensor.empty() : tensor<128x64xbf16>
  %f = linalg.fill ins(%half : bf16) outs(%fe : tensor<128x64xbf16>) -> tensor<128x64xbf16>
  %ce = tensor.empty() : tensor<128x32xf32>
  %c0 = linalg.fill ins(%zero : f32) outs(%ce : tensor<128x32xf32>) -> tensor<128x32xf32>
  %p = linalg.matmul ins(%f, %w : tensor<128x64xbf16>, tensor<64x32xbf16>) outs(%c0 : tensor<128x32xf32>) -> tensor<128x32xf32>
  %q = linalg.matmul ins(%f, %w : tensor<128x64xbf16>, tensor<64x32xbf16>) outs(%c0 : tensor<128x32xf32>) -> tensor<128x32xf32>
  return %p, %q : tensor<128x32xf32>, tensor<128x32xf32>
}

// -----

// A product that rounds another product's result (its truncf fused into
// it): the result is rounded and widened once, by an op of its own, and
// read from the fp32 product that replaces the first.

// AVX2-LABEL: func.func @chained
// AVX2: %[[P:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<64x64xf32>, tensor<64x64xf32>)
// AVX2: %[[R:.*]] = linalg.generic {{.*}} ins(%[[P]] : tensor<64x64xf32>) outs(%{{.*}} : tensor<64x64xf32>)
// AVX2-NEXT: ^bb0(%[[IN:.*]]: f32, %{{.*}}: f32):
// AVX2-NEXT: %[[T:.*]] = arith.truncf %[[IN]] : f32 to bf16
// AVX2-NEXT: arith.extf %[[T]] : bf16 to f32
// AVX2: linalg.generic {{.*}} ins(%[[R]], %{{.*}} : tensor<64x64xf32>, tensor<64x64xf32>)
// AVX2-NOT: bf16 to f32
// AVX2: return

// AVX512-LABEL: func.func @chained
// AVX512: linalg.matmul ins(%arg0, %arg1 : tensor<64x64xbf16>, tensor<64x64xbf16>)
// AVX512: linalg.generic {{.*}} ins(%{{.*}}, %arg1 : tensor<64x64xf32>, tensor<64x64xbf16>)
#ca = affine_map<(m, n, k) -> (m, k)>
#cb = affine_map<(m, n, k) -> (k, n)>
#cc = affine_map<(m, n, k) -> (m, n)>
func.func @chained(%a: tensor<64x64xbf16>, %b: tensor<64x64xbf16>) -> tensor<64x64xf32> {
  %zero = arith.constant 0.0 : f32
  %ce = tensor.empty() : tensor<64x64xf32>
  %c0 = linalg.fill ins(%zero : f32) outs(%ce : tensor<64x64xf32>) -> tensor<64x64xf32>
  %p = linalg.matmul ins(%a, %b : tensor<64x64xbf16>, tensor<64x64xbf16>) outs(%c0 : tensor<64x64xf32>) -> tensor<64x64xf32>
  %q = linalg.generic {indexing_maps = [#ca, #cb, #cc], iterator_types = ["parallel", "parallel", "reduction"]} ins(%p, %b : tensor<64x64xf32>, tensor<64x64xbf16>) outs(%c0 : tensor<64x64xf32>) {
  ^bb0(%x: f32, %y: bf16, %o: f32):
    %t = arith.truncf %x : f32 to bf16
    %ex = arith.extf %t : bf16 to f32
    %ey = arith.extf %y : bf16 to f32
    %m = arith.mulf %ex, %ey : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<64x64xf32>
  return %q : tensor<64x64xf32>
}

// -----

// Two layers' fp32 weights (fp32 masters under `compute: bf16`), each
// rounded and widened every step by an op of its own: each just before the
// product that first reads it, not both at the function's start, so that
// the product reads the copy while it is still in the cache (made all at
// once at the start, llama_medium's 3.4 MB of copies had left L2 before
// their products read them). The second is still read by a later product.

// AVX2-LABEL: func.func @layers
// AVX2-SAME: (%[[X:.*]]: tensor<128x64xbf16>, %[[W1:.*]]: tensor<64x64xf32>, %[[W2:.*]]: tensor<64x64xf32>)
// AVX2-NOT: linalg.generic
// AVX2: %[[WX:.*]] = linalg.generic {{.*}} ins(%[[X]] : tensor<128x64xbf16>)
// AVX2-NOT: linalg.generic
// AVX2: %[[E1:.*]] = tensor.empty() : tensor<64x64xf32>
// AVX2-NEXT: %[[R1:.*]] = linalg.generic {{.*}} ins(%[[W1]] : tensor<64x64xf32>) outs(%[[E1]] : tensor<64x64xf32>)
// AVX2: arith.truncf
// AVX2: %[[P1:.*]] = linalg.generic {{.*}} ins(%[[WX]], %[[R1]] : tensor<128x64xf32>, tensor<64x64xf32>)
// AVX2: %[[H:.*]] = linalg.generic {{.*}} ins(%[[P1]] : tensor<128x64xf32>)
// AVX2: %[[E2:.*]] = tensor.empty() : tensor<64x64xf32>
// AVX2-NEXT: %[[R2:.*]] = linalg.generic {{.*}} ins(%[[W2]] : tensor<64x64xf32>) outs(%[[E2]] : tensor<64x64xf32>)
// AVX2: arith.truncf
// AVX2: linalg.generic {{.*}} ins(%[[H]], %[[R2]] : tensor<128x64xf32>, tensor<64x64xf32>)
// AVX2: linalg.generic {{.*}} ins(%[[WX]], %[[R2]] : tensor<128x64xf32>, tensor<64x64xf32>)
// AVX2: return
#la = affine_map<(m, n, k) -> (m, k)>
#lb = affine_map<(m, n, k) -> (k, n)>
#lc = affine_map<(m, n, k) -> (m, n)>
#lid = affine_map<(d0, d1) -> (d0, d1)>
func.func @layers(%x: tensor<128x64xbf16>, %w1: tensor<64x64xf32>, %w2: tensor<64x64xf32>) -> (tensor<128x64xf32>, tensor<128x64xf32>) {
  %zero = arith.constant 0.0 : f32
  %ce = tensor.empty() : tensor<128x64xf32>
  %c0 = linalg.fill ins(%zero : f32) outs(%ce : tensor<128x64xf32>) -> tensor<128x64xf32>
  %p1 = linalg.generic {indexing_maps = [#la, #lb, #lc], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %w1 : tensor<128x64xbf16>, tensor<64x64xf32>) outs(%c0 : tensor<128x64xf32>) {
  ^bb0(%a: bf16, %b: f32, %o: f32):
    %ea = arith.extf %a : bf16 to f32
    %tb = arith.truncf %b : f32 to bf16
    %eb = arith.extf %tb : bf16 to f32
    %m = arith.mulf %ea, %eb : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<128x64xf32>
  %he = tensor.empty() : tensor<128x64xbf16>
  %h = linalg.generic {indexing_maps = [#lid, #lid], iterator_types = ["parallel", "parallel"]} ins(%p1 : tensor<128x64xf32>) outs(%he : tensor<128x64xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.mulf %in, %in : f32
    %t = arith.truncf %r : f32 to bf16
    linalg.yield %t : bf16
  } -> tensor<128x64xbf16>
  %p2 = linalg.generic {indexing_maps = [#la, #lb, #lc], iterator_types = ["parallel", "parallel", "reduction"]} ins(%h, %w2 : tensor<128x64xbf16>, tensor<64x64xf32>) outs(%c0 : tensor<128x64xf32>) {
  ^bb0(%a: bf16, %b: f32, %o: f32):
    %ea = arith.extf %a : bf16 to f32
    %tb = arith.truncf %b : f32 to bf16
    %eb = arith.extf %tb : bf16 to f32
    %m = arith.mulf %ea, %eb : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<128x64xf32>
  %p3 = linalg.generic {indexing_maps = [#la, #lb, #lc], iterator_types = ["parallel", "parallel", "reduction"]} ins(%x, %w2 : tensor<128x64xbf16>, tensor<64x64xf32>) outs(%c0 : tensor<128x64xf32>) {
  ^bb0(%a: bf16, %b: f32, %o: f32):
    %ea = arith.extf %a : bf16 to f32
    %tb = arith.truncf %b : f32 to bf16
    %eb = arith.extf %tb : bf16 to f32
    %m = arith.mulf %ea, %eb : f32
    %s = arith.addf %o, %m : f32
    linalg.yield %s : f32
  } -> tensor<128x64xf32>
  return %p2, %p3 : tensor<128x64xf32>, tensor<128x64xf32>
}

// -----

// A value that two products read rounded, one of them through a
// transposed copy (a SiLU's gradient: the product for the input's gradient
// reads it, the weight's gradient reads it transposed). The producer gets
// the rounded value as a result for the first product; the transposed copy
// then reads that result instead of rounding the value again (the same
// bf16 value), so it copies without rounding and the producer no longer
// writes the unrounded value, which nothing else reads.

// AVX2-LABEL: func.func @rounded_twice
// AVX2: %[[G:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<128x64xbf16>) outs(%{{.*}} : tensor<128x64xf32>)
// AVX2-NEXT: ^bb0(%[[IN:.*]]: bf16, %{{.*}}: f32):
// AVX2-NEXT: %[[E:.*]] = arith.extf %[[IN]] : bf16 to f32
// AVX2-NEXT: %[[M:.*]] = arith.mulf %[[E]], %[[E]] : f32
// AVX2-NEXT: %[[T:.*]] = arith.truncf %[[M]] : f32 to bf16
// AVX2-NEXT: %[[W:.*]] = arith.extf %[[T]] : bf16 to f32
// AVX2-NEXT: linalg.yield %[[W]] : f32
// AVX2-NEXT: } -> tensor<128x64xf32>
// AVX2: %[[TR:.*]] = linalg.generic {{.*}} ins(%[[G]] : tensor<128x64xf32>) outs(%{{.*}} : tensor<64x128xf32>)
// AVX2-NEXT: ^bb0(%[[X:.*]]: f32, %{{.*}}: f32):
// AVX2-NEXT: linalg.yield %[[X]] : f32
// AVX2: linalg.generic {{.*}} ins(%[[G]], %{{.*}} : tensor<128x64xf32>, tensor<64x32xf32>)
// AVX2: linalg.generic {{.*}} ins(%[[TR]], %{{.*}} : tensor<64x128xf32>, tensor<128x32xf32>)
// AVX2-NOT: truncf
// AVX2: return
#ra = affine_map<(m, n, k) -> (m, k)>
#rb = affine_map<(m, n, k) -> (k, n)>
#rc = affine_map<(m, n, k) -> (m, n)>
#rid = affine_map<(d0, d1) -> (d0, d1)>
#rt = affine_map<(d0, d1) -> (d1, d0)>
func.func @rounded_twice(%x: tensor<128x64xbf16>, %w: tensor<64x32xbf16>, %y: tensor<128x32xbf16>) -> (tensor<128x32xf32>, tensor<64x32xf32>) {
  %zero = arith.constant 0.0 : f32
  %ge = tensor.empty() : tensor<128x64xf32>
  %g = linalg.generic {indexing_maps = [#rid, #rid], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<128x64xbf16>) outs(%ge : tensor<128x64xf32>) {
  ^bb0(%in: bf16, %out: f32):
    %e = arith.extf %in : bf16 to f32
    %m = arith.mulf %e, %e : f32
    linalg.yield %m : f32
  } -> tensor<128x64xf32>
  %te = tensor.empty() : tensor<64x128xbf16>
  %t = linalg.generic {indexing_maps = [#rt, #rid], iterator_types = ["parallel", "parallel"]} ins(%g : tensor<128x64xf32>) outs(%te : tensor<64x128xbf16>) {
  ^bb0(%in: f32, %out: bf16):
    %r = arith.truncf %in : f32 to bf16
    linalg.yield %r : bf16
  } -> tensor<64x128xbf16>
  %ce = tensor.empty() : tensor<128x32xf32>
  %c0 = linalg.fill ins(%zero : f32) outs(%ce : tensor<128x32xf32>) -> tensor<128x32xf32>
  %p = linalg.generic {indexing_maps = [#ra, #rb, #rc], iterator_types = ["parallel", "parallel", "reduction"]} ins(%g, %w : tensor<128x64xf32>, tensor<64x32xbf16>) outs(%c0 : tensor<128x32xf32>) {
  ^bb0(%a: f32, %b: bf16, %o: f32):
    %ta = arith.truncf %a : f32 to bf16
    %ea = arith.extf %ta : bf16 to f32
    %eb = arith.extf %b : bf16 to f32
    %mm = arith.mulf %ea, %eb : f32
    %s = arith.addf %o, %mm : f32
    linalg.yield %s : f32
  } -> tensor<128x32xf32>
  %de = tensor.empty() : tensor<64x32xf32>
  %d0 = linalg.fill ins(%zero : f32) outs(%de : tensor<64x32xf32>) -> tensor<64x32xf32>
  %q = linalg.generic {indexing_maps = [#ra, #rb, #rc], iterator_types = ["parallel", "parallel", "reduction"]} ins(%t, %y : tensor<64x128xbf16>, tensor<128x32xbf16>) outs(%d0 : tensor<64x32xf32>) {
  ^bb0(%a: bf16, %b: bf16, %o: f32):
    %ea = arith.extf %a : bf16 to f32
    %eb = arith.extf %b : bf16 to f32
    %mm = arith.mulf %ea, %eb : f32
    %s = arith.addf %o, %mm : f32
    linalg.yield %s : f32
  } -> tensor<64x32xf32>
  return %p, %q : tensor<128x32xf32>, tensor<64x32xf32>
}

// -----

// The linear layer under `compute: fp16`: widened for every CPU, AVX-512
// included, since the runtime's GEMM takes no f16 operands (the product
// would stay in the generated loops): the producer also yields its f16
// value widened, the weight is rounded to f16 and widened by an op of its
// own, and the GEMM's descriptor has types 0, 0, 0.

// AVX2-LABEL: func.func @linear_f16
// AVX2: %[[R:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<128x64xf32>)
// AVX2: arith.truncf %{{.*}} : f32 to f16
// AVX2-NEXT: arith.extf %{{.*}} : f16 to f32
// AVX2: %[[WIDE_W:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<32x64xf32>) outs(%{{.*}} : tensor<32x64xf32>)
// AVX2-NEXT: ^bb0(%[[IN:.*]]: f32, %{{.*}}: f32):
// AVX2-NEXT: %[[T:.*]] = arith.truncf %[[IN]] : f32 to f16
// AVX2-NEXT: %[[E:.*]] = arith.extf %[[T]] : f16 to f32
// AVX2-NEXT: linalg.yield %[[E]] : f32
// AVX2: linalg.generic {{.*}} ins(%[[R]], %[[WIDE_W]] : tensor<128x64xf32>, tensor<32x64xf32>) outs(%{{.*}} : tensor<128x32xf32>)
// AVX2-NEXT: ^bb0(%[[A:.*]]: f32, %[[B:.*]]: f32, %[[O:.*]]: f32):
// AVX2-NEXT: arith.mulf %[[A]], %[[B]] : f32
// AVX2-NOT: f16

// AVX512-LABEL: func.func @linear_f16
// AVX512: %[[WIDE_W:.*]] = linalg.generic {{.*}} ins(%{{.*}} : tensor<32x64xf32>) outs(%{{.*}} : tensor<32x64xf32>)
// AVX512: arith.truncf %{{.*}} : f32 to f16
// AVX512: linalg.generic {{.*}} ins(%{{.*}}, %[[WIDE_W]] : tensor<128x64xf32>, tensor<32x64xf32>) outs(%{{.*}} : tensor<128x32xf32>)
// AVX512-NOT: f16

// GEMM-AVX2: memref.global "private" constant @__mantissa_gemm_0 : memref<19xi64> = dense<[4, 0, 0, 0, 1, 128, 32, 64, 8192, 64, 1, 2048, 1, 64, 4096, 32, 1, 0, 0]>
// GEMM-AVX2-LABEL: func.func @linear_f16
// GEMM-AVX2: call @mantissa_cpu_gemm

// GEMM-AVX512: memref.global "private" constant @__mantissa_gemm_0 : memref<19xi64> = dense<[4, 0, 0, 0, 1, 128, 32, 64, 8192, 64, 1, 2048, 1, 64, 4096, 32, 1, 0, 0]>
// GEMM-AVX512-LABEL: func.func @linear_f16
// GEMM-AVX512: call @mantissa_cpu_gemm

#a = affine_map<(m, n, k) -> (m, k)>
#bt = affine_map<(m, n, k) -> (n, k)>
#c = affine_map<(m, n, k) -> (m, n)>
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @linear_f16(%x: tensor<128x64xf32>, %w: tensor<32x64xf32>) -> tensor<128x32xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<128x64xf16>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<128x64xf32>) outs(%e : tensor<128x64xf16>) {
  ^bb0(%in: f32, %out: f16):
    %m = arith.mulf %in, %in : f32
    %t = arith.truncf %m : f32 to f16
    linalg.yield %t : f16
  } -> tensor<128x64xf16>
  %ce = tensor.empty() : tensor<128x32xf32>
  %c0 = linalg.fill ins(%zero : f32) outs(%ce : tensor<128x32xf32>) -> tensor<128x32xf32>
  %p = linalg.generic {indexing_maps = [#a, #bt, #c], iterator_types = ["parallel", "parallel", "reduction"]} ins(%r, %w : tensor<128x64xf16>, tensor<32x64xf32>) outs(%c0 : tensor<128x32xf32>) {
  ^bb0(%in: f16, %in_w: f32, %out: f32):
    %ea = arith.extf %in : f16 to f32
    %tw = arith.truncf %in_w : f32 to f16
    %ew = arith.extf %tw : f16 to f32
    %mm = arith.mulf %ea, %ew : f32
    %s = arith.addf %out, %mm : f32
    linalg.yield %s : f32
  } -> tensor<128x32xf32>
  return %p : tensor<128x32xf32>
}
