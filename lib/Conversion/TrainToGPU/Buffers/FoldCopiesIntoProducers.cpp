//===- FoldCopiesIntoProducers.cpp - Write where the copy would -----------===//
//
// mantissa-fold-copies-into-producers (Passes.td): a temporary that one op
// (a linalg op or an attention kernel) computes and a copy or transpose
// then moves elsewhere (a gradient result, a slice of a concatenation, the
// attention's gradients in the projections' layout) is computed there in
// the first place, through a view of the destination; the copy's kernel
// and the temporary go.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Utils/IndexingUtils.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_FOLDCOPIESINTOPRODUCERSPASS
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// One op that writes a temporary: its output operand, and the static
/// subview of the temporary it writes through (none: the whole of it).
struct Writer {
  OpOperand *output;
  memref::SubViewOp part;
};

/// A copy whose source is a temporary only its producers write (one that
/// writes it whole, or several that each write a part of it: a
/// concatenation's parts): their outputs, the temporary's view chain up to
/// the copy (a single memref.transpose or none) and the permutation that
/// takes an index of the temporary to the destination's.
struct Fold {
  SmallVector<Writer> writers;
  /// Attention kernels that read the temporary (the forward's output, read
  /// by the backward): they read the destination's view instead.
  SmallVector<OpOperand *> readers;
  /// The first writer, before which the destination's view is made.
  Operation *firstWriter;
  memref::AllocOp temporary;
  Operation *copy;
  Operation *sourceView;
  Value destination;
  SmallVector<int64_t> permutation;
  /// The destination's view ops to move above the producer, in order.
  SmallVector<Operation *> hoisted;
};

/// The permutation of the copy (destination dimension d reads source
/// dimension permutation[d]), or none when it is not a copy.
std::optional<SmallVector<int64_t>> getCopyPermutation(Operation *op) {
  if (auto transpose = dyn_cast<linalg::TransposeOp>(op))
    return SmallVector<int64_t>(transpose.getPermutation());
  if (auto copy = dyn_cast<linalg::CopyOp>(op)) {
    int64_t rank = cast<MemRefType>(copy.getInputs()[0].getType()).getRank();
    return llvm::to_vector(llvm::seq<int64_t>(0, rank));
  }
  return std::nullopt;
}

std::optional<Fold> matchFold(Operation *copy) {
  std::optional<SmallVector<int64_t>> copyPermutation =
      getCopyPermutation(copy);
  if (!copyPermutation)
    return std::nullopt;
  auto linalgCopy = cast<linalg::LinalgOp>(copy);
  Value source = linalgCopy.getDpsInputs()[0];
  Value destination = linalgCopy.getDpsInits()[0];
  Fold fold;
  fold.copy = copy;
  fold.destination = destination;
  fold.sourceView = nullptr;
  // The temporary's index i reaches the destination at
  // copyPermutation^-1(viewPermutation^-1(i)).
  SmallVector<int64_t> viewPermutation;
  if (auto view = source.getDefiningOp<memref::TransposeOp>()) {
    fold.sourceView = view;
    AffineMap map = view.getPermutation();
    for (AffineExpr expr : map.getResults())
      viewPermutation.push_back(cast<AffineDimExpr>(expr).getPosition());
    source = view.getIn();
  } else {
    viewPermutation =
        llvm::to_vector(llvm::seq<int64_t>(0, copyPermutation->size()));
  }
  auto alloc = source.getDefiningOp<memref::AllocOp>();
  if (!alloc || alloc->getBlock() != copy->getBlock())
    return std::nullopt;
  fold.temporary = alloc;
  // Destination dimension d holds source view dimension copy[d], which is
  // temporary dimension view[copy[d]].
  fold.permutation.resize(copyPermutation->size());
  for (auto [d, s] : llvm::enumerate(*copyPermutation))
    fold.permutation[d] = viewPermutation[s];

  // The temporary: one writer of the whole buffer (a linalg op's output,
  // the buffer as is), or writers of static parts of it, read by nothing
  // but the copy.
  // A linalg op, or an attention kernel (which writes each output whole,
  // through any strided view, without reading it), before the copy.
  auto isWriter = [&](OpOperand &use) {
    Operation *user = use.getOwner();
    auto producer = dyn_cast<DestinationStyleOpInterface>(user);
    if (!producer || !isa<linalg::LinalgOp, train::AttentionKernelOp>(user) ||
        !producer.isDpsInit(&use) || !producer.hasPureBufferSemantics() ||
        user->getBlock() != copy->getBlock() || !user->isBeforeInBlock(copy))
      return false;
    // The producer must not read its output (an accumulation from zero
    // is written by a fill first, which would be a second writer).
    auto linalgOp = dyn_cast<linalg::LinalgOp>(user);
    return !linalgOp || !linalgOp.payloadUsesValueFromOperand(&use);
  };
  bool whole = false;
  for (OpOperand &use : alloc->getUses()) {
    Operation *user = use.getOwner();
    if (isa<memref::DeallocOp>(user) || user == copy || user == fold.sourceView)
      continue;
    // An attention kernel reads its inputs through any strided view.
    if (auto attention = dyn_cast<train::AttentionKernelOp>(user);
        attention && attention.isDpsInput(&use) && !attention.isDpsInit(&use)) {
      fold.readers.push_back(&use);
      continue;
    }
    if (auto part = dyn_cast<memref::SubViewOp>(user)) {
      if (part.getType().getRank() != alloc.getType().getRank() ||
          llvm::any_of(part.getMixedOffsets(), llvm::IsaPred<Value>) ||
          llvm::any_of(part.getMixedSizes(), llvm::IsaPred<Value>) ||
          llvm::any_of(part.getMixedStrides(), llvm::IsaPred<Value>))
        return std::nullopt;
      for (OpOperand &partUse : part->getUses()) {
        if (!isWriter(partUse))
          return std::nullopt;
        fold.writers.push_back({&partUse, part});
      }
      continue;
    }
    if (!isWriter(use) || whole)
      return std::nullopt;
    whole = true;
    fold.writers.push_back({&use, nullptr});
  }
  if (fold.sourceView && !fold.sourceView->getResult(0).hasOneUse())
    return std::nullopt;
  if (fold.writers.empty() || (whole && fold.writers.size() > 1) ||
      (!fold.readers.empty() && !whole))
    return std::nullopt;
  // The first writer, where the destination's view must exist.
  Operation *producer = fold.writers.front().output->getOwner();
  for (const Writer &writer : fold.writers)
    if (writer.output->getOwner()->isBeforeInBlock(producer))
      producer = writer.output->getOwner();
  fold.firstWriter = producer;
  // The destination, seen with the temporary's dimensions, has its shape.
  ArrayRef<int64_t> destinationShape =
      cast<MemRefType>(destination.getType()).getShape();
  for (auto [d, t] : llvm::enumerate(fold.permutation))
    if (destinationShape[d] != alloc.getType().getDimSize(t))
      return std::nullopt;
  // A GEMM's rounding kernel becomes the GEMM's epilogue, which writes a
  // dense matrix: it keeps its temporary (and the copy).
  bool identity = isIdentityPermutation(fold.permutation);
  for (const Writer &writer : fold.writers) {
    Operation *op = writer.output->getOwner();
    if (isa<linalg::LinalgOp>(op) && isGemmEpilogueCandidate(op) &&
        (!identity || writer.part))
      return std::nullopt;
    // A contraction keeps a plain destination: a GEMM's output must stay a
    // matrix cuBLAS can write.
    auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
    if (linalgOp && linalgOp.getNumReductionLoops() > 0 &&
        (!cast<MemRefType>(destination.getType()).getLayout().isIdentity() ||
         !identity || writer.part))
      return std::nullopt;
  }
  // The destination's views made between the producer and the copy move
  // up to the producer (views and allocations only).
  Value destinationBase = getBaseBuffer(destination);
  fold.hoisted.clear();
  for (Value value = destination;;) {
    Operation *definition = value.getDefiningOp();
    if (!definition || definition->getBlock() != producer->getBlock() ||
        definition->isBeforeInBlock(producer))
      break;
    // A view's source is its first operand.
    bool view = isViewOp(definition);
    bool movable =
        (view || isa<memref::AllocOp>(definition)) &&
        llvm::all_of(definition->getOperands().drop_front(view ? 1 : 0),
                     [&](Value operand) {
                       Operation *def = operand.getDefiningOp();
                       return !def || def->getBlock() != producer->getBlock() ||
                              def->isBeforeInBlock(producer);
                     });
    if (!movable)
      return std::nullopt;
    fold.hoisted.insert(fold.hoisted.begin(), definition);
    if (!view)
      break;
    value = definition->getOperand(0);
  }
  for (Operation *op = producer; op != copy; op = op->getNextNode())
    if (BufferAccesses::of(op).touches(destinationBase))
      return std::nullopt;
  // The readers come after the producer, with nothing writing the
  // destination between the copy and them.
  for (OpOperand *reader : fold.readers) {
    Operation *op = reader->getOwner();
    if (op->getBlock() != producer->getBlock() ||
        !producer->isBeforeInBlock(op))
      return std::nullopt;
    if (copy->isBeforeInBlock(op))
      for (Operation *between = copy->getNextNode(); between != op;
           between = between->getNextNode())
        if (writesBuffer(between, destinationBase))
          return std::nullopt;
  }
  return fold;
}

struct FoldCopiesIntoProducersPass
    : mantissa::impl::FoldCopiesIntoProducersPassBase<
          FoldCopiesIntoProducersPass> {
  void runOnOperation() override {
    SmallVector<Operation *> copies;
    getOperation().walk([&](Operation *op) {
      if (getCopyPermutation(op))
        copies.push_back(op);
    });
    for (Operation *copy : copies) {
      std::optional<Fold> fold = matchFold(copy);
      if (!fold)
        continue;
      Operation *producer = fold->firstWriter;
      for (Operation *definition : fold->hoisted)
        definition->moveBefore(producer);
      OpBuilder builder(producer);
      // The destination seen with the temporary's dimensions: temporary
      // dimension t is destination dimension d where permutation[d] = t.
      Value target = fold->destination;
      if (!isIdentityPermutation(fold->permutation))
        target = builder.create<memref::TransposeOp>(
            copy->getLoc(), target,
            AffineMapAttr::get(AffineMap::getPermutationMap(
                invertPermutationVector(fold->permutation),
                builder.getContext())));
      for (Writer writer : fold->writers) {
        if (!writer.part) {
          writer.output->set(target);
          continue;
        }
        // The same part of the destination's view.
        builder.setInsertionPoint(writer.output->getOwner());
        writer.output->set(builder.create<memref::SubViewOp>(
            writer.part.getLoc(), target, writer.part.getMixedOffsets(),
            writer.part.getMixedSizes(), writer.part.getMixedStrides()));
      }
      for (OpOperand *reader : fold->readers)
        reader->set(target);
      copy->erase();
      if (fold->sourceView)
        fold->sourceView->erase();
      for (Operation *user :
           llvm::make_early_inc_range(fold->temporary->getUsers()))
        user->erase();
      fold->temporary.erase();
    }
  }
};

} // namespace
