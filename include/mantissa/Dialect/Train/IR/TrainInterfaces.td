//===- TrainInterfaces.td - Op families of the train dialect -*- tablegen -*-===//
//
// The interfaces that make a family of train operations first-class: the
// lowering to linalg, the reference interpreter and the GPU rewrites ask an
// operation whether it belongs to a family instead of keeping their own
// lists of operations.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAININTERFACES_TD
#define MANTISSA_DIALECT_TRAIN_IR_TRAININTERFACES_TD

include "mlir/IR/OpBase.td"

def Train_ElementwiseOpInterface : OpInterface<"ElementwiseOpInterface"> {
  let cppNamespace = "::mlir::mantissa::train";
  let description = [{
    An operation with one result each of whose elements is a function of
    the elements of its tensor operands at the same position, the operands
    broadcasting to the result as in torch (right-aligned, size-1
    dimensions read at index 0); attributes (a Python scalar, a bound, the
    GELU approximation) are constants of that function. The operation has
    no regions.

    Who reads it: `mantissa-lower-train-to-linalg` lowers every such
    operation with one pattern (`ElementwiseOpLowering`, one
    `linalg.generic` whose body is the op's scalar function,
    lib/Conversion/TrainToLinalg/Elementwise.cpp); the reference
    interpreter evaluates the family in lib/Reference/ElementwiseOps.cpp;
    the GPU rewrites on train ops (`isTrainElementwise`) move and clone the
    family's operations through concatenations and slices. Adding an
    elementwise operation is its definition with this interface plus one
    scalar function per layer.
  }];
}

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAININTERFACES_TD
