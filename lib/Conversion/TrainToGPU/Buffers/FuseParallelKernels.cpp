//===- FuseParallelKernels.cpp - One kernel for elementwise neighbours ----===//
//
// mantissa-fuse-parallel-kernels (Passes.td): on the bufferized step, merges
// each all-parallel linalg.generic into an earlier one over the same
// iteration space, moving it up past the ops in between when nothing they
// do to memory can tell, so that the GPU program launches one kernel where
// it launched several (docs/gpu-step.md).
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_FUSEPARALLELKERNELSPASS
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// How far back a generic looks for one to join (ops of the block).
constexpr int kSearchWindow = 96;

bool intersects(const llvm::SmallSetVector<Value, 8> &a,
                const llvm::SmallSetVector<Value, 8> &b) {
  return llvm::any_of(a, [&](Value value) { return b.contains(value); });
}

/// A generic whose loops are all parallel, with static ranges, on buffers:
/// one thread per iteration on the GPU.
bool isParallelGeneric(Operation *op) {
  auto generic = dyn_cast_or_null<linalg::GenericOp>(op);
  return generic && generic.hasPureBufferSemantics() &&
         generic.getNumParallelLoops() == generic.getNumLoops() &&
         generic.getNumLoops() > 0 && !generic.hasDynamicShape();
}

/// Whether `op` sets its outputs to constants without reading anything:
/// a fill the GPU program may merge into the GEMM after it.
bool isFill(linalg::GenericOp op) {
  return op.getNumDpsInputs() == 0 &&
         llvm::all_of(op.getBody()->getTerminator()->getOperands(),
                      [](Value value) {
                        Operation *definition = value.getDefiningOp();
                        return definition &&
                               definition->hasTrait<OpTrait::ConstantLike>();
                      });
}

class Fuser {
public:
  explicit Fuser(Block &block) : block(block) {}
  bool run();

private:
  /// The ops between `first` and `op` that must move up with it (the
  /// allocations and views defining what it uses), in order, or failure
  /// when one of them cannot move.
  FailureOr<SmallVector<Operation *>> getDefinitionsToHoist(Operation *first,
                                                            Operation *op);
  /// Replaces `first` and `second` (later) by one generic at `first`.
  void merge(linalg::GenericOp first, linalg::GenericOp second,
             ArrayRef<Operation *> hoisted);

  Block &block;
};

FailureOr<SmallVector<Operation *>>
Fuser::getDefinitionsToHoist(Operation *first, Operation *op) {
  llvm::SetVector<Value> used(op->operand_begin(), op->operand_end());
  getUsedValuesDefinedAbove(op->getRegions(), used);
  llvm::SetVector<Operation *> hoisted;
  SmallVector<Value> worklist(used.begin(), used.end());
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    Operation *definition = value.getDefiningOp();
    if (!definition || definition->getBlock() != &block ||
        definition->isBeforeInBlock(first) || definition == first)
      continue;
    if (!(isa<memref::AllocOp>(definition) || isViewOp(definition)) &&
        !definition->hasTrait<OpTrait::ConstantLike>())
      return failure();
    if (hoisted.insert(definition))
      llvm::append_range(worklist, definition->getOperands());
  }
  SmallVector<Operation *> ordered(hoisted.begin(), hoisted.end());
  llvm::sort(ordered,
             [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  return ordered;
}

void Fuser::merge(linalg::GenericOp first, linalg::GenericOp second,
                  ArrayRef<Operation *> hoisted) {
  for (Operation *definition : hoisted)
    definition->moveBefore(first);

  // The second op's inputs that the first writes, read where it writes
  // them: the value the first yields there, in the same iteration.
  SmallVector<std::optional<unsigned>> forwarded;
  for (OpOperand *input : second.getDpsInputOperands()) {
    forwarded.push_back(std::nullopt);
    for (OpOperand &output : first.getDpsInitsMutable())
      if (output.get() == input->get() &&
          first.getMatchingIndexingMap(&output) ==
              second.getMatchingIndexingMap(input))
        forwarded.back() = output.getOperandNumber() - first.getNumDpsInputs();
  }

  SmallVector<Value> inputs, outputs;
  SmallVector<AffineMap> maps;
  for (OpOperand *input : first.getDpsInputOperands()) {
    inputs.push_back(input->get());
    maps.push_back(first.getMatchingIndexingMap(input));
  }
  for (auto [input, source] :
       llvm::zip_equal(second.getDpsInputOperands(), forwarded)) {
    if (source)
      continue;
    inputs.push_back(input->get());
    maps.push_back(second.getMatchingIndexingMap(input));
  }
  for (OpOperand &output : first.getDpsInitsMutable()) {
    outputs.push_back(output.get());
    maps.push_back(first.getMatchingIndexingMap(&output));
  }
  for (OpOperand &output : second.getDpsInitsMutable()) {
    outputs.push_back(output.get());
    maps.push_back(second.getMatchingIndexingMap(&output));
  }

  OpBuilder builder(first);
  auto fused = builder.create<linalg::GenericOp>(
      first.getLoc(), TypeRange(), inputs, outputs, maps,
      first.getIteratorTypesArray(),
      [&](OpBuilder &nested, Location loc, ValueRange arguments) {
        unsigned firstInputs = first.getNumDpsInputs();
        unsigned secondInputs =
            llvm::count_if(forwarded, [](auto source) { return !source; });
        unsigned inputCount = firstInputs + secondInputs;
        IRMapping mapping;
        Block *firstBody = first.getBody();
        for (unsigned index = 0; index < firstInputs; ++index)
          mapping.map(firstBody->getArgument(index), arguments[index]);
        for (unsigned index = 0, e = first.getNumDpsInits(); index < e; ++index)
          mapping.map(firstBody->getArgument(firstInputs + index),
                      arguments[inputCount + index]);
        for (Operation &op : firstBody->without_terminator())
          nested.clone(op, mapping);
        SmallVector<Value> yields;
        for (Value value : firstBody->getTerminator()->getOperands())
          yields.push_back(mapping.lookupOrDefault(value));

        IRMapping secondMapping;
        Block *secondBody = second.getBody();
        unsigned next = firstInputs;
        for (auto [index, source] : llvm::enumerate(forwarded))
          secondMapping.map(secondBody->getArgument(index),
                            source ? yields[*source] : arguments[next++]);
        for (unsigned index = 0, e = second.getNumDpsInits(); index < e;
             ++index)
          secondMapping.map(
              secondBody->getArgument(second.getNumDpsInputs() + index),
              arguments[inputCount + first.getNumDpsInits() + index]);
        for (Operation &op : secondBody->without_terminator())
          nested.clone(op, secondMapping);
        for (Value value : secondBody->getTerminator()->getOperands())
          yields.push_back(secondMapping.lookupOrDefault(value));
        nested.create<linalg::YieldOp>(loc, yields);
      });
  fused->setLoc(
      FusedLoc::get(first.getContext(), {first.getLoc(), second.getLoc()}));
  first.erase();
  second.erase();
}

bool Fuser::run() {
  bool changed = false;
  for (Operation &candidate : llvm::make_early_inc_range(block)) {
    if (!isParallelGeneric(&candidate))
      continue;
    auto second = cast<linalg::GenericOp>(candidate);
    if (isFill(second) || isGemmEpilogueCandidate(second))
      continue;
    BufferAccesses secondAccesses = BufferAccesses::of(second);
    if (!secondAccesses.known)
      continue;
    SmallVector<int64_t> ranges = second.getStaticLoopRanges();
    int steps = 0;
    for (Operation *op = second->getPrevNode(); op && steps < kSearchWindow;
         op = op->getPrevNode(), ++steps) {
      if ((isa<memref::AllocOp>(op) || isViewOp(op)) ||
          op->hasTrait<OpTrait::ConstantLike>())
        continue;
      BufferAccesses accesses = BufferAccesses::of(op);
      // What the second writes, this op must not touch: neither can move
      // past the other then.
      bool separate = accesses.known &&
                      !intersects(secondAccesses.writes, accesses.reads) &&
                      !intersects(secondAccesses.writes, accesses.writes);
      auto first = dyn_cast<linalg::GenericOp>(op);
      if (separate && isParallelGeneric(op) && !isFill(first) &&
          !isGemmEpilogueCandidate(first) &&
          first.getStaticLoopRanges() == ranges) {
        // What the first writes, the second may read only where it is
        // written in the same iteration.
        bool forwardable = true;
        for (OpOperand *input : second.getDpsInputOperands()) {
          if (!accesses.writes.contains(getBaseBuffer(input->get())))
            continue;
          forwardable &=
              llvm::any_of(first.getDpsInitsMutable(), [&](OpOperand &output) {
                return output.get() == input->get() &&
                       first.getMatchingIndexingMap(&output) ==
                           second.getMatchingIndexingMap(input);
              });
        }
        // Loads in the second's body must not see the first's writes.
        BufferAccesses bodyReads;
        second.getBody()->walk([&](memref::LoadOp load) {
          bodyReads.reads.insert(getBaseBuffer(load.getMemref()));
        });
        forwardable &= !intersects(bodyReads.reads, accesses.writes);
        FailureOr<SmallVector<Operation *>> hoisted =
            getDefinitionsToHoist(first, second);
        if (forwardable && succeeded(hoisted)) {
          merge(first, second, *hoisted);
          changed = true;
          break;
        }
      }
      // The second cannot move above an op that touches what it touches.
      if (!separate || intersects(secondAccesses.reads, accesses.writes))
        break;
    }
  }
  return changed;
}

struct FuseParallelKernelsPass
    : mantissa::impl::FuseParallelKernelsPassBase<FuseParallelKernelsPass> {
  void runOnOperation() override {
    for (Block &block : getOperation().getBody())
      while (Fuser(block).run()) {
      }
  }
};

} // namespace
