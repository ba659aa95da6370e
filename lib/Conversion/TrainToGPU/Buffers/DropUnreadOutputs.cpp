//===- DropUnreadOutputs.cpp - Temporaries nothing reads ------------------===//
//
// mantissa-drop-unread-outputs (Passes.td): an output of a linalg op on
// buffers whose buffer is a temporary that nothing else touches (its only
// other uses are views leading back to the op and its deallocation) is not
// written: the output is dropped from the op, or the op erased when it was
// its only output, and the temporary with it.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "llvm/ADT/SmallBitVector.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_DROPUNREADOUTPUTSPASS
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// Whether `init` of `op` writes a temporary nothing reads: nothing but
/// `op` uses it (views and its deallocation aside), `op` only through
/// `init`, and `op` does not read what is there first.
bool isUnread(linalg::LinalgOp op, OpOperand &init) {
  Value base = getBaseBuffer(init.get());
  return base.getDefiningOp<memref::AllocOp>() &&
         !op.payloadUsesValueFromOperand(&init) && isOnlyUsedBy(base, {op}) &&
         llvm::count_if(op->getOperands(), [&](Value operand) {
           return isa<MemRefType>(operand.getType()) &&
                  getBaseBuffer(operand) == base;
         }) == 1;
}

/// Whether the operands of `op` but its output `position` still give every
/// loop its range (one of their maps names it): an output that alone
/// spans a loop (partials that write what they fold from a row's value
/// alone) must stay for the loop to exist.
bool definesLoopsWithout(linalg::GenericOp op, unsigned position) {
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  maps.erase(maps.begin() + op.getNumDpsInputs() + position);
  llvm::SmallBitVector named(op.getNumLoops());
  for (AffineMap map : maps)
    for (AffineExpr expr : map.getResults())
      if (auto dim = dyn_cast<AffineDimExpr>(expr))
        named.set(dim.getPosition());
  return named.all();
}

/// `op` without its output `position` (a generic: its map, block argument
/// and yielded value go too).
void dropOutput(linalg::GenericOp op, unsigned position) {
  OpBuilder builder(op);
  SmallVector<Value> outputs(op.getDpsInits());
  outputs.erase(outputs.begin() + position);
  SmallVector<AffineMap> maps = op.getIndexingMapsArray();
  unsigned argument = op.getNumDpsInputs() + position;
  maps.erase(maps.begin() + argument);
  auto dropped = builder.create<linalg::GenericOp>(
      op.getLoc(), TypeRange{}, op.getDpsInputs(), outputs, maps,
      op.getIteratorTypesArray());
  for (NamedAttribute attribute : op->getDiscardableAttrs())
    dropped->setAttr(attribute.getName(), attribute.getValue());
  dropped.getRegion().takeBody(op.getRegion());
  Block &body = dropped.getRegion().front();
  body.getTerminator()->eraseOperand(position);
  body.eraseArgument(argument);
  op.erase();
}

/// Erases the views of `value`, its deallocations and their own views.
void eraseViews(Value value) {
  for (Operation *user : llvm::make_early_inc_range(value.getUsers())) {
    if (user->getNumResults() == 1)
      eraseViews(user->getResult(0));
    user->erase();
  }
}

/// Erases the temporary `base` once nothing but its views and
/// deallocations use it.
void eraseIfUnused(Value base) {
  if (!isOnlyUsedBy(base, {}))
    return;
  eraseViews(base);
  base.getDefiningOp()->erase();
}

/// Drops one unread output of `op` (erasing `op` if it was its only
/// one), and its temporary if nothing else uses it; false when `op` has
/// none to drop.
bool dropOneUnreadOutput(linalg::LinalgOp op) {
  for (int64_t position = op.getNumDpsInits() - 1; position >= 0; --position) {
    OpOperand &init = *op.getDpsInitOperand(position);
    if (!isUnread(op, init))
      continue;
    Value base = getBaseBuffer(init.get());
    if (op.getNumDpsInits() == 1) {
      // Its only output: the op computes nothing anyone reads.
      op->erase();
    } else if (auto generic = dyn_cast<linalg::GenericOp>(op.getOperation());
               generic && definesLoopsWithout(generic, position)) {
      dropOutput(generic, position);
    } else {
      continue;
    }
    eraseIfUnused(base);
    return true;
  }
  return false;
}

struct DropUnreadOutputsPass
    : mantissa::impl::DropUnreadOutputsPassBase<DropUnreadOutputsPass> {
  void runOnOperation() override {
    // Until nothing changes: a rebuilt generic may have another output to
    // drop.
    bool changed = true;
    while (changed) {
      changed = false;
      SmallVector<linalg::LinalgOp> ops;
      getOperation().walk([&](linalg::LinalgOp op) {
        if (op.hasPureBufferSemantics())
          ops.push_back(op);
      });
      for (linalg::LinalgOp op : ops)
        if (dropOneUnreadOutput(op)) {
          changed = true;
          break;
        }
    }
  }
};

} // namespace
