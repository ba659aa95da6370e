//===- TrainDialect.h - The train dialect -----------------------*- C++ -*-===//
//
// Declares the `train` dialect.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINDIALECT_H
#define MANTISSA_DIALECT_TRAIN_IR_TRAINDIALECT_H

#include "mlir/IR/Dialect.h"

#include "mantissa/Dialect/Train/IR/TrainOpsDialect.h.inc"

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINDIALECT_H
