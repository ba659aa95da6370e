//===- TrainOptimizerOps.td - Optimizer updates ------------*- tablegen -*-===//
//
// The fused optimizer updates of shard groups.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINOPTIMIZEROPS_TD
#define MANTISSA_DIALECT_TRAIN_IR_TRAINOPTIMIZEROPS_TD

include "mantissa/Dialect/Train/IR/TrainAttrs.td"

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINOPTIMIZEROPS_TD