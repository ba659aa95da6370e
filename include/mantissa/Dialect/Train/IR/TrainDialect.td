//===- TrainDialect.td - The train dialect -----------------*- tablegen -*-===//
//
// The `train` dialect: one training step of a model, as exported by torch.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_TRAINDIALECT_TD
#define MANTISSA_DIALECT_TRAIN_IR_TRAINDIALECT_TD

include "mlir/IR/OpBase.td"

def Train_Dialect : Dialect {
  let name = "train";
  let cppNamespace = "::mlir::mantissa::train";
  let summary = "One mixed-precision training step: tensors, roles and precision";
  let description = [{
    The `train` dialect holds one training step of a model as torch.export
    writes it: the joint forward and backward program, whose inputs are the
    model's parameters, buffers, constants and the user's batch, and whose
    results are the loss, one gradient per parameter and the buffer mutations.

    Every tensor that crosses the step's boundary carries its role and the
    metadata the precision pass needs (`#train.tensor`, `#train.result`), so
    that per-tensor precision rules can be matched by fully qualified name
    (FQN) and module path. The precision pass records its decisions as
    `#train.plan` attributes, converts element types with `train.cast`, and
    groups parameters for sharding with `train.shard_group`.
  }];
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    /// Registers the attributes of TrainAttrs.td (defined in TrainAttrs.cpp).
    void registerAttributes();
  }];
}

/// Base class of every operation in the dialect.
class Train_Op<string mnemonic, list<Trait> traits = []>
    : Op<Train_Dialect, mnemonic, traits>;

#endif // MANTISSA_DIALECT_TRAIN_IR_TRAINDIALECT_TD
