//===- RecomputeWideningProducers.cpp - Temporaries recomputed ------------===//
//
// mantissa-recompute-widening-producers (Passes.td): an elementwise op read
// by several ops is fused into each of them when reading what it reads
// costs the GPU step fewer bytes than writing and reading its result.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/BufferAccesses.h"
#include "mantissa/Conversion/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_RECOMPUTEWIDENINGPRODUCERSPASS
#include "mantissa/Conversion/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// Ops a recomputed body holds at most: beyond that, recomputing it in
/// every reader could cost more than the memory traffic it saves.
constexpr size_t kMaxBodyOps = 16;

int64_t getElementBytes(Type type) {
  return getStorageBytes(getElementTypeOrSelf(type));
}

/// The elements of a tensor (1 for a scalar).
int64_t getElementCount(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && type.hasStaticShape() ? type.getNumElements() : 1;
}

/// The bytes per element the GPU program reads of `input`: an input that
/// the body only rounds to a narrower type is read at that width, since the
/// program rounds it once where it is written (mantissa-share-roundings,
/// a GEMM's output dtype).
int64_t getReadBytes(linalg::GenericOp producer, OpOperand *input) {
  int64_t bytes = getElementBytes(input->get().getType());
  BlockArgument argument = producer.getMatchingBlockArgument(input);
  if (argument.hasOneUse())
    if (auto round = dyn_cast<arith::TruncFOp>(*argument.getUsers().begin()))
      bytes = std::min(bytes, getElementBytes(round.getType()));
  return bytes;
}

/// Whether `producer` may be recomputed in its readers: one result, all
/// loops parallel, its maps projected permutations (an input may be
/// broadcast), a short body that does not ask where it is (linalg.index
/// would see the reader's loops).
bool isRecomputable(linalg::GenericOp producer) {
  return producer.getNumResults() == 1 &&
         producer.getNumParallelLoops() == producer.getNumLoops() &&
         producer.hasPureTensorSemantics() &&
         producer.getBody()->getOperations().size() <= kMaxBodyOps + 1 &&
         llvm::all_of(
             producer.getIndexingMapsArray(),
             [](AffineMap map) { return map.isProjectedPermutation(); }) &&
         producer.getBody()->getOps<linalg::IndexOp>().empty();
}

/// Whether `producer` reads a matrix product: the GEMM's epilogue may
/// absorb it (a bias added to every row), which costs no bytes at all.
bool readsProduct(linalg::GenericOp producer) {
  return llvm::any_of(producer.getDpsInputs(), [](Value input) {
    auto definition = input.getDefiningOp<linalg::LinalgOp>();
    return definition && linalg::isaContractionOpInterface(definition);
  });
}

/// The bytes that recomputing `producer` in `reader` adds to what `reader`
/// reads: the producer's inputs (of rank > 0; scalars are read once) that
/// it does not read already, each once (a broadcast input, such as a row's
/// rsqrt, is read once per row, not once per element), or, for a producer
/// of a matrix product (an epilogue), each once per element.
int64_t getExtraReadBytes(linalg::GenericOp producer,
                          linalg::GenericOp reader) {
  int64_t bytes = 0;
  int64_t elements = getElementCount(producer.getResult(0));
  bool epilogue = readsProduct(producer);
  for (OpOperand *input : producer.getDpsInputOperands()) {
    auto type = dyn_cast<RankedTensorType>(input->get().getType());
    if (!type || type.getRank() == 0 ||
        llvm::is_contained(reader.getDpsInputs(), input->get()))
      continue;
    bytes += getReadBytes(producer, input) *
             (epilogue ? elements : getElementCount(input->get()));
  }
  return bytes;
}

/// The readers of `producer` to recompute it in: each saves reading the
/// producer's result and adds reading the inputs it lacks; when every
/// reader recomputes it, its write is saved too.
SmallVector<OpOperand *> chooseReaders(linalg::GenericOp producer) {
  int64_t written = getElementBytes(producer.getResult(0).getType()) *
                    getElementCount(producer.getResult(0));
  // One operand of each reader: fusing erases the reader (another operand
  // reading the producer keeps reading it).
  SmallVector<OpOperand *> readers;
  llvm::SmallPtrSet<Operation *, 8> seen;
  bool all = true;
  for (OpOperand &use : producer->getResult(0).getUses()) {
    auto reader = dyn_cast<linalg::GenericOp>(use.getOwner());
    if (!reader || !reader.isDpsInput(&use) ||
        linalg::isaContractionOpInterface(reader) ||
        !linalg::areElementwiseOpsFusable(&use)) {
      all = false;
      continue;
    }
    if (seen.insert(reader).second)
      readers.push_back(&use);
    else
      all = false;
  }
  auto extra = [&](OpOperand *use) {
    return getExtraReadBytes(producer,
                             cast<linalg::GenericOp>(use->getOwner()));
  };
  if (all) {
    int64_t added = 0;
    for (OpOperand *use : readers)
      added += extra(use);
    if (added < written * int64_t(1 + readers.size()))
      return readers;
    return {};
  }
  SmallVector<OpOperand *> chosen;
  for (OpOperand *use : readers)
    if (extra(use) < written)
      chosen.push_back(use);
  return chosen;
}

struct RecomputeWideningProducersPass
    : mantissa::impl::RecomputeWideningProducersPassBase<
          RecomputeWideningProducersPass> {
  void runOnOperation() override {
    SmallVector<linalg::GenericOp> producers;
    getOperation().walk([&](linalg::GenericOp op) {
      if (isRecomputable(op) && !op->getResult(0).hasOneUse())
        producers.push_back(op);
    });
    IRRewriter rewriter(&getContext());
    // Last first: fusing erases only the producer and its readers, which
    // come after it, so the producers still to do stay alive.
    for (linalg::GenericOp producer : llvm::reverse(producers)) {
      SmallVector<OpOperand *> readers = chooseReaders(producer);
      for (OpOperand *use : readers) {
        // A copy of the producer for this reader alone, fused into it (the
        // copy has no other reader, so the fused op does not write it).
        auto reader = cast<linalg::GenericOp>(use->getOwner());
        // (chooseReaders checked that the fusion applies.)
        rewriter.setInsertionPoint(producer);
        Operation *copy = rewriter.clone(*producer);
        use->set(copy->getResult(0));
        rewriter.setInsertionPoint(reader);
        FailureOr<linalg::ElementwiseOpFusionResult> fused =
            linalg::fuseElementwiseOps(rewriter, use);
        if (failed(fused)) {
          use->set(producer->getResult(0));
          rewriter.eraseOp(copy);
          continue;
        }
        for (OpResult result : reader->getResults())
          rewriter.replaceAllUsesWith(result,
                                      fused->replacements.lookup(result));
        rewriter.eraseOp(reader);
        rewriter.eraseOp(copy);
      }
      if (producer->use_empty())
        rewriter.eraseOp(producer);
    }
  }
};

} // namespace
