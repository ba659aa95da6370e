//===- TrainOps.td - Operations of the train dialect -------*- tablegen -*-===//
//
// Collects the dialect's operations; each concern lives in its own file.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINOPS_TD
#define MANTISSA_DIALECT_TRAIN_IR_TRAINOPS_TD

include "mantissa/Dialect/Train/IR/TrainStepOps.td"
include "mantissa/Dialect/Train/IR/TrainPrecisionOps.td"

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINOPS_TD
