// RUN: mantissa-opt %s -canonicalize -split-input-file | FileCheck %s
// RUN: mantissa-opt %s -cse -split-input-file | FileCheck %s --check-prefix=CSE

// Folds of train.cast: no-op casts vanish, exact round trips vanish, chains
// through a wider type shorten, and rounding chains stay.

// CHECK-LABEL: train.step @casts
// CHECK-SAME: (%[[F32:[^:]+]]: tensor<4xf32>
// CHECK-SAME: %[[BF16:[^:]+]]: tensor<4xbf16>
// CHECK-SAME: %[[F16:[^:]+]]: tensor<4xf16>
// CHECK-SAME: %[[BOOL:[^:]+]]: tensor<4xi1>
train.step @casts(
    %f32: tensor<4xf32> {train.tensor = #train.tensor<user_input, fqn = "f32", module = "", shape = [4], dtype = f32>},
    %bf16: tensor<4xbf16> {train.tensor = #train.tensor<user_input, fqn = "bf16", module = "", shape = [4], dtype = bf16>},
    %f16: tensor<4xf16> {train.tensor = #train.tensor<user_input, fqn = "f16", module = "", shape = [4], dtype = f16>},
    %bool: tensor<4xi1> {train.tensor = #train.tensor<user_input, fqn = "bool", module = "", shape = [4], dtype = i1>},
    %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<4xf32> {train.result = #train.result<user_output>},
        tensor<4xbf16> {train.result = #train.result<user_output>},
        tensor<4xf16> {train.result = #train.result<user_output>},
        tensor<4xf32> {train.result = #train.result<user_output>},
        tensor<4xf16> {train.result = #train.result<user_output>},
        tensor<4xf32> {train.result = #train.result<user_output>}) {
  // A cast to the same type is the input.
  %same = train.cast %f32 : tensor<4xf32> to tensor<4xf32>
  // bf16 -> fp32 -> bf16 is exact: the input.
  %up = train.cast %bf16 : tensor<4xbf16> to tensor<4xf32>
  %back = train.cast %up : tensor<4xf32> to tensor<4xbf16>
  // fp16 -> fp32 -> bf16 becomes fp16 -> bf16: the fp32 step is exact.
  %h = train.cast %f16 : tensor<4xf16> to tensor<4xf32>
  %hb = train.cast %h : tensor<4xf32> to tensor<4xbf16>
  %hbf = train.cast %hb : tensor<4xbf16> to tensor<4xf32>
  // fp32 -> bf16 -> fp16 rounds twice and must stay a chain.
  %r1 = train.cast %f32 : tensor<4xf32> to tensor<4xbf16>
  %r2 = train.cast %r1 : tensor<4xbf16> to tensor<4xf16>
  // bool -> fp16 -> fp32 is exact: becomes bool -> fp32.
  %b1 = train.cast %bool : tensor<4xi1> to tensor<4xf16>
  %b2 = train.cast %b1 : tensor<4xf16> to tensor<4xf32>
  train.return %loss, %same, %back, %r2, %hbf, %r2, %b2 : tensor<f32>, tensor<4xf32>, tensor<4xbf16>, tensor<4xf16>, tensor<4xf32>, tensor<4xf16>, tensor<4xf32>
}
// CHECK-DAG: %[[HB:.+]] = train.cast %[[F16]] : tensor<4xf16> to tensor<4xbf16>
// CHECK-DAG: %[[HBF:.+]] = train.cast %[[HB]] : tensor<4xbf16> to tensor<4xf32>
// CHECK-DAG: %[[R1:.+]] = train.cast %[[F32]] : tensor<4xf32> to tensor<4xbf16>
// CHECK-DAG: %[[R2:.+]] = train.cast %[[R1]] : tensor<4xbf16> to tensor<4xf16>
// CHECK-DAG: %[[B2:.+]] = train.cast %[[BOOL]] : tensor<4xi1> to tensor<4xf32>
// CHECK-NOT: train.cast
// CHECK: train.return %{{.+}}, %[[F32]], %[[BF16]], %[[R2]], %[[HBF]], %[[R2]], %[[B2]]

// -----

// Identical casts of one value are one cast after CSE.

// CSE-LABEL: train.step @cse
// CSE: %[[C:.+]] = train.cast
// CSE-NOT: train.cast
// CSE: train.return %{{.+}}, %[[C]], %[[C]]
train.step @cse(%x: tensor<4xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [4], dtype = f32>},
                %loss: tensor<f32> {train.tensor = #train.tensor<user_input, fqn = "loss", module = "", shape = [], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<4xbf16> {train.result = #train.result<user_output>},
        tensor<4xbf16> {train.result = #train.result<user_output>}) {
  %a = train.cast %x : tensor<4xf32> to tensor<4xbf16>
  %b = train.cast %x : tensor<4xf32> to tensor<4xbf16>
  train.return %loss, %a, %b : tensor<f32>, tensor<4xbf16>, tensor<4xbf16>
}
