//===- GpuHostEmulation.cpp - The GPU step's kernels run on the host -----===//
//
// emulateGpuKernels (TrainToGPU.h): every kernel of the step's gpu.module
// as a host function that runs each block's threads in turn, from the very
// gpu.func that became the PTX, so that the stand-in driver of the tests
// runs GPU programs on the CPU (docs/gpu-step.md). A kernel whose warps
// run in lockstep (kWarpLockstepAttr: the fused attention) runs a warp at a
// time instead, its lanes side by side, and the block's warps one after the
// other between barriers (WarpEmulation).
//
//===----------------------------------------------------------------------===//

#include "GpuAttentionKernels.h"
#include "mantissa/Conversion/TrainToGPU.h"
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

/// The host emulation of a kernel marked kWarpLockstepAttr: a warp at a
/// time, every op of the kernel cloned once per lane (lane l's values in
/// lanes[l]), so that what lanes exchange is read from the other lanes'
/// clones: an xor shuffle lane l ^ offset's value, a ballot every lane's
/// predicate, an mma.sync every lane's fragments (multiplied as the PTX ISA
/// lays them out, by mantissa_emulated_mma). A loop or branch that
/// contains an exchange runs once for the warp, with lane 0's bounds or
/// condition (the kernel builder makes them the same on every lane); the
/// others run once per lane.
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
  /// A part of a block of the kernel: a phase's ops, a barrier, or a loop
  /// with barriers in its body.
  struct Segment {
    enum class Kind { Run, Barrier, Loop } kind;
    SmallVector<Operation *> ops;
    scf::ForOp loop;
    /// Run: the values it uses from other phases, and those other phases
    /// use from it.
    llvm::SetVector<Value> inputs, outputs;
  };
  static bool containsBarrier(Operation *op) {
    return op->walk([](gpu::BarrierOp) { return WalkResult::interrupt(); })
        .wasInterrupted();
  }
  LogicalResult planSegments(Block &block);
  LogicalResult planSlots();
  LogicalResult emitSegments(Block &block);
  LogicalResult emitSegment(Segment &segment);
  /// A run in a loop over the block's warps, or in the one being built.
  LogicalResult emitRun(Segment &run);
  LogicalResult emitRunInWarp(Segment &run);
  LogicalResult emitLoop(scf::ForOp loop);
  /// In the warp loop being built, each lane's `values` into the slots of
  /// `targets`.
  LogicalResult copyInto(ValueRange values, ValueRange targets);
  /// `body` in a loop over the block's warps (`warp`, `warpBase`).
  LogicalResult forEachWarp(llvm::function_ref<LogicalResult()> body);
  /// Lane `lane`'s value of `value` (of another phase) in the warp loop
  /// being built.
  FailureOr<Value> laneValue(Value value, int64_t lane);
  /// Every lane's value of a loop bound (the same in every thread).
  FailureOr<Value> uniformValue(Value value);
  void resetLanes();
  LogicalResult cloneBlock(Block &block);
  LogicalResult cloneOp(Operation &op);
  LogicalResult cloneUniformFor(scf::ForOp loop);
  LogicalResult cloneUniformIf(scf::IfOp branch);
  LogicalResult cloneMma(LLVM::InlineAsmOp product);
  LogicalResult cloneLdMatrix(nvgpu::LdMatrixOp matrices);
  Value index(int64_t value) {
    return builder.create<arith::ConstantIndexOp>(kernel.getLoc(), value);
  }
  /// Every lane's value of each of `values`, lane by lane.
  SmallVector<Value> allLanes(ValueRange values) {
    SmallVector<Value> result;
    for (IRMapping &lane : lanes)
      for (Value value : values)
        result.push_back(lane.lookup(value));
    return result;
  }
  void mapAllLanes(ValueRange from, ValueRange to) {
    for (auto [l, lane] : llvm::enumerate(lanes))
      lane.map(from, to.slice(l * from.size(), from.size()));
  }

  gpu::GPUFuncOp kernel;
  func::FuncOp mma;
  /// mantissa_emulated_ldmatrix for memory of a number of elements.
  llvm::function_ref<func::FuncOp(int64_t)> ldmatrix;
  OpBuilder builder{kernel.getContext()};
  std::array<IRMapping, 32> lanes;
  /// Each lane's four results of each mma.sync.
  llvm::DenseMap<Value, std::array<std::array<Value, 4>, 32>> products;
  Value block, grid, blockSize, warpBase, warp, warps;
  /// The fragments an mma.sync exchanges: A, B, C, and D.
  std::array<Value, 4> fragments;
  /// What an ldmatrix exchanges: each lane's address and registers.
  Value ldmatrixAddresses, ldmatrixResults;
  /// The host function's arguments for the kernel's (its buffers), and the
  /// block's workgroup memory for its attributions.
  IRMapping functionLevel;
  /// Each block's segments (a std::map: planning a loop's body adds
  /// blocks while the enclosing block's segments are being filled).
  std::map<Block *, SmallVector<Segment>> segments;
  /// Each run-level op's run.
  llvm::DenseMap<Operation *, Segment *> runOf;
  /// A value's slot: memref<warps x 32 x type>.
  llvm::DenseMap<Value, Value> slots;
};

} // namespace

LogicalResult WarpEmulation::cloneBlock(Block &block) {
  for (Operation &op : block.without_terminator())
    if (failed(cloneOp(op)))
      return failure();
  return success();
}

LogicalResult WarpEmulation::cloneMma(LLVM::InlineAsmOp product) {
  Location loc = product.getLoc();
  ValueRange operands = product.getOperands();
  // Operands: A (4 registers), B (2), C (4).
  for (auto [l, lane] : llvm::enumerate(lanes)) {
    Value at = index(l);
    for (int64_t i = 0; i < 10; ++i) {
      int64_t fragment = i < 4 ? 0 : i < 6 ? 1 : 2;
      int64_t position = i < 4 ? i : i < 6 ? i - 4 : i - 6;
      builder.create<memref::StoreOp>(loc, lane.lookup(operands[i]),
                                      fragments[fragment],
                                      ValueRange{at, index(position)});
    }
  }
  builder.create<func::CallOp>(loc, mma, ValueRange(fragments));
  auto &results = products[product.getResult(0)];
  for (int64_t l = 0; l < 32; ++l)
    for (int64_t j = 0; j < 4; ++j)
      results[l][j] = builder.create<memref::LoadOp>(
          loc, fragments[3], ValueRange{index(l), index(j)});
  return success();
}

LogicalResult WarpEmulation::cloneLdMatrix(nvgpu::LdMatrixOp matrices) {
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
  for (int64_t l = 0; l < 32; ++l)
    builder.create<memref::StoreOp>(loc,
                                    lanes[l].lookup(matrices.getIndices()[0]),
                                    ldmatrixAddresses, ValueRange{index(l)});
  Value memory = lanes[0].lookup(matrices.getSrcMemref());
  builder.create<func::CallOp>(
      loc, ldmatrix(memoryType.getNumElements()),
      ValueRange{memory, ldmatrixAddresses, ldmatrixResults,
                 builder.create<arith::ConstantIntOp>(
                     loc, matrices.getTranspose(), 1)});
  for (int64_t l = 0; l < 32; ++l) {
    Value row = builder.create<vector::LoadOp>(
        loc, VectorType::get({8}, builder.getBF16Type()), ldmatrixResults,
        ValueRange{index(l), index(0)});
    lanes[l].map(matrices.getRes(),
                 builder.create<vector::ShapeCastOp>(loc, type, row));
  }
  return success();
}

LogicalResult WarpEmulation::cloneUniformFor(scf::ForOp loop) {
  Location loc = loop.getLoc();
  IRMapping &first = lanes[0];
  auto warpLoop = builder.create<scf::ForOp>(
      loc, first.lookup(loop.getLowerBound()),
      first.lookup(loop.getUpperBound()), first.lookup(loop.getStep()),
      allLanes(loop.getInitArgs()));
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToStart(warpLoop.getBody());
  for (IRMapping &lane : lanes)
    lane.map(loop.getInductionVar(), warpLoop.getInductionVar());
  mapAllLanes(loop.getRegionIterArgs(), warpLoop.getRegionIterArgs());
  if (failed(cloneBlock(*loop.getBody())))
    return failure();
  builder.create<scf::YieldOp>(
      loc, allLanes(loop.getBody()->getTerminator()->getOperands()));
  mapAllLanes(loop.getResults(), warpLoop.getResults());
  return success();
}

LogicalResult WarpEmulation::cloneUniformIf(scf::IfOp branch) {
  Location loc = branch.getLoc();
  SmallVector<Type> types;
  for (size_t l = 0; l < lanes.size(); ++l)
    llvm::append_range(types, branch.getResultTypes());
  auto warpBranch = builder.create<scf::IfOp>(
      loc, types, lanes[0].lookup(branch.getCondition()),
      /*withElseRegion=*/!branch.getElseRegion().empty());
  for (auto [from, to] :
       llvm::zip(branch->getRegions(), warpBranch->getRegions())) {
    if (from.empty())
      continue;
    Block &target = to.front();
    if (!target.empty())
      target.getTerminator()->erase();
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToEnd(&target);
    if (failed(cloneBlock(from.front())))
      return failure();
    builder.create<scf::YieldOp>(
        loc, allLanes(from.front().getTerminator()->getOperands()));
  }
  mapAllLanes(branch.getResults(), warpBranch.getResults());
  return success();
}

LogicalResult WarpEmulation::cloneOp(Operation &op) {
  Location loc = op.getLoc();
  if (isa<gpu::ThreadIdOp, gpu::BlockIdOp, gpu::GridDimOp, gpu::BlockDimOp>(
          op)) {
    // Lane l's thread is warpBase + l.
    bool threadIndex = isa<gpu::ThreadIdOp>(op);
    for (auto [l, mapping] : llvm::enumerate(lanes)) {
      Value thread =
          threadIndex ? builder.create<arith::AddIOp>(loc, warpBase, index(l))
                            .getResult()
                      : Value();
      mapping.map(op.getResult(0),
                  getHostGeometry(&op, {block, thread, grid, blockSize,
                                        index(0), index(1)}));
    }
    return success();
  }
  if (auto shuffle = dyn_cast<gpu::ShuffleOp>(op)) {
    std::optional<int64_t> offset = getConstantIntValue(shuffle.getOffset());
    std::optional<int64_t> width = getConstantIntValue(shuffle.getWidth());
    if (shuffle.getMode() != gpu::ShuffleMode::XOR || !offset || !width ||
        *width != 32 || *offset < 0 || *offset >= 32)
      return op.emitOpError()
             << "cannot run on the host (only xor shuffles of whole warps by "
                "a constant offset)";
    Value valid = builder.create<arith::ConstantIntOp>(loc, 1, 1);
    for (auto [l, mapping] : llvm::enumerate(lanes)) {
      mapping.map(shuffle.getShuffleResult(),
                  lanes[l ^ *offset].lookup(shuffle.getValue()));
      mapping.map(shuffle.getValid(), valid);
    }
    return success();
  }
  if (auto ballot = dyn_cast<NVVM::VoteBallotOp>(op)) {
    Value bits = builder.create<arith::ConstantIntOp>(loc, 0, 32);
    for (auto [l, mapping] : llvm::enumerate(lanes)) {
      Value set = builder.create<arith::ExtUIOp>(
          loc, builder.getI32Type(), mapping.lookup(ballot.getPred()));
      bits = builder.create<arith::OrIOp>(
          loc, bits,
          builder.create<arith::ShLIOp>(
              loc, set, builder.create<arith::ConstantIntOp>(loc, l, 32)));
    }
    for (IRMapping &mapping : lanes)
      mapping.map(ballot.getResult(), bits);
    return success();
  }
  if (auto matrices = dyn_cast<nvgpu::LdMatrixOp>(op))
    return cloneLdMatrix(matrices);
  if (auto assembly = dyn_cast<LLVM::InlineAsmOp>(op)) {
    if (!isExchange(assembly))
      return op.emitOpError() << "cannot run on the host (inline PTX other "
                                 "than the bf16 mma.sync m16n8k16)";
    return cloneMma(assembly);
  }
  if (auto extract = dyn_cast<LLVM::ExtractValueOp>(op)) {
    auto product = products.find(extract.getContainer());
    if (product != products.end() && extract.getPosition().size() == 1) {
      for (auto [l, mapping] : llvm::enumerate(lanes))
        mapping.map(extract.getResult(),
                    product->second[l][extract.getPosition()[0]]);
      return success();
    }
  }
  if (containsExchange(&op)) {
    if (auto loop = dyn_cast<scf::ForOp>(op))
      return cloneUniformFor(loop);
    if (auto branch = dyn_cast<scf::IfOp>(op))
      return cloneUniformIf(branch);
    return op.emitOpError()
           << "exchanges values between lanes in a region the host cannot "
              "run a warp at a time";
  }
  if (isa<gpu::GPUDialect, NVVM::NVVMDialect, LLVM::LLVMDialect>(
          op.getDialect()))
    return op.emitOpError() << "cannot run on the host";
  for (IRMapping &mapping : lanes)
    builder.clone(op, mapping);
  return success();
}

LogicalResult WarpEmulation::planSegments(Block &block) {
  SmallVector<Segment> &parts = segments[&block];
  for (Operation &op : block.without_terminator()) {
    if (isa<gpu::BarrierOp>(op)) {
      parts.push_back({Segment::Kind::Barrier, {}, {}, {}, {}});
      continue;
    }
    if (containsBarrier(&op)) {
      auto loop = dyn_cast<scf::ForOp>(op);
      if (!loop)
        return op.emitOpError()
               << "holds a barrier the host cannot run (barriers go at the "
                  "kernel's top level or directly in a loop there)";
      parts.push_back({Segment::Kind::Loop, {}, loop, {}, {}});
      if (failed(planSegments(*loop.getBody())))
        return failure();
      continue;
    }
    if (parts.empty() || parts.back().kind != Segment::Kind::Run)
      parts.push_back({Segment::Kind::Run, {}, {}, {}, {}});
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
    if (user)
      user->inputs.insert(value);
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

void WarpEmulation::resetLanes() {
  for (IRMapping &lane : lanes) {
    lane.clear();
    for (auto [from, to] : functionLevel.getValueMap())
      lane.map(from, to);
  }
}

LogicalResult
WarpEmulation::forEachWarp(llvm::function_ref<LogicalResult()> body) {
  Location loc = kernel.getLoc();
  auto loop = builder.create<scf::ForOp>(loc, index(0), warps, index(1));
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPoint(loop.getBody()->getTerminator());
  warp = loop.getInductionVar();
  warpBase = builder.create<arith::MulIOp>(loc, warp, index(32));
  resetLanes();
  return body();
}

FailureOr<Value> WarpEmulation::laneValue(Value value, int64_t lane) {
  if (Value mapped = lanes[lane].lookupOrNull(value))
    return mapped;
  if (Value slot = slots.lookup(value))
    return builder
        .create<memref::LoadOp>(value.getLoc(), slot,
                                ValueRange{warp, index(lane)})
        .getResult();
  Operation *definition = value.getDefiningOp();
  if (definition && definition->hasTrait<OpTrait::ConstantLike>())
    return builder.clone(*definition)->getResult(0);
  return kernel.emitOpError() << "uses a value across a barrier that the "
                                 "host cannot keep";
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

LogicalResult WarpEmulation::emitRunInWarp(Segment &run) {
  for (Value input : run.inputs)
    for (int64_t l = 0; l < 32; ++l) {
      FailureOr<Value> value = laneValue(input, l);
      if (failed(value))
        return failure();
      lanes[l].map(input, *value);
    }
  for (Operation *op : run.ops)
    if (failed(cloneOp(*op)))
      return failure();
  for (Value output : run.outputs)
    for (int64_t l = 0; l < 32; ++l)
      builder.create<memref::StoreOp>(output.getLoc(), lanes[l].lookup(output),
                                      slots.lookup(output),
                                      ValueRange{warp, index(l)});
  return success();
}

LogicalResult WarpEmulation::emitRun(Segment &run) {
  return forEachWarp([&] { return emitRunInWarp(run); });
}

LogicalResult WarpEmulation::copyInto(ValueRange values, ValueRange targets) {
  // Every lane's value read before any is written (a yielded value may be
  // another carried one).
  SmallVector<std::pair<Value, Value>> copies;
  for (auto [value, target] : llvm::zip_equal(values, targets))
    for (int64_t l = 0; l < 32; ++l) {
      FailureOr<Value> copied = laneValue(value, l);
      if (failed(copied))
        return failure();
      copies.push_back({*copied, slots.lookup(target)});
    }
  for (auto [i, copy] : llvm::enumerate(copies))
    builder.create<memref::StoreOp>(kernel.getLoc(), copy.first, copy.second,
                                    ValueRange{warp, index(i % 32)});
  return success();
}

LogicalResult WarpEmulation::emitLoop(scf::ForOp loop) {
  Location loc = loop.getLoc();
  ValueRange carried = loop.getRegionIterArgs();
  if (failed(
          forEachWarp([&] { return copyInto(loop.getInitArgs(), carried); })))
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
          failed(copyInto(loop.getBody()->getTerminator()->getOperands(),
                          carried)))
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
      resetLanes();
      for (IRMapping &lane : lanes)
        lane.map(inductionVariable, next);
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
  warps = builder.create<arith::DivUIOp>(loc, blockSize, index(32));
  for (auto [fragment, type] :
       llvm::zip_equal(fragments, mma.getArgumentTypes()))
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
