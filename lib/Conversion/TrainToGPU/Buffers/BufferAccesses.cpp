//===- BufferAccesses.cpp - What ops of a bufferized step touch -----------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

using namespace mlir;
using namespace mlir::mantissa;

int64_t mlir::mantissa::getStorageBytes(Type element) {
  if (element.isInteger(1))
    return 1;
  return std::max<int64_t>(1, element.getIntOrFloatBitWidth() / 8);
}

bool mlir::mantissa::isViewOp(Operation *op) {
  return isa<ViewLikeOpInterface, memref::TransposeOp, memref::CastOp>(op);
}

bool mlir::mantissa::isOnlyUsedBy(Value base, ArrayRef<Operation *> allowed) {
  SmallVector<Value> worklist = {base};
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    for (Operation *user : value.getUsers()) {
      if (isa<memref::DeallocOp>(user) || llvm::is_contained(allowed, user))
        continue;
      if (isViewOp(user) && user->getNumResults() == 1) {
        worklist.push_back(user->getResult(0));
        continue;
      }
      return false;
    }
  }
  return true;
}

Value mlir::mantissa::getBaseBuffer(Value value) {
  while (true) {
    if (auto view = value.getDefiningOp<ViewLikeOpInterface>())
      value = view.getViewSource();
    else if (auto cast = value.getDefiningOp<memref::CastOp>())
      value = cast.getSource();
    else if (auto transpose = value.getDefiningOp<memref::TransposeOp>())
      value = transpose.getIn();
    else
      return value;
  }
}

BufferAccesses BufferAccesses::of(Operation *op) {
  BufferAccesses accesses;
  op->walk([&](Operation *nested) {
    // linalg ops and the ops formed for the GPU (train.attention_kernel).
    if (auto linalgOp = dyn_cast<DestinationStyleOpInterface>(nested)) {
      for (OpOperand *input : linalgOp.getDpsInputOperands())
        if (isa<MemRefType>(input->get().getType()))
          accesses.reads.insert(getBaseBuffer(input->get()));
      for (OpOperand &output : linalgOp.getDpsInitsMutable()) {
        accesses.writes.insert(getBaseBuffer(output.get()));
        // An output a body reads (an accumulation) is read too.
        accesses.reads.insert(getBaseBuffer(output.get()));
      }
    } else if (auto load = dyn_cast<memref::LoadOp>(nested)) {
      accesses.reads.insert(getBaseBuffer(load.getMemref()));
    } else if (auto store = dyn_cast<memref::StoreOp>(nested)) {
      accesses.writes.insert(getBaseBuffer(store.getMemref()));
    } else if (!isMemoryEffectFree(nested) &&
               !isa<memref::AllocOp, memref::DeallocOp>(nested) &&
               !nested->hasTrait<OpTrait::HasRecursiveMemoryEffects>()) {
      accesses.known = false;
    }
  });
  return accesses;
}

bool mlir::mantissa::isGemmEpilogueCandidate(Operation *op) {
  Operation *before = op->getPrevNode();
  while (before && (isa<memref::AllocOp>(before) || isViewOp(before) ||
                    before->hasTrait<OpTrait::ConstantLike>()))
    before = before->getPrevNode();
  auto previous = dyn_cast_or_null<linalg::LinalgOp>(before);
  if (!previous || previous.getNumReductionLoops() == 0)
    return false;
  BufferAccesses accesses = BufferAccesses::of(op);
  return llvm::any_of(previous.getDpsInits(), [&](Value output) {
    return accesses.reads.contains(getBaseBuffer(output));
  });
}

arith::TruncFOp mlir::mantissa::getElementRounding(linalg::GenericOp op) {
  if (op.getNumDpsInputs() != 1 || op.getNumDpsInits() != 1 ||
      op.getNumParallelLoops() != op.getNumLoops() ||
      !op.hasPureBufferSemantics() ||
      !llvm::all_of(op.getIndexingMapsArray(),
                    [](AffineMap map) { return map.isPermutation(); }))
    return {};
  Block *body = op.getBody();
  auto truncate = dyn_cast<arith::TruncFOp>(body->front());
  if (body->getOperations().size() != 2 || !truncate ||
      truncate.getIn() != body->getArgument(0) ||
      body->getTerminator()->getOperand(0) != truncate.getResult())
    return {};
  return truncate;
}

Value mlir::mantissa::rebuildView(OpBuilder &builder, Operation *view,
                                  Value source) {
  auto sourceType = cast<MemRefType>(source.getType());
  Location loc = view->getLoc();
  if (auto expand = dyn_cast<memref::ExpandShapeOp>(view)) {
    FailureOr<MemRefType> type = memref::ExpandShapeOp::computeExpandedType(
        sourceType, expand.getResultType().getShape(),
        expand.getReassociationIndices());
    if (failed(type))
      return {};
    return builder.create<memref::ExpandShapeOp>(
        loc, *type, source, expand.getReassociationIndices());
  }
  if (auto collapse = dyn_cast<memref::CollapseShapeOp>(view)) {
    if (!memref::CollapseShapeOp::isGuaranteedCollapsible(
            sourceType, collapse.getReassociationIndices()))
      return {};
    return builder.create<memref::CollapseShapeOp>(
        loc, source, collapse.getReassociationIndices());
  }
  if (auto transpose = dyn_cast<memref::TransposeOp>(view))
    return builder.create<memref::TransposeOp>(
        loc, source, AffineMapAttr::get(transpose.getPermutation()));
  // The same static window (RoPE's halves of the last dimension), its
  // strides the new source's.
  if (auto subview = dyn_cast<memref::SubViewOp>(view)) {
    if (!subview.getOffsets().empty() || !subview.getSizes().empty() ||
        !subview.getStrides().empty())
      return {};
    auto type = cast<MemRefType>(memref::SubViewOp::inferRankReducedResultType(
        subview.getType().getShape(), sourceType, subview.getMixedOffsets(),
        subview.getMixedSizes(), subview.getMixedStrides()));
    return builder.create<memref::SubViewOp>(
        loc, type, source, subview.getMixedOffsets(), subview.getMixedSizes(),
        subview.getMixedStrides());
  }
  return {};
}

bool ReadRedirection::collect(Value value, Value replacement,
                              Operation *writer) {
  for (OpOperand &use : value.getUses()) {
    Operation *user = use.getOwner();
    if (user == writer || isa<memref::DeallocOp>(user))
      continue;
    // Linalg ops and the attention kernels read their inputs through any
    // strided view.
    auto destinationStyle = dyn_cast<DestinationStyleOpInterface>(user);
    if (destinationStyle &&
        isa<linalg::LinalgOp, train::AttentionKernelOp>(user)) {
      if (!destinationStyle.isDpsInput(&use))
        return false;
      reads.push_back({&use, value, replacement});
      continue;
    }
    OpBuilder builder(user);
    Value view = rebuildView(builder, user, replacement);
    if (!view)
      return false;
    oldViews.push_back(user);
    newViews.push_back(view.getDefiningOp());
    if (!collect(user->getResult(0), view, nullptr))
      return false;
  }
  return true;
}

void ReadRedirection::apply(bool redirected) {
  for (Read &read : reads)
    read.operand->set(redirected ? read.after : read.before);
}

void ReadRedirection::eraseViews(bool newOnes) {
  for (Operation *view : llvm::reverse(newOnes ? newViews : oldViews))
    view->erase();
}

bool mlir::mantissa::writesBuffer(Operation *op, Value base) {
  bool writes = false;
  op->walk([&](Operation *nested) {
    if (auto linalgOp = dyn_cast<linalg::LinalgOp>(nested)) {
      for (OpOperand &init : linalgOp.getDpsInitsMutable())
        writes |= getBaseBuffer(init.get()) == base;
    } else if (auto store = dyn_cast<memref::StoreOp>(nested)) {
      writes |= getBaseBuffer(store.getMemref()) == base;
    } else if (auto copy = dyn_cast<memref::CopyOp>(nested)) {
      writes |= getBaseBuffer(copy.getTarget()) == base;
    }
  });
  return writes;
}

ExpandedOperand
mlir::mantissa::expandOperand(AffineMap map, ArrayRef<int64_t> operandShape,
                              ArrayRef<SmallVector<int64_t, 2>> loops,
                              AffineMap loopMap, ArrayRef<int64_t> loopSizes) {
  ExpandedOperand result;
  SmallVector<AffineExpr> results;
  for (auto [dim, expr] : llvm::enumerate(map.getResults())) {
    SmallVector<int64_t, 2> &group = result.groups.emplace_back();
    if (auto loop = dyn_cast<AffineDimExpr>(expr)) {
      ArrayRef<int64_t> expanded = loops[loop.getPosition()];
      result.expands |= expanded.size() != 1;
      for (int64_t next : expanded) {
        group.push_back(result.shape.size());
        result.shape.push_back(loopSizes[next]);
        results.push_back(loopMap.getResult(next));
      }
      continue;
    }
    group.push_back(result.shape.size());
    result.shape.push_back(operandShape[dim]);
    results.push_back(expr);
  }
  result.map =
      AffineMap::get(loopMap.getNumDims(), 0, results, map.getContext());
  return result;
}
