//===- TrainOps.h - Operations of the train dialect -------------*- C++ -*-===//
//
// Declares the operations of the `train` dialect.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINOPS_H
#define MANTISSA_DIALECT_TRAIN_IR_TRAINOPS_H

#include "mantissa/Dialect/Train/IR/TrainAttrs.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/RegionKindInterface.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::mantissa::train {

/// Parses and prints a `#train.dtype` attribute as a bare keyword.
ParseResult parseDTypeKeyword(OpAsmParser &parser, DTypeAttr &dtype);
void printDTypeKeyword(OpAsmPrinter &printer, Operation *op, DTypeAttr dtype);

} // namespace mlir::mantissa::train

#define GET_OP_CLASSES
#include "mantissa/Dialect/Train/IR/TrainOps.h.inc"

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINOPS_H
