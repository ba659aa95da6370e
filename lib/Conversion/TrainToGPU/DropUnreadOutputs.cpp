//===- DropUnreadOutputs.cpp - Temporaries nothing reads ------------------===//
//
// mantissa-drop-unread-outputs (Passes.td): an output of a linalg op on
// buffers whose buffer is a temporary that nothing else touches (its only
// other uses are views leading back to the op and its deallocation) is not
// written: the output is dropped from the op, or the op erased when it was
// its only output, and the temporary with it.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/BufferAccesses.h"
#include "mantissa/Conversion/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_DROPUNREADOUTPUTSPASS
#include "mantissa/Conversion/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// Whether every use of `value` (through views) is `init` or a
/// deallocation, so that what `init`'s op writes there is never read.
bool onlyWrittenThrough(Value value, OpOperand &init) {
  for (OpOperand &use : value.getUses()) {
    Operation *user = use.getOwner();
    if (&use == &init || isa<memref::DeallocOp>(user))
      continue;
    if (isViewOp(user) && user->getNumResults() == 1 &&
        onlyWrittenThrough(user->getResult(0), init))
      continue;
    return false;
  }
  return true;
}

/// Whether `init` of `op` writes a temporary nothing reads, and `op` does
/// not read what is there first.
bool isUnread(linalg::LinalgOp op, OpOperand &init) {
  Value base = getBaseBuffer(init.get());
  return base.getDefiningOp<memref::AllocOp>() &&
         !op.payloadUsesValueFromOperand(&init) &&
         onlyWrittenThrough(base, init);
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

/// Erases `value`'s views and deallocations and the allocation itself,
/// once nothing else uses it.
void eraseIfUnused(Value base) {
  SmallVector<Operation *> dead;
  std::function<bool(Value)> collect = [&](Value value) {
    for (Operation *user : value.getUsers()) {
      if (isa<memref::DeallocOp>(user)) {
        dead.push_back(user);
      } else if (isViewOp(user) && user->getNumResults() == 1 &&
                 collect(user->getResult(0))) {
        dead.push_back(user);
      } else {
        return false;
      }
    }
    return true;
  };
  if (!collect(base))
    return;
  for (Operation *op : dead)
    op->erase();
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
    } else if (auto generic = dyn_cast<linalg::GenericOp>(op.getOperation())) {
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
