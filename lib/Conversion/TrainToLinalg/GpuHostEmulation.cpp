//===- GpuHostEmulation.cpp - The GPU step's kernels run on the host -----===//
//
// emulateGpuKernels (TrainToGPU.h): every kernel of the step's gpu.module
// as a host function that runs each block's threads in turn, from the very
// gpu.func that became the PTX, so that the stand-in driver of the tests
// runs GPU programs on the CPU (docs/gpu-step.md).
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU.h"
#include "mantissa/Conversion/TrainToLLVM.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// The host emulation of one kernel: its top-level ops in phases, split
/// before each shuffle, which the host runs for every thread of a block
/// before it starts the next. A value that a later phase uses is
/// recomputed there when it is pure (the thread's index, views, constants),
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
  builder.setInsertionPointToEnd(hostModule.getBody());
  SmallVector<Type> types(kernel.getArgumentTypes());
  types.append(2, builder.getIndexType());
  auto host = builder.create<func::FuncOp>(loc, kernel.getName(),
                                           builder.getFunctionType(types, {}));
  Block *entry = host.addEntryBlock();
  builder.setInsertionPointToStart(entry);
  Value grid = entry->getArgument(types.size() - 2);
  Value blockSize = entry->getArgument(types.size() - 1);

  // Phases, and the values kept per thread across them.
  SmallVector<SmallVector<Operation *>> phases(1);
  for (Operation &op : body.without_terminator()) {
    if (isa<gpu::ShuffleOp>(op))
      phases.emplace_back();
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
  auto blocks = builder.create<scf::ForOp>(loc, zero, grid, one);
  builder.create<func::ReturnOp>(loc);
  SmallVector<scf::ForOp> threadLoops;
  for (ArrayRef<Operation *> ops : phases) {
    builder.setInsertionPoint(blocks.getBody()->getTerminator());
    auto threads = builder.create<scf::ForOp>(loc, zero, blockSize, one);
    threadLoops.push_back(threads);
    builder.setInsertionPoint(threads.getBody()->getTerminator());
    thread = threads.getInductionVar();
    mapping.clear();
    mapping.map(kernel.getArguments(), entry->getArguments().drop_back(2));
    // In order: what an op uses of its own phase is cloned before it.
    for (Operation *op : ops)
      if (failed(cloneOp(*op)))
        return failure();
  }
  // Launch geometry as the loops give it: x only (the kernels are 1-D).
  for (scf::ForOp threads : threadLoops) {
    WalkResult result = threads.getBody()->walk([&](Operation *op) {
      Value replacement;
      auto dimension = [&](auto idOp) {
        return idOp.getDimension() == gpu::Dimension::x;
      };
      if (auto id = dyn_cast<gpu::BlockIdOp>(op))
        replacement = dimension(id) ? blocks.getInductionVar() : zero;
      else if (auto id = dyn_cast<gpu::ThreadIdOp>(op))
        replacement = dimension(id) ? threads.getInductionVar() : zero;
      else if (auto dim = dyn_cast<gpu::GridDimOp>(op))
        replacement = dimension(dim) ? grid : one;
      else if (auto dim = dyn_cast<gpu::BlockDimOp>(op))
        replacement = dimension(dim) ? blockSize : one;
      else if (isa<gpu::GPUDialect>(op->getDialect()))
        return op->emitOpError() << "cannot run on the host",
               WalkResult::interrupt();
      else
        return WalkResult::advance();
      op->getResult(0).replaceAllUsesWith(replacement);
      op->erase();
      return WalkResult::skip();
    });
    if (result.wasInterrupted())
      return failure();
  }
  return success();
}

LogicalResult mlir::mantissa::emulateGpuKernels(gpu::GPUModuleOp gpuModule,
                                                ModuleOp hostModule) {
  for (auto kernel : gpuModule.getOps<gpu::GPUFuncOp>())
    if (kernel.isKernel() && failed(KernelEmulation(kernel).build(hostModule)))
      return failure();
  return success();
}

LogicalResult mlir::mantissa::lowerEmulatedKernelsToLLVM(ModuleOp hostModule) {
  SmallVector<std::string> names;
  for (auto kernel : hostModule.getOps<func::FuncOp>())
    names.push_back(kernel.getSymName().str());
  if (failed(lowerBufferizedToLLVM(hostModule)))
    return failure();
  for (const std::string &name : names)
    addPackedEntry(hostModule, name, name + "_host", /*indirect=*/true,
                   /*passThrough=*/2);
  return success();
}
