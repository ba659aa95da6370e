//===- RecomputeWideningProducers.cpp - Temporaries recomputed ------------===//
//
// mantissa-recompute-widening-producers (Passes.td): an elementwise op read
// by several ops is fused into each of them when reading what it reads
// costs the GPU step fewer bytes than writing and reading its result.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/GemmMatching.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Linalg/Utils/Utils.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_RECOMPUTEWIDENINGPRODUCERSPASS
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h.inc"
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

/// Whether `producer` may be recomputed in its readers: one result written
/// in the order of its loops, all loops parallel, its inputs' maps
/// projected permutations (an input may be broadcast, along a loop it does
/// not name or a unit dimension it reads at 0), a short body that reads
/// nothing but its inputs (a gather's tensor.extract reads a table whose
/// bytes the choice below would not count) and does not ask where it is
/// (linalg.index would see the reader's loops).
bool isRecomputable(linalg::GenericOp producer) {
  bool asks = producer.getBody()
                  ->walk([](Operation *op) {
                    return isa<tensor::ExtractOp, linalg::IndexOp>(op)
                               ? WalkResult::interrupt()
                               : WalkResult::advance();
                  })
                  .wasInterrupted();
  return !asks && producer.getNumResults() == 1 &&
         producer.getNumParallelLoops() == producer.getNumLoops() &&
         producer.hasPureTensorSemantics() && !producer.hasDynamicShape() &&
         producer.getBody()->getOperations().size() <= kMaxBodyOps + 1 &&
         producer.getMatchingIndexingMap(producer.getDpsInitOperand(0))
             .isIdentity() &&
         llvm::all_of(producer.getDpsInputOperands(), [&](OpOperand *input) {
           return producer.getMatchingIndexingMap(input).isProjectedPermutation(
               /*allowZeroInResults=*/true);
         });
}

/// The generic that reads `use`: its owner, or, where that is a
/// tensor.expand_shape of the producer's result with one use, that use's
/// owner (a reduction reading the result with a unit dimension added).
std::pair<linalg::GenericOp, OpOperand *> getReader(OpOperand &use) {
  if (auto expand = dyn_cast<tensor::ExpandShapeOp>(use.getOwner())) {
    if (!expand->hasOneUse())
      return {};
    OpOperand &read = *expand->getUses().begin();
    return {dyn_cast<linalg::GenericOp>(read.getOwner()), &read};
  }
  return {dyn_cast<linalg::GenericOp>(use.getOwner()), &use};
}

/// A copy of `producer` computing its result in the shape `expand` gives
/// it: each loop expanded as the result's dimension it writes is, each
/// input expanded likewise along the dimensions such loops index (a unit
/// dimension read at 0 stays), built before `expand`.
linalg::GenericOp expandProducer(RewriterBase &rewriter,
                                 linalg::GenericOp producer,
                                 tensor::ExpandShapeOp expand) {
  MLIRContext *context = producer.getContext();
  Location loc = producer.getLoc();
  rewriter.setInsertionPoint(expand);
  SmallVector<ReassociationIndices> groups = expand.getReassociationIndices();
  ArrayRef<int64_t> shape = expand.getResultType().getShape();
  SmallVector<Value> inputs;
  SmallVector<AffineMap> maps;
  AffineMap identity = AffineMap::getMultiDimIdentityMap(shape.size(), context);
  for (OpOperand *input : producer.getDpsInputOperands()) {
    auto type = cast<RankedTensorType>(input->get().getType());
    ExpandedOperand seen =
        expandOperand(producer.getMatchingIndexingMap(input), type.getShape(),
                      groups, identity, shape);
    Value value = input->get();
    if (seen.expands)
      value = rewriter.create<tensor::ExpandShapeOp>(
          loc, RankedTensorType::get(seen.shape, type.getElementType()), value,
          seen.groups);
    inputs.push_back(value);
    maps.push_back(seen.map);
  }
  maps.push_back(identity);
  Value init = rewriter.create<tensor::EmptyOp>(
      loc, shape, expand.getResultType().getElementType());
  auto copy = rewriter.create<linalg::GenericOp>(
      loc, TypeRange{expand.getResultType()}, inputs, ValueRange{init}, maps,
      SmallVector<utils::IteratorType>(shape.size(),
                                       utils::IteratorType::parallel));
  IRMapping mapping;
  producer.getRegion().cloneInto(&copy.getRegion(), mapping);
  return copy;
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
    auto [reader, read] = getReader(use);
    // (Through an expand_shape, whether the expanded copy fuses is known
    // once it is built.)
    if (!reader || !reader.isDpsInput(read) || isMatrixProduct(reader) ||
        (read == &use && !linalg::areElementwiseOpsFusable(&use))) {
      all = false;
      continue;
    }
    if (seen.insert(reader).second)
      readers.push_back(&use);
    else
      all = false;
  }
  auto extra = [&](OpOperand *use) {
    return getExtraReadBytes(producer, getReader(*use).first);
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

/// Erases `copy` and what it alone used of what expandProducer built for
/// it (its inputs' expand_shapes, its empty output).
void eraseWithUnusedInputs(RewriterBase &rewriter, Operation *copy) {
  SmallVector<Value> operands(copy->getOperands());
  rewriter.eraseOp(copy);
  for (Value operand : operands)
    if (Operation *definition = operand.getDefiningOp();
        definition && definition->use_empty() &&
        isa<tensor::ExpandShapeOp, tensor::EmptyOp>(definition))
      rewriter.eraseOp(definition);
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
        auto [reader, read] = getReader(*use);
        Operation *copy;
        Value before = read->get();
        auto expand = dyn_cast<tensor::ExpandShapeOp>(use->getOwner());
        if (expand) {
          copy = expandProducer(rewriter, producer, expand);
        } else {
          rewriter.setInsertionPoint(producer);
          copy = rewriter.clone(*producer);
        }
        read->set(copy->getResult(0));
        rewriter.setInsertionPoint(reader);
        FailureOr<linalg::ElementwiseOpFusionResult> fused = failure();
        if (linalg::areElementwiseOpsFusable(read))
          fused = linalg::fuseElementwiseOps(rewriter, read);
        if (failed(fused)) {
          read->set(before);
          eraseWithUnusedInputs(rewriter, copy);
          continue;
        }
        for (OpResult result : reader->getResults())
          rewriter.replaceAllUsesWith(result,
                                      fused->replacements.lookup(result));
        rewriter.eraseOp(reader);
        eraseWithUnusedInputs(rewriter, copy);
        if (expand && expand->use_empty())
          rewriter.eraseOp(expand);
      }
      if (producer->use_empty())
        rewriter.eraseOp(producer);
    }
  }
};

} // namespace
