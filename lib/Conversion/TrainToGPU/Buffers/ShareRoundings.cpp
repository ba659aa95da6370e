//===- ShareRoundings.cpp - Round each buffer to the compute dtype once ---===//
//
// mantissa-share-roundings (Passes.td): every rounding of an fp32 buffer to
// bf16 (fp16) reads it through its own view (a weight for the forward
// product, its transpose for the backward one); they become views of one
// rounded copy made right after the buffer is written, which then merges
// into the kernel that writes the buffer, or into the GEMM's epilogue.
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
#define GEN_PASS_DEF_SHAREROUNDINGSPASS
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// The type an all-parallel generic rounds its one fp32 input to, when
/// that is all it does (getElementRounding, identity maps), into a
/// temporary of its own.
Type getRoundingType(linalg::GenericOp op) {
  arith::TruncFOp truncate = getElementRounding(op);
  if (!truncate || !truncate.getIn().getType().isF32() ||
      !llvm::all_of(op.getIndexingMapsArray(),
                    [](AffineMap map) { return map.isIdentity(); }) ||
      !op.getDpsInits()[0].getDefiningOp<memref::AllocOp>())
    return {};
  return truncate.getType();
}

/// Whether a rounding to `type` right after `writer` merges with it.
bool isMergeableWriter(Operation *writer, Type type) {
  auto linalgOp = dyn_cast_or_null<linalg::LinalgOp>(writer);
  if (!linalgOp)
    return false;
  if (linalgOp.getNumReductionLoops() == 0)
    return isa<linalg::GenericOp>(writer);
  return llvm::all_of(linalgOp.getDpsInputs(), [&](Value input) {
    return getElementTypeOrSelf(input.getType()) == type;
  });
}

/// The views between `base` and `value`, outermost first; failure when
/// `value` is not `base` seen through view ops.
FailureOr<SmallVector<Operation *>> getViewChain(Value base, Value value) {
  SmallVector<Operation *> chain;
  while (value != base) {
    Operation *definition = value.getDefiningOp();
    if (!definition || !isViewOp(definition))
      return failure();
    chain.insert(chain.begin(), definition);
    value = definition->getOperand(0);
  }
  return chain;
}

struct ShareRoundingsPass
    : mantissa::impl::ShareRoundingsPassBase<ShareRoundingsPass> {
  void runOnOperation() override {
    for (Block &block : getOperation().getBody())
      shareIn(block);
  }

  /// The ops of a block that write each buffer, in order, and those that
  /// may write any (unknown effects). Sharing does not change them: the
  /// roundings it adds and removes write only their own bf16 copies.
  struct Writers {
    llvm::DenseMap<Value, SmallVector<Operation *>> byBuffer;
    SmallVector<Operation *> unknown;
  };

  void shareIn(Block &block) {
    // Roundings by the buffer they read and the dtype they round to.
    llvm::MapVector<std::pair<Value, Type>, SmallVector<linalg::GenericOp>>
        groups;
    Writers writers;
    for (Operation &op : block) {
      BufferAccesses accesses = BufferAccesses::of(&op);
      if (!accesses.known)
        writers.unknown.push_back(&op);
      for (Value written : accesses.writes)
        writers.byBuffer[written].push_back(&op);
      if (auto generic = dyn_cast<linalg::GenericOp>(op))
        if (Type type = getRoundingType(generic))
          groups[{getBaseBuffer(generic.getDpsInputs()[0]), type}].push_back(
              generic);
    }
    for (auto &[key, roundings] : groups)
      share(block, key.first, key.second, roundings, writers);
  }

  void share(Block &block, Value base, Type type,
             ArrayRef<linalg::GenericOp> roundings, const Writers &writers) {
    auto baseType = dyn_cast<MemRefType>(base.getType());
    if (!baseType || !baseType.hasStaticShape() ||
        !baseType.getLayout().isIdentity() ||
        !baseType.getElementType().isF32())
      return;
    // The buffer is complete before the first rounding and stays so: the
    // shared copy goes right after its last writer (or first in the block,
    // for an argument nothing writes).
    Operation *firstRounding = roundings.front();
    Operation *lastWriter = nullptr;
    SmallVector<Operation *> baseWriters(writers.unknown);
    if (auto found = writers.byBuffer.find(base);
        found != writers.byBuffer.end())
      llvm::append_range(baseWriters, found->second);
    for (Operation *writer : baseWriters) {
      if (!writer->isBeforeInBlock(firstRounding))
        return;
      if (!lastWriter || lastWriter->isBeforeInBlock(writer))
        lastWriter = writer;
    }
    if (!lastWriter && !isa<BlockArgument>(base))
      return;
    if (auto alloc = base.getDefiningOp<memref::AllocOp>();
        alloc && alloc->getBlock() != &block)
      return;
    // A lone rounding moves only where it then merges: into the
    // elementwise kernel that writes the buffer, or into the epilogue of a
    // product of operands in the rounded dtype (cuBLASLt writes that dtype
    // from such a product, not from an fp32 one). Elsewhere it stays, free
    // to merge with its neighbours.
    if (roundings.size() == 1 && !isMergeableWriter(lastWriter, type))
      return;
    // The rounded copy, over the buffer's own shape.
    MLIRContext *context = &getContext();
    OpBuilder builder(context);
    if (lastWriter)
      builder.setInsertionPointAfter(lastWriter);
    else
      builder.setInsertionPointToStart(&block);
    Location loc = firstRounding->getLoc();
    auto copyType = MemRefType::get(baseType.getShape(), type);
    Value copy = builder.create<memref::AllocOp>(loc, copyType);
    unsigned rank = baseType.getRank();
    AffineMap identity = builder.getMultiDimIdentityMap(rank);
    auto rounding = builder.create<linalg::GenericOp>(
        loc, TypeRange(), ValueRange{base}, ValueRange{copy},
        ArrayRef<AffineMap>{identity, identity},
        SmallVector<utils::IteratorType>(rank, utils::IteratorType::parallel),
        [&](OpBuilder &nested, Location bodyLoc, ValueRange arguments) {
          Value rounded =
              nested.create<arith::TruncFOp>(bodyLoc, type, arguments[0]);
          nested.create<linalg::YieldOp>(bodyLoc, rounded);
        });

    // Each rounding's readers read the same view of the copy instead.
    bool replacedAny = false;
    for (linalg::GenericOp op : roundings) {
      FailureOr<SmallVector<Operation *>> chain =
          getViewChain(base, op.getDpsInputs()[0]);
      if (failed(chain))
        continue;
      OpBuilder viewBuilder(op);
      Value view = copy;
      SmallVector<Operation *> built;
      for (Operation *step : *chain) {
        view = rebuildView(viewBuilder, step, view);
        if (!view)
          break;
        built.push_back(view.getDefiningOp());
      }
      Value output = op.getDpsInits()[0];
      ReadRedirection redirection;
      bool ok = view && redirection.collect(output, view, op);
      if (!ok) {
        redirection.eraseViews(/*newOnes=*/true);
        for (Operation *step : llvm::reverse(built))
          step->erase();
        continue;
      }
      redirection.apply(/*redirected=*/true);
      redirection.eraseViews(/*newOnes=*/false);
      Operation *alloc = output.getDefiningOp();
      op.erase();
      for (Operation *user : llvm::make_early_inc_range(alloc->getUsers()))
        user->erase();
      alloc->erase();
      replacedAny = true;
    }
    if (!replacedAny) {
      rounding.erase();
      copy.getDefiningOp()->erase();
      return;
    }
    // Freed where the buffer is: the deallocations come at the end.
    if (Operation *terminator = block.getTerminator()) {
      OpBuilder endBuilder(terminator);
      endBuilder.create<memref::DeallocOp>(loc, copy);
    }
  }
};

} // namespace
