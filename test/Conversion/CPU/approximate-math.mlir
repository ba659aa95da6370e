// RUN: mantissa-opt %s --mantissa-approximate-math | FileCheck %s

// f32 sin and cos are computed in f64 by libm and rounded once: the
// polynomial approximations reduce large arguments (1e3 to 1e5 radians, a
// timestep sinusoid's or a rotary table's) in f32 and lose digits there.
// CHECK-LABEL: func.func @sin_cos
// CHECK-SAME: (%[[X:.*]]: f32, %[[V:.*]]: vector<8xf32>)
// CHECK: %[[W:.*]] = arith.extf %[[X]] : f32 to f64
// CHECK: %[[S:.*]] = math.sin %[[W]] : f64
// CHECK: arith.truncf %[[S]] : f64 to f32
// CHECK: %[[VW:.*]] = arith.extf %[[V]] : vector<8xf32> to vector<8xf64>
// CHECK: %[[C:.*]] = math.cos %[[VW]] : vector<8xf64>
// CHECK: arith.truncf %[[C]] : vector<8xf64> to vector<8xf32>
func.func @sin_cos(%x: f32, %v: vector<8xf32>) -> (f32, vector<8xf32>) {
  %s = math.sin %x : f32
  %c = math.cos %v : vector<8xf32>
  return %s, %c : f32, vector<8xf32>
}

// The other functions keep MLIR's polynomial approximations: no libm call.
// CHECK-LABEL: func.func @tanh_exp
// CHECK-NOT: math.tanh
// CHECK-NOT: math.exp
// CHECK: return
func.func @tanh_exp(%x: f32) -> (f32, f32) {
  %t = math.tanh %x : f32
  %e = math.exp %x : f32
  return %t, %e : f32, f32
}
