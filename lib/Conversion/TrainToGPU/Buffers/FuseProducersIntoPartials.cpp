//===- FuseProducersIntoPartials.cpp - Elementwise producers in partials --===//
//
// mantissa-fuse-producers-into-partials (Passes.td): the elementwise op that
// writes a temporary which a split reduction's partials read (the residual
// add before a norm) runs inside the partials' generic instead, each
// element computed, written and folded by the thread that folds it, so
// that the add, the norm's sum and its scaling share one launch.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/GpuStepOps.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/IRMapping.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_FUSEPRODUCERSINTOPARTIALSPASS
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// Whether `op` computes partials that a later fold of a split reduction
/// (kGpuFoldPartsAttr) folds: its one output, the fold's first input.
bool isSplitPartials(linalg::GenericOp op) {
  if (!op.hasPureBufferSemantics() || op.hasDynamicShape() ||
      op.getNumDpsInits() != 1 || op.getNumReductionLoops() == 0)
    return false;
  Value partials = op.getDpsInitOperand(0)->get();
  return llvm::any_of(partials.getUsers(), [&](Operation *user) {
    auto fold = dyn_cast<linalg::GenericOp>(user);
    return fold && fold->hasAttr(kGpuFoldPartsAttr) &&
           fold.getNumDpsInputs() > 0 &&
           fold.getDpsInputOperand(0)->get() == partials &&
           op->isBeforeInBlock(fold);
  });
}

/// Whether `op` is an elementwise generic that computes every element of
/// its one output, a whole temporary, from its inputs alone: all loops
/// parallel, the output indexed by the identity and not read, its inputs
/// indexed by loops or by 0, and no linalg.index.
bool isElementwiseProducer(linalg::GenericOp op) {
  if (!op.hasPureBufferSemantics() || op.hasDynamicShape() ||
      op.getNumDpsInits() != 1 ||
      op.getNumParallelLoops() != op.getNumLoops() ||
      !op.getBody()->getOps<linalg::IndexOp>().empty())
    return false;
  OpOperand *init = op.getDpsInitOperand(0);
  if (!op.getMatchingIndexingMap(init).isIdentity() ||
      !op.getMatchingBlockArgument(init).use_empty() ||
      !init->get().getDefiningOp<memref::AllocOp>())
    return false;
  return llvm::all_of(op.getDpsInputOperands(), [&](OpOperand *input) {
    return isa<MemRefType>(input->get().getType()) &&
           op.getMatchingIndexingMap(input).isProjectedPermutation(
               /*allowZeroInResults=*/true);
  });
}

/// How the partials see the temporary: as itself or through
/// memref.expand_shapes, whose groups say which of the view's dimensions
/// each of the temporary's dimensions became.
struct TemporaryView {
  OpOperand *operand;
  SmallVector<ReassociationIndices> groups;
};

/// The one input of `partials` that reads `temporary`, when it reads all of
/// it, each element once: indexed by a permutation of all its loops, the
/// temporary itself or expand_shapes of it.
std::optional<TemporaryView> getTemporaryView(linalg::GenericOp partials,
                                              Value temporary) {
  std::optional<TemporaryView> found;
  for (OpOperand &operand : partials->getOpOperands()) {
    if (!isa<MemRefType>(operand.get().getType()) ||
        getBaseBuffer(operand.get()) != temporary)
      continue;
    if (found || partials.isDpsInit(&operand))
      return std::nullopt;
    AffineMap map = partials.getMatchingIndexingMap(&operand);
    if (!map.isPermutation())
      return std::nullopt;
    // Through the chain of expand_shapes, from the view back to the
    // temporary: each of the view's dimensions is its own group at first,
    // then each step merges the groups of the dimensions it expanded.
    TemporaryView view{&operand, {}};
    Value value = operand.get();
    for (int64_t dim = 0, e = cast<MemRefType>(value.getType()).getRank();
         dim < e; ++dim)
      view.groups.push_back({dim});
    while (value != temporary) {
      auto expand = value.getDefiningOp<memref::ExpandShapeOp>();
      if (!expand)
        return std::nullopt;
      SmallVector<ReassociationIndices> groups;
      for (const ReassociationIndices &group :
           expand.getReassociationIndices()) {
        ReassociationIndices &merged = groups.emplace_back();
        for (int64_t dim : group)
          llvm::append_range(merged, view.groups[dim]);
      }
      view.groups = std::move(groups);
      value = expand.getSrc();
    }
    found = view;
  }
  return found;
}

/// `input` of `producer` seen from the loops of `partials`: its dimensions
/// that the producer indexes by loop j expanded as the temporary's dimension
/// j is in the partials' view (`view`), and the indexing map from the
/// partials' loops; none when the input's layout cannot be expanded so.
std::optional<std::pair<Value, AffineMap>>
viewFromPartials(OpBuilder &builder, linalg::GenericOp producer,
                 OpOperand *input, linalg::GenericOp partials,
                 const TemporaryView &view) {
  auto type = cast<MemRefType>(input->get().getType());
  auto viewType = cast<MemRefType>(view.operand->get().getType());
  ExpandedOperand seen = expandOperand(
      producer.getMatchingIndexingMap(input), type.getShape(), view.groups,
      partials.getMatchingIndexingMap(view.operand), viewType.getShape());
  if (!seen.expands)
    return std::make_pair(input->get(), seen.map);
  FailureOr<MemRefType> expanded =
      memref::ExpandShapeOp::computeExpandedType(type, seen.shape, seen.groups);
  if (failed(expanded))
    return std::nullopt;
  Value value = builder.create<memref::ExpandShapeOp>(
      producer.getLoc(), *expanded, input->get(), seen.groups);
  return std::make_pair(value, seen.map);
}

/// Whether anything strictly between `first` and `last` (one block) writes
/// a buffer in `inputs` or touches `temporary`.
bool isUndisturbedBetween(Operation *first, Operation *last,
                          ArrayRef<Value> inputs, Value temporary) {
  for (Operation *op = first->getNextNode(); op != last;
       op = op->getNextNode()) {
    if (isViewOp(op) || isa<memref::AllocOp, memref::DeallocOp>(op))
      continue;
    BufferAccesses accesses = BufferAccesses::of(op);
    if (accesses.touches(temporary) || !accesses.known ||
        llvm::any_of(
            inputs, [&](Value base) { return accesses.writes.contains(base); }))
      return false;
  }
  return true;
}

/// Replaces `partials` and `producer` by one generic at `partials` that
/// computes the producer's element where the partials read it, folds it,
/// and writes it through the partials' view of the temporary.
void fuse(linalg::GenericOp producer, linalg::GenericOp partials,
          const TemporaryView &view,
          ArrayRef<std::pair<Value, AffineMap>> producerInputs) {
  OpBuilder builder(partials);
  SmallVector<Value> inputs;
  SmallVector<AffineMap> maps;
  for (OpOperand *input : partials.getDpsInputOperands()) {
    if (input == view.operand) {
      for (auto [value, map] : producerInputs) {
        inputs.push_back(value);
        maps.push_back(map);
      }
      continue;
    }
    inputs.push_back(input->get());
    maps.push_back(partials.getMatchingIndexingMap(input));
  }
  SmallVector<Value> outputs;
  for (OpOperand &init : partials.getDpsInitsMutable()) {
    outputs.push_back(init.get());
    maps.push_back(partials.getMatchingIndexingMap(&init));
  }
  outputs.push_back(view.operand->get());
  maps.push_back(partials.getMatchingIndexingMap(view.operand));
  auto fused = builder.create<linalg::GenericOp>(
      partials.getLoc(), TypeRange(), inputs, outputs, maps,
      partials.getIteratorTypesArray());
  fused->setDiscardableAttrs(partials->getDiscardableAttrDictionary());

  Block *body = builder.createBlock(&fused.getRegion());
  for (Value value : llvm::concat<Value>(inputs, outputs))
    body->addArgument(getElementTypeOrSelf(value.getType()), partials.getLoc());
  builder.setInsertionPointToStart(body);
  // The producer's body on its inputs' elements, then the partials' body
  // with the element it computed where it read the temporary.
  IRMapping mapping;
  unsigned position = 0;
  Value element;
  for (OpOperand *input : partials.getDpsInputOperands()) {
    BlockArgument argument = partials.getMatchingBlockArgument(input);
    if (input != view.operand) {
      mapping.map(argument, body->getArgument(position++));
      continue;
    }
    IRMapping producerMapping;
    for (OpOperand *producerInput : producer.getDpsInputOperands())
      producerMapping.map(producer.getMatchingBlockArgument(producerInput),
                          body->getArgument(position++));
    for (Operation &op : producer.getBody()->without_terminator())
      builder.clone(op, producerMapping);
    element = producerMapping.lookupOrDefault(
        producer.getBody()->getTerminator()->getOperand(0));
    mapping.map(argument, element);
  }
  for (OpOperand &init : partials.getDpsInitsMutable())
    mapping.map(partials.getMatchingBlockArgument(&init),
                body->getArgument(position++));
  for (Operation &op : partials.getBody()->without_terminator())
    builder.clone(op, mapping);
  SmallVector<Value> yielded;
  for (Value value : partials.getBody()->getTerminator()->getOperands())
    yielded.push_back(mapping.lookupOrDefault(value));
  yielded.push_back(element);
  builder.create<linalg::YieldOp>(partials.getLoc(), yielded);
  partials.erase();
  producer.erase();
}

struct FuseProducersIntoPartialsPass
    : mantissa::impl::FuseProducersIntoPartialsPassBase<
          FuseProducersIntoPartialsPass> {
  void runOnOperation() override {
    func::FuncOp function = getOperation();
    if (function.isExternal())
      return;
    Block &block = function.getBody().front();
    FailureOr<llvm::DenseMap<Operation *, GpuStepOpRole>> roles =
        getGpuStepOpRoles(block);
    if (failed(roles))
      return signalPassFailure();
    // Who writes each buffer, and whether an op's accesses are not known
    // (it may write any buffer).
    llvm::DenseMap<Value, SmallVector<Operation *, 1>> writers;
    bool unknown = false;
    auto collectWriters = [&] {
      writers.clear();
      unknown = false;
      for (Operation &op : block) {
        if (isViewOp(&op) || isa<memref::AllocOp, memref::DeallocOp>(op))
          continue;
        BufferAccesses accesses = BufferAccesses::of(&op);
        unknown |= !accesses.known;
        for (Value base : accesses.writes)
          writers[base].push_back(&op);
      }
    };
    collectWriters();
    SmallVector<linalg::GenericOp> candidates;
    for (auto op : block.getOps<linalg::GenericOp>())
      if (isSplitPartials(op))
        candidates.push_back(op);
    for (linalg::GenericOp partials : candidates) {
      for (OpOperand *input : partials.getDpsInputOperands()) {
        Value temporary = getBaseBuffer(input->get());
        if (!temporary.getDefiningOp<memref::AllocOp>())
          continue;
        // Its one writer, a kernel of its own (not a GEMM's epilogue).
        auto written = writers.find(temporary);
        if (unknown || written == writers.end() || written->second.size() != 1)
          continue;
        auto producer = dyn_cast<linalg::GenericOp>(written->second.front());
        if (!producer || !producer->isBeforeInBlock(partials) ||
            !isElementwiseProducer(producer))
          continue;
        auto role = roles->find(producer);
        if (role == roles->end() ||
            role->second.kind != GpuStepOpRole::Kind::Kernel)
          continue;
        std::optional<TemporaryView> view =
            getTemporaryView(partials, temporary);
        if (!view)
          continue;
        // What it reads (its inputs, and what its body loads) must hold the
        // same values where the partials run.
        BufferAccesses read = BufferAccesses::of(producer);
        SmallVector<Value> producerBases;
        for (Value base : read.reads)
          if (base != temporary)
            producerBases.push_back(base);
        if (!read.known ||
            llvm::any_of(producer.getDpsInputOperands(),
                         [&](OpOperand *producerInput) {
                           return getBaseBuffer(producerInput->get()) ==
                                  temporary;
                         }) ||
            !isUndisturbedBetween(producer, partials, producerBases, temporary))
          continue;
        OpBuilder builder(partials);
        SmallVector<std::pair<Value, AffineMap>> producerInputs;
        for (OpOperand *producerInput : producer.getDpsInputOperands()) {
          std::optional<std::pair<Value, AffineMap>> seen = viewFromPartials(
              builder, producer, producerInput, partials, *view);
          if (!seen)
            break;
          producerInputs.push_back(*seen);
        }
        if (producerInputs.size() != producer.getNumDpsInputs()) {
          for (auto [value, map] : producerInputs)
            if (value.use_empty())
              value.getDefiningOp()->erase();
          continue;
        }
        fuse(producer, partials, *view, producerInputs);
        collectWriters();
        roles = getGpuStepOpRoles(block);
        if (failed(roles))
          return signalPassFailure();
        break;
      }
    }
  }
};

} // namespace
