//===- GpuHostEmulation.cpp - The GPU step's kernels run on the host -----===//
//
// emulateGpuKernels (TrainToGPU.h): every kernel of the step's gpu.module
// as a host function that runs each block's threads in turn, from the very
// gpu.func that became the PTX, so that the stand-in driver of the tests
// runs GPU programs on the CPU (docs/gpu-step.md). A kernel whose warps
// run in lockstep (kWarpLockstepAttr: the fused attention) runs a warp at a
// time instead, its lanes side by side (WarpEmulation).
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
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"

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
class WarpEmulation {
public:
  WarpEmulation(gpu::GPUFuncOp kernel, func::FuncOp mma)
      : kernel(kernel), mma(mma) {}
  LogicalResult build(ModuleOp hostModule);

private:
  static bool isExchange(Operation *op) {
    if (auto assembly = dyn_cast<LLVM::InlineAsmOp>(op))
      return assembly.getAsmString() == kMmaBf16Asm;
    return isa<gpu::ShuffleOp, NVVM::VoteBallotOp>(op);
  }
  static bool containsExchange(Operation *op) {
    return op
        ->walk([](Operation *nested) {
          return isExchange(nested) ? WalkResult::interrupt()
                                    : WalkResult::advance();
        })
        .wasInterrupted();
  }
  LogicalResult cloneBlock(Block &block);
  LogicalResult cloneOp(Operation &op);
  LogicalResult cloneUniformFor(scf::ForOp loop);
  LogicalResult cloneUniformIf(scf::IfOp branch);
  LogicalResult cloneMma(LLVM::InlineAsmOp product);
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
  OpBuilder builder{kernel.getContext()};
  std::array<IRMapping, 32> lanes;
  /// Each lane's four results of each mma.sync.
  llvm::DenseMap<Value, std::array<std::array<Value, 4>, 32>> products;
  Value block, grid, blockSize, warpBase;
  /// The fragments an mma.sync exchanges: A, B, C, and D.
  std::array<Value, 4> fragments;
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

LogicalResult WarpEmulation::build(ModuleOp hostModule) {
  if (!kernel.getBody().hasOneBlock())
    return kernel.emitOpError() << "has control flow the host cannot run";
  Location loc = kernel.getLoc();
  Block *entry = createHostFunction(builder, kernel, hostModule);
  grid = entry->getArgument(entry->getNumArguments() - 2);
  blockSize = entry->getArgument(entry->getNumArguments() - 1);
  for (auto [fragment, type] :
       llvm::zip_equal(fragments, mma.getArgumentTypes()))
    fragment = builder.create<memref::AllocaOp>(loc, cast<MemRefType>(type));
  auto blocks = builder.create<scf::ForOp>(loc, index(0), grid, index(1));
  builder.create<func::ReturnOp>(loc);
  builder.setInsertionPoint(blocks.getBody()->getTerminator());
  block = blocks.getInductionVar();
  auto warps = builder.create<scf::ForOp>(
      loc, index(0), builder.create<arith::DivUIOp>(loc, blockSize, index(32)),
      index(1));
  builder.setInsertionPoint(warps.getBody()->getTerminator());
  warpBase =
      builder.create<arith::MulIOp>(loc, warps.getInductionVar(), index(32));
  for (IRMapping &lane : lanes)
    lane.map(kernel.getArguments(), entry->getArguments().drop_back(2));
  return cloneBlock(kernel.getBody().front());
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
  MLIRContext *context = hostModule.getContext();
  Location loc = hostModule.getLoc();
  OpBuilder b = OpBuilder::atBlockEnd(hostModule.getBody());
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  SmallVector<Type> types = {
      MemRefType::get({32, 4}, i32), MemRefType::get({32, 2}, i32),
      MemRefType::get({32, 4}, f32), MemRefType::get({32, 4}, f32)};
  auto function = b.create<func::FuncOp>(loc, "mantissa_emulated_mma",
                                         FunctionType::get(context, types, {}));
  function.setPrivate();
  Block *entry = function.addEntryBlock();
  b.setInsertionPointToStart(entry);
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

LogicalResult mlir::mantissa::emulateGpuKernels(gpu::GPUModuleOp gpuModule,
                                                ModuleOp hostModule) {
  func::FuncOp mma;
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
    if (failed(WarpEmulation(kernel, mma).build(hostModule)))
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
