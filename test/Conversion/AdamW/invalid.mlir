// RUN: mantissa-opt %s -split-input-file -verify-diagnostics

func.func @f(%g: memref<64xi8>, %p: memref<64xi8>, %m: memref<64xi8>, %e1: memref<64xi8>, %e2: memref<64xi8>, %mx: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{'train.adamw_update' op has no members}}
  train.adamw_update members []
    grad(%g : memref<64xi8>) param(%p : memref<64xi8>)
    exp_avg(%e1 : memref<64xi8>) exp_avg_sq(%e2 : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %p: memref<64xi8>, %m: memref<64xi8>, %e1: memref<64xi8>, %e2: memref<64xi8>, %mx: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{'train.adamw_update' op member 'w' has 0 elements; a member needs at least one}}
  train.adamw_update members ["w" 0 {grad = fp32 at 0, param = fp32 at 0, moments = fp32 at 0}]
    grad(%g : memref<64xi8>) param(%p : memref<64xi8>)
    exp_avg(%e1 : memref<64xi8>) exp_avg_sq(%e2 : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %p: memref<64xi8>, %m: memref<64xi8>, %e1: memref<64xi8>, %e2: memref<64xi8>, %mx: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{'train.adamw_update' op member 'w' has grad offset 8, which is not a non-negative multiple of 16 bytes}}
  train.adamw_update members ["w" 4 {grad = fp32 at 8, param = fp32 at 0, moments = fp32 at 0}]
    grad(%g : memref<64xi8>) param(%p : memref<64xi8>)
    exp_avg(%e1 : memref<64xi8>) exp_avg_sq(%e2 : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %p: memref<64xi8>, %m: memref<64xi8>, %e1: memref<64xi8>, %e2: memref<64xi8>, %mx: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{'train.adamw_update' op member 'w' keeps its moments in bf16 but has no master: without a master the optimizer state is in the parameter's dtype (fp32)}}
  train.adamw_update members ["w" 4 {grad = fp32 at 0, param = fp32 at 0, moments = bf16 at 0}]
    grad(%g : memref<64xi8>) param(%p : memref<64xi8>)
    exp_avg(%e1 : memref<64xi8>) exp_avg_sq(%e2 : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %p: memref<64xi8>, %m: memref<64xi8>, %e1: memref<64xi8>, %e2: memref<64xi8>, %mx: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{'train.adamw_update' op member 'w' has a bf16 parameter without master and a fp32 gradient; they must match}}
  train.adamw_update members ["w" 4 {grad = fp32 at 0, param = bf16 at 0, moments = bf16 at 0}]
    grad(%g : memref<64xi8>) param(%p : memref<64xi8>)
    exp_avg(%e1 : memref<64xi8>) exp_avg_sq(%e2 : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %p: memref<64xi8>, %m: memref<64xi8>, %e1: memref<64xi8>, %e2: memref<64xi8>, %mx: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{'train.adamw_update' op member 'w' has an fp32 master for an fp32 parameter; an fp32 parameter is its own master}}
  train.adamw_update members ["w" 4 {grad = fp32 at 0, param = fp32 at 0, master = fp32 at 0, moments = fp32 at 0}]
    grad(%g : memref<64xi8>) param(%p : memref<64xi8>) master(%m : memref<64xi8>)
    exp_avg(%e1 : memref<64xi8>) exp_avg_sq(%e2 : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %p: memref<64xi8>, %m: memref<64xi8>, %e1: memref<64xi8>, %e2: memref<64xi8>, %mx: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{'train.adamw_update' op member 'w' has an fp32 master but bf16 moments; the moments of a master are fp32}}
  train.adamw_update members ["w" 4 {grad = bf16 at 0, param = bf16 at 0, master = fp32 at 0, moments = bf16 at 0}]
    grad(%g : memref<64xi8>) param(%p : memref<64xi8>) master(%m : memref<64xi8>)
    exp_avg(%e1 : memref<64xi8>) exp_avg_sq(%e2 : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %p: memref<64xi8>, %m: memref<64xi8>, %e1: memref<64xi8>, %e2: memref<64xi8>, %mx: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{'train.adamw_update' op member 'w' has a remainder master but a fp16 parameter; remainders complete bf16 parameters}}
  train.adamw_update members ["w" 4 {grad = fp16 at 0, param = fp16 at 0, master = remainder at 0, moments = fp32 at 0}]
    grad(%g : memref<64xi8>) param(%p : memref<64xi8>) master(%m : memref<64xi8>)
    exp_avg(%e1 : memref<64xi8>) exp_avg_sq(%e2 : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %p: memref<64xi8>, %m: memref<64xi8>, %e1: memref<64xi8>, %e2: memref<64xi8>, %mx: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{'train.adamw_update' op member 'w' has a remainder master but bf16 moments; the moments of a master are fp32}}
  train.adamw_update members ["w" 4 {grad = bf16 at 0, param = bf16 at 0, master = remainder at 0, moments = bf16 at 0}]
    grad(%g : memref<64xi8>) param(%p : memref<64xi8>) master(%m : memref<64xi8>)
    exp_avg(%e1 : memref<64xi8>) exp_avg_sq(%e2 : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %p: memref<64xi8>, %m: memref<64xi8>, %e1: memref<64xi8>, %e2: memref<64xi8>, %mx: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{'train.adamw_update' op has members with masters but no master buffer}}
  train.adamw_update members ["w" 4 {grad = bf16 at 0, param = bf16 at 0, master = fp32 at 0, moments = fp32 at 0}]
    grad(%g : memref<64xi8>) param(%p : memref<64xi8>)
    exp_avg(%e1 : memref<64xi8>) exp_avg_sq(%e2 : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %p: memref<64xi8>, %m: memref<64xi8>, %e1: memref<64xi8>, %e2: memref<64xi8>, %mx: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{'train.adamw_update' op has a master buffer but no member has a master}}
  train.adamw_update members ["w" 4 {grad = fp32 at 0, param = fp32 at 0, moments = fp32 at 0}]
    grad(%g : memref<64xi8>) param(%p : memref<64xi8>) master(%m : memref<64xi8>)
    exp_avg(%e1 : memref<64xi8>) exp_avg_sq(%e2 : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %p: memref<64xi8>, %m: memref<64xi8>, %e1: memref<64xi8>, %e2: memref<64xi8>, %mx: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{'train.adamw_update' op with amsgrad needs a max_exp_avg_sq buffer}}
  train.adamw_update amsgrad members ["w" 4 {grad = fp32 at 0, param = fp32 at 0, moments = fp32 at 0}]
    grad(%g : memref<64xi8>) param(%p : memref<64xi8>)
    exp_avg(%e1 : memref<64xi8>) exp_avg_sq(%e2 : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %p: memref<64xi8>, %m: memref<64xi8>, %e1: memref<64xi8>, %e2: memref<64xi8>, %mx: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{'train.adamw_update' op has a max_exp_avg_sq buffer but amsgrad is not set}}
  train.adamw_update members ["w" 4 {grad = fp32 at 0, param = fp32 at 0, moments = fp32 at 0}]
    grad(%g : memref<64xi8>) param(%p : memref<64xi8>)
    exp_avg(%e1 : memref<64xi8>) exp_avg_sq(%e2 : memref<64xi8>) max_exp_avg_sq(%mx : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %p: memref<64xi8>, %m: memref<64xi8>, %e1: memref<64xi8>, %e2: memref<64xi8>, %mx: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{'train.adamw_update' op member 'w' needs grad bytes [0, 80) but the grad buffer has 64 bytes}}
  train.adamw_update members ["w" 20 {grad = fp32 at 0, param = fp32 at 0, moments = fp32 at 0}]
    grad(%g : memref<64xi8>) param(%p : memref<64xi8>)
    exp_avg(%e1 : memref<64xi8>) exp_avg_sq(%e2 : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %p: memref<64xi8>, %m: memref<64xi8>, %e1: memref<64xi8>, %e2: memref<64xi8>, %mx: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{'train.adamw_update' op members 'a' and 'b' overlap in the grad buffer (bytes [0, 32) and [16, 48))}}
  train.adamw_update members ["a" 8 {grad = fp32 at 0, param = fp32 at 0, moments = fp32 at 0}, "b" 8 {grad = fp32 at 16, param = fp32 at 32, moments = fp32 at 32}]
    grad(%g : memref<64xi8>) param(%p : memref<64xi8>)
    exp_avg(%e1 : memref<64xi8>) exp_avg_sq(%e2 : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{expected 'grad', 'param', 'master' or 'moments', got 'momentz'}}
  train.adamw_update members ["w" 4 {grad = fp32 at 0, param = fp32 at 0, momentz = fp32 at 0}]
    grad(%g : memref<64xi8>) param(%g : memref<64xi8>) exp_avg(%g : memref<64xi8>) exp_avg_sq(%g : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{member 'w' needs 'grad', 'param' and 'moments'}}
  train.adamw_update members ["w" 4 {grad = fp32 at 0, param = fp32 at 0}]
    grad(%g : memref<64xi8>) param(%g : memref<64xi8>) exp_avg(%g : memref<64xi8>) exp_avg_sq(%g : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{expected master 'fp32' or 'remainder', got 'bf16'}}
  train.adamw_update members ["w" 4 {grad = bf16 at 0, param = bf16 at 0, master = bf16 at 0, moments = fp32 at 0}]
    grad(%g : memref<64xi8>) param(%g : memref<64xi8>) exp_avg(%g : memref<64xi8>) exp_avg_sq(%g : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{'grad' given twice}}
  train.adamw_update members ["w" 4 {grad = bf16 at 0, grad = bf16 at 0, param = bf16 at 0, moments = bf16 at 0}]
    grad(%g : memref<64xi8>) param(%g : memref<64xi8>) exp_avg(%g : memref<64xi8>) exp_avg_sq(%g : memref<64xi8>)
    lr(%s) beta1(%s) beta2(%s) eps(%s) weight_decay(%s) step(%step)
  return
}

// -----

func.func @f(%g: memref<64xi8>, %s: f64, %step: i64, %i: index) {
  // expected-error @+1 {{'train.adamw_update' op needs both the part and the number of parts}}
  "train.adamw_update"(%g, %g, %g, %g, %s, %s, %s, %s, %s, %step, %i) <{members = [{name = "w", count = 4 : i64, grad = #train.dtype<fp32>, grad_offset = 0 : i64, param = #train.dtype<fp32>, param_offset = 0 : i64, moments = #train.dtype<fp32>, moments_offset = 0 : i64}], operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 1, 0>}> : (memref<64xi8>, memref<64xi8>, memref<64xi8>, memref<64xi8>, f64, f64, f64, f64, f64, i64, index) -> ()
  return
}

// -----

func.func @f(%g: memref<64xi8>, %s: f64, %step: i64) {
  // expected-error @+1 {{'train.adamw_update' op member #0 has no integer 'count'}}
  "train.adamw_update"(%g, %g, %g, %g, %s, %s, %s, %s, %s, %step) <{members = [{name = "w", grad = #train.dtype<fp32>, grad_offset = 0 : i64, param = #train.dtype<fp32>, param_offset = 0 : i64, moments = #train.dtype<fp32>, moments_offset = 0 : i64}], operandSegmentSizes = array<i32: 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0>}> : (memref<64xi8>, memref<64xi8>, memref<64xi8>, memref<64xi8>, f64, f64, f64, f64, f64, i64) -> ()
  return
}
