// RUN: mantissa-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mantissa-tile-transposed-reads))" | FileCheck %s
// RUN: mantissa-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mantissa-tile-transposed-reads{cpu=znver3}))" | FileCheck %s --check-prefix=AVX2
// RUN: mantissa-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(mantissa-tile-transposed-reads{cpu=nehalem}))" | FileCheck %s

// Without a CPU, or on one without AVX2 (nehalem), ops are cut into strips;
// with AVX2 (znver3), f32 ops are computed in 8x8 blocks.

// The transpose of the logits' gradient for the output projection's weight
// gradient: 512 rows of 128, each element of a row from another 2 KiB row
// of the input. It becomes 8 strips of 16 columns (a 64-byte line of f32).
// CHECK-LABEL: func.func @transpose
// CHECK-SAME: (%[[X:.*]]: memref<128x512xf32>, %[[Y:.*]]: memref<512x128xf32>)
// CHECK-DAG: %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG: %[[C16:.*]] = arith.constant 16 : index
// CHECK-DAG: %[[C128:.*]] = arith.constant 128 : index
// CHECK: scf.for %[[J:.*]] = %[[C0]] to %[[C128]] step %[[C16]] {
// CHECK: %[[XS:.*]] = memref.subview %[[X]][%[[J]], 0] [16, 512] [1, 1]
// CHECK: %[[YS:.*]] = memref.subview %[[Y]][0, %[[J]]] [512, 16] [1, 1]
// CHECK: linalg.transpose ins(%[[XS]] : memref<16x512xf32, strided<[512, 1], offset: ?>>) outs(%[[YS]] : memref<512x16xf32, strided<[128, 1], offset: ?>>) permutation = [1, 0]
// CHECK-NOT: linalg.
// In 8x8 blocks: a strip of 16 columns, 8 rows of the output at a time,
// the strip's two blocks; 8 loads along the input's rows, the shuffles of
// an 8x8 transpose, 8 stores along the output's rows.
// AVX2-LABEL: func.func @transpose
// AVX2-SAME: (%[[X:.*]]: memref<128x512xf32>, %[[Y:.*]]: memref<512x128xf32>)
// AVX2-DAG: %[[C0:.*]] = arith.constant 0 : index
// AVX2-DAG: %[[C8:.*]] = arith.constant 8 : index
// AVX2-DAG: %[[C16:.*]] = arith.constant 16 : index
// AVX2-DAG: %[[C128:.*]] = arith.constant 128 : index
// AVX2-DAG: %[[C512:.*]] = arith.constant 512 : index
// AVX2: scf.for %[[J:.*]] = %[[C0]] to %[[C128]] step %[[C16]] {
// AVX2: scf.for %[[I:.*]] = %[[C0]] to %[[C512]] step %[[C8]] {
// AVX2: scf.for %[[B:.*]] = %[[C0]] to %[[C16]] step %[[C8]] {
// AVX2: %[[COL:.*]] = arith.addi %[[J]], %[[B]] : index
// AVX2: vector.load %[[X]][%[[COL]], %[[I]]] : memref<128x512xf32>, vector<8xf32>
// AVX2-COUNT-7: vector.load %[[X]]
// AVX2: vector.shuffle
// AVX2: llvm.inline_asm {{.*}}"vblendps
// AVX2: vector.store %{{.*}}, %[[Y]][%[[I]], %[[COL]]] : memref<512x128xf32>, vector<8xf32>
// AVX2-COUNT-7: vector.store %{{.*}}, %[[Y]]
// AVX2-NOT: linalg.
func.func @transpose(%x: memref<128x512xf32>, %y: memref<512x128xf32>) {
  linalg.transpose ins(%x : memref<128x512xf32>) outs(%y : memref<512x128xf32>) permutation = [1, 0]
  return
}

// -----

// autocast's rounding of a (4, 32, 344) activation in the layout a weight
// gradient reads it, (344, 4, 32): the innermost loop (32) is tiled in
// two strips of 16. The rounding to bf16 in the other layout writes bf16,
// 32 to a line, and the innermost loop is not longer than that: left alone.
#in = affine_map<(d0, d1, d2) -> (d1, d2, d0)>
#id = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @rounding_in_another_layout
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK: linalg.generic {{.*}} ins(%{{.*}} : memref<4x16x344xf32, strided<[11008, 344, 1], offset: ?>>) outs(%{{.*}} : memref<344x4x16xf32, strided<[128, 32, 1], offset: ?>>)
// CHECK: arith.truncf
// CHECK: arith.extf
// CHECK: }
// CHECK: linalg.generic {{.*}} ins(%{{.*}} : memref<4x32x344xf32>) outs(%{{.*}} : memref<344x4x32xbf16>)
// With AVX2, the f32 rounding in blocks: loops over the strips of the
// innermost loop (32), the transposed input's loop (344, in 8s), the
// other loop (4), and the strip's two blocks; each row rounded as a vector.
// AVX2-LABEL: func.func @rounding_in_another_layout
// AVX2: scf.for %{{.*}} = %{{.*}} to %[[C32:.*]] step %[[C16:.*]] {
// AVX2: scf.for %{{.*}} = %{{.*}} to %[[C344:.*]] step %[[C8:.*]] {
// AVX2: scf.for %{{.*}} = %{{.*}} to %[[C4:.*]] step %[[C1:.*]] {
// AVX2: scf.for %{{.*}} = %{{.*}} to %[[C16]] step %[[C8]] {
// AVX2-COUNT-8: vector.load %{{.*}} : memref<4x32x344xf32>, vector<8xf32>
// AVX2: arith.truncf %{{.*}} : vector<8xf32> to vector<8xbf16>
// AVX2: arith.extf %{{.*}} : vector<8xbf16> to vector<8xf32>
// AVX2: vector.store %{{.*}} : memref<344x4x32xf32>, vector<8xf32>
// The rounding into bf16 memory is left alone (its line holds 32).
// AVX2: linalg.generic {{.*}} ins(%{{.*}} : memref<4x32x344xf32>) outs(%{{.*}} : memref<344x4x32xbf16>)
func.func @rounding_in_another_layout(%x: memref<4x32x344xf32>, %y: memref<344x4x32xf32>, %z: memref<344x4x32xbf16>) {
  linalg.generic {indexing_maps = [#in, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : memref<4x32x344xf32>) outs(%y : memref<344x4x32xf32>) {
  ^bb0(%a: f32, %b: f32):
    %t = arith.truncf %a : f32 to bf16
    %w = arith.extf %t : bf16 to f32
    linalg.yield %w : f32
  }
  linalg.generic {indexing_maps = [#in, #id], iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%x : memref<4x32x344xf32>) outs(%z : memref<344x4x32xbf16>) {
  ^bb0(%a: f32, %b: bf16):
    %t = arith.truncf %a : f32 to bf16
    linalg.yield %t : bf16
  }
  return
}

// -----

// Left alone: an op whose inputs are read along their last dimension (a
// head permutation that keeps the innermost index), a broadcast, an op
// that ends in a reduction, and an op on tensors.
#perm = affine_map<(d0, d1, d2, d3) -> (d0, d2, d1, d3)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#row = affine_map<(d0, d1) -> (d0)>
#rows = affine_map<(d0, d1) -> (d0, d1)>
#cols = affine_map<(d0, d1) -> (d1, d0)>
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: scf.for
// CHECK-COUNT-4: linalg.generic
// CHECK-NOT: scf.for
func.func @left_alone(%x: memref<4x32x4x32xf32>, %y: memref<4x4x32x32xf32>,
                      %r: memref<64xf32>, %m: memref<64x64xf32>,
                      %s: memref<64xf32>, %t: tensor<64x64xf32>) -> tensor<64x64xf32> {
  linalg.generic {indexing_maps = [#perm, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%x : memref<4x32x4x32xf32>) outs(%y : memref<4x4x32x32xf32>) {
  ^bb0(%a: f32, %b: f32):
    linalg.yield %a : f32
  }
  linalg.generic {indexing_maps = [#row, #rows], iterator_types = ["parallel", "parallel"]}
      ins(%r : memref<64xf32>) outs(%m : memref<64x64xf32>) {
  ^bb0(%a: f32, %b: f32):
    linalg.yield %a : f32
  }
  linalg.generic {indexing_maps = [#cols, #row], iterator_types = ["parallel", "reduction"]}
      ins(%m : memref<64x64xf32>) outs(%s : memref<64xf32>) {
  ^bb0(%a: f32, %b: f32):
    %sum = arith.addf %a, %b : f32
    linalg.yield %sum : f32
  }
  %e = tensor.empty() : tensor<64x64xf32>
  %u = linalg.generic {indexing_maps = [#cols, #rows], iterator_types = ["parallel", "parallel"]}
      ins(%t : tensor<64x64xf32>) outs(%e : tensor<64x64xf32>) {
  ^bb0(%a: f32, %b: f32):
    linalg.yield %a : f32
  } -> tensor<64x64xf32>
  return %u : tensor<64x64xf32>
}

// -----

// On an AVX2 CPU, an add of a transposed input and one read along the output's
// rows, times a 0-d scalar, in blocks: the row input loaded row by row, the
// scalar loaded once per block and broadcast. The same op on a 24-wide
// output (no multiple of 16) is cut into strips: 16, then 8.
#t2 = affine_map<(d0, d1) -> (d1, d0)>
#i2 = affine_map<(d0, d1) -> (d0, d1)>
#s2 = affine_map<(d0, d1) -> ()>
// CHECK-LABEL: func.func @row_and_scalar_operands
// AVX2-LABEL: func.func @row_and_scalar_operands
// AVX2-SAME: (%[[A:.*]]: memref<32x48xf32>, %[[B:.*]]: memref<48x32xf32>, %[[S:.*]]: memref<f32>, %[[Y:.*]]: memref<48x32xf32>
// AVX2: scf.for
// AVX2-COUNT-8: vector.load %[[A]]
// AVX2: vector.shuffle
// AVX2: vector.load %[[B]]
// AVX2-COUNT-7: vector.load %[[B]]
// AVX2: %[[SV:.*]] = memref.load %[[S]][] : memref<f32>
// AVX2: %[[SB:.*]] = vector.broadcast %[[SV]] : f32 to vector<8xf32>
// AVX2: %[[SUM:.*]] = arith.addf %{{.*}}, %{{.*}} : vector<8xf32>
// AVX2: arith.mulf %[[SUM]], %[[SB]] : vector<8xf32>
// AVX2-COUNT-8: vector.store %{{.*}}, %[[Y]]
// AVX2: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} {
// AVX2: %[[W:.*]] = affine.min
// AVX2: linalg.generic {{.*}} outs(%{{.*}} : memref<48x?xf32, strided<[24, 1], offset: ?>>)
func.func @row_and_scalar_operands(%a: memref<32x48xf32>, %b: memref<48x32xf32>, %s: memref<f32>, %y: memref<48x32xf32>,
                                   %c: memref<24x48xf32>, %d: memref<48x24xf32>, %z: memref<48x24xf32>) {
  linalg.generic {indexing_maps = [#t2, #i2, #s2, #i2], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b, %s : memref<32x48xf32>, memref<48x32xf32>, memref<f32>) outs(%y : memref<48x32xf32>) {
  ^bb0(%x: f32, %r: f32, %k: f32, %o: f32):
    %sum = arith.addf %x, %r : f32
    %p = arith.mulf %sum, %k : f32
    linalg.yield %p : f32
  }
  linalg.generic {indexing_maps = [#t2, #i2, #s2, #i2], iterator_types = ["parallel", "parallel"]}
      ins(%c, %d, %s : memref<24x48xf32>, memref<48x24xf32>, memref<f32>) outs(%z : memref<48x24xf32>) {
  ^bb0(%x: f32, %r: f32, %k: f32, %o: f32):
    %sum = arith.addf %x, %r : f32
    %p = arith.mulf %sum, %k : f32
    linalg.yield %p : f32
  }
  return
}

// -----

// bf16 in memory: the block's 16-bit elements are moved in the low halves
// of 32-bit lanes, transposed with the f32 shuffles, and narrowed back, so
// every bit pattern arrives unchanged. A bf16 output's strip is 32 wide.
// CHECK-LABEL: func.func @bf16_transpose
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C32:.*]] {
// CHECK: linalg.transpose ins(%{{.*}} : memref<32x24xbf16, strided<[24, 1], offset: ?>>)
// AVX2-LABEL: func.func @bf16_transpose
// AVX2-SAME: (%[[X:.*]]: memref<64x24xbf16>, %[[Y:.*]]: memref<24x64xbf16>)
// AVX2-COUNT-8: vector.load %[[X]]{{.*}} : memref<64x24xbf16>, vector<8xbf16>
// AVX2: %[[BITS:.*]] = arith.bitcast %{{.*}} : vector<8xbf16> to vector<8xi16>
// AVX2: %[[WIDE:.*]] = arith.extui %[[BITS]] : vector<8xi16> to vector<8xi32>
// AVX2: arith.bitcast %[[WIDE]] : vector<8xi32> to vector<8xf32>
// AVX2: llvm.inline_asm {{.*}}"vblendps
// AVX2: %[[NARROW:.*]] = arith.trunci %{{.*}} : vector<8xi32> to vector<8xi16>
// AVX2: %[[ROW:.*]] = arith.bitcast %[[NARROW]] : vector<8xi16> to vector<8xbf16>
// AVX2: vector.store %{{.*}}, %[[Y]]{{.*}} : memref<24x64xbf16>, vector<8xbf16>
func.func @bf16_transpose(%x: memref<64x24xbf16>, %y: memref<24x64xbf16>) {
  linalg.transpose ins(%x : memref<64x24xbf16>) outs(%y : memref<24x64xbf16>) permutation = [1, 0]
  return
}
