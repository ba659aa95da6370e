//===- TrainOps.td - Operations of the train dialect -------*- tablegen -*-===//
//
// Collects the dialect's operations; each concern lives in its own file.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINOPS_TD
#define MANTISSA_DIALECT_TRAIN_IR_TRAINOPS_TD

include "mantissa/Dialect/Train/IR/TrainStepOps.td"
include "mantissa/Dialect/Train/IR/TrainPrecisionOps.td"
include "mantissa/Dialect/Train/IR/TrainOptimizerOps.td"
include "mantissa/Dialect/Train/IR/TrainElementwiseOps.td"
include "mantissa/Dialect/Train/IR/TrainReductionOps.td"
include "mantissa/Dialect/Train/IR/TrainLinalgOps.td"
include "mantissa/Dialect/Train/IR/TrainShapeOps.td"
include "mantissa/Dialect/Train/IR/TrainIndexingOps.td"
include "mantissa/Dialect/Train/IR/TrainCreationOps.td"
include "mantissa/Dialect/Train/IR/TrainKernelOps.td"

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINOPS_TD
