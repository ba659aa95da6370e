//===- GpuKernels.cpp - The gpu.funcs of a GPU step's launches -----------===//
//
// buildGpuKernel (GpuKernels.h): the gpu.func of one launch of the step's
// GPU program, from the lowered kernel functions of its members: their
// loops spread over threads, folds of partials as warp trees, large
// elementwise launches several iterations a thread (docs/gpu-step.md).
//
//===----------------------------------------------------------------------===//

#include "GpuKernels.h"
#include "GpuVectorAccesses.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// The chain of scf.for loops starting at the first one in `block`, each
/// the only op (besides the terminator) of its parent's body, except that
/// the last may hold more.
SmallVector<scf::ForOp> getLoopNest(Block &block) {
  SmallVector<scf::ForOp> nest;
  auto loops = block.getOps<scf::ForOp>();
  if (loops.empty())
    return nest;
  scf::ForOp loop = *loops.begin();
  while (true) {
    nest.push_back(loop);
    Block *body = loop.getBody();
    if (body->getOperations().size() != 2)
      break;
    auto inner = dyn_cast<scf::ForOp>(body->front());
    if (!inner)
      break;
    loop = inner;
  }
  return nest;
}

std::optional<int64_t> getTripCount(scf::ForOp loop) {
  std::optional<int64_t> lower = getConstantIntValue(loop.getLowerBound());
  std::optional<int64_t> upper = getConstantIntValue(loop.getUpperBound());
  std::optional<int64_t> step = getConstantIntValue(loop.getStep());
  if (!lower || !upper || !step || *step <= 0)
    return std::nullopt;
  return std::max<int64_t>(0, (*upper - *lower + *step - 1) / *step);
}

/// The loops of a scatter nest whose iterations threads may run at once,
/// each thread running the other loops in order: a loop qualifies when,
/// for every buffer the nest writes, every access to it (load or store,
/// through one view) has the loop's induction variable itself as the index
/// of one fixed dimension, along which that view does not broadcast
/// (stride 0). Distinct iterations of such a loop then touch distinct
/// elements of everything written, so they cannot race, while the loops
/// left out (the ones whose iterations may hit the same element, as
/// repeated indices of an accumulating scatter do) keep their order in
/// every thread. Buffers only read are indexed freely. Nothing qualifies
/// when the nest holds anything but loads, stores and pure ops.
SmallVector<scf::ForOp> findSpreadableLoops(MutableArrayRef<scf::ForOp> nest) {
  if (nest.empty())
    return {};
  struct Access {
    Value memref;
    ValueRange indices;
  };
  SmallVector<Access> accesses;
  llvm::SetVector<Value> written;
  bool pure = true;
  nest.front().getBody()->walk([&](Operation *op) {
    if (auto load = dyn_cast<memref::LoadOp>(op)) {
      accesses.push_back({load.getMemref(), load.getIndices()});
    } else if (auto store = dyn_cast<memref::StoreOp>(op)) {
      accesses.push_back({store.getMemref(), store.getIndices()});
      written.insert(getBaseBuffer(store.getMemref()));
    } else if (!isa<scf::ForOp, scf::YieldOp>(op) && !isMemoryEffectFree(op)) {
      pure = false;
    }
  });
  if (!pure)
    return {};
  SmallVector<scf::ForOp> spreadable;
  for (scf::ForOp loop : nest) {
    Value iv = loop.getInductionVar();
    bool ok = true;
    for (Value base : written) {
      Value view;
      std::optional<size_t> dimension;
      for (const Access &access : accesses) {
        if (getBaseBuffer(access.memref) != base)
          continue;
        if (!view)
          view = access.memref;
        if (access.memref != view) {
          ok = false;
          break;
        }
        std::optional<size_t> at;
        for (auto [position, index] : llvm::enumerate(access.indices))
          if (index == iv)
            at = position;
        if (!at || (dimension && *dimension != *at)) {
          ok = false;
          break;
        }
        dimension = at;
      }
      SmallVector<int64_t> strides;
      int64_t offset;
      if (!ok || !view ||
          failed(getStridesAndOffset(cast<MemRefType>(view.getType()), strides,
                                     offset)) ||
          strides[*dimension] == 0) {
        ok = false;
        break;
      }
    }
    if (ok && !written.empty())
      spreadable.push_back(loop);
  }
  return spreadable;
}

/// One loop that threads share out: its bounds (static) and where it is.
struct SpreadLoop {
  scf::ForOp loop;
  int64_t lower, step, tripCount;
};

/// Replaces `loops` (outermost first, perfectly nested in one another) by
/// the iteration that `linear` (their row-major linear index) names: each
/// induction variable becomes lower + index * step, computed at the
/// builder's insertion point, and each body is inlined in place of its
/// loop.
///
/// With `innerOffset`, the innermost loop's iteration is that many after the
/// one `linear` names (a thread's later consecutive iteration, whose other
/// indices are the same).
void spreadLoops(OpBuilder &builder, ArrayRef<SpreadLoop> loops, Value linear,
                 int64_t innerOffset = 0) {
  Location loc = linear.getLoc();
  SmallVector<Value> values(loops.size());
  Value remaining = linear;
  for (int64_t position = loops.size() - 1; position >= 0; --position) {
    const SpreadLoop &spread = loops[position];
    Value count = builder.create<arith::ConstantIndexOp>(loc, spread.tripCount);
    Value index = position == 0
                      ? remaining
                      : builder.create<arith::RemUIOp>(loc, remaining, count);
    if (position > 0)
      remaining = builder.create<arith::DivUIOp>(loc, remaining, count);
    if (position + 1 == int64_t(loops.size()) && innerOffset != 0)
      index = builder.create<arith::AddIOp>(
          loc, index, builder.create<arith::ConstantIndexOp>(loc, innerOffset));
    values[position] = builder.create<arith::AddIOp>(
        loc, builder.create<arith::ConstantIndexOp>(loc, spread.lower),
        builder.create<arith::MulIOp>(
            loc, index,
            builder.create<arith::ConstantIndexOp>(loc, spread.step)));
  }
  for (auto [spread, value] : llvm::zip_equal(loops, values)) {
    scf::ForOp loop = spread.loop;
    loop.getInductionVar().replaceAllUsesWith(value);
    Block *body = loop.getBody();
    body->getTerminator()->erase();
    loop->getBlock()->getOperations().splice(Block::iterator(loop),
                                             body->getOperations());
    loop->erase();
  }
}

} // namespace

/// The thread's global index (block * blockDim + thread) as an index.
Value mlir::mantissa::buildThreadIndex(OpBuilder &builder, Location loc) {
  Value block = builder.create<gpu::BlockIdOp>(loc, gpu::Dimension::x);
  Value size = builder.create<gpu::BlockDimOp>(loc, gpu::Dimension::x);
  Value thread = builder.create<gpu::ThreadIdOp>(loc, gpu::Dimension::x);
  return builder.create<arith::AddIOp>(
      loc, builder.create<arith::MulIOp>(loc, block, size), thread);
}

/// An insertion point at the end of a gpu.module's body (before its
/// terminator, if it has one).
OpBuilder mlir::mantissa::getModuleEndBuilder(gpu::GPUModuleOp gpuModule) {
  Block *body = gpuModule.getBody();
  if (!body->empty() && body->back().hasTrait<OpTrait::IsTerminator>())
    return OpBuilder(&body->back());
  return OpBuilder::atBlockEnd(body);
}

namespace {

/// The shape of one member of a kernel launch (a lowered kernel function
/// whose threads each run one iteration of the loops its attributes name):
/// the threads it runs on, the launch's first, and the loop iterations each
/// of them runs in order.
struct KernelMember {
  int64_t threads, iterations;
};

/// The shape of `function` as a launch member, and in `chosen` the loops
/// (of its nest) whose iterations its threads share out.
FailureOr<KernelMember>
getKernelMemberShape(func::FuncOp function,
                     SmallVectorImpl<scf::ForOp> &chosen) {
  SmallVector<scf::ForOp> nest = getLoopNest(function.getBody().front());
  if (auto loops = function->getAttrOfType<IntegerAttr>(kThreadLoops)) {
    int64_t count = std::min<int64_t>(loops.getInt(), nest.size());
    chosen.assign(nest.begin(), nest.begin() + count);
  } else if (function->hasAttr(kThreadScatterLoops)) {
    chosen = findSpreadableLoops(nest);
  }
  int64_t threads = 1;
  for (scf::ForOp loop : chosen) {
    std::optional<int64_t> count = getTripCount(loop);
    if (!count)
      return function.emitOpError() << "has a loop without static bounds";
    threads *= *count;
  }
  if (auto serial =
          function->getAttrOfType<IntegerAttr>(kGpuSerialIterationsAttr))
    return KernelMember{threads, serial.getInt()};
  int64_t iterations = 1;
  for (scf::ForOp loop : nest)
    iterations *= getTripCount(loop).value_or(1);
  return KernelMember{threads, iterations / std::max<int64_t>(threads, 1)};
}

/// Tells LLVM that no two arguments of `kernel` overlap (`llvm.noalias`)
/// and which ones it only reads (`llvm.readonly`: not in `written`), so
/// that values stay in
/// registers across stores and read-only buffers load through the
/// non-coherent cache (ld.global.nc). Each argument is a distinct buffer of
/// the program, and no two buffers of one launch overlap: temporaries live
/// across their whole launch in the arena packing (which the program's
/// checker verifies), and GpuStep::run refuses arguments and results bound
/// to overlapping storage.
///
/// In a kernel with a barrier (a member by rows reads what other threads
/// of its block wrote before it), a written buffer is not `noalias`: LLVM's
/// alias analysis takes a noalias argument for memory that no call it is
/// not passed to touches, the barrier's intrinsic included, and could then
/// move a load of what another thread stored across the barrier.
void markArgumentsNoAlias(gpu::GPUFuncOp kernel,
                          const llvm::SmallDenseSet<Value> &written) {
  UnitAttr unit = UnitAttr::get(kernel.getContext());
  bool barrier = false;
  kernel.walk([&](gpu::BarrierOp) { barrier = true; });
  for (BlockArgument argument : kernel.getArguments()) {
    bool isWritten = written.contains(argument);
    if (!isWritten || !barrier)
      kernel.setArgAttr(argument.getArgNumber(),
                        LLVM::LLVMDialect::getNoAliasAttrName(), unit);
    if (!isWritten)
      kernel.setArgAttr(argument.getArgNumber(),
                        LLVM::LLVMDialect::getReadonlyAttrName(), unit);
  }
}

/// Emits, at the top level of a kernel's body (every thread of the block
/// takes part in its shuffles), the fold of a split reduction's partials
/// (`function`, marked kGpuFoldPartsAttr) over the launch's threads: output u
/// on the `parts` threads from u * parts, lane l loading partial l, the
/// lanes combining in a butterfly of xor shuffles (a fixed tree: the same
/// on every run and launch), then lane 0 combining the tree's value into
/// the output.
static void buildFoldTree(OpBuilder &builder, func::FuncOp function,
                          Block *entry, const GpuStepOp::Member &member,
                          int64_t outputs, Value linear) {
  Location loc = function.getLoc();
  int64_t parts = member.threadStride;
  IRMapping values;
  for (auto [argument, index] :
       llvm::zip_equal(function.getArguments(), member.buffers))
    values.map(argument, entry->getArgument(index));
  // The fold's loop body: the running value and a partial loaded, the
  // combiner applied to them, the result stored. The output's view is what
  // it stores to, the partials' what else it loads.
  memref::StoreOp folded;
  function.walk([&](memref::StoreOp store) { folded = store; });
  Value output = folded.getMemRef(), partials;
  Operation *combiner = folded.getValueToStore().getDefiningOp();
  Value runningLoaded, partialLoaded;
  for (Value operand : combiner->getOperands()) {
    auto load = operand.getDefiningOp<memref::LoadOp>();
    if (load.getMemRef() == output) {
      runningLoaded = operand;
    } else {
      partialLoaded = operand;
      partials = load.getMemRef();
    }
  }
  for (Value *view : {&output, &partials})
    *view = isa<BlockArgument>(*view)
                ? values.lookup(*view)
                : builder.clone(*view->getDefiningOp(), values)->getResult(0);
  auto outputType = cast<MemRefType>(output.getType());
  Type element = outputType.getElementType();
  auto index = [&](int64_t value) {
    return builder.create<arith::ConstantIndexOp>(loc, value).getResult();
  };
  Value lane = builder.create<arith::RemUIOp>(loc, linear, index(parts));
  Value iteration = builder.create<arith::DivUIOp>(loc, linear, index(parts));
  Value active = builder.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult,
                                               iteration, index(outputs));
  // The output element of iteration u, row-major.
  SmallVector<Value> indices(outputType.getRank());
  Value remaining = iteration;
  for (int64_t dim = outputType.getRank() - 1; dim >= 0; --dim) {
    Value extent = index(outputType.getDimSize(dim));
    indices[dim] = dim == 0
                       ? remaining
                       : builder.create<arith::RemUIOp>(loc, remaining, extent);
    if (dim > 0)
      remaining = builder.create<arith::DivUIOp>(loc, remaining, extent);
  }
  // The combiner, on the running value and the next one in its places.
  auto combine = [&](OpBuilder &at, Value running, Value next) {
    IRMapping operands;
    operands.map(runningLoaded, running);
    operands.map(partialLoaded, next);
    return at.clone(*combiner, operands)->getResult(0);
  };
  // Threads past the last output (the last block's) still shuffle: a value
  // they do not use.
  auto load = builder.create<scf::IfOp>(
      loc, active,
      [&](OpBuilder &then, Location thenLoc) {
        SmallVector<Value> at(indices);
        at.push_back(lane);
        then.create<scf::YieldOp>(
            thenLoc,
            then.create<memref::LoadOp>(thenLoc, partials, at).getResult());
      },
      [&](OpBuilder &otherwise, Location otherwiseLoc) {
        otherwise.create<scf::YieldOp>(
            otherwiseLoc, otherwise
                              .create<arith::ConstantOp>(
                                  otherwiseLoc, otherwise.getZeroAttr(element))
                              .getResult());
      });
  Value value = load.getResult(0);
  Value width = builder.create<arith::ConstantIntOp>(loc, 32, 32);
  for (int64_t offset = parts / 2; offset >= 1; offset /= 2) {
    auto shuffle = builder.create<gpu::ShuffleOp>(
        loc, value, builder.create<arith::ConstantIntOp>(loc, offset, 32),
        width, gpu::ShuffleMode::XOR);
    value = combine(builder, value, shuffle.getShuffleResult());
  }
  Value first = builder.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq,
                                              lane, index(0));
  auto store = builder.create<scf::IfOp>(
      loc, builder.create<arith::AndIOp>(loc, active, first), false);
  OpBuilder then(store.thenBlock()->getTerminator());
  Value running = then.create<memref::LoadOp>(loc, output, indices);
  then.create<memref::StoreOp>(loc, combine(then, running, value), output,
                               indices);
}

/// Moves the loads of `block` (at its top level) from buffers the kernel
/// does not write (not in `written`), and the pure ops they need, as early in
/// the block as their operands allow: a thread's iterations then issue all
/// their loads before the first store, in the PTX's order. Reading a buffer
/// nothing writes gives the same value at any point.
void hoistReadOnlyLoads(Block *block,
                        const llvm::SmallDenseSet<Value> &written) {
  // The last op moved to the front (ops that need nothing of the block
  // keep their order there).
  Operation *front = nullptr;
  for (Operation &op :
       llvm::make_early_inc_range(block->without_terminator())) {
    bool movable = op.getNumRegions() == 0 &&
                   (isMemoryEffectFree(&op) ||
                    (isa<memref::LoadOp>(op) &&
                     !written.contains(
                         getBaseBuffer(cast<memref::LoadOp>(op).getMemRef()))));
    if (!movable)
      continue;
    // Right after the last of its operands defined in the block.
    Operation *latest = nullptr;
    for (Value operand : op.getOperands())
      if (Operation *definition = operand.getDefiningOp();
          definition && definition->getBlock() == block &&
          (!latest || latest->isBeforeInBlock(definition)))
        latest = definition;
    if (latest) {
      op.moveAfter(latest);
    } else {
      if (front)
        op.moveAfter(front);
      else if (&block->front() != &op)
        op.moveBefore(&block->front());
      front = &op;
    }
  }
}

/// Launches with at least this many threads of elementwise work run
/// several iterations per thread (about four waves of an H200's resident
/// threads).
constexpr int64_t kCoarsenThreads = int64_t(1) << 20;
constexpr int64_t kIterationsPerThread = 4;

/// How many iterations of each member a thread of the launch runs: more
/// than one when every member is a large elementwise op on consecutive
/// threads (one iteration of its loops each, no fold), so that each thread
/// keeps several independent loads in flight. The mapping is the same
/// function of a member's iteration count for every member, so members
/// that depend on each other element by element (the same loops) keep
/// each element on one thread.
int64_t getElementsPerThread(ArrayRef<func::FuncOp> functions,
                             ArrayRef<GpuStepOp::Member> members,
                             ArrayRef<KernelMember> shapes) {
  int64_t threads = 0;
  for (auto [function, member, shape] :
       llvm::zip_equal(functions, members, shapes)) {
    if (!function->hasAttr(kThreadLoops) ||
        function->hasAttr(kGpuFoldPartsAttr) || member.threadStride != 1 ||
        shape.iterations != 1)
      return 1;
    threads = std::max(threads, shape.threads);
  }
  return threads >= kCoarsenThreads ? kIterationsPerThread : 1;
}

/// How many consecutive iterations of each member a thread of the launch
/// runs, as vector accesses (GpuVectorAccesses.h), with each member's
/// candidates in `candidates`: more than one when every member is
/// elementwise on consecutive threads (one iteration of its whole nest
/// each, no fold, not by rows) and some access of theirs may be a vector.
/// The mapping (thread t runs iterations t * width, ...) is the same
/// function of a member's iterations for every member, so members that
/// depend on each other element by element keep each element on one
/// thread.
int64_t getVectorWidth(ArrayRef<func::FuncOp> functions,
                       ArrayRef<GpuStepOp::Member> members,
                       ArrayRef<SmallVector<scf::ForOp>> chosen,
                       ArrayRef<KernelMember> shapes,
                       SmallVectorImpl<VectorCandidates> &candidates) {
  for (auto [function, member, loops, shape] :
       llvm::zip_equal(functions, members, chosen, shapes)) {
    // A member on one thread (a scalar) runs on thread 0 either way.
    if (shape.threads == 1 && member.threadStride == 1 &&
        member.rowColumns == 0 && !function->hasAttr(kGpuFoldPartsAttr)) {
      candidates.push_back({});
      continue;
    }
    if (!function->hasAttr(kThreadLoops) ||
        function->hasAttr(kGpuFoldPartsAttr) || member.threadStride != 1 ||
        member.rowColumns > 0 || shape.iterations != 1)
      return 1;
    FailureOr<VectorCandidates> found = findVectorCandidates(function, loops);
    if (failed(found))
      return 1;
    candidates.push_back(std::move(*found));
  }
  return chooseVectorWidth(candidates);
}

} // namespace

/// The gpu.func of kernel op `op` (its `entry`, one flat memref argument
/// per buffer) that runs each of its members (lowered kernel functions in
/// `kernels`), one after the other: thread t runs iteration t of each
/// member that has one, or iteration t / stride of a member with a thread
/// stride (a fold as a warp tree, the ops on its threads), or iterations
/// t, t + T', ... of a large elementwise launch's members. Sets each
/// member's and the launch's thread counts and serial iterations (the
/// launch's: the most of any member).
LogicalResult mlir::mantissa::buildGpuKernel(GpuStepOp &op, ModuleOp kernels,
                                             gpu::GPUModuleOp gpuModule) {
  SmallVector<func::FuncOp> functions;
  for (GpuStepOp::Member &member : op.members)
    functions.push_back(kernels.lookupSymbol<func::FuncOp>(member.function));
  // The launch's arguments: each buffer's, as a member takes it.
  SmallVector<Type> arguments(op.buffers.size());
  for (auto [function, member] : llvm::zip_equal(functions, op.members))
    for (auto [type, index] :
         llvm::zip_equal(function.getArgumentTypes(), member.buffers))
      arguments[index] = type;
  SmallVector<SmallVector<scf::ForOp>> chosen(functions.size());
  SmallVector<KernelMember> shapes;
  for (auto [function, loops] : llvm::zip_equal(functions, chosen)) {
    FailureOr<KernelMember> shape = getKernelMemberShape(function, loops);
    if (failed(shape))
      return failure();
    shapes.push_back(*shape);
  }
  SmallVector<VectorCandidates> candidates;
  int64_t width =
      getVectorWidth(functions, op.members, chosen, shapes, candidates);
  int64_t perThread =
      width > 1 ? 1 : getElementsPerThread(functions, op.members, shapes);
  Location loc = functions.front().getLoc();
  OpBuilder builder = getModuleEndBuilder(gpuModule);
  auto kernel = builder.create<gpu::GPUFuncOp>(
      loc, op.entry, builder.getFunctionType(arguments, {}));
  kernel->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                  builder.getUnitAttr());
  Block *entry = &kernel.getBody().front();
  builder.setInsertionPointToStart(entry);
  Value linear = buildThreadIndex(builder, loc);
  builder.setInsertionPoint(builder.create<gpu::ReturnOp>(loc));
  auto index = [&](OpBuilder &at, int64_t value) {
    return at.create<arith::ConstantIndexOp>(loc, value).getResult();
  };
  auto below = [&](OpBuilder &at, Value value, Value limit) {
    return at.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, value,
                                    limit);
  };
  op.threads = op.serialIterations = 1;
  // The blocks that run several iterations of a member one after the
  // other, unguarded.
  SmallVector<Block *> fullBlocks;
  for (auto [position, function, member, loops, shape] :
       llvm::enumerate(functions, op.members, chosen, shapes)) {
    member.serialIterations = shape.iterations;
    op.serialIterations = std::max(op.serialIterations, shape.iterations);
    if (function->hasAttr(kGpuFoldPartsAttr)) {
      if (member.threadStride !=
          function->getAttrOfType<IntegerAttr>(kGpuFoldPartsAttr).getInt())
        return function.emitOpError()
               << "folds its partials on threads of another stride";
      member.threads = shape.threads;
      op.threads = std::max(op.threads, shape.threads * member.threadStride);
      buildFoldTree(builder, function, entry, member, shape.threads, linear);
      member.serialIterations = 1;
      continue;
    }
    // Iteration `iteration` of the member (its innermost loop's iteration
    // `innerOffset` after), at the builder's point; `copy` (if given) maps
    // the member's ops to their clones.
    auto emitIteration = [&](OpBuilder &at, Value iteration,
                             int64_t innerOffset = 0,
                             IRMapping *copy = nullptr) {
      IRMapping local;
      IRMapping &values = copy ? *copy : local;
      for (auto [argument, position] :
           llvm::zip_equal(function.getArguments(), member.buffers))
        values.map(argument, entry->getArgument(position));
      Operation *first = nullptr;
      for (Operation &nested :
           function.getBody().front().without_terminator()) {
        Operation *clone = at.clone(nested, values);
        first = first ? first : clone;
      }
      if (!first)
        return;
      SmallVector<SpreadLoop> spread;
      for (scf::ForOp loop : loops)
        spread.push_back({cast<scf::ForOp>(values.lookup(loop.getOperation())),
                          *getConstantIntValue(loop.getLowerBound()),
                          *getConstantIntValue(loop.getStep()),
                          *getTripCount(loop)});
      OpBuilder spreadAt(first);
      spreadLoops(spreadAt, spread, iteration, innerOffset);
    };
    Value limit = index(builder, shape.threads);
    if (member.rowColumns > 0) {
      // By rows: row r on the lanes from r * stride, lane l running
      // columns l, l + stride, ... in order, after the block's barrier (the
      // row's lanes wrote what it reads earlier in the launch).
      int64_t columns = member.rowColumns, lanes = member.threadStride;
      if (lanes < 2 || shape.threads % columns != 0)
        return function.emitOpError()
               << "runs by rows of " << columns << " columns on " << lanes
               << " lanes, which its " << shape.threads
               << " iterations do not divide into";
      int64_t rows = shape.threads / columns;
      builder.create<gpu::BarrierOp>(loc);
      Value lane =
          builder.create<arith::RemUIOp>(loc, linear, index(builder, lanes));
      Value row =
          builder.create<arith::DivUIOp>(loc, linear, index(builder, lanes));
      auto guard = builder.create<scf::IfOp>(
          loc, below(builder, row, index(builder, rows)), false);
      OpBuilder then(guard.thenBlock()->getTerminator());
      Value first = then.create<arith::MulIOp>(loc, row, index(then, columns));
      auto loop = then.create<scf::ForOp>(loc, lane, index(then, columns),
                                          index(then, lanes));
      OpBuilder body(loop.getBody()->getTerminator());
      emitIteration(
          body, body.create<arith::AddIOp>(loc, first, loop.getInductionVar()));
      member.threads = rows;
      member.serialIterations =
          llvm::divideCeil(columns, lanes) * shape.iterations;
      op.serialIterations =
          std::max(op.serialIterations, member.serialIterations);
      op.threads = std::max(op.threads, rows * lanes);
      continue;
    }
    if (member.threadStride > 1) {
      Value stride = index(builder, member.threadStride);
      Value iteration = builder.create<arith::DivUIOp>(loc, linear, stride);
      Value inRange = builder.create<arith::AndIOp>(
          loc,
          builder.create<arith::CmpIOp>(
              loc, arith::CmpIPredicate::eq,
              builder.create<arith::RemUIOp>(loc, linear, stride),
              index(builder, 0)),
          below(builder, iteration, limit));
      member.threads = shape.threads;
      op.threads = std::max(op.threads, shape.threads * member.threadStride);
      auto guard = builder.create<scf::IfOp>(loc, inRange, false);
      OpBuilder then(guard.thenBlock()->getTerminator());
      emitIteration(then, iteration);
      continue;
    }
    if (width > 1 && shape.threads > 1) {
      // Thread t runs iterations t * width, ..., t * width + width - 1,
      // whose accesses along contiguous dimensions are one vector each.
      int64_t threads = shape.threads / width;
      member.threads = threads;
      member.elementsPerThread = width;
      op.threads = std::max(op.threads, threads);
      auto guard = builder.create<scf::IfOp>(
          loc, below(builder, linear, index(builder, threads)), false);
      OpBuilder then(guard.thenBlock()->getTerminator());
      Value first = then.create<arith::MulIOp>(loc, linear, index(then, width));
      SmallVector<IRMapping> copies(width);
      for (auto [offset, copy] : llvm::enumerate(copies))
        emitIteration(then, first, offset, &copy);
      for (const VectorCandidates::Access &access :
           candidates[position].accesses) {
        if (!isVectorAccess(access, width))
          continue;
        SmallVector<Operation *> ops;
        for (IRMapping &copy : copies)
          ops.push_back(copy.lookup(access.op));
        fuseCopiesIntoVectors(ops, access.dimension);
      }
      continue;
    }
    // Thread t runs iterations t, t + T', ..., t + (k - 1) T' (T' threads,
    // k iterations each): neighbouring threads still touch neighbouring
    // elements, and each thread has k independent iterations' loads in
    // flight. All k unguarded where they all exist (every thread but the
    // last few), so that their loads can issue together.
    int64_t threads = llvm::divideCeil(shape.threads, perThread);
    member.threads = threads;
    member.elementsPerThread = llvm::divideCeil(shape.threads, threads);
    op.threads = std::max(op.threads, threads);
    auto guard = builder.create<scf::IfOp>(
        loc, below(builder, linear, index(builder, threads)), false);
    OpBuilder then(guard.thenBlock()->getTerminator());
    if (perThread == 1) {
      emitIteration(then, linear);
      continue;
    }
    Value step = index(then, threads);
    Value last = then.create<arith::AddIOp>(
        loc, linear, index(then, (perThread - 1) * threads));
    auto all = then.create<scf::IfOp>(loc, below(then, last, limit), true);
    fullBlocks.push_back(all.thenBlock());
    OpBuilder full(all.thenBlock()->getTerminator());
    OpBuilder tail(all.elseBlock()->getTerminator());
    Value iteration = linear;
    for (int64_t k = 0; k < perThread; ++k) {
      if (k > 0)
        iteration = full.create<arith::AddIOp>(loc, iteration, step);
      emitIteration(full, iteration);
    }
    iteration = linear;
    for (int64_t k = 0; k < perThread; ++k) {
      if (k > 0)
        iteration = tail.create<arith::AddIOp>(loc, iteration, step);
      auto exists =
          tail.create<scf::IfOp>(loc, below(tail, iteration, limit), false);
      OpBuilder inner(exists.thenBlock()->getTerminator());
      emitIteration(inner, iteration);
    }
  }
  op.grid = std::max<int64_t>(1, (op.threads + kBlockSize - 1) / kBlockSize);
  // The buffers some member writes (base buffers: the kernel's arguments).
  llvm::SmallDenseSet<Value> written;
  kernel.walk([&](Operation *store) {
    if (auto scalar = dyn_cast<memref::StoreOp>(store))
      written.insert(getBaseBuffer(scalar.getMemRef()));
    if (auto vector = dyn_cast<vector::StoreOp>(store))
      written.insert(getBaseBuffer(vector.getBase()));
  });
  for (Block *block : fullBlocks)
    hoistReadOnlyLoads(block, written);
  markArgumentsNoAlias(kernel, written);
  return success();
}
