//===- PackCpuArena.cpp - A CPU function's temporaries in one allocation --===//
//
// mantissa-pack-cpu-arena (Passes.td): the temporaries of a bufferized
// function's body become views of one arena allocated when it starts,
// first fit over their lifetimes, so that a step call makes one malloc and
// one free where it made one per temporary.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/ArenaPlacement.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Conversion/TrainToLinalg/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/MathExtras.h"

#include <limits>

namespace mlir::mantissa {
#define GEN_PASS_DEF_PACKCPUARENAPASS
#include "mantissa/Conversion/TrainToLinalg/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;

namespace {

/// Offsets in the arena are multiples of this: a cache line, and the
/// alignment bufferization gives every temporary.
constexpr int64_t kArenaAlignment = 64;

/// A temporary placed in the arena: its allocation, its bytes, the
/// positions in the body of the first and last op that use it, and the
/// deallocations that go.
struct Temporary {
  memref::AllocOp alloc;
  int64_t bytes, begin, end;
  SmallVector<memref::DeallocOp> deallocs;
};

/// The bytes of one element of `type` in memory (getStorageBytes; an index
/// is 64-bit on the CPU), or nothing for an element type the arena does not
/// hold.
std::optional<int64_t> getElementBytes(Type type) {
  if (type.isIndex())
    return 8;
  if (type.isIntOrFloat())
    return mantissa::getStorageBytes(type);
  return std::nullopt;
}

/// `alloc` as a temporary of `body` (whose ops have the positions
/// `positions`), or nothing when the arena cannot hold it: a dynamic shape
/// or a layout a view of bytes cannot have, a use that frees it other than
/// a deallocation in the body, or one that lets it escape the function.
std::optional<Temporary>
getTemporary(memref::AllocOp alloc, Block &body,
             const llvm::DenseMap<Operation *, int64_t> &positions) {
  MemRefType type = alloc.getType();
  std::optional<int64_t> elementBytes = getElementBytes(type.getElementType());
  if (!type.hasStaticShape() || !type.getLayout().isIdentity() ||
      type.getMemorySpace() || !elementBytes ||
      !alloc.getSymbolOperands().empty())
    return std::nullopt;
  Temporary temporary{
      alloc,
      static_cast<int64_t>(llvm::alignTo(type.getNumElements() * *elementBytes,
                                         kArenaAlignment)),
      std::numeric_limits<int64_t>::max(),
      -1,
      {}};
  // Every op that uses the temporary or a value computed from it (a view,
  // its pointer as an index), through the results of the body's op that
  // holds the use (a value a region yields flows out there).
  llvm::SetVector<Value> derived;
  derived.insert(alloc.getResult());
  for (size_t next = 0; next < derived.size(); ++next) {
    for (OpOperand &use : derived[next].getUses()) {
      Operation *user = use.getOwner();
      if (auto dealloc = dyn_cast<memref::DeallocOp>(user)) {
        if (dealloc.getMemref() != alloc.getResult() ||
            dealloc->getBlock() != &body)
          return std::nullopt;
        temporary.deallocs.push_back(dealloc);
        continue;
      }
      if (isa<func::ReturnOp>(user) && isa<BaseMemRefType>(use.get().getType()))
        return std::nullopt;
      Operation *ancestor = body.findAncestorOpInBlock(*user);
      if (!ancestor)
        return std::nullopt;
      int64_t position = positions.lookup(ancestor);
      temporary.begin = std::min(temporary.begin, position);
      temporary.end = std::max(temporary.end, position);
      for (Operation *op = user;; op = op->getParentOp()) {
        derived.insert(op->result_begin(), op->result_end());
        if (op == ancestor)
          break;
      }
    }
  }
  if (temporary.end < 0)
    return std::nullopt;

  return temporary;
}

/// Makes every `memref.extract_aligned_pointer_as_index` of `view` (a
/// view of `arena` at byte `shift`) or of a view of it (the pointers the
/// GEMM calls pass) the arena's pointer plus `shift`. The aligned pointer of
/// a `memref.view` is its source's moved by the shift, but MLIR's
/// expand-strided-metadata replaces the extraction of a view-like op's
/// pointer by its source's, which for `memref.view` drops the shift.
void addressThroughArena(Value view, Value arena, Value shift) {
  SmallVector<Value> worklist{view};
  SmallVector<memref::ExtractAlignedPointerAsIndexOp> extractions;
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    for (Operation *user : value.getUsers()) {
      if (auto extraction =
              dyn_cast<memref::ExtractAlignedPointerAsIndexOp>(user))
        extractions.push_back(extraction);
      else if (auto viewLike = dyn_cast<ViewLikeOpInterface>(user);
               viewLike && viewLike.getViewSource() == value)
        llvm::append_range(worklist, user->getResults());
    }
  }
  for (memref::ExtractAlignedPointerAsIndexOp extraction : extractions) {
    OpBuilder builder(extraction);
    Location loc = extraction.getLoc();
    Value base =
        builder.create<memref::ExtractAlignedPointerAsIndexOp>(loc, arena);
    Value address = builder.create<arith::AddIOp>(loc, base, shift);
    extraction.replaceAllUsesWith(address);
    extraction.erase();
  }
}

struct PackCpuArenaPass
    : mantissa::impl::PackCpuArenaPassBase<PackCpuArenaPass> {
  void runOnOperation() override {
    func::FuncOp function = getOperation();
    if (function.isExternal() || !function.getBody().hasOneBlock())
      return;
    Block &body = function.getBody().front();
    llvm::DenseMap<Operation *, int64_t> positions;
    for (auto [position, op] : llvm::enumerate(body))
      positions[&op] = position;
    std::vector<Temporary> temporaries;
    for (auto alloc : body.getOps<memref::AllocOp>())
      if (std::optional<Temporary> temporary =
              getTemporary(alloc, body, positions))
        temporaries.push_back(std::move(*temporary));
    if (temporaries.empty())
      return;

    // First fit, in the order lifetimes start: each temporary takes the
    // lowest offset that no temporary alive at the same time occupies.
    std::vector<mantissa::ArenaInterval> intervals;
    for (const Temporary &temporary : temporaries)
      intervals.push_back({temporary.bytes, temporary.begin, temporary.end});
    SmallVector<int64_t> offsets;
    int64_t arenaBytes = mantissa::placeInArena(intervals, offsets);
    OpBuilder builder(&getContext());
    builder.setInsertionPointToStart(&body);
    Location loc = function.getLoc();
    auto arenaType = MemRefType::get({arenaBytes}, builder.getI8Type());
    Value arena = builder.create<memref::AllocOp>(
        loc, arenaType, builder.getI64IntegerAttr(kArenaAlignment));
    for (auto [temporary, offset] : llvm::zip_equal(temporaries, offsets)) {
      builder.setInsertionPoint(temporary.alloc);
      Value shift = builder.create<arith::ConstantIndexOp>(
          temporary.alloc.getLoc(), offset);
      Value view = builder.create<memref::ViewOp>(temporary.alloc.getLoc(),
                                                  temporary.alloc.getType(),
                                                  arena, shift, ValueRange());
      for (memref::DeallocOp dealloc : temporary.deallocs)
        dealloc.erase();
      temporary.alloc.getResult().replaceAllUsesWith(view);
      temporary.alloc.erase();
      addressThroughArena(view, arena, shift);
    }
    builder.setInsertionPoint(body.getTerminator());
    builder.create<memref::DeallocOp>(loc, arena);
  }
};

} // namespace
