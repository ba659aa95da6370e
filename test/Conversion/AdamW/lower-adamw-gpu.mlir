// RUN: mantissa-opt %s -split-input-file --mantissa-lower-adamw=target=gpu -verify-diagnostics | FileCheck %s

// One kernel per group, with a fixed signature: the op's buffers, then the
// step's seven fp32 scalars (computed on the host in f64). Each thread
// updates 8 elements with 128-bit accesses through vector-element views.
// CHECK: module attributes {gpu.container_module}
// CHECK-LABEL: func.func @group
// CHECK-NOT: train.adamw_update
// CHECK: math.powf
// CHECK: gpu.launch_func @group_kernels::@group_kernel blocks in (%{{.+}}, %{{.+}}, %{{.+}}) threads in (%{{.+}}, %{{.+}}, %{{.+}}) args(%{{.+}} : memref<32816xi8>, %{{.+}} : memref<32816xi8>, %{{.+}} : memref<16400xi8>, %{{.+}} : memref<32816xi8>, %{{.+}} : memref<32816xi8>, %{{.+}} : f32, %{{.+}} : f32, %{{.+}} : f32, %{{.+}} : f32, %{{.+}} : f32, %{{.+}} : f32, %{{.+}} : f32)
// CHECK: gpu.module @group_kernels
// CHECK: gpu.func @group_kernel(%{{.+}}: memref<32816xi8>, %{{.+}}: memref<32816xi8>, %{{.+}}: memref<16400xi8>, %{{.+}}: memref<32816xi8>, %{{.+}}: memref<32816xi8>, %{{.+}}: f32, %{{.+}}: f32, %{{.+}}: f32, %{{.+}}: f32, %{{.+}}: f32, %{{.+}}: f32, %{{.+}}: f32) kernel
// CHECK-SAME: known_block_size = array<i32: 256, 1, 1>
// CHECK-DAG: memref.view %{{.+}} : memref<32816xi8> to memref<?xvector<4xf32>>
// CHECK-DAG: memref.view %{{.+}} : memref<32816xi8> to memref<?xvector<8xbf16>>
// CHECK-DAG: memref.assume_alignment %{{.+}}, 16 : memref<?xvector<4xf32>>
// CHECK-DAG: gpu.thread_id x
// CHECK-DAG: gpu.block_id x
// CHECK-DAG: gpu.grid_dim x
// CHECK: scf.for
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

func.func @sliced(%b: memref<64xi8>, %s: f64, %step: i64, %part: index, %parts: index) {
  // expected-error @+1 {{'train.adamw_update' op with a slice cannot be lowered for the GPU; the kernel updates the whole group}}
  train.adamw_update members ["w" 4 {grad = fp32 at 0, param = fp32 at 0, moments = fp32 at 0}]
    grad(%b : memref<64xi8>) param(%b : memref<64xi8>) exp_avg(%b : memref<64xi8>) exp_avg_sq(%b : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step) slice(%part, %parts)
  return
}
