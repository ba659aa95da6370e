// RUN: mantissa-opt %s --mantissa-elementwise-through-concats --split-input-file | FileCheck %s

// RoPE as torch exports it: x * cos + cat(-x2, x1) * sin (rotate_half), the
// tables [S, D] broadcast over the batch and heads. The sum runs on each
// half, with the halves of x and of the tables; the negation stays on its
// half; a cat joins the two halves of the result (rounded to bf16 on each
// half), and nothing reads the first cat any more.

// CHECK-LABEL: train.step @rope(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x3x4x8xbf16>
// CHECK-SAME: %[[COS:[^:]+]]: tensor<4x8xf32>
// CHECK-SAME: %[[SIN:[^:]+]]: tensor<4x8xf32>
// CHECK: %[[X1:.+]] = train.slice %[[X]] {dim = 3 : i64, end = 4 : i64, start = 0 : i64}
// CHECK: %[[X2:.+]] = train.slice %[[X]] {dim = 3 : i64, end = 9223372036854775807 : i64, start = 4 : i64}
// CHECK: %[[N:.+]] = train.neg %[[X2]]
// CHECK: %[[SIN1:.+]] = train.slice %[[SIN]] {dim = 1 : i64, end = 4 : i64, start = 0 : i64}
// CHECK: %[[R1:.+]] = train.mul %[[N]], %[[SIN1]] : tensor<2x3x4x4xbf16>, tensor<4x4xf32> -> tensor<2x3x4x4xf32>
// CHECK: %[[SIN2:.+]] = train.slice %[[SIN]] {dim = 1 : i64, end = 8 : i64, start = 4 : i64}
// CHECK: %[[R2:.+]] = train.mul %[[X1]], %[[SIN2]] : tensor<2x3x4x4xbf16>, tensor<4x4xf32> -> tensor<2x3x4x4xf32>
// CHECK: %[[XA:.+]] = train.slice %[[X]] {dim = 3 : i64, end = 4 : i64, start = 0 : i64}
// CHECK: %[[COS1:.+]] = train.slice %[[COS]] {dim = 1 : i64, end = 4 : i64, start = 0 : i64}
// CHECK: %[[C1:.+]] = train.mul %[[XA]], %[[COS1]]
// CHECK: %[[S1:.+]] = train.add %[[C1]], %[[R1]] : tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32> -> tensor<2x3x4x4xf32>
// CHECK: %[[XB:.+]] = train.slice %[[X]] {dim = 3 : i64, end = 8 : i64, start = 4 : i64}
// CHECK: %[[COS2:.+]] = train.slice %[[COS]] {dim = 1 : i64, end = 8 : i64, start = 4 : i64}
// CHECK: %[[C2:.+]] = train.mul %[[XB]], %[[COS2]]
// CHECK: %[[S2:.+]] = train.add %[[C2]], %[[R2]] : tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32> -> tensor<2x3x4x4xf32>
// CHECK: %[[B1:.+]] = train.cast %[[S1]] : tensor<2x3x4x4xf32> to tensor<2x3x4x4xbf16>
// CHECK: %[[B2:.+]] = train.cast %[[S2]] : tensor<2x3x4x4xf32> to tensor<2x3x4x4xbf16>
// CHECK: %[[Y:.+]] = train.cat %[[B1]], %[[B2]] {dim = 3 : i64} : tensor<2x3x4x4xbf16>, tensor<2x3x4x4xbf16> -> tensor<2x3x4x8xbf16>
// CHECK-NOT: train.cat
// CHECK: train.return %{{.*}}, %[[Y]]
train.step @rope(%x: tensor<2x3x4x8xbf16> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 3, 4, 8], dtype = bf16>},
                 %cos: tensor<4x8xf32> {train.tensor = #train.tensor<buffer, fqn = "cos", module = "", shape = [4, 8], dtype = f32>},
                 %sin: tensor<4x8xf32> {train.tensor = #train.tensor<buffer, fqn = "sin", module = "", shape = [4, 8], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<2x3x4x8xbf16> {train.result = #train.result<user_output>}) {
  %x1 = train.slice %x {dim = 3 : i64, end = 4 : i64, start = 0 : i64} : tensor<2x3x4x8xbf16> -> tensor<2x3x4x4xbf16>
  %x2 = train.slice %x {dim = 3 : i64, end = 9223372036854775807 : i64, start = 4 : i64} : tensor<2x3x4x8xbf16> -> tensor<2x3x4x4xbf16>
  %n = train.neg %x2 : tensor<2x3x4x4xbf16> -> tensor<2x3x4x4xbf16>
  %r = train.cat %n, %x1 {dim = 3 : i64} : tensor<2x3x4x4xbf16>, tensor<2x3x4x4xbf16> -> tensor<2x3x4x8xbf16>
  %c = train.mul %x, %cos : tensor<2x3x4x8xbf16>, tensor<4x8xf32> -> tensor<2x3x4x8xf32>
  %s = train.mul %r, %sin : tensor<2x3x4x8xbf16>, tensor<4x8xf32> -> tensor<2x3x4x8xf32>
  %y = train.add %c, %s : tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32> -> tensor<2x3x4x8xf32>
  %b = train.cast %y : tensor<2x3x4x8xf32> to tensor<2x3x4x8xbf16>
  %l = train.full {value = 0 : i64} : tensor<f32>
  train.return %l, %b : tensor<f32>, tensor<2x3x4x8xbf16>
}

// -----

// Left alone: a cat that something else reads too (the product would only
// add work), a cat of lower rank than the op that reads it (broadcast over
// the op's first dimension), and slices of an elementwise op that overlap
// (they would compute elements twice), even where they take fewer elements
// than it has.

// CHECK-LABEL: train.step @kept(
// CHECK-COUNT-2: train.cat
// CHECK: %[[E:.+]] = train.exp %{{.+}} : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK: train.slice %[[E]] {dim = 1 : i64, end = 6 : i64, start = 0 : i64}
// CHECK: train.slice %[[E]] {dim = 1 : i64, end = 8 : i64, start = 2 : i64}
// CHECK: %[[F:.+]] = train.tanh %{{.+}} : tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK: train.slice %[[F]] {dim = 1 : i64, end = 3 : i64, start = 0 : i64}
// CHECK: train.slice %[[F]] {dim = 1 : i64, end = 5 : i64, start = 2 : i64}
train.step @kept(%a: tensor<4x4xf32> {train.tensor = #train.tensor<user_input, fqn = "a", module = "", shape = [4, 4], dtype = f32>},
                 %b: tensor<4x4xf32> {train.tensor = #train.tensor<user_input, fqn = "b", module = "", shape = [4, 4], dtype = f32>},
                 %c: tensor<4xf32> {train.tensor = #train.tensor<user_input, fqn = "c", module = "", shape = [4], dtype = f32>},
                 %d: tensor<4x8xf32> {train.tensor = #train.tensor<user_input, fqn = "d", module = "", shape = [4, 8], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<4x8xf32> {train.result = #train.result<user_output>},
        tensor<4x8xf32> {train.result = #train.result<user_output>},
        tensor<4x8xf32> {train.result = #train.result<user_output>},
        tensor<4x6xf32> {train.result = #train.result<user_output>},
        tensor<4x6xf32> {train.result = #train.result<user_output>},
        tensor<4x3xf32> {train.result = #train.result<user_output>},
        tensor<4x3xf32> {train.result = #train.result<user_output>}) {
  %k = train.cat %a, %b {dim = 1 : i64} : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x8xf32>
  %m = train.mul %k, %d : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %r = train.cat %c, %c {dim = 0 : i64} : tensor<4xf32>, tensor<4xf32> -> tensor<8xf32>
  %w = train.mul %d, %r : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %e = train.exp %d : tensor<4x8xf32> -> tensor<4x8xf32>
  %s1 = train.slice %e {dim = 1 : i64, end = 6 : i64, start = 0 : i64} : tensor<4x8xf32> -> tensor<4x6xf32>
  %s2 = train.slice %e {dim = 1 : i64, end = 8 : i64, start = 2 : i64} : tensor<4x8xf32> -> tensor<4x6xf32>
  %f = train.tanh %d : tensor<4x8xf32> -> tensor<4x8xf32>
  %t1 = train.slice %f {dim = 1 : i64, end = 3 : i64, start = 0 : i64} : tensor<4x8xf32> -> tensor<4x3xf32>
  %t2 = train.slice %f {dim = 1 : i64, end = 5 : i64, start = 2 : i64} : tensor<4x8xf32> -> tensor<4x3xf32>
  %l = train.full {value = 0 : i64} : tensor<f32>
  train.return %l, %k, %m, %w, %s1, %s2, %t1, %t2 : tensor<f32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x6xf32>, tensor<4x6xf32>, tensor<4x3xf32>, tensor<4x3xf32>
}

// -----

// RoPE's backward as mantissa-add-into-slices leaves it: the gradient g
// times cos, with g's rotated halves times sin added into its halves
// (slice_scatter), then in the projections' layout (permute, view) rounded
// to bf16 for the input's gradient and, transposed, the weight's. Each
// scatter is a cat of the parts it keeps and the part it writes; the
// slices then go through the product with cos and the cat, so that each
// half of the result is one chain of elementwise ops on the halves of g,
// cos and sin; the two roundings, of views of one tensor, are one rounding
// of it, moved above the views, and then one per half: the f32 result is
// never whole, and the views move bf16.

// CHECK-LABEL: train.step @rope_backward(
// CHECK-SAME: %[[G:[^:]+]]: tensor<2x3x4x8xbf16>
// CHECK-SAME: %[[COS:[^:]+]]: tensor<4x8xf32>
// CHECK-SAME: %[[SIN:[^:]+]]: tensor<4x8xf32>
// CHECK: %[[A:.+]] = train.mul %{{.+}}, %{{.+}} : tensor<2x3x4x4xbf16>, tensor<4x4xf32> -> tensor<2x3x4x4xf32>
// CHECK: %[[B:.+]] = train.mul %{{.+}}, %{{.+}} : tensor<2x3x4x4xbf16>, tensor<4x4xf32> -> tensor<2x3x4x4xf32>
// CHECK: %[[N:.+]] = train.neg %[[A]]
// CHECK: %[[G2:.+]] = train.slice %[[G]] {dim = 3 : i64, end = 8 : i64, start = 4 : i64}
// CHECK: %[[COS2:.+]] = train.slice %[[COS]] {dim = 1 : i64, end = 8 : i64, start = 4 : i64}
// CHECK: %[[C2:.+]] = train.mul %[[G2]], %[[COS2]]
// CHECK: %[[H2:.+]] = train.add %[[C2]], %[[N]]
// CHECK: %[[G1:.+]] = train.slice %[[G]] {dim = 3 : i64, end = 4 : i64, start = 0 : i64}
// CHECK: %[[COS1:.+]] = train.slice %[[COS]] {dim = 1 : i64, end = 4 : i64, start = 0 : i64}
// CHECK: %[[C1:.+]] = train.mul %[[G1]], %[[COS1]]
// CHECK: %[[H1:.+]] = train.add %[[C1]], %[[B]]
// CHECK: %[[R1:.+]] = train.cast %[[H1]] : tensor<2x3x4x4xf32> to tensor<2x3x4x4xbf16>
// CHECK: %[[R2:.+]] = train.cast %[[H2]] : tensor<2x3x4x4xf32> to tensor<2x3x4x4xbf16>
// CHECK: %[[Y:.+]] = train.cat %[[R1]], %[[R2]] {dim = 3 : i64} : tensor<2x3x4x4xbf16>, tensor<2x3x4x4xbf16> -> tensor<2x3x4x8xbf16>
// CHECK: %[[P:.+]] = train.permute %[[Y]] {dims = array<i64: 0, 2, 1, 3>} : tensor<2x3x4x8xbf16> -> tensor<2x4x3x8xbf16>
// CHECK: %[[M:.+]] = train.view %[[P]] : tensor<2x4x3x8xbf16> -> tensor<8x24xbf16>
// CHECK: %[[MT:.+]] = train.permute %[[M]] {dims = array<i64: 1, 0>} : tensor<8x24xbf16> -> tensor<24x8xbf16>
// CHECK-NOT: train.cast
// CHECK-NOT: train.slice_scatter
// CHECK-NOT: train.cat
// CHECK: train.return %{{.*}}, %[[MT]], %[[M]]
train.step @rope_backward(%g: tensor<2x3x4x8xbf16> {train.tensor = #train.tensor<user_input, fqn = "g", module = "", shape = [2, 3, 4, 8], dtype = bf16>},
                 %cos: tensor<4x8xf32> {train.tensor = #train.tensor<buffer, fqn = "cos", module = "", shape = [4, 8], dtype = f32>},
                 %sin: tensor<4x8xf32> {train.tensor = #train.tensor<buffer, fqn = "sin", module = "", shape = [4, 8], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<24x8xbf16> {train.result = #train.result<user_output>},
        tensor<8x24xbf16> {train.result = #train.result<user_output>}) {
  %c = train.mul %g, %cos : tensor<2x3x4x8xbf16>, tensor<4x8xf32> -> tensor<2x3x4x8xf32>
  %g1 = train.slice %g {dim = 3 : i64, end = 4 : i64, start = 0 : i64} : tensor<2x3x4x8xbf16> -> tensor<2x3x4x4xbf16>
  %s1 = train.slice %sin {dim = 1 : i64, end = 4 : i64, start = 0 : i64} : tensor<4x8xf32> -> tensor<4x4xf32>
  %a = train.mul %g1, %s1 : tensor<2x3x4x4xbf16>, tensor<4x4xf32> -> tensor<2x3x4x4xf32>
  %g2 = train.slice %g {dim = 3 : i64, end = 8 : i64, start = 4 : i64} : tensor<2x3x4x8xbf16> -> tensor<2x3x4x4xbf16>
  %s2 = train.slice %sin {dim = 1 : i64, end = 8 : i64, start = 4 : i64} : tensor<4x8xf32> -> tensor<4x4xf32>
  %b = train.mul %g2, %s2 : tensor<2x3x4x4xbf16>, tensor<4x4xf32> -> tensor<2x3x4x4xf32>
  %n = train.neg %a : tensor<2x3x4x4xf32> -> tensor<2x3x4x4xf32>
  %t = train.slice %c {dim = 3 : i64, end = 9223372036854775807 : i64, start = 4 : i64} : tensor<2x3x4x8xf32> -> tensor<2x3x4x4xf32>
  %u = train.add %t, %n : tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32> -> tensor<2x3x4x4xf32>
  %y = train.slice_scatter %c, %u {dim = 3 : i64, end = 9223372036854775807 : i64, start = 4 : i64} : tensor<2x3x4x8xf32>, tensor<2x3x4x4xf32> -> tensor<2x3x4x8xf32>
  %v = train.slice %y {dim = 3 : i64, end = 4 : i64, start = 0 : i64} : tensor<2x3x4x8xf32> -> tensor<2x3x4x4xf32>
  %w = train.add %v, %b : tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32> -> tensor<2x3x4x4xf32>
  %z = train.slice_scatter %y, %w {dim = 3 : i64, end = 4 : i64, start = 0 : i64} : tensor<2x3x4x8xf32>, tensor<2x3x4x4xf32> -> tensor<2x3x4x8xf32>
  %p = train.permute %z {dims = array<i64: 0, 2, 1, 3>} : tensor<2x3x4x8xf32> -> tensor<2x4x3x8xf32>
  %m = train.view %p : tensor<2x4x3x8xf32> -> tensor<8x24xf32>
  %mt = train.permute %m {dims = array<i64: 1, 0>} : tensor<8x24xf32> -> tensor<24x8xf32>
  %r1 = train.cast %mt : tensor<24x8xf32> to tensor<24x8xbf16>
  %r2 = train.cast %m : tensor<8x24xf32> to tensor<8x24xbf16>
  %l = train.full {value = 0 : i64} : tensor<f32>
  train.return %l, %r1, %r2 : tensor<f32>, tensor<24x8xbf16>, tensor<8x24xbf16>
}

// -----

// Left alone: a scatter into a tensor that something other than a slice
// also reads (its parts would be computed twice), and a rounding of a view
// whose tensor is also read in fp32.

// CHECK-LABEL: train.step @kept(
// CHECK: %[[C:.+]] = train.exp
// CHECK: %[[Y:.+]] = train.slice_scatter %[[C]]
// CHECK: %[[T:.+]] = train.permute %[[Y]] {{.*}} -> tensor<8x2xf32>
// CHECK: %[[R:.+]] = train.cast %[[T]] : tensor<8x2xf32> to tensor<8x2xbf16>
// CHECK: train.return %{{.*}}, %[[C]], %[[Y]], %[[R]], %[[T]]
train.step @kept(%g: tensor<2x8xf32> {train.tensor = #train.tensor<user_input, fqn = "g", module = "", shape = [2, 8], dtype = f32>},
                 %u: tensor<2x4xf32> {train.tensor = #train.tensor<user_input, fqn = "u", module = "", shape = [2, 4], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<2x8xf32> {train.result = #train.result<user_output>},
        tensor<2x8xf32> {train.result = #train.result<user_output>},
        tensor<8x2xbf16> {train.result = #train.result<user_output>},
        tensor<8x2xf32> {train.result = #train.result<user_output>}) {
  %c = train.exp %g : tensor<2x8xf32> -> tensor<2x8xf32>
  %y = train.slice_scatter %c, %u {dim = 1 : i64, end = 8 : i64, start = 4 : i64} : tensor<2x8xf32>, tensor<2x4xf32> -> tensor<2x8xf32>
  %t = train.permute %y {dims = array<i64: 1, 0>} : tensor<2x8xf32> -> tensor<8x2xf32>
  %r = train.cast %t : tensor<8x2xf32> to tensor<8x2xbf16>
  %l = train.full {value = 0 : i64} : tensor<f32>
  train.return %l, %c, %y, %r, %t : tensor<f32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<8x2xbf16>, tensor<8x2xf32>
}

// -----

// Left alone: a widening through a view (moved above the view, it would
// make the view move wider elements).

// CHECK-LABEL: train.step @widened(
// CHECK: %[[E:.+]] = train.exp
// CHECK: %[[T:.+]] = train.permute %[[E]] {{.*}} -> tensor<8x2xbf16>
// CHECK: %[[W:.+]] = train.cast %[[T]] : tensor<8x2xbf16> to tensor<8x2xf32>
// CHECK: train.return %{{.*}}, %[[W]]
train.step @widened(%g: tensor<2x8xbf16> {train.tensor = #train.tensor<user_input, fqn = "g", module = "", shape = [2, 8], dtype = bf16>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<8x2xf32> {train.result = #train.result<user_output>}) {
  %e = train.exp %g : tensor<2x8xbf16> -> tensor<2x8xbf16>
  %t = train.permute %e {dims = array<i64: 1, 0>} : tensor<2x8xbf16> -> tensor<8x2xbf16>
  %w = train.cast %t : tensor<8x2xbf16> to tensor<8x2xf32>
  %l = train.full {value = 0 : i64} : tensor<f32>
  train.return %l, %w : tensor<f32>, tensor<8x2xf32>
}
