//===- PackArena.cpp - The GPU step's temporaries in one arena ------------===//
//
// mantissa-pack-arena: each memref.alloc of a bufferized step that the GPU
// program touches gets its offset in one arena of temporaries, first fit
// over their lifetimes, where each kernel runs at its launch
// (mantissa-group-launches).
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/ArenaPlacement.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/GpuStepOps.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/MathExtras.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_PACKARENAPASS
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// A temporary: its allocation, bytes in the arena, and the positions of
/// the step where the program first and last touches it.
struct Lifetime {
  memref::AllocOp alloc;
  int64_t bytes, begin, end;
};

/// The lifetimes of the temporaries of `body` that the program touches, in
/// the order of their allocations: each op touches what its launch reads
/// and writes (getGpuOpBuffers), at its position, or for a kernel in a
/// launch, at the position of the launch's first member.
std::vector<Lifetime>
getLifetimes(Block &body,
             const llvm::DenseMap<Operation *, GpuStepOpRole> &roles) {
  llvm::MapVector<Operation *, Lifetime> lifetimes;
  for (auto alloc : body.getOps<memref::AllocOp>())
    lifetimes[alloc] = {
        alloc,
        static_cast<int64_t>(llvm::alignTo(getGpuBufferBytes(alloc.getType()),
                                           kGpuBufferAlignment)),
        std::numeric_limits<int64_t>::max(), -1};
  llvm::DenseMap<int64_t, int64_t> launches;
  int64_t position = -1;
  for (Operation &op : body) {
    ++position;
    int64_t runs = position;
    if (std::optional<GpuLaunchMark> mark = getGpuLaunchMark(&op))
      runs = launches.try_emplace(mark->launch, position).first->second;
    GpuOpBuffers buffers = getGpuOpBuffers(&op, roles.find(&op)->second);
    for (Value view : llvm::concat<Value>(buffers.reads, buffers.writes)) {
      auto found = lifetimes.find(getBaseBuffer(view).getDefiningOp());
      if (found == lifetimes.end())
        continue;
      found->second.begin = std::min(found->second.begin, runs);
      found->second.end = std::max(found->second.end, runs);
    }
  }
  std::vector<Lifetime> result;
  for (auto &entry : lifetimes)
    if (entry.second.end >= 0)
      result.push_back(entry.second);
  return result;
}

struct PackArenaPass
    : public mlir::mantissa::impl::PackArenaPassBase<PackArenaPass> {
  void runOnOperation() override {
    func::FuncOp function = getOperation();
    if (function.isExternal())
      return;
    Block &body = function.getBody().front();
    for (auto alloc : body.getOps<memref::AllocOp>())
      if (!alloc.getType().hasStaticShape()) {
        alloc.emitOpError() << "has a dynamic shape the GPU program cannot "
                               "allocate ahead of time";
        return signalPassFailure();
      }
    FailureOr<llvm::DenseMap<Operation *, GpuStepOpRole>> roles =
        getGpuStepOpRoles(body);
    if (failed(roles))
      return signalPassFailure();
    std::vector<Lifetime> lifetimes = getLifetimes(body, *roles);
    // First fit, in the order lifetimes start (launches move some starts
    // up; allocations in order where they start together).
    std::vector<ArenaInterval> intervals;
    for (const Lifetime &lifetime : lifetimes)
      intervals.push_back({lifetime.bytes, lifetime.begin, lifetime.end});
    SmallVector<int64_t> offsets;
    int64_t arenaBytes = placeInArena(intervals, offsets);
    Builder builder(function.getContext());
    for (auto [lifetime, offset] : llvm::zip_equal(lifetimes, offsets))
      lifetime.alloc->setAttr(kGpuArenaOffsetAttr,
                              builder.getI64IntegerAttr(offset));
    function->setAttr(kGpuArenaBytesAttr,
                      builder.getI64IntegerAttr(arenaBytes));
  }
};

} // namespace
