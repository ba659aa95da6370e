// RUN: mantissa-opt %s -split-input-file --mantissa-lower-adamw=target=gpu -verify-diagnostics | FileCheck %s

// One kernel per group, with a fixed signature: the op's buffers, then the
// step's eight fp32 scalars (computed on the host in f64; the gradient scale
// last, 1.0 when the op has none), then the tile range it updates. The
// launch has one block per tile: two members of 4099 elements are 2 tiles
// of 4096 each. Each thread updates 8 elements with 128-bit accesses
// through vector-element views.
// CHECK: module attributes {gpu.container_module}
// CHECK-LABEL: func.func @group
// CHECK-NOT: train.adamw_update
// CHECK: math.powf
// CHECK-DAG: %[[FIRST:.+]] = arith.constant 0 : index
// CHECK-DAG: %[[END:.+]] = arith.constant 4 : index
// CHECK-DAG: %[[ONE:.+]] = arith.constant 1.000000e+00 : f32
// CHECK: %[[TILES:.+]] = arith.subi %[[END]], %[[FIRST]] : index
// CHECK: %[[BLOCKS:.+]] = arith.maxui %[[TILES]], %{{.+}} : index
// CHECK: gpu.launch_func @group_kernels::@group_kernel blocks in (%[[BLOCKS]], %{{.+}}, %{{.+}}) threads in (%{{.+}}, %{{.+}}, %{{.+}}) args(%{{.+}} : memref<32816xi8>, %{{.+}} : memref<32816xi8>, %{{.+}} : memref<16400xi8>, %{{.+}} : memref<32816xi8>, %{{.+}} : memref<32816xi8>, %{{.+}} : f32, %{{.+}} : f32, %{{.+}} : f32, %{{.+}} : f32, %{{.+}} : f32, %{{.+}} : f32, %{{.+}} : f32, %[[ONE]] : f32, %[[FIRST]] : index, %[[END]] : index)
// CHECK: gpu.module @group_kernels
// CHECK: gpu.func @group_kernel(%{{.+}}: memref<32816xi8>, %{{.+}}: memref<32816xi8>, %{{.+}}: memref<16400xi8>, %{{.+}}: memref<32816xi8>, %{{.+}}: memref<32816xi8>, %{{.+}}: f32, %{{.+}}: f32, %{{.+}}: f32, %{{.+}}: f32, %{{.+}}: f32, %{{.+}}: f32, %{{.+}}: f32, %{{.+}}: f32, %[[KFIRST:.+]]: index, %[[KEND:.+]]: index) kernel
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-DAG: memref.view %{{.+}} : memref<32816xi8> to memref<?xvector<4xf32>>
// CHECK-DAG: memref.view %{{.+}} : memref<32816xi8> to memref<?xvector<8xbf16>>
// CHECK-DAG: memref.assume_alignment %{{.+}}, 16 : memref<?xvector<4xf32>>
// CHECK-DAG: gpu.thread_id x
// CHECK-DAG: %[[BLOCK:.+]] = gpu.block_id x
// CHECK-DAG: %[[GRID:.+]] = gpu.grid_dim x
// The blocks stride over the tile range; a block walks its tile of 4096 in
// chunks of 256 * 8.
// CHECK: %[[START:.+]] = arith.addi %[[KFIRST]], %[[BLOCK]] : index
// CHECK: scf.for %{{.+}} = %[[START]] to %[[KEND]] step %[[GRID]]
// CHECK: scf.for %{{.+}} = %{{.+}} to %c4096{{.*}} step %c2048
// CHECK: memref.load %{{.+}} : memref<?xvector<4xf32>>
// CHECK: memref.load %{{.+}} : memref<?xvector<4xf32>>
// CHECK: vector.shuffle %{{.+}} [0, 1, 2, 3, 4, 5, 6, 7] : vector<4xf32>, vector<4xf32>
// CHECK: llvm.call_intrinsic "llvm.sqrt.v8f32"
// CHECK: vector.extract_strided_slice %{{.+}} {offsets = [4], sizes = [4], strides = [1]} : vector<8xf32> to vector<4xf32>
// CHECK: memref.store %{{.+}} : memref<?xvector<4xf32>>
// The end of a member: one element at a time.
// CHECK: memref.load %{{.+}} : memref<?xf32>
// CHECK: llvm.call_intrinsic "llvm.sqrt.f32"
// CHECK: memref.load %{{.+}} : memref<?xvector<8xbf16>>
// CHECK: gpu.return
func.func @group(%g: memref<32816xi8>, %p: memref<32816xi8>, %m: memref<16400xi8>,
                 %m1: memref<32816xi8>, %m2: memref<32816xi8>,
                 %lr: f64, %b1: f64, %b2: f64, %eps: f64, %wd: f64, %step: i64) {
  train.adamw_update members [
      "w" 4099 {grad = fp32 at 0, param = fp32 at 0, moments = fp32 at 0},
      "emb" 4099 {grad = bf16 at 16400, param = bf16 at 16400, master = fp32 at 0, moments = fp32 at 16400}]
    grad(%g : memref<32816xi8>) param(%p : memref<32816xi8>) master(%m : memref<16400xi8>)
    exp_avg(%m1 : memref<32816xi8>) exp_avg_sq(%m2 : memref<32816xi8>)
    lr(%lr) beta1(%b1) beta2(%b2) eps(%eps) weight_decay(%wd) step(%step)
  return
}

// -----

// A slice is a tile range on the GPU as on the CPU: tiles
// [part * T / parts, (part + 1) * T / parts) of T = 3 (4 elements and two
// tiles of 4096 + 1). The gradient scale reaches the kernel as its last
// scalar and multiplies each gradient as it is loaded.
// CHECK-LABEL: func.func @sliced
// CHECK-DAG: %[[T:.+]] = arith.constant 3 : index
// CHECK: %[[A:.+]] = arith.muli %[[PART:.+]], %[[T]] : index
// CHECK: %[[FIRST:.+]] = arith.divui %[[A]], %[[PARTS:.+]] : index
// CHECK: %[[NEXT:.+]] = arith.addi %[[PART]], %{{.+}} : index
// CHECK: %[[B:.+]] = arith.muli %[[NEXT]], %[[T]] : index
// CHECK: %[[END:.+]] = arith.divui %[[B]], %[[PARTS]] : index
// CHECK: gpu.launch_func @sliced_kernels::@sliced_kernel
// CHECK-SAME: %[[SCALE:[a-z0-9_]+]] : f32, %[[FIRST]] : index, %[[END]] : index)
// CHECK: gpu.func @sliced_kernel
// CHECK-SAME: %[[KSCALE:[a-z0-9_]+]]: f32, %{{.+}}: index, %{{.+}}: index) kernel
// CHECK: %[[G:.+]] = memref.load %{{.+}} : memref<?xvector<4xf32>>
// CHECK: arith.mulf %{{.+}}, %{{.+}} : vector<8xf32>
func.func @sliced(%b: memref<65600xi8>, %s: f64, %step: i64, %scale: f32, %part: index, %parts: index) {
  train.adamw_update members ["w" 4 {grad = fp32 at 0, param = fp32 at 0, moments = fp32 at 0},
                              "v" 4097 {grad = fp32 at 16, param = fp32 at 16, moments = fp32 at 16}]
    grad(%b : memref<65600xi8>) param(%b : memref<65600xi8>) exp_avg(%b : memref<65600xi8>) exp_avg_sq(%b : memref<65600xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step) grad_scale(%scale) slice(%part, %parts)
  return
}
