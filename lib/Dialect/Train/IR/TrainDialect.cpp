//===- TrainDialect.cpp - The train dialect -------------------------------===//
//
// Registers the operations and attributes of the `train` dialect.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mantissa/Dialect/Train/IR/TrainAttrs.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"

using namespace mlir;
using namespace mlir::mantissa::train;

#include "mantissa/Dialect/Train/IR/TrainOpsDialect.cpp.inc"

void TrainDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "mantissa/Dialect/Train/IR/TrainOps.cpp.inc"
      >();
}
