//===- GpuHostEmulation.cpp - The GPU step's kernels run on the host -----===//
//
// emulateGpuKernels (GpuHostEmulation.h): every kernel of the step's
// gpu.module as a host function that runs each block's threads in turn,
// from the very gpu.func that became the PTX, so that the stand-in driver
// of the tests runs GPU programs on the CPU (docs/gpu-step.md). Test
// support in a library of its own (MantissaGpuHostEmulation): the code
// generator does not link it. A kernel whose warps
// run in lockstep (kWarpLockstepAttr: the fused attention) runs a warp at a
// time instead, its ops between two exchanges in a loop over the lanes, and
// the block's warps one after the other between barriers (WarpEmulation).
// Either way each op of the kernel is emitted once: the host code grows
// with the kernel, not with its threads.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/GpuHostEmulation.h"
#include "mantissa/Conversion/TrainToGPU/GpuKernelMarks.h"
#include "mantissa/Conversion/TrainToLLVM.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"
#include <map>

using namespace mlir;
using namespace mlir::mantissa;

/// A 1-D launch on the host: the block's and thread's indices, the grid
/// and block sizes, and the values of the other dimensions (0 and 1).
struct HostGeometry {
  Value block, thread, grid, blockSize, zero, one;
};

/// The value of launch-geometry op `op` (block or thread index, grid or
/// block size) in `geometry`; null for any other op.
static Value getHostGeometry(Operation *op, const HostGeometry &geometry) {
  auto x = [](auto idOp) { return idOp.getDimension() == gpu::Dimension::x; };
  if (auto id = dyn_cast<gpu::BlockIdOp>(op))
    return x(id) ? geometry.block : geometry.zero;
  if (auto id = dyn_cast<gpu::ThreadIdOp>(op))
    return x(id) ? geometry.thread : geometry.zero;
  if (auto dim = dyn_cast<gpu::GridDimOp>(op))
    return x(dim) ? geometry.grid : geometry.one;
  if (auto dim = dyn_cast<gpu::BlockDimOp>(op))
    return x(dim) ? geometry.blockSize : geometry.one;
  return nullptr;
}

/// The host function of `kernel` (its arguments, then the grid and the
/// block size), at the end of `hostModule`; `builder` at its entry.
static Block *createHostFunction(OpBuilder &builder, gpu::GPUFuncOp kernel,
                                 ModuleOp hostModule) {
  builder.setInsertionPointToEnd(hostModule.getBody());
  SmallVector<Type> types(kernel.getArgumentTypes());
  types.append(2, builder.getIndexType());
  auto host = builder.create<func::FuncOp>(kernel.getLoc(), kernel.getName(),
                                           builder.getFunctionType(types, {}));
  Block *entry = host.addEntryBlock();
  builder.setInsertionPointToStart(entry);
  return entry;
}

namespace {

/// The host emulation of one kernel: its top-level ops in phases, split
/// before each shuffle and at each barrier, which the host runs for every
/// thread of a block before it starts the next. A value that a later phase uses
/// is recomputed there when it is pure (the thread's index, views, constants),
/// else kept per thread in a slot of the block's threads (a loaded value;
/// every shuffled value, which a thread reads from another thread's
/// slot).
class KernelEmulation {
public:
  KernelEmulation(gpu::GPUFuncOp kernel) : kernel(kernel) {}
  LogicalResult build(ModuleOp hostModule);

private:
  bool isRecomputable(Operation *op) const {
    return isMemoryEffectFree(op) && op->getNumRegions() == 0 &&
           !isa<gpu::ShuffleOp>(op);
  }
  /// The value of `value` (of the kernel) in the phase being built.
  FailureOr<Value> lookup(Value value);
  LogicalResult cloneOp(Operation &op);

  gpu::GPUFuncOp kernel;
  llvm::DenseMap<Operation *, unsigned> phaseOf;
  llvm::DenseMap<Value, Value> slots;
  // The phase being built.
  OpBuilder builder{kernel.getContext()};
  IRMapping mapping;
  Value thread;
};

} // namespace

FailureOr<Value> KernelEmulation::lookup(Value value) {
  if (Value mapped = mapping.lookupOrNull(value))
    return mapped;
  Operation *definition = value.getDefiningOp();
  if (!definition)
    return kernel.emitOpError() << "uses a value the host cannot emulate";
  if (auto slot = slots.find(value); slot != slots.end()) {
    Value loaded = builder.create<memref::LoadOp>(value.getLoc(), slot->second,
                                                  ValueRange{thread});
    mapping.map(value, loaded);
    return loaded;
  }
  if (!isRecomputable(definition))
    return definition->emitOpError()
           << "is used across a shuffle and cannot run on the host";
  if (failed(cloneOp(*definition)))
    return failure();
  return mapping.lookup(value);
}

LogicalResult KernelEmulation::cloneOp(Operation &op) {
  llvm::SetVector<Value> used(op.operand_begin(), op.operand_end());
  getUsedValuesDefinedAbove(op.getRegions(), used);
  for (Value value : used) {
    // Values defined inside the kernel's nested regions map as the op is
    // cloned; the rest are the kernel's top-level values.
    Operation *definition = value.getDefiningOp();
    bool topLevel = isa<BlockArgument>(value)
                        ? value.getParentBlock() == &kernel.getBody().front()
                        : definition->getBlock() == &kernel.getBody().front();
    if (topLevel && failed(lookup(value)))
      return failure();
  }
  Location loc = op.getLoc();
  if (auto shuffle = dyn_cast<gpu::ShuffleOp>(op)) {
    // Lane k reads lane k ^ offset's value: a warp of `width` lanes, all
    // valid (the kernels shuffle within full warps).
    Value kept = slots.lookup(shuffle.getValue());
    if (shuffle.getMode() != gpu::ShuffleMode::XOR || !kept)
      return op.emitOpError() << "cannot run on the host (only xor shuffles "
                                 "of values computed in the kernel)";
    auto asIndex = [&](Value value) {
      return builder.create<arith::IndexCastUIOp>(loc, builder.getIndexType(),
                                                  mapping.lookup(value));
    };
    Value width = asIndex(shuffle.getWidth());
    Value lane = builder.create<arith::RemUIOp>(loc, thread, width);
    Value source = builder.create<arith::AddIOp>(
        loc, builder.create<arith::SubIOp>(loc, thread, lane),
        builder.create<arith::XOrIOp>(loc, lane, asIndex(shuffle.getOffset())));
    mapping.map(shuffle.getShuffleResult(),
                builder.create<memref::LoadOp>(loc, kept, ValueRange{source}));
    mapping.map(shuffle.getValid(),
                builder.create<arith::ConstantIntOp>(loc, 1, 1));
  } else {
    builder.clone(op, mapping);
  }
  for (Value result : op.getResults())
    if (auto slot = slots.find(result); slot != slots.end())
      builder.create<memref::StoreOp>(loc, mapping.lookup(result), slot->second,
                                      ValueRange{thread});
  return success();
}

LogicalResult KernelEmulation::build(ModuleOp hostModule) {
  if (!kernel.getBody().hasOneBlock())
    return kernel.emitOpError() << "has control flow the host cannot run";
  Block &body = kernel.getBody().front();
  Location loc = kernel.getLoc();
  Block *entry = createHostFunction(builder, kernel, hostModule);
  Value grid = entry->getArgument(entry->getNumArguments() - 2);
  Value blockSize = entry->getArgument(entry->getNumArguments() - 1);

  // Phases, and the values kept per thread across them.
  SmallVector<SmallVector<Operation *>> phases(1);
  for (Operation &op : body.without_terminator()) {
    if (isa<gpu::ShuffleOp, gpu::BarrierOp>(op))
      phases.emplace_back();
    // A barrier is the split itself: every thread of the block runs the
    // phase before it before any runs the next.
    if (isa<gpu::BarrierOp>(op))
      continue;
    phaseOf[&op] = phases.size() - 1;
    phases.back().push_back(&op);
  }
  for (Operation &op : body.without_terminator()) {
    if (!phaseOf.count(&op))
      continue;
    for (Value result : op.getResults()) {
      bool kept = llvm::any_of(result.getUsers(), [&](Operation *user) {
        Operation *top = body.findAncestorOpInBlock(*user);
        if (auto shuffle = dyn_cast<gpu::ShuffleOp>(user);
            shuffle && shuffle.getValue() == result)
          return true;
        return top && phaseOf.lookup(top) > phaseOf.lookup(&op) &&
               !isRecomputable(&op);
      });
      if (!kept)
        continue;
      if (!result.getType().isIntOrIndexOrFloat())
        return op.emitOpError() << "keeps a value across a shuffle that the "
                                   "host cannot hold per thread";
      slots[result] = builder.create<memref::AllocaOp>(
          loc, MemRefType::get({ShapedType::kDynamic}, result.getType()),
          ValueRange{blockSize});
    }
  }

  Value zero = builder.create<arith::ConstantIndexOp>(loc, 0);
  Value one = builder.create<arith::ConstantIndexOp>(loc, 1);
  Value last = builder.create<arith::SubIOp>(loc, blockSize, one);
  auto blocks = builder.create<scf::ForOp>(loc, zero, grid, one);
  builder.create<func::ReturnOp>(loc);
  // Each phase runs the block's threads from the last to the first, so
  // that a kernel whose threads read what others of the block wrote in the
  // same phase (a missing barrier) reads stale values here too.
  SmallVector<std::pair<scf::ForOp, Value>> threadLoops;
  for (ArrayRef<Operation *> ops : phases) {
    builder.setInsertionPoint(blocks.getBody()->getTerminator());
    auto threads = builder.create<scf::ForOp>(loc, zero, blockSize, one);
    builder.setInsertionPoint(threads.getBody()->getTerminator());
    thread =
        builder.create<arith::SubIOp>(loc, last, threads.getInductionVar());
    threadLoops.push_back({threads, thread});
    mapping.clear();
    mapping.map(kernel.getArguments(), entry->getArguments().drop_back(2));
    // In order: what an op uses of its own phase is cloned before it.
    for (Operation *op : ops)
      if (failed(cloneOp(*op)))
        return failure();
  }
  // Launch geometry as the loops give it: x only (the kernels are 1-D).
  for (auto [threads, reversed] : threadLoops) {
    WalkResult result = threads.getBody()->walk([&](Operation *op) {
      Value replacement = getHostGeometry(
          op, {blocks.getInductionVar(), reversed, grid, blockSize, zero, one});
      if (!replacement) {
        if (isa<gpu::GPUDialect>(op->getDialect()))
          return op->emitOpError() << "cannot run on the host",
                 WalkResult::interrupt();
        return WalkResult::advance();
      }
      op->getResult(0).replaceAllUsesWith(replacement);
      op->erase();
      return WalkResult::skip();
    });
    if (result.wasInterrupted())
      return failure();
  }
  return success();
}

namespace {

/// Where a warp keeps one value of each of its lanes: lane l's is the
/// element (before..., l ^ laneXor, after...) of `memory`. A shuffled value
/// is its source's location with the lanes exchanged (laneXor), not a copy.
struct LaneLocation {
  Value memory;
  SmallVector<Value, 1> before;
  SmallVector<int64_t, 1> after;
  int64_t laneXor = 0;
};

/// The host emulation of a kernel marked kWarpLockstepAttr: a warp at a
/// time. The ops between two exchanges (an xor shuffle, a ballot, an
/// mma.sync, an ldmatrix) run in a loop over the warp's 32 lanes; a value
/// that a later loop or an exchange reads is kept per lane in a slot of 32
/// elements. An exchange then reads every lane's slot: a shuffle reads lane
/// l ^ offset's element, a ballot every lane's predicate, an mma.sync every
/// lane's fragments (multiplied as the PTX ISA lays them out, by
/// mantissa_emulated_mma). Each op of the kernel is emitted once, not once
/// per lane: the host code grows with the kernel, not 32 times it, so that
/// clang compiles the emulation of the fused attention in seconds. A loop
/// or branch that contains an exchange runs once for the warp, with lane
/// 0's bounds or condition (the kernel builder makes them the same on every
/// lane), its carried values and results in slots; the others run inside
/// the lane loops.
///
/// A kernel with barriers (gpu.barrier, at its top level or directly in
/// the body of a loop there, whose bounds are the same in every thread of
/// a block) runs in phases: the ops between two barriers run for every
/// warp of the block, one warp after the other, before the next phase
/// starts. A value that a later phase uses, and a loop's carried values,
/// are kept per warp and lane in a slot. Workgroup memory is the block's,
/// every bit set (NaN) when the block starts. A loop whose body neither
/// starts nor ends with a barrier is rotated: a warp runs the last phase of
/// a step and the first of the next in one phase, as a GPU lets it. A warp
/// that read what another warp writes in the same phase, or wrote what
/// another warp reads, would read it before that warp ran, or overwrite it
/// first: the barriers the kernel needs are checked by the results. (The
/// phases before and after a loop with barriers are phases of their own,
/// as if the loop began and ended with one.)
class WarpEmulation {
public:
  WarpEmulation(gpu::GPUFuncOp kernel, func::FuncOp mma,
                llvm::function_ref<func::FuncOp(int64_t)> ldmatrix)
      : kernel(kernel), mma(mma), ldmatrix(ldmatrix) {}
  LogicalResult build(ModuleOp hostModule);

private:
  static bool isExchange(Operation *op) {
    if (auto assembly = dyn_cast<LLVM::InlineAsmOp>(op))
      return assembly.getAsmString() == kMmaBf16Asm;
    return isa<gpu::ShuffleOp, NVVM::VoteBallotOp, nvgpu::LdMatrixOp>(op);
  }
  static bool containsExchange(Operation *op) {
    return op
        ->walk([](Operation *nested) {
          return isExchange(nested) ? WalkResult::interrupt()
                                    : WalkResult::advance();
        })
        .wasInterrupted();
  }
  /// Whether `op` ends the ops that one loop over the lanes runs.
  static bool endsLaneLoop(Operation *op) {
    return isExchange(op) || containsExchange(op);
  }
  /// An extraction of one result of an mma.sync: read from the product's
  /// fragments where it is used.
  static bool isProductExtract(Operation *op) {
    auto extract = dyn_cast<LLVM::ExtractValueOp>(op);
    Operation *container =
        extract ? extract.getContainer().getDefiningOp() : nullptr;
    return container && isExchange(container) &&
           extract.getPosition().size() == 1;
  }
  /// An op that has no code of its own: a constant or the launch geometry
  /// other than the thread's index, made where it is used, or an
  /// extraction of an mma.sync's result.
  static bool isFree(Operation *op) {
    if (auto thread = dyn_cast<gpu::ThreadIdOp>(op))
      return thread.getDimension() != gpu::Dimension::x;
    return (op->hasTrait<OpTrait::ConstantLike>() &&
            op->getNumRegions() == 0) ||
           isa<gpu::BlockIdOp, gpu::GridDimOp, gpu::BlockDimOp>(op) ||
           isProductExtract(op);
  }
  /// A part of a block of the kernel: a phase's ops, a barrier, or a loop
  /// with barriers in its body.
  struct Segment {
    enum class Kind { Run, Barrier, Loop } kind;
    SmallVector<Operation *> ops;
    scf::ForOp loop;
    /// Run: the values other phases use from it (the values it uses from
    /// other phases are read from their slots where they are used).
    llvm::SetVector<Value> outputs;
  };
  static bool containsBarrier(Operation *op) {
    return op->walk([](gpu::BarrierOp) { return WalkResult::interrupt(); })
        .wasInterrupted();
  }
  /// A loop over the warp's lanes being built, and the kernel's values in
  /// it.
  struct LaneLoop {
    scf::ForOp loop;
    Value lane;
    IRMapping values;
  };

  LogicalResult planSegments(Block &block);
  LogicalResult planSlots();
  LogicalResult emitSegments(Block &block);
  LogicalResult emitSegment(Segment &segment);
  /// A run in a loop over the block's warps, or in the one being built.
  LogicalResult emitRun(Segment &run);
  LogicalResult emitRunInWarp(Segment &run);
  LogicalResult emitLoop(scf::ForOp loop);
  /// In the warp loop being built, `ops` (of one block) in loops over the
  /// lanes between the exchanges.
  LogicalResult emitWarpOps(ArrayRef<Operation *> ops);
  LogicalResult emitWarpBlock(Block &block);
  LogicalResult emitInLane(LaneLoop &loop, Operation &op,
                           const llvm::SmallPtrSetImpl<Operation *> &ops);
  LogicalResult emitExchange(Operation &op);
  LogicalResult emitShuffle(gpu::ShuffleOp shuffle);
  LogicalResult emitBallot(NVVM::VoteBallotOp ballot);
  LogicalResult emitMma(LLVM::InlineAsmOp product);
  LogicalResult emitLdMatrix(nvgpu::LdMatrixOp matrices);
  LogicalResult emitUniformFor(scf::ForOp loop);
  LogicalResult emitUniformIf(scf::IfOp branch);
  /// A loop over the lanes at the builder's point, the builder in it.
  LaneLoop openLaneLoop();
  /// In the warp loop being built, each lane's `values` into `targets`;
  /// through copies first where a value may be read from a target.
  LogicalResult copyLanes(ValueRange values, ArrayRef<LaneLocation> targets,
                          bool throughCopies);
  /// `body` in a loop over the block's warps (`warp`, `warpBase`).
  LogicalResult forEachWarp(llvm::function_ref<LogicalResult()> body);
  /// The value of `value` (of the kernel) in `loop`, for its lane.
  FailureOr<Value> laneValue(LaneLoop &loop, Value value);
  /// Lane 0's value of `value` in the warp loop being built (a bound or
  /// condition the kernel makes the same on every lane).
  FailureOr<Value> firstLaneValue(Value value);
  /// Every lane's value of a loop bound (the same in every thread), outside
  /// the warp loops.
  FailureOr<Value> uniformValue(Value value);
  /// The value of `value` where it is the same for every lane of the warp
  /// being built: the function's or the warp's, or a free op's made here.
  Value sharedValue(Value value);
  /// Where the warp being built keeps `value`, if it does.
  std::optional<LaneLocation> locationOf(Value value);
  Value load(const LaneLocation &location, Value lane);
  void store(Value value, const LaneLocation &location, Value lane);
  /// A new slot for one value of `type` per lane; failure where memory
  /// cannot hold the type.
  FailureOr<LaneLocation> newLaneSlot(Type type, Operation *op);
  void resetWarp() {
    located.clear();
    warpValues.clear();
  }
  Value index(int64_t value) {
    return builder.create<arith::ConstantIndexOp>(kernel.getLoc(), value);
  }

  gpu::GPUFuncOp kernel;
  func::FuncOp mma;
  /// mantissa_emulated_ldmatrix for memory of a number of elements.
  llvm::function_ref<func::FuncOp(int64_t)> ldmatrix;
  OpBuilder builder{kernel.getContext()};
  /// Slots are allocated before this op (the loop over the blocks), once
  /// per call of the host function.
  Operation *slotPoint = nullptr;
  Value block, grid, blockSize, zero, one, warpBase, warp, warps;
  /// The fragments an mma.sync exchanges: A, B, and C (D is the product's
  /// own slot).
  std::array<Value, 3> fragments;
  /// What an ldmatrix exchanges: each lane's address and registers.
  Value ldmatrixAddresses, ldmatrixResults;
  /// The host function's arguments for the kernel's (its buffers), the
  /// block's workgroup memory for its attributions, and a loop with
  /// barriers' induction variable.
  IRMapping functionLevel;
  /// In the warp loop being built: values the same on every lane (a
  /// ballot, a uniform loop's induction variable), and where each lane's
  /// value of the others is kept.
  IRMapping warpValues;
  llvm::DenseMap<Value, LaneLocation> located;
  /// Each block's segments (a std::map: planning a loop's body adds
  /// blocks while the enclosing block's segments are being filled).
  std::map<Block *, SmallVector<Segment>> segments;
  /// Each run-level op's run.
  llvm::DenseMap<Operation *, Segment *> runOf;
  /// A value's slot across phases: memref<warps x 32 x type>.
  llvm::DenseMap<Value, Value> slots;
};

} // namespace

Value WarpEmulation::load(const LaneLocation &location, Value lane) {
  Location loc = kernel.getLoc();
  Value at =
      location.laneXor == 0
          ? lane
          : builder.create<arith::XOrIOp>(loc, lane, index(location.laneXor));
  SmallVector<Value> indices(location.before.begin(), location.before.end());
  indices.push_back(at);
  for (int64_t after : location.after)
    indices.push_back(index(after));
  return builder.create<memref::LoadOp>(loc, location.memory, indices);
}

void WarpEmulation::store(Value value, const LaneLocation &location,
                          Value lane) {
  SmallVector<Value> indices(location.before.begin(), location.before.end());
  indices.push_back(lane);
  for (int64_t after : location.after)
    indices.push_back(index(after));
  builder.create<memref::StoreOp>(kernel.getLoc(), value, location.memory,
                                  indices);
}

FailureOr<LaneLocation> WarpEmulation::newLaneSlot(Type type, Operation *op) {
  if (!MemRefType::isValidElementType(type))
    return op->emitOpError() << "keeps a value of type " << type
                             << " per lane, which the host cannot";
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPoint(slotPoint);
  LaneLocation slot;
  slot.memory = builder.create<memref::AllocaOp>(kernel.getLoc(),
                                                 MemRefType::get({32}, type));
  return slot;
}

WarpEmulation::LaneLoop WarpEmulation::openLaneLoop() {
  auto loop = builder.create<scf::ForOp>(kernel.getLoc(), index(0), index(32),
                                         index(1));
  builder.setInsertionPoint(loop.getBody()->getTerminator());
  return {loop, loop.getInductionVar(), {}};
}

Value WarpEmulation::sharedValue(Value value) {
  if (Value mapped = warpValues.lookupOrNull(value))
    return mapped;
  if (Value mapped = functionLevel.lookupOrNull(value))
    return mapped;
  Operation *definition = value.getDefiningOp();
  if (!definition || !isFree(definition) || isProductExtract(definition))
    return nullptr;
  if (definition->hasTrait<OpTrait::ConstantLike>())
    return builder.clone(*definition)->getResult(0);
  return getHostGeometry(definition,
                         {block, Value(), grid, blockSize, zero, one});
}

std::optional<LaneLocation> WarpEmulation::locationOf(Value value) {
  if (auto found = located.find(value); found != located.end())
    return found->second;
  if (Value slot = slots.lookup(value)) {
    LaneLocation location;
    location.memory = slot;
    location.before.push_back(warp);
    return location;
  }
  return std::nullopt;
}

FailureOr<Value> WarpEmulation::laneValue(LaneLoop &loop, Value value) {
  if (Value mapped = loop.values.lookupOrNull(value))
    return mapped;
  Value result = sharedValue(value);
  if (!result) {
    std::optional<LaneLocation> location = locationOf(value);
    if (!location)
      return kernel.emitOpError() << "uses a value across a barrier that the "
                                     "host cannot keep";
    result = load(*location, loop.lane);
  }
  loop.values.map(value, result);
  return result;
}

FailureOr<Value> WarpEmulation::firstLaneValue(Value value) {
  if (Value shared = sharedValue(value))
    return shared;
  // The first lane's, as the PTX takes each thread's own.
  if (std::optional<LaneLocation> location = locationOf(value))
    return load(*location, index(0));
  return kernel.emitOpError()
         << "has a bound or condition the host cannot read";
}

LogicalResult WarpEmulation::copyLanes(ValueRange values,
                                       ArrayRef<LaneLocation> targets,
                                       bool throughCopies) {
  if (values.empty())
    return success();
  OpBuilder::InsertionGuard guard(builder);
  SmallVector<LaneLocation> firstTargets(targets);
  SmallVector<Value> copies;
  if (throughCopies) {
    // Every lane's value read before any is written: a value may be
    // another target's, or another lane's element of it (a shuffle).
    firstTargets.clear();
    for (Value value : values) {
      FailureOr<LaneLocation> copy =
          newLaneSlot(value.getType(), kernel.getOperation());
      if (failed(copy))
        return failure();
      firstTargets.push_back(*copy);
      copies.push_back(copy->memory);
    }
  }
  {
    LaneLoop loop = openLaneLoop();
    SmallVector<Value> read;
    for (Value value : values) {
      FailureOr<Value> laneValueOf = laneValue(loop, value);
      if (failed(laneValueOf))
        return failure();
      read.push_back(*laneValueOf);
    }
    for (auto [value, target] : llvm::zip_equal(read, firstTargets))
      store(value, target, loop.lane);
    builder.setInsertionPointAfter(loop.loop);
  }
  if (!throughCopies)
    return success();
  LaneLoop loop = openLaneLoop();
  for (auto [copy, target] : llvm::zip_equal(copies, targets)) {
    LaneLocation from;
    from.memory = copy;
    store(load(from, loop.lane), target, loop.lane);
  }
  return success();
}

LogicalResult
WarpEmulation::emitInLane(LaneLoop &loop, Operation &op,
                          const llvm::SmallPtrSetImpl<Operation *> &ops) {
  Location loc = op.getLoc();
  if (isa<gpu::ThreadIdOp>(op)) {
    // Lane l's thread is warpBase + l.
    loop.values.map(op.getResult(0),
                    builder.create<arith::AddIOp>(loc, warpBase, loop.lane));
  } else {
    if (isa<gpu::GPUDialect, NVVM::NVVMDialect, LLVM::LLVMDialect>(
            op.getDialect()))
      return op.emitOpError() << "cannot run on the host";
    llvm::SetVector<Value> used(op.operand_begin(), op.operand_end());
    getUsedValuesDefinedAbove(op.getRegions(), used);
    for (Value value : used)
      if (failed(laneValue(loop, value)))
        return failure();
    builder.clone(op, loop.values);
  }
  // A result that ops after this loop read is kept per lane.
  Block *owner = op.getBlock();
  for (Value result : op.getResults()) {
    bool readLater = llvm::any_of(result.getUsers(), [&](Operation *user) {
      Operation *top = owner->findAncestorOpInBlock(*user);
      return !top || !ops.contains(top);
    });
    if (!readLater)
      continue;
    FailureOr<LaneLocation> slot = newLaneSlot(result.getType(), &op);
    if (failed(slot))
      return failure();
    store(loop.values.lookup(result), *slot, loop.lane);
    located[result] = *slot;
  }
  return success();
}

LogicalResult WarpEmulation::emitWarpOps(ArrayRef<Operation *> ops) {
  for (size_t i = 0; i < ops.size();) {
    if (isFree(ops[i])) {
      ++i;
      continue;
    }
    if (endsLaneLoop(ops[i])) {
      if (failed(emitExchange(*ops[i])))
        return failure();
      ++i;
      continue;
    }
    // The ops up to the next exchange, in one loop over the lanes.
    size_t end = i;
    llvm::SmallPtrSet<Operation *, 16> members;
    for (; end < ops.size() && !endsLaneLoop(ops[end]); ++end)
      members.insert(ops[end]);
    OpBuilder::InsertionGuard guard(builder);
    LaneLoop loop = openLaneLoop();
    for (; i < end; ++i)
      if (!isFree(ops[i]) && failed(emitInLane(loop, *ops[i], members)))
        return failure();
  }
  return success();
}

LogicalResult WarpEmulation::emitWarpBlock(Block &block) {
  SmallVector<Operation *> ops;
  for (Operation &op : block.without_terminator())
    ops.push_back(&op);
  return emitWarpOps(ops);
}

LogicalResult WarpEmulation::emitExchange(Operation &op) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(&op)
      .Case([&](gpu::ShuffleOp shuffle) { return emitShuffle(shuffle); })
      .Case([&](NVVM::VoteBallotOp ballot) { return emitBallot(ballot); })
      .Case([&](nvgpu::LdMatrixOp load) { return emitLdMatrix(load); })
      .Case([&](LLVM::InlineAsmOp product) { return emitMma(product); })
      .Case([&](scf::ForOp loop) { return emitUniformFor(loop); })
      .Case([&](scf::IfOp branch) { return emitUniformIf(branch); })
      .Default([&](Operation *) {
        return op.emitOpError()
               << "exchanges values between lanes in a region the host "
                  "cannot run a warp at a time";
      });
}

LogicalResult WarpEmulation::emitShuffle(gpu::ShuffleOp shuffle) {
  std::optional<int64_t> offset = getConstantIntValue(shuffle.getOffset());
  std::optional<int64_t> width = getConstantIntValue(shuffle.getWidth());
  if (shuffle.getMode() != gpu::ShuffleMode::XOR || !offset || !width ||
      *width != 32 || *offset < 0 || *offset >= 32)
    return shuffle.emitOpError()
           << "cannot run on the host (only xor shuffles of whole warps by "
              "a constant offset)";
  // Every lane valid (the kernels shuffle within full warps).
  warpValues.map(shuffle.getValid(),
                 builder.create<arith::ConstantIntOp>(shuffle.getLoc(), 1, 1));
  // Lane l reads lane l ^ offset's value.
  if (Value shared = sharedValue(shuffle.getValue())) {
    warpValues.map(shuffle.getShuffleResult(), shared);
    return success();
  }
  std::optional<LaneLocation> location = locationOf(shuffle.getValue());
  if (!location)
    return shuffle.emitOpError() << "shuffles a value the host does not keep";
  location->laneXor ^= *offset;
  located[shuffle.getShuffleResult()] = *location;
  return success();
}

LogicalResult WarpEmulation::emitBallot(NVVM::VoteBallotOp ballot) {
  Location loc = ballot.getLoc();
  Type i32 = builder.getI32Type();
  auto lanes = builder.create<scf::ForOp>(
      loc, index(0), index(32), index(1),
      ValueRange{builder.create<arith::ConstantIntOp>(loc, 0, 32)});
  {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(lanes.getBody());
    LaneLoop loop{lanes, lanes.getInductionVar(), {}};
    FailureOr<Value> predicate = laneValue(loop, ballot.getPred());
    if (failed(predicate))
      return failure();
    Value set = builder.create<arith::ShLIOp>(
        loc, builder.create<arith::ExtUIOp>(loc, i32, *predicate),
        builder.create<arith::IndexCastOp>(loc, i32, loop.lane));
    builder.create<scf::YieldOp>(loc,
                                 ValueRange{builder.create<arith::OrIOp>(
                                     loc, lanes.getRegionIterArgs()[0], set)});
  }
  warpValues.map(ballot.getResult(), lanes.getResult(0));
  return success();
}

LogicalResult WarpEmulation::emitMma(LLVM::InlineAsmOp product) {
  if (!isExchange(product))
    return product.emitOpError() << "cannot run on the host (inline PTX "
                                    "other than the bf16 mma.sync m16n8k16)";
  Location loc = product.getLoc();
  ValueRange operands = product.getOperands();
  // Operands: A (4 registers), B (2), C (4).
  {
    OpBuilder::InsertionGuard guard(builder);
    LaneLoop loop = openLaneLoop();
    for (int64_t i = 0; i < 10; ++i) {
      int64_t fragment = i < 4 ? 0 : i < 6 ? 1 : 2;
      int64_t position = i < 4 ? i : i < 6 ? i - 4 : i - 6;
      FailureOr<Value> value = laneValue(loop, operands[i]);
      if (failed(value))
        return failure();
      builder.create<memref::StoreOp>(loc, *value, fragments[fragment],
                                      ValueRange{loop.lane, index(position)});
    }
  }
  // D: the product's own slot, which its extractions read.
  LaneLocation result;
  {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPoint(slotPoint);
    result.memory = builder.create<memref::AllocaOp>(
        loc, cast<MemRefType>(mma.getArgumentTypes()[3]));
  }
  builder.create<func::CallOp>(
      loc, mma,
      ValueRange{fragments[0], fragments[1], fragments[2], result.memory});
  for (Operation *user : product.getResult(0).getUsers()) {
    if (!isProductExtract(user))
      return user->emitOpError()
             << "uses an mma.sync's results in a way the host cannot run";
    LaneLocation element = result;
    element.after.push_back(cast<LLVM::ExtractValueOp>(user).getPosition()[0]);
    located[user->getResult(0)] = element;
  }
  return success();
}

LogicalResult WarpEmulation::emitLdMatrix(nvgpu::LdMatrixOp matrices) {
  // Every lane's address, then mantissa_emulated_ldmatrix, then each
  // lane's registers.
  Location loc = matrices.getLoc();
  auto type = cast<VectorType>(matrices.getRes().getType());
  auto memoryType = cast<MemRefType>(matrices.getSrcMemref().getType());
  if (matrices.getIndices().size() != 1 || matrices.getNumTiles() != 4 ||
      type.getShape()[1] != 2 || !memoryType.getElementType().isBF16() ||
      !memoryType.hasStaticShape() || !memoryType.getLayout().isIdentity())
    return matrices.emitOpError()
           << "cannot run on the host (only four matrices of bf16 of a 1-D "
              "buffer)";
  {
    OpBuilder::InsertionGuard guard(builder);
    LaneLoop loop = openLaneLoop();
    FailureOr<Value> address = laneValue(loop, matrices.getIndices()[0]);
    if (failed(address))
      return failure();
    builder.create<memref::StoreOp>(loc, *address, ldmatrixAddresses,
                                    ValueRange{loop.lane});
  }
  FailureOr<Value> memory = firstLaneValue(matrices.getSrcMemref());
  if (failed(memory))
    return failure();
  builder.create<func::CallOp>(
      loc, ldmatrix(memoryType.getNumElements()),
      ValueRange{*memory, ldmatrixAddresses, ldmatrixResults,
                 builder.create<arith::ConstantIntOp>(
                     loc, matrices.getTranspose(), 1)});
  FailureOr<LaneLocation> slot = newLaneSlot(type, matrices);
  if (failed(slot))
    return failure();
  OpBuilder::InsertionGuard guard(builder);
  LaneLoop loop = openLaneLoop();
  Value row = builder.create<vector::LoadOp>(
      loc, VectorType::get({8}, builder.getBF16Type()), ldmatrixResults,
      ValueRange{loop.lane, index(0)});
  store(builder.create<vector::ShapeCastOp>(loc, type, row), *slot, loop.lane);
  located[matrices.getRes()] = *slot;
  return success();
}

LogicalResult WarpEmulation::emitUniformFor(scf::ForOp loop) {
  Location loc = loop.getLoc();
  FailureOr<Value> lower = firstLaneValue(loop.getLowerBound()),
                   upper = firstLaneValue(loop.getUpperBound()),
                   step = firstLaneValue(loop.getStep());
  if (failed(lower) || failed(upper) || failed(step))
    return failure();
  // The carried values in slots: the loop's results are read from them.
  SmallVector<LaneLocation> carried;
  for (Value value : loop.getRegionIterArgs()) {
    FailureOr<LaneLocation> slot = newLaneSlot(value.getType(), loop);
    if (failed(slot))
      return failure();
    carried.push_back(*slot);
  }
  // The slots are new: no initial value is read from them.
  if (failed(copyLanes(loop.getInitArgs(), carried, /*throughCopies=*/false)))
    return failure();
  auto warpLoop = builder.create<scf::ForOp>(loc, *lower, *upper, *step);
  {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPoint(warpLoop.getBody()->getTerminator());
    warpValues.map(loop.getInductionVar(), warpLoop.getInductionVar());
    for (auto [value, slot] :
         llvm::zip_equal(loop.getRegionIterArgs(), carried))
      located[value] = slot;
    if (failed(emitWarpBlock(*loop.getBody())) ||
        failed(copyLanes(loop.getBody()->getTerminator()->getOperands(),
                         carried, /*throughCopies=*/true)))
      return failure();
  }
  for (auto [result, slot] : llvm::zip_equal(loop.getResults(), carried))
    located[result] = slot;
  return success();
}

LogicalResult WarpEmulation::emitUniformIf(scf::IfOp branch) {
  Location loc = branch.getLoc();
  FailureOr<Value> condition = firstLaneValue(branch.getCondition());
  if (failed(condition))
    return failure();
  SmallVector<LaneLocation> results;
  // New slots, which no value of the branches is read from.
  for (Value value : branch.getResults()) {
    FailureOr<LaneLocation> slot = newLaneSlot(value.getType(), branch);
    if (failed(slot))
      return failure();
    results.push_back(*slot);
  }
  auto warpBranch = builder.create<scf::IfOp>(
      loc, TypeRange(), *condition,
      /*withElseRegion=*/!branch.getElseRegion().empty());
  for (auto [from, to] :
       llvm::zip(branch->getRegions(), warpBranch->getRegions())) {
    if (from.empty())
      continue;
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPoint(to.front().getTerminator());
    if (failed(emitWarpBlock(from.front())) ||
        failed(copyLanes(from.front().getTerminator()->getOperands(), results,
                         /*throughCopies=*/false)))
      return failure();
  }
  for (auto [result, slot] : llvm::zip_equal(branch.getResults(), results))
    located[result] = slot;
  return success();
}

LogicalResult WarpEmulation::planSegments(Block &block) {
  SmallVector<Segment> &parts = segments[&block];
  for (Operation &op : block.without_terminator()) {
    if (isa<gpu::BarrierOp>(op)) {
      parts.push_back({Segment::Kind::Barrier, {}, {}, {}});
      continue;
    }
    if (containsBarrier(&op)) {
      auto loop = dyn_cast<scf::ForOp>(op);
      if (!loop)
        return op.emitOpError()
               << "holds a barrier the host cannot run (barriers go at the "
                  "kernel's top level or directly in a loop there)";
      parts.push_back({Segment::Kind::Loop, {}, loop, {}});
      if (failed(planSegments(*loop.getBody())))
        return failure();
      continue;
    }
    if (parts.empty() || parts.back().kind != Segment::Kind::Run)
      parts.push_back({Segment::Kind::Run, {}, {}, {}});
    parts.back().ops.push_back(&op);
  }
  return success();
}

LogicalResult WarpEmulation::planSlots() {
  // Runs point into `segments`, which no longer grows.
  for (auto &entry : segments)
    for (Segment &segment : entry.second)
      for (Operation *op : segment.ops)
        runOf[op] = &segment;
  // The run a value's definition belongs to (null: the kernel's arguments
  // and attributions, a loop's induction variable, a loop itself).
  auto definingRun = [&](Value value) -> Segment * {
    Operation *op = value.getDefiningOp();
    for (; op; op = op->getParentOp())
      if (Segment *run = runOf.lookup(op))
        return run;
    return nullptr;
  };
  // The kernel's arguments and a loop's induction variable are the host
  // function's, the same in every phase.
  auto functionLevelValue = [&](Value value) {
    auto argument = dyn_cast<BlockArgument>(value);
    if (!argument)
      return false;
    auto loop = dyn_cast<scf::ForOp>(argument.getOwner()->getParentOp());
    return !loop || !segments.count(loop.getBody()) ||
           argument == loop.getInductionVar();
  };
  auto use = [&](Value value, Segment *user) -> LogicalResult {
    if (functionLevelValue(value))
      return success();
    Segment *run = definingRun(value);
    if (run == user && run)
      return success();
    // A constant is cloned where it is used.
    Operation *definition = value.getDefiningOp();
    if (definition && definition->hasTrait<OpTrait::ConstantLike>())
      return success();
    if (run)
      run->outputs.insert(value);
    if (!slots.count(value)) {
      if (!MemRefType::isValidElementType(value.getType()))
        return kernel.emitOpError()
               << "keeps a value of type " << value.getType()
               << " across a barrier, which the host cannot";
      slots[value] = nullptr;
    }
    return success();
  };
  for (auto &entry : segments) {
    for (Segment &segment : entry.second) {
      if (segment.kind == Segment::Kind::Run) {
        for (Operation *op : segment.ops) {
          llvm::SetVector<Value> used(op->operand_begin(), op->operand_end());
          getUsedValuesDefinedAbove(op->getRegions(), used);
          for (Value value : used)
            if (failed(use(value, &segment)))
              return failure();
        }
        continue;
      }
      if (segment.kind != Segment::Kind::Loop)
        continue;
      // A loop's bounds, initial and yielded values are read outside any
      // run; its carried values are slots (its results read them).
      scf::ForOp loop = segment.loop;
      for (Value value : loop->getOperands())
        if (failed(use(value, nullptr)))
          return failure();
      for (Value value : loop.getBody()->getTerminator()->getOperands())
        if (failed(use(value, nullptr)))
          return failure();
      for (Value carried : loop.getRegionIterArgs())
        slots[carried] = nullptr;
    }
  }
  return success();
}

LogicalResult
WarpEmulation::forEachWarp(llvm::function_ref<LogicalResult()> body) {
  Location loc = kernel.getLoc();
  auto loop = builder.create<scf::ForOp>(loc, index(0), warps, index(1));
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPoint(loop.getBody()->getTerminator());
  warp = loop.getInductionVar();
  warpBase = builder.create<arith::MulIOp>(loc, warp, index(32));
  resetWarp();
  return body();
}

FailureOr<Value> WarpEmulation::uniformValue(Value value) {
  if (Value mapped = functionLevel.lookupOrNull(value))
    return mapped;
  Operation *definition = value.getDefiningOp();
  if (definition && definition->hasTrait<OpTrait::ConstantLike>())
    return builder.clone(*definition)->getResult(0);
  // The first thread's, as the PTX's loop takes each thread's own.
  if (Value slot = slots.lookup(value))
    return builder
        .create<memref::LoadOp>(value.getLoc(), slot,
                                ValueRange{index(0), index(0)})
        .getResult();
  return kernel.emitOpError()
         << "has a loop bound with barriers that the host cannot read";
}

/// The slots across phases of `values` in the warp loop being built.
static SmallVector<LaneLocation>
phaseSlots(ValueRange values, const llvm::DenseMap<Value, Value> &slots,
           Value warp) {
  SmallVector<LaneLocation> locations;
  for (Value value : values) {
    LaneLocation location;
    location.memory = slots.lookup(value);
    location.before.push_back(warp);
    locations.push_back(location);
  }
  return locations;
}

LogicalResult WarpEmulation::emitRunInWarp(Segment &run) {
  if (failed(emitWarpOps(run.ops)))
    return failure();
  SmallVector<Value> outputs(run.outputs.begin(), run.outputs.end());
  return copyLanes(outputs, phaseSlots(outputs, slots, warp),
                   /*throughCopies=*/false);
}

LogicalResult WarpEmulation::emitRun(Segment &run) {
  return forEachWarp([&] { return emitRunInWarp(run); });
}

LogicalResult WarpEmulation::emitLoop(scf::ForOp loop) {
  Location loc = loop.getLoc();
  ValueRange carried = loop.getRegionIterArgs();
  auto copyCarried = [&](ValueRange values) {
    return copyLanes(values, phaseSlots(carried, slots, warp),
                     /*throughCopies=*/true);
  };
  if (failed(forEachWarp([&] { return copyCarried(loop.getInitArgs()); })))
    return failure();
  FailureOr<Value> lower = uniformValue(loop.getLowerBound()),
                   upper = uniformValue(loop.getUpperBound()),
                   step = uniformValue(loop.getStep());
  if (failed(lower) || failed(upper) || failed(step))
    return failure();
  // Without a barrier at the start or the end of the body, a warp runs its
  // last phase of a step and its first of the next without waiting for
  // the others: the loop is rotated so that each warp does both in one
  // phase, the first phase of the first step before it.
  MutableArrayRef<Segment> body = segments[loop.getBody()];
  bool rotated = body.size() > 1 && body.front().kind == Segment::Kind::Run &&
                 body.back().kind == Segment::Kind::Run;
  Value inductionVariable = loop.getInductionVar();
  if (rotated) {
    functionLevel.map(inductionVariable, *lower);
    auto first = builder.create<scf::IfOp>(
        loc,
        builder.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, *lower,
                                      *upper),
        /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPoint(first.thenBlock()->getTerminator());
    if (failed(emitRun(body.front())))
      return failure();
  }
  auto hostLoop = builder.create<scf::ForOp>(loc, *lower, *upper, *step);
  {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPoint(hostLoop.getBody()->getTerminator());
    Value current = hostLoop.getInductionVar();
    functionLevel.map(inductionVariable, current);
    for (Segment &segment : rotated ? body.drop_front().drop_back() : body)
      if (failed(emitSegment(segment)))
        return failure();
    LogicalResult result = forEachWarp([&] {
      if ((rotated && failed(emitRunInWarp(body.back()))) ||
          failed(copyCarried(loop.getBody()->getTerminator()->getOperands())))
        return failure();
      if (!rotated)
        return success();
      Value next = builder.create<arith::AddIOp>(loc, current, *step);
      auto more = builder.create<scf::IfOp>(
          loc,
          builder.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, next,
                                        *upper),
          /*withElseRegion=*/false);
      OpBuilder::InsertionGuard nextGuard(builder);
      builder.setInsertionPoint(more.thenBlock()->getTerminator());
      // The next step's values: none of this one's (a carried value is
      // read again from its slot).
      resetWarp();
      warpValues.map(inductionVariable, next);
      return emitRunInWarp(body.front());
    });
    functionLevel.erase(inductionVariable);
    if (failed(result))
      return failure();
  }
  // The results are the carried values' slots.
  for (auto [result, value] : llvm::zip_equal(loop.getResults(), carried))
    slots[result] = slots.lookup(value);
  return success();
}

LogicalResult WarpEmulation::emitSegment(Segment &segment) {
  switch (segment.kind) {
  case Segment::Kind::Barrier:
    // The end of a phase: the next runs after every warp.
    return success();
  case Segment::Kind::Run:
    return emitRun(segment);
  case Segment::Kind::Loop:
    return emitLoop(segment.loop);
  }
  llvm_unreachable("a segment of each kind");
}

LogicalResult WarpEmulation::emitSegments(Block &block) {
  for (Segment &segment : segments[&block])
    if (failed(emitSegment(segment)))
      return failure();
  return success();
}

LogicalResult WarpEmulation::build(ModuleOp hostModule) {
  if (!kernel.getBody().hasOneBlock())
    return kernel.emitOpError() << "has control flow the host cannot run";
  Location loc = kernel.getLoc();
  Block &body = kernel.getBody().front();
  if (failed(planSegments(body)) || failed(planSlots()))
    return failure();
  Block *entry = createHostFunction(builder, kernel, hostModule);
  grid = entry->getArgument(entry->getNumArguments() - 2);
  blockSize = entry->getArgument(entry->getNumArguments() - 1);
  zero = index(0);
  one = index(1);
  warps = builder.create<arith::DivUIOp>(loc, blockSize, index(32));
  for (auto [fragment, type] :
       llvm::zip(fragments, mma.getArgumentTypes().take_front(3)))
    fragment = builder.create<memref::AllocaOp>(loc, cast<MemRefType>(type));
  ldmatrixAddresses = builder.create<memref::AllocaOp>(
      loc, MemRefType::get({32}, builder.getIndexType()));
  ldmatrixResults = builder.create<memref::AllocaOp>(
      loc, MemRefType::get({32, 8}, builder.getBF16Type()));
  functionLevel.map(body.getArguments().take_front(kernel.getNumArguments()),
                    entry->getArguments().drop_back(2));
  for (auto &[value, slot] : slots)
    if (!isa<OpResult>(value) || !isa<scf::ForOp>(value.getDefiningOp()) ||
        !segments.count(cast<scf::ForOp>(value.getDefiningOp()).getBody()))
      slot = builder.create<memref::AllocaOp>(
          loc, MemRefType::get({ShapedType::kDynamic, 32}, value.getType()),
          ValueRange{warps});
  SmallVector<std::pair<Value, Value>> memories;
  for (BlockArgument attribution : kernel.getWorkgroupAttributions()) {
    auto type = cast<MemRefType>(attribution.getType());
    Type element = type.getElementType();
    if (!type.hasStaticShape() || type.getRank() != 1 ||
        !(element.isSignlessInteger() || isa<FloatType>(element)))
      return kernel.emitOpError()
             << "has workgroup memory the host cannot hold (a static 1-D "
                "buffer of integers or floats)";
    Value memory = builder.create<memref::AllocaOp>(
        loc, MemRefType::get(type.getShape(), element));
    functionLevel.map(attribution, memory);
    // Every bit set: -1, or a NaN.
    unsigned width = element.getIntOrFloatBitWidth();
    Value allOnes = builder.create<arith::ConstantIntOp>(loc, -1, int(width));
    memories.push_back(
        {memory, isa<FloatType>(element)
                     ? builder.create<arith::BitcastOp>(loc, element, allOnes)
                           .getResult()
                     : allOnes});
  }
  auto blocks = builder.create<scf::ForOp>(loc, index(0), grid, index(1));
  slotPoint = blocks;
  builder.create<func::ReturnOp>(loc);
  builder.setInsertionPoint(blocks.getBody()->getTerminator());
  block = blocks.getInductionVar();
  for (auto [memory, poison] : memories) {
    auto fill = builder.create<scf::ForOp>(
        loc, index(0),
        index(cast<MemRefType>(memory.getType()).getNumElements()), index(1));
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPoint(fill.getBody()->getTerminator());
    builder.create<memref::StoreOp>(loc, poison, memory,
                                    fill.getInductionVar());
  }
  return emitSegments(body);
}

/// A private function `name` of `types` (no results) at the end of
/// `hostModule`, `b` at the start of its entry block.
static std::pair<func::FuncOp, Block *>
createEmulationHelper(OpBuilder &b, ModuleOp hostModule, const Twine &name,
                      ArrayRef<Type> types) {
  b.setInsertionPointToEnd(hostModule.getBody());
  auto function = b.create<func::FuncOp>(
      hostModule.getLoc(), name.str(),
      FunctionType::get(hostModule.getContext(), types, {}));
  function.setPrivate();
  Block *entry = function.addEntryBlock();
  b.setInsertionPointToStart(entry);
  return {function, entry};
}

/// mantissa_emulated_mma(A, B, C, D): D = A B + C for one warp's bf16
/// mma.sync m16n8k16 (row-major A, column-major B, fp32 C and D), each
/// lane's registers a row of A (4 x 2 bf16), B (2 x 2 bf16), C and D (4
/// fp32), laid out as the PTX ISA gives them: lane = 4 * group + thread;
/// A register r holds row group + 8 * (r % 2), columns 2 * thread +
/// 8 * (r / 2) and the next (the lower in the low half); B register r rows
/// 2 * thread + 8 * r and the next, column group; C value j row group +
/// 8 * (j / 2), column 2 * thread + j % 2. Sums in fp32 over k in order.
static func::FuncOp buildEmulatedMma(ModuleOp hostModule) {
  Location loc = hostModule.getLoc();
  OpBuilder b(hostModule.getContext());
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  auto [function, entry] = createEmulationHelper(
      b, hostModule, "mantissa_emulated_mma",
      {MemRefType::get({32, 4}, i32), MemRefType::get({32, 2}, i32),
       MemRefType::get({32, 4}, f32), MemRefType::get({32, 4}, f32)});
  Value a = entry->getArgument(0), bFragment = entry->getArgument(1),
        c = entry->getArgument(2), d = entry->getArgument(3);
  auto index = [&](int64_t value) {
    return b.create<arith::ConstantIndexOp>(loc, value).getResult();
  };
  auto constant = [&](int64_t value) {
    return b.create<arith::ConstantIntOp>(loc, value, 32).getResult();
  };
  // The bf16 in half `half` (0 low, 1 high) of register `bits`, as f32.
  auto element = [&](Value bits, Value half) {
    Value shift = b.create<arith::MulIOp>(
        loc, b.create<arith::IndexCastOp>(loc, i32, half), constant(16));
    Value value = b.create<arith::AndIOp>(
        loc, b.create<arith::ShRUIOp>(loc, bits, shift), constant(0xffff));
    return b.create<arith::BitcastOp>(
        loc, f32, b.create<arith::ShLIOp>(loc, value, constant(16)));
  };
  auto div = [&](Value x, int64_t y) {
    return b.create<arith::DivUIOp>(loc, x, index(y)).getResult();
  };
  auto rem = [&](Value x, int64_t y) {
    return b.create<arith::RemUIOp>(loc, x, index(y)).getResult();
  };
  auto addi = [&](Value x, Value y) {
    return b.create<arith::AddIOp>(loc, x, y).getResult();
  };
  auto muli = [&](Value x, int64_t y) {
    return b.create<arith::MulIOp>(loc, x, index(y)).getResult();
  };
  auto lanes = b.create<scf::ForOp>(loc, index(0), index(32), index(1));
  b.create<func::ReturnOp>(loc);
  b.setInsertionPoint(lanes.getBody()->getTerminator());
  Value lane = lanes.getInductionVar();
  auto values = b.create<scf::ForOp>(loc, index(0), index(4), index(1));
  b.setInsertionPoint(values.getBody()->getTerminator());
  Value j = values.getInductionVar();
  Value group = div(lane, 4), thread = rem(lane, 4);
  Value row = addi(group, muli(div(j, 2), 8));
  Value column = addi(muli(thread, 2), rem(j, 2));
  Value initial = b.create<memref::LoadOp>(loc, c, ValueRange{lane, j});
  auto sum = b.create<scf::ForOp>(loc, index(0), index(16), index(1),
                                  ValueRange{initial});
  b.create<memref::StoreOp>(loc, sum.getResult(0), d, ValueRange{lane, j});
  b.setInsertionPointToStart(sum.getBody());
  Value k = sum.getInductionVar();
  // A(row, k): lane 4 * (row % 8) + (k % 8) / 2, register
  // row / 8 + 2 * (k / 8), half k % 2.
  Value aLane = addi(muli(rem(row, 8), 4), div(rem(k, 8), 2));
  Value aRegister = addi(div(row, 8), muli(div(k, 8), 2));
  Value aValue =
      element(b.create<memref::LoadOp>(loc, a, ValueRange{aLane, aRegister}),
              rem(k, 2));
  // B(k, column): lane 4 * column + (k % 8) / 2, register k / 8, half k % 2.
  Value bLane = addi(muli(column, 4), div(rem(k, 8), 2));
  Value bValue = element(
      b.create<memref::LoadOp>(loc, bFragment, ValueRange{bLane, div(k, 8)}),
      rem(k, 2));
  b.create<scf::YieldOp>(loc,
                         ValueRange{b.create<arith::AddFOp>(
                             loc, sum.getRegionIterArgs()[0],
                             b.create<arith::MulFOp>(loc, aValue, bValue))});
  return function;
}

/// mantissa_emulated_ldmatrix(memory, addresses, registers, transposed):
/// one warp's ldmatrix of four 8 x 8 matrices of bf16 (nvgpu.ldmatrix) from
/// `memory`: lane l's address (addresses[l], an element) is that of row
/// l % 8 of matrix l / 8; registers[l][2 i + e] is element e of lane l's
/// register i: of matrix i's row l / 4, column 2 (l % 4) + e, or,
/// transposed, of its row 2 (l % 4) + e, column l / 4.
/// One for each size of `memory` (`elements`): the host's calls pass
/// memrefs as bare pointers, which take static shapes only.
static func::FuncOp buildEmulatedLdMatrix(ModuleOp hostModule,
                                          int64_t elements) {
  Location loc = hostModule.getLoc();
  OpBuilder b(hostModule.getContext());
  Type bf16 = b.getBF16Type();
  auto [function, entry] = createEmulationHelper(
      b, hostModule, "mantissa_emulated_ldmatrix_" + Twine(elements),
      {MemRefType::get({elements}, bf16),
       MemRefType::get({32}, b.getIndexType()), MemRefType::get({32, 8}, bf16),
       b.getI1Type()});
  Value memory = entry->getArgument(0), addresses = entry->getArgument(1),
        registers = entry->getArgument(2), transposed = entry->getArgument(3);
  auto index = [&](int64_t value) {
    return b.create<arith::ConstantIndexOp>(loc, value).getResult();
  };
  auto lanes = b.create<scf::ForOp>(loc, index(0), index(32), index(1));
  b.create<func::ReturnOp>(loc);
  b.setInsertionPoint(lanes.getBody()->getTerminator());
  Value lane = lanes.getInductionVar();
  auto perLane = b.create<scf::ForOp>(loc, index(0), index(8), index(1));
  b.setInsertionPoint(perLane.getBody()->getTerminator());
  Value element = perLane.getInductionVar();
  Value matrix = b.create<arith::DivUIOp>(loc, element, index(2));
  Value half = b.create<arith::RemUIOp>(loc, element, index(2));
  Value quarter = b.create<arith::DivUIOp>(loc, lane, index(4));
  Value twice = b.create<arith::MulIOp>(
      loc, b.create<arith::RemUIOp>(loc, lane, index(4)), index(2));
  Value first = b.create<arith::MulIOp>(loc, matrix, index(8));
  Value source = b.create<arith::SelectOp>(
      loc, transposed,
      b.create<arith::AddIOp>(loc, first,
                              b.create<arith::AddIOp>(loc, twice, half)),
      b.create<arith::AddIOp>(loc, first, quarter));
  Value column = b.create<arith::SelectOp>(
      loc, transposed, quarter, b.create<arith::AddIOp>(loc, twice, half));
  Value address = b.create<arith::AddIOp>(
      loc, b.create<memref::LoadOp>(loc, addresses, ValueRange{source}),
      column);
  b.create<memref::StoreOp>(
      loc, b.create<memref::LoadOp>(loc, memory, ValueRange{address}),
      registers, ValueRange{lane, element});
  return function;
}

LogicalResult mlir::mantissa::emulateGpuKernels(gpu::GPUModuleOp gpuModule,
                                                ModuleOp hostModule) {
  func::FuncOp mma;
  std::map<int64_t, func::FuncOp> ldmatrixBySize;
  auto ldmatrix = [&](int64_t elements) {
    func::FuncOp &function = ldmatrixBySize[elements];
    if (!function)
      function = buildEmulatedLdMatrix(hostModule, elements);
    return function;
  };
  for (auto kernel : gpuModule.getOps<gpu::GPUFuncOp>()) {
    if (!kernel.isKernel())
      continue;
    if (!kernel->hasAttr(kWarpLockstepAttr)) {
      if (failed(KernelEmulation(kernel).build(hostModule)))
        return failure();
      continue;
    }
    if (!mma)
      mma = buildEmulatedMma(hostModule);
    if (failed(WarpEmulation(kernel, mma, ldmatrix).build(hostModule)))
      return failure();
  }
  return success();
}

LogicalResult mlir::mantissa::lowerEmulatedKernelsToLLVM(ModuleOp hostModule) {
  SmallVector<std::string> names;
  for (auto kernel : hostModule.getOps<func::FuncOp>())
    if (kernel.isPublic())
      names.push_back(kernel.getSymName().str());
  if (failed(lowerBufferizedToLLVM(hostModule)))
    return failure();
  for (const std::string &name : names)
    addPackedEntry(hostModule, name, name + "_host", /*indirect=*/true,
                   /*passThrough=*/2);
  return success();
}

const GpuHostEmulator &mlir::mantissa::getGpuHostEmulator() {
  static constexpr GpuHostEmulator emulator{emulateGpuKernels,
                                            lowerEmulatedKernelsToLLVM};
  return emulator;
}
