//===- MaterializeOperandCasts.cpp - Rounded GEMM operands as buffers -----===//
//
// mantissa-materialize-operand-casts (Passes.td): a contraction into which
// elementwise fusion folded the rounding of an operand gets the rounding
// back as an op of its own, so that it stays a bf16 GEMM.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/GemmMatching.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_MATERIALIZEOPERANDCASTSPASS
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// Undoes, for the GPU, the fusion of an operand's cast into a contraction:
/// elementwise fusion folds `truncf` of an fp32 operand (the compute dtype's
/// cast that autocast inserts) into the contraction's body, which then reads
/// fp32 and rounds every element again for every product it enters, and no
/// longer fits a bf16 GEMM. Where the contraction would be a GEMM with the
/// rounded operand, the rounding moves back into an elementwise op writing a
/// bf16 (fp16) temporary that the GEMM reads: the same numbers, with the
/// products on the tensor cores instead of in a loop kernel.
void materializeOperandCasts(func::FuncOp function) {
  Block &body = function.getBody().front();
  SmallVector<linalg::GenericOp> contractions;
  for (Operation &op : body)
    if (auto generic = dyn_cast<linalg::GenericOp>(op))
      if (generic.getNumDpsInputs() == 2 && generic.getNumDpsInits() == 1 &&
          generic.getNumReductionLoops() > 0 &&
          generic.hasPureBufferSemantics())
        contractions.push_back(generic);
  for (linalg::GenericOp contraction : contractions) {
    Block *inner = contraction.getBlock();
    struct Change {
      unsigned input;
      Value operand;
      arith::TruncFOp truncate;
      memref::AllocOp alloc;
      linalg::GenericOp cast;
    };
    SmallVector<Change> changes;
    for (unsigned input = 0; input < 2; ++input) {
      BlockArgument argument = inner->getArgument(input);
      if (!argument.getType().isF32() || !argument.hasOneUse())
        continue;
      auto truncate = dyn_cast<arith::TruncFOp>(*argument.getUsers().begin());
      if (!truncate ||
          !(truncate.getType().isBF16() || truncate.getType().isF16()))
        continue;
      OpOperand *operand = contraction.getDpsInputOperand(input);
      auto viewType = cast<MemRefType>(operand->get().getType());
      if (!viewType.hasStaticShape())
        continue;
      Type narrow = truncate.getType();
      Location loc = contraction.getLoc();
      OpBuilder builder(contraction);
      auto alloc = builder.create<memref::AllocOp>(
          loc, MemRefType::get(viewType.getShape(), narrow));
      AffineMap identity = builder.getMultiDimIdentityMap(viewType.getRank());
      auto cast = builder.create<linalg::GenericOp>(
          loc, ValueRange{operand->get()}, ValueRange{alloc.getResult()},
          ArrayRef<AffineMap>{identity, identity},
          SmallVector<utils::IteratorType>(viewType.getRank(),
                                           utils::IteratorType::parallel),
          [&](OpBuilder &nested, Location l, ValueRange arguments) {
            nested.create<linalg::YieldOp>(
                l, nested.create<arith::TruncFOp>(l, narrow, arguments[0])
                       .getResult());
          });
      changes.push_back({input, operand->get(), truncate, alloc, cast});
      operand->set(alloc.getResult());
      argument.setType(narrow);
      truncate.getResult().replaceAllUsesWith(argument);
    }
    if (changes.empty())
      continue;
    if (isGemm(contraction)) {
      for (Change &change : changes)
        change.truncate.erase();
      continue;
    }
    // Not a GEMM even so: as it was.
    for (Change &change : changes) {
      BlockArgument argument = inner->getArgument(change.input);
      argument.replaceAllUsesExcept(change.truncate.getResult(),
                                    change.truncate);
      argument.setType(FloatType::getF32(function.getContext()));
      contraction.getDpsInputOperand(change.input)->set(change.operand);
      change.cast.erase();
      change.alloc.erase();
    }
  }
}

struct MaterializeOperandCastsPass
    : mantissa::impl::MaterializeOperandCastsPassBase<
          MaterializeOperandCastsPass> {
  void runOnOperation() override {
    if (!getOperation().getBody().empty())
      materializeOperandCasts(getOperation());
  }
};

} // namespace
