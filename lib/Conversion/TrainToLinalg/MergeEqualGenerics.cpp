//===- MergeEqualGenerics.cpp - one op for equal elementwise copies -------===//
//
// mantissa-merge-equal-generics: a linalg.generic on tensors that computes
// what an earlier one in the same block computes (same inputs, maps,
// iterators, result types and body, outputs that are only tensor.empty
// the body does not read) is replaced by the earlier one's results
// (Passes.td). CSE cannot do this: it would also merge the tensor.empty
// outputs of unrelated ops, which bufferization then copies apart.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToLinalg/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/OperationSupport.h"

using namespace mlir;

namespace mlir::mantissa {
#define GEN_PASS_DEF_MERGEEQUALGENERICSPASS
#include "mantissa/Conversion/TrainToLinalg/Passes.h.inc"
} // namespace mlir::mantissa

namespace {

/// Whether `op`'s results depend on nothing but its inputs and body: pure
/// tensor semantics, each output a tensor.empty whose value the body does
/// not read.
bool hasFreshOutputs(linalg::GenericOp op) {
  if (!op.hasPureTensorSemantics())
    return false;
  for (OpOperand &init : op.getDpsInitsMutable())
    if (!init.get().getDefiningOp<tensor::EmptyOp>() ||
        !op.getMatchingBlockArgument(&init).use_empty())
      return false;
  return true;
}

/// Whether `a` and `b` compute the same results.
bool computeTheSame(linalg::GenericOp a, linalg::GenericOp b) {
  return a.getInputs() == b.getInputs() &&
         a.getResultTypes() == b.getResultTypes() &&
         a.getIndexingMaps() == b.getIndexingMaps() &&
         a.getIteratorTypes() == b.getIteratorTypes() &&
         OperationEquivalence::isRegionEquivalentTo(
             &a.getRegion(), &b.getRegion(),
             OperationEquivalence::IgnoreLocations);
}

struct MergeEqualGenericsPass
    : mantissa::impl::MergeEqualGenericsPassBase<MergeEqualGenericsPass> {
  void runOnOperation() override {
    for (Block &block : getOperation().getBody()) {
      // Candidates by their first input (ops without inputs are fills,
      // which canonicalisation already shares where it can).
      llvm::DenseMap<Value, SmallVector<linalg::GenericOp>> seen;
      for (Operation &op : llvm::make_early_inc_range(block)) {
        auto generic = dyn_cast<linalg::GenericOp>(op);
        if (!generic || generic.getNumDpsInputs() == 0 ||
            !hasFreshOutputs(generic))
          continue;
        SmallVector<linalg::GenericOp> &earlier =
            seen[generic.getDpsInputs().front()];
        auto same = llvm::find_if(earlier, [&](linalg::GenericOp previous) {
          return computeTheSame(previous, generic);
        });
        if (same == earlier.end()) {
          earlier.push_back(generic);
          continue;
        }
        generic->replaceAllUsesWith(*same);
        generic->erase();
      }
    }
  }
};

} // namespace
