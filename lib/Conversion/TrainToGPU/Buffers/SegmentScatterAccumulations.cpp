//===- SegmentScatterAccumulations.cpp - Scatters as sorted segments ------===//
//
// mantissa-segment-scatter-accumulations (Passes.td): an accumulating
// scatter, whose iterations may hit the same element and so run in order in
// one GPU thread per feature, becomes a stable counting sort of its index
// iterations by key and one thread per sorted position and feature, where
// the first position of each run of equal keys folds the run in order.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h"
#include "mlir/Analysis/SliceAnalysis.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_SEGMENTSCATTERACCUMULATIONSPASS
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// Below this many index iterations the nest's serial loop is short.
constexpr int64_t kMinIndexIterations = 32;
/// The most partial counts per index iteration in the rank nest.
constexpr int64_t kMaxPartials = 32;

/// A matched nest: loops outermost first, with their trip counts, and the
/// one read-modify-write of the accumulated buffer in the innermost body.
struct ScatterNest {
  SmallVector<scf::ForOp> loops;
  SmallVector<int64_t> trips;
  memref::LoadOp old;
  memref::StoreOp store;
  /// Positions in `loops`: the loops the key depends on (in nest order)
  /// and the loops that are coordinates of the store themselves.
  SmallVector<unsigned> indexLoops, featureLoops;
  /// The store coordinate that is the key, and the ops of the innermost
  /// body that compute it, in order.
  unsigned keyCoordinate = 0;
  SmallVector<Operation *> keySlice;
  int64_t indexIterations = 1;
};

/// The position of the loop whose induction variable `value` is, if any.
std::optional<unsigned> getLoopOf(ArrayRef<scf::ForOp> loops, Value value) {
  for (unsigned position = 0; position < loops.size(); ++position)
    if (scf::ForOp(loops[position]).getInductionVar() == value)
      return position;
  return std::nullopt;
}

std::optional<ScatterNest> matchScatterNest(scf::ForOp outer) {
  ScatterNest nest;
  for (scf::ForOp loop = outer;;) {
    std::optional<int64_t> lower = getConstantIntValue(loop.getLowerBound());
    std::optional<int64_t> upper = getConstantIntValue(loop.getUpperBound());
    std::optional<int64_t> step = getConstantIntValue(loop.getStep());
    if (!lower || *lower != 0 || !step || *step != 1 || !upper || *upper < 1 ||
        loop.getNumResults() != 0)
      return std::nullopt;
    nest.loops.push_back(loop);
    nest.trips.push_back(*upper);
    Block *body = loop.getBody();
    auto inner = dyn_cast<scf::ForOp>(body->front());
    if (!inner || body->getOperations().size() != 2)
      break;
    loop = inner;
  }
  Block *body = nest.loops.back().getBody();
  for (Operation &op : body->without_terminator()) {
    if (op.getNumRegions() != 0)
      return std::nullopt;
    if (auto store = dyn_cast<memref::StoreOp>(op)) {
      if (nest.store)
        return std::nullopt;
      nest.store = store;
    } else if (!isa<memref::LoadOp>(op) && !isMemoryEffectFree(&op)) {
      return std::nullopt;
    }
  }
  if (!nest.store)
    return std::nullopt;
  Value base = getBaseBuffer(nest.store.getMemRef());
  for (auto load : body->getOps<memref::LoadOp>()) {
    if (getBaseBuffer(load.getMemRef()) != base)
      continue;
    if (nest.old || load.getMemRef() != nest.store.getMemRef() ||
        load.getIndices() != nest.store.getIndices())
      return std::nullopt;
    nest.old = load;
  }
  if (!nest.old)
    return std::nullopt;

  // One data-dependent coordinate, the key; the others are loops.
  std::optional<unsigned> key;
  for (auto [position, index] : llvm::enumerate(nest.store.getIndices())) {
    if (std::optional<unsigned> loop = getLoopOf(nest.loops, index)) {
      if (llvm::is_contained(nest.featureLoops, *loop))
        return std::nullopt;
      nest.featureLoops.push_back(*loop);
    } else if (key) {
      return std::nullopt;
    } else {
      key = position;
    }
  }
  if (!key)
    return std::nullopt;
  nest.keyCoordinate = *key;
  Value keyValue = nest.store.getIndices()[*key];
  Operation *keyOp = keyValue.getDefiningOp();
  if (!keyOp || keyOp->getBlock() != body)
    return std::nullopt;
  BackwardSliceOptions options;
  options.filter = [&](Operation *op) { return op->getBlock() == body; };
  options.inclusive = true;
  SetVector<Operation *> slice;
  getBackwardSlice(keyOp, &slice, options);
  // The key may read buffers other than the accumulated one, and depends on
  // index loops only.
  for (Operation *op : slice) {
    if (op == nest.old.getOperation())
      return std::nullopt;
    for (Value operand : op->getOperands())
      if (std::optional<unsigned> loop = getLoopOf(nest.loops, operand);
          loop && llvm::is_contained(nest.featureLoops, *loop))
        return std::nullopt;
  }
  nest.keySlice.assign(slice.begin(), slice.end());
  llvm::sort(nest.keySlice,
             [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  for (unsigned position = 0; position < nest.loops.size(); ++position)
    if (!llvm::is_contained(nest.featureLoops, position)) {
      nest.indexLoops.push_back(position);
      nest.indexIterations *= nest.trips[position];
    }
  if (nest.indexIterations < kMinIndexIterations ||
      nest.indexIterations > INT32_MAX)
    return std::nullopt;
  return nest;
}

/// Builds the four nests that replace a matched one.
class SegmentBuilder {
public:
  SegmentBuilder(ScatterNest &nest, OpBuilder &builder)
      : nest(nest), b(builder), loc(nest.loops.front().getLoc()),
        count(nest.indexIterations) {}

  void build();

private:
  Value index(int64_t value) {
    return b.create<arith::ConstantIndexOp>(loc, value);
  }
  /// Maps the index loops' induction variables to iteration `linear`
  /// (row-major over them, in nest order).
  void mapIndexLoops(Value linear, IRMapping &mapping);
  /// The key of index iteration `linear`.
  Value keyOf(Value linear);
  /// A loop nest over `trips` marked for the GPU program: its first
  /// `parallel` loops may run one iteration per thread, and each thread
  /// runs `serial` loop iterations; `body` fills the innermost body.
  void buildNest(ArrayRef<int64_t> trips, int64_t parallel, int64_t serial,
                 function_ref<void(ValueRange)> body);
  Value loadIndex(Value buffer, ValueRange indices) {
    return b.create<arith::IndexCastOp>(
        loc, b.getIndexType(), b.create<memref::LoadOp>(loc, buffer, indices));
  }
  void storeIndex(Value value, Value buffer, ValueRange indices) {
    b.create<memref::StoreOp>(
        loc, b.create<arith::IndexCastOp>(loc, b.getI32Type(), value), buffer,
        indices);
  }

  ScatterNest &nest;
  OpBuilder &b;
  Location loc;
  int64_t count;
};

void SegmentBuilder::mapIndexLoops(Value linear, IRMapping &mapping) {
  Value remaining = linear;
  for (unsigned position : llvm::reverse(nest.indexLoops)) {
    if (position == nest.indexLoops.front()) {
      mapping.map(nest.loops[position].getInductionVar(), remaining);
      break;
    }
    Value trip = index(nest.trips[position]);
    mapping.map(nest.loops[position].getInductionVar(),
                b.create<arith::RemUIOp>(loc, remaining, trip));
    remaining = b.create<arith::DivUIOp>(loc, remaining, trip);
  }
}

Value SegmentBuilder::keyOf(Value linear) {
  IRMapping mapping;
  mapIndexLoops(linear, mapping);
  for (Operation *op : nest.keySlice)
    b.clone(*op, mapping);
  return mapping.lookup(nest.store.getIndices()[nest.keyCoordinate]);
}

void SegmentBuilder::buildNest(ArrayRef<int64_t> trips, int64_t parallel,
                               int64_t serial,
                               function_ref<void(ValueRange)> body) {
  OpBuilder::InsertionGuard guard(b);
  SmallVector<Value> ivs;
  scf::ForOp outer;
  for (int64_t trip : trips) {
    auto loop = b.create<scf::ForOp>(loc, index(0), index(trip), index(1));
    if (!outer)
      outer = loop;
    ivs.push_back(loop.getInductionVar());
    b.setInsertionPointToStart(loop.getBody());
  }
  outer->setAttr(kGpuParallelLoopsAttr, b.getI64IntegerAttr(parallel));
  if (serial > 1)
    outer->setAttr(kGpuSerialIterationsAttr, b.getI64IntegerAttr(serial));
  body(ivs);
}

void SegmentBuilder::build() {
  // P partial counts per iteration, a power of two dividing the count, about
  // its square root: both the rank nest's and the partials' loops short.
  int64_t partials = 1;
  while (partials * 2 <= kMaxPartials && count % (partials * 2) == 0 &&
         partials * 2 * partials * 2 <= count)
    partials *= 2;
  int64_t chunk = count / partials;
  auto i32 = b.getI32Type();
  Value partial =
      b.create<memref::AllocOp>(loc, MemRefType::get({count, partials}, i32));
  Value rank = b.create<memref::AllocOp>(loc, MemRefType::get({count}, i32));
  Value order = b.create<memref::AllocOp>(loc, MemRefType::get({count}, i32));

  // 1. partial[t, p]: how many iterations j = c * P + p come before t in
  // (key, iteration) order.
  buildNest({count, partials}, 2, chunk, [&](ValueRange ivs) {
    Value t = ivs[0], p = ivs[1];
    Value key = keyOf(t);
    auto loop = b.create<scf::ForOp>(
        loc, index(0), index(chunk), index(1),
        ValueRange{b.create<arith::ConstantIntOp>(loc, 0, i32)});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value j = b.create<arith::AddIOp>(
        loc,
        b.create<arith::MulIOp>(loc, loop.getInductionVar(), index(partials)),
        p);
    Value other = keyOf(j);
    Value less =
        b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, other, key);
    Value tie = b.create<arith::AndIOp>(
        loc, b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, other, key),
        b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, j, t));
    Value before = b.create<arith::OrIOp>(loc, less, tie);
    Value sum =
        b.create<arith::AddIOp>(loc, loop.getRegionIterArgs()[0],
                                b.create<arith::ExtUIOp>(loc, i32, before));
    b.create<scf::YieldOp>(loc, sum);
    b.setInsertionPointAfter(loop);
    b.create<memref::StoreOp>(loc, loop.getResult(0), partial, ivs);
  });

  // 2. rank[t]: the partials summed.
  buildNest({count}, 1, partials, [&](ValueRange ivs) {
    auto loop = b.create<scf::ForOp>(
        loc, index(0), index(partials), index(1),
        ValueRange{b.create<arith::ConstantIntOp>(loc, 0, i32)});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value part = b.create<memref::LoadOp>(
        loc, partial, ValueRange{ivs[0], loop.getInductionVar()});
    b.create<scf::YieldOp>(loc, ValueRange{b.create<arith::AddIOp>(
                                    loc, loop.getRegionIterArgs()[0], part)});
    b.setInsertionPointAfter(loop);
    b.create<memref::StoreOp>(loc, loop.getResult(0), rank, ivs);
  });

  // 3. order[rank[t]] = t: the ranks are a permutation, so no two
  // iterations write one element.
  buildNest({count}, 1, 1, [&](ValueRange ivs) {
    storeIndex(ivs[0], order, ValueRange{loadIndex(rank, ivs)});
  });

  // 4. One thread per sorted position s and feature: the first position of
  // each run of equal keys folds the run's values into its element, in
  // iteration order (the sort is stable).
  SmallVector<int64_t> trips = {count};
  for (unsigned loop : nest.featureLoops)
    trips.push_back(nest.trips[loop]);
  buildNest(trips, trips.size(), 1, [&](ValueRange ivs) {
    Value s = ivs[0];
    Value t = loadIndex(order, s);
    Value key = keyOf(t);
    Value previous = b.create<arith::SubIOp>(
        loc, b.create<arith::MaxUIOp>(loc, s, index(1)), index(1));
    Value first = b.create<arith::OrIOp>(
        loc,
        b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, s, index(0)),
        b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne,
                                keyOf(loadIndex(order, previous)), key));
    auto leader = b.create<scf::IfOp>(loc, first, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(leader.thenBlock());
    SmallVector<Value> coordinates;
    for (Value coordinate : nest.store.getIndices()) {
      std::optional<unsigned> loop = getLoopOf(nest.loops, coordinate);
      coordinates.push_back(loop
                                ? ivs[1 + llvm::find(nest.featureLoops, *loop) -
                                      nest.featureLoops.begin()]
                                : key);
    }
    Value dest = nest.store.getMemRef();
    Value initial = b.create<memref::LoadOp>(loc, dest, coordinates);
    Type element = initial.getType();
    auto run = b.create<scf::WhileOp>(loc, TypeRange{element, b.getIndexType()},
                                      ValueRange{initial, s});
    {
      Block *before = b.createBlock(&run.getBefore(), {},
                                    {element, b.getIndexType()}, {loc, loc});
      Value position = before->getArgument(1);
      Value inRange = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult,
                                              position, index(count));
      Value clamped = b.create<arith::MinUIOp>(loc, position, index(count - 1));
      Value same = b.create<arith::AndIOp>(
          loc, inRange,
          b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq,
                                  keyOf(loadIndex(order, clamped)), key));
      b.create<scf::ConditionOp>(loc, same, before->getArguments());
    }
    {
      Block *after = b.createBlock(&run.getAfter(), {},
                                   {element, b.getIndexType()}, {loc, loc});
      Value position = after->getArgument(1);
      IRMapping mapping;
      mapIndexLoops(loadIndex(order, position), mapping);
      for (auto [feature, loop] : llvm::enumerate(nest.featureLoops))
        mapping.map(nest.loops[loop].getInductionVar(), ivs[1 + feature]);
      mapping.map(nest.old.getResult(), after->getArgument(0));
      for (Operation &op : nest.loops.back().getBody()->without_terminator())
        if (&op != nest.old.getOperation() && &op != nest.store.getOperation())
          b.clone(op, mapping);
      b.create<scf::YieldOp>(
          loc, ValueRange{mapping.lookupOrDefault(nest.store.getValue()),
                          b.create<arith::AddIOp>(loc, position, index(1))});
    }
    b.setInsertionPointAfter(run);
    b.create<memref::StoreOp>(loc, run.getResult(0), dest, coordinates);
  });

  // The temporaries are freed where the step frees the others.
  Block &entry =
      nest.loops.front()->getParentOfType<func::FuncOp>().getBody().front();
  OpBuilder end(entry.getTerminator());
  for (Value buffer : {partial, rank, order})
    end.create<memref::DeallocOp>(loc, buffer);
}

struct SegmentScatterAccumulationsPass
    : mantissa::impl::SegmentScatterAccumulationsPassBase<
          SegmentScatterAccumulationsPass> {
  void runOnOperation() override {
    func::FuncOp function = getOperation();
    if (function.getBody().empty())
      return;
    for (auto outer : llvm::make_early_inc_range(
             function.getBody().front().getOps<scf::ForOp>())) {
      std::optional<ScatterNest> nest = matchScatterNest(outer);
      if (!nest)
        continue;
      OpBuilder builder(outer);
      SegmentBuilder(*nest, builder).build();
      outer.erase();
    }
  }
};

} // namespace
