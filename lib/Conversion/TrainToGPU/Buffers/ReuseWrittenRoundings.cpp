//===- ReuseWrittenRoundings.cpp - Copy a rounding already written --------===//
//
// mantissa-reuse-written-roundings (Passes.td): a rounding of an fp32
// temporary whose writer also wrote that rounding (a kernel that yields a
// value and its bf16 copy) becomes a copy of the rounded buffer, which
// mantissa-fold-transposes-into-views then reads as a view.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_REUSEWRITTENROUNDINGSPASS
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// The output of `writer` that holds the rounding to `type` of what it
/// writes into `output` (another output, indexed alike, yielding truncf of
/// the same value into a whole temporary of the same shape), if any.
OpOperand *findWrittenRounding(linalg::GenericOp writer, OpOperand *output,
                               Type type) {
  Block *body = writer.getBody();
  auto yield = cast<linalg::YieldOp>(body->getTerminator());
  unsigned position = output->getOperandNumber() - writer.getNumDpsInputs();
  Value value = yield.getOperand(position);
  AffineMap map = writer.getMatchingIndexingMap(output);
  for (OpOperand &other : writer.getDpsInitsMutable()) {
    if (&other == output || writer.getMatchingIndexingMap(&other) != map ||
        other.get().getType() !=
            MemRefType::get(
                cast<MemRefType>(output->get().getType()).getShape(), type) ||
        !other.get().getDefiningOp<memref::AllocOp>())
      continue;
    auto truncate =
        yield.getOperand(other.getOperandNumber() - writer.getNumDpsInputs())
            .getDefiningOp<arith::TruncFOp>();
    if (truncate && truncate->getBlock() == body && truncate.getIn() == value &&
        truncate.getType() == type)
      return &other;
  }
  return nullptr;
}

/// Where `op` wrote X's rounding to `type`: the temporary and the map from
/// an index of X to the index of its rounding there.
struct WrittenRounding {
  Value buffer;
  AffineMap fromX;
};

/// X's rounding to `type` that `op` writes, whole: another output of X's
/// writer (findWrittenRounding; at X's own indices), or an earlier rounding
/// of X (at its output map over its input map).
std::optional<WrittenRounding> getRoundingOf(Operation *op, Value x,
                                             Type type) {
  auto generic = dyn_cast<linalg::GenericOp>(op);
  if (!generic)
    return std::nullopt;
  int64_t rank = cast<MemRefType>(x.getType()).getRank();
  if (arith::TruncFOp truncate = getElementRounding(generic)) {
    Value output = generic.getDpsInits()[0];
    if (generic.getDpsInputs()[0] != x || truncate.getType() != type ||
        !output.getDefiningOp<memref::AllocOp>())
      return std::nullopt;
    SmallVector<AffineMap> maps = generic.getIndexingMapsArray();
    return WrittenRounding{output,
                           maps[1].compose(inversePermutation(maps[0]))};
  }
  if (!generic.hasPureBufferSemantics() ||
      generic.getNumParallelLoops() != generic.getNumLoops())
    return std::nullopt;
  for (OpOperand &init : generic.getDpsInitsMutable())
    if (init.get() == x &&
        generic.getMatchingIndexingMap(&init).isPermutation())
      if (OpOperand *rounded = findWrittenRounding(generic, &init, type))
        return WrittenRounding{
            rounded->get(),
            AffineMap::getMultiDimIdentityMap(rank, op->getContext())};
  return std::nullopt;
}

/// A generic that only rounds X element for element, each to the index it
/// reads (input and output indexed alike): the rounding worth keeping,
/// which the kernel that writes X can compute in its launch.
bool roundsInPlace(linalg::GenericOp rounding) {
  SmallVector<AffineMap> maps = rounding.getIndexingMapsArray();
  return maps[0] == maps[1];
}

/// The roundings of each temporary X after its last writer become copies
/// of one rounded buffer Y that nothing overwrites before them: Y is
/// written by X's writer beside X, or is the output of one of those
/// roundings, the first that rounds in place (moved up to right after X's
/// writer, so that it comes first) or else the first. The same bits: each
/// element is the same truncf of the same value. So of X's roundings one
/// computes; mantissa-fold-transposes-into-views reads the copies as views
/// of it.
void reuseWrittenRoundings(func::FuncOp function) {
  Block &body = function.getBody().front();
  // X's roundings after its last writer, by X, in order.
  llvm::MapVector<Value, SmallVector<linalg::GenericOp>> roundings;
  for (Operation &op : body) {
    if (auto generic = dyn_cast<linalg::GenericOp>(op);
        generic && getElementRounding(generic) &&
        generic.getDpsInputs()[0].getDefiningOp<memref::AllocOp>()) {
      roundings[generic.getDpsInputs()[0]].push_back(generic);
      continue;
    }
    for (auto &entry : roundings)
      if (writesBuffer(&op, entry.first))
        entry.second.clear();
  }
  for (auto &[x, group] : roundings) {
    if (group.empty())
      continue;
    // Move the first rounding in place up before the others.
    auto inPlace = llvm::find_if(group, roundsInPlace);
    if (inPlace != group.end() && inPlace != group.begin()) {
      linalg::GenericOp keeper = *inPlace;
      Operation *first = group.front();
      Value output = keeper.getDpsInits()[0];
      auto alloc = output.getDefiningOp<memref::AllocOp>();
      bool movable = alloc && alloc->getBlock() == &body;
      for (Operation *op = first; op != keeper && movable;
           op = op->getNextNode())
        movable = !BufferAccesses::of(op).touches(output) || op == alloc;
      if (movable) {
        if (first->isBeforeInBlock(alloc))
          alloc->moveBefore(first);
        keeper->moveBefore(first);
        group.erase(inPlace);
        group.insert(group.begin(), keeper);
      }
    }
    for (linalg::GenericOp rounding : group) {
      Type type = getElementRounding(rounding).getType();
      // Back to X's writer, looking for X's rounding on the way.
      std::optional<WrittenRounding> written;
      for (Operation *op = rounding->getPrevNode(); op;
           op = op->getPrevNode()) {
        written = getRoundingOf(op, x, type);
        if (written) {
          for (Operation *later = op->getNextNode();
               later != rounding && written; later = later->getNextNode())
            if (writesBuffer(later, written->buffer))
              written.reset();
          break;
        }
        if (writesBuffer(op, x))
          break;
      }
      if (!written)
        continue;
      SmallVector<AffineMap> maps = rounding.getIndexingMapsArray();
      maps[0] = written->fromX.compose(maps[0]);
      OpBuilder builder(rounding);
      auto replacement = builder.create<linalg::GenericOp>(
          rounding.getLoc(), TypeRange{}, ValueRange{written->buffer},
          rounding.getDpsInits(), maps, rounding.getIteratorTypesArray(),
          [](OpBuilder &nested, Location loc, ValueRange arguments) {
            nested.create<linalg::YieldOp>(loc, arguments.front());
          });
      replacement->setDiscardableAttrs(
          rounding->getDiscardableAttrDictionary());
      rounding.erase();
    }
  }
}

struct ReuseWrittenRoundingsPass
    : mantissa::impl::ReuseWrittenRoundingsPassBase<ReuseWrittenRoundingsPass> {
  void runOnOperation() override {
    if (!getOperation().getBody().empty())
      reuseWrittenRoundings(getOperation());
  }
};

} // namespace
