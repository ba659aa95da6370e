//===- TrainToLLVM.cpp - train.step to LLVM-dialect CPU code --------------===//
//
// mantissa-train-cpu-pipeline: mantissa-lower-train-to-linalg, then one-shot
// bufferization with results turned into out-parameters and temporaries
// freed, matrix products as calls of the runtime's GEMM
// (CallGemmLibrary.cpp), linalg to loops, polynomial approximations of the
// math functions LLVM has no inline lowering for, and the verified CPU
// pipeline of TOOLCHAIN.md (bf16 emulated in f32, truncf as integer code).
// Mantissa's own stages are the passes below.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToLLVM.h"

#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h"
#include "mantissa/Conversion/TrainToLinalg/Passes.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/Arith/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Bufferization/Transforms/FuncBufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Linalg/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Transforms/AllocationOpInterfaceImpl.h"
#include "mlir/Dialect/MemRef/Transforms/BufferViewFlowOpInterfaceImpl.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/OpenMP/OpenMPDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/SCF/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/OpenMP/OpenMPToLLVMIRTranslation.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstdlib>
#include <mutex>

using namespace mlir;

namespace mlir::mantissa {
#define GEN_PASS_DEF_MARKARGUMENTSREADONLYPASS
#define GEN_PASS_DEF_FUSETRANSPOSESPASS
#define GEN_PASS_DEF_COMPUTERESULTSINPLACEPASS
#define GEN_PASS_DEF_CONVERTCOPIESTOLINALGPASS
#define GEN_PASS_DEF_INTERCHANGEREDUCTIONSOUTWARDPASS
#define GEN_PASS_DEF_OUTLINELINALGOPSPASS
#define GEN_PASS_DEF_PARALLELIZEOUTERLOOPSPASS
#define GEN_PASS_DEF_INLINEALLOCASCOPESPASS
#define GEN_PASS_DEF_APPROXIMATEMATHPASS
#define GEN_PASS_DEF_MARKOUTLINEDNOINLINEPASS
#include "mantissa/Conversion/TrainToLinalg/Passes.h.inc"
} // namespace mlir::mantissa

void mlir::mantissa::registerTrainToLLVMDialects(DialectRegistry &registry) {
  registry
      .insert<train::TrainDialect, affine::AffineDialect, arith::ArithDialect,
              bufferization::BufferizationDialect, cf::ControlFlowDialect,
              func::FuncDialect, linalg::LinalgDialect, LLVM::LLVMDialect,
              math::MathDialect, memref::MemRefDialect, omp::OpenMPDialect,
              scf::SCFDialect, tensor::TensorDialect, vector::VectorDialect>();
  arith::registerBufferizableOpInterfaceExternalModels(registry);
  linalg::registerBufferizableOpInterfaceExternalModels(registry);
  tensor::registerBufferizableOpInterfaceExternalModels(registry);
  scf::registerBufferizableOpInterfaceExternalModels(registry);
  arith::registerBufferDeallocationOpInterfaceExternalModels(registry);
  scf::registerBufferDeallocationOpInterfaceExternalModels(registry);
  memref::registerAllocationOpInterfaceExternalModels(registry);
  memref::registerBufferViewFlowOpInterfaceExternalModels(registry);
  bufferization::func_ext::registerBufferizableOpInterfaceExternalModels(
      registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerOpenMPDialectTranslation(registry);
}

void mlir::mantissa::registerTrainCpuPipelinePasses() {
  static std::once_flag registered;
  std::call_once(registered, [] {
    ::mlir::registerConversionPasses();
    ::mlir::registerGPUPasses();
    bufferization::registerBufferizationPasses();
    registerLinalgPasses();
    memref::registerMemRefPasses();
    arith::registerArithPasses();
    registerCanonicalizerPass();
    registerCSEPass();
    mantissa::registerLowerTrainToLinalgPass();
    mantissa::registerMarkArgumentsReadOnlyPass();
    mantissa::registerFuseTransposesPass();
    mantissa::registerWidenBf16ProductsPass();
    mantissa::registerComputeResultsInPlacePass();
    mantissa::registerConvertCopiesToLinalgPass();
    mantissa::registerCallGemmLibraryPass();
    mantissa::registerInterchangeReductionsOutwardPass();
    mantissa::registerOutlineLinalgOpsPass();
    mantissa::registerPackCpuArenaPass();
    mantissa::registerParallelizeOuterLoopsPass();
    mantissa::registerInlineAllocaScopesPass();
    mantissa::registerApproximateMathPass();
    mantissa::registerRouteGemmCallsThroughHookPass();
    mantissa::registerMarkOutlinedNoInlinePass();
    mantissa::registerAccessNarrowFloatsAsIntegersPass();
    mantissa::registerFuseElementwiseKeepingProductsPass();
    mantissa::registerMergeEqualGenericsPass();
    mantissa::registerTileTransposedReadsPass();
    registerTrainToGPUBuffersPasses();
    registerTrainCpuPipeline();
  });
}

LogicalResult mlir::mantissa::runPassPipeline(ModuleOp module,
                                              StringRef pipeline) {
  registerTrainCpuPipelinePasses();
  FailureOr<OpPassManager> parsed = parsePassPipeline(pipeline);
  if (failed(parsed))
    return module.emitError() << "bad pass pipeline: " << pipeline;
  PassManager pm(module.getContext());
  static_cast<OpPassManager &>(pm) = std::move(*parsed);
  return pm.run(module);
}

/// The position of the last result of `map` whose dimension of `operand`
/// has more than one element: trailing dimensions of one element (a
/// reduction's kept dimension, [rows, 1]) are not walked, so the one before
/// them is the operand's contiguous one. None when every dimension has one
/// element.
static std::optional<unsigned> lastWalkedPosition(AffineMap map,
                                                  Value operand) {
  auto type = dyn_cast<ShapedType>(operand.getType());
  ArrayRef<int64_t> shape =
      type && type.hasRank() ? type.getShape() : ArrayRef<int64_t>();
  for (unsigned position = map.getNumResults(); position-- > 0;)
    if (position >= shape.size() || shape[position] != 1)
      return position;
  return std::nullopt;
}

/// Whether every operand of `op` walks `loop` contiguously: it is the last
/// walked index (lastWalkedPosition) of the output and of each input that
/// uses it, and used nowhere else.
static bool isContiguousParallelLoop(linalg::LinalgOp op, unsigned loop) {
  if (!linalg::isParallelIterator(op.getIteratorTypesArray()[loop]))
    return false;
  for (OpOperand &operand : op->getOpOperands()) {
    AffineMap map = op.getMatchingIndexingMap(&operand);
    bool isInit = op.isDpsInit(&operand);
    std::optional<unsigned> lastWalked = lastWalkedPosition(map, operand.get());
    if (isInit && !lastWalked)
      return false;
    for (auto [position, result] : llvm::enumerate(map.getResults())) {
      bool last = lastWalked && position == *lastWalked;
      auto dim = dyn_cast<AffineDimExpr>(result);
      bool uses = result.isFunctionOfDim(loop);
      if (uses && !(last && dim && dim.getPosition() == loop))
        return false;
      if (isInit && last && !uses)
        return false;
    }
  }
  return true;
}

/// Gives each input of `generic` that indexes `loop` other than last a
/// transposed copy in which `loop` is last (freed after the op), so that
/// `loop` becomes contiguous: `x @ w^T` and `q @ k^T` read both operands
/// along the reduction, which no vector unit can use without reassociating
/// the sum. Returns false, changing nothing, when an input is not a plain
/// permutation of loops.
static bool packInputsAlongLoop(IRRewriter &rewriter, linalg::GenericOp generic,
                                unsigned loop) {
  SmallVector<AffineMap> maps = generic.getIndexingMapsArray();
  SmallVector<std::pair<OpOperand *, unsigned>> toPack;
  for (OpOperand *input : generic.getDpsInputOperands()) {
    AffineMap map = maps[input->getOperandNumber()];
    std::optional<unsigned> position =
        map.getResultPosition(getAffineDimExpr(loop, rewriter.getContext()));
    if (!position) {
      for (AffineExpr result : map.getResults())
        if (result.isFunctionOfDim(loop))
          return false;
      continue;
    }
    if (*position == lastWalkedPosition(map, input->get()))
      continue;
    if (!map.isProjectedPermutation() ||
        !isa<MemRefType>(input->get().getType()))
      return false;
    toPack.emplace_back(input, *position);
  }
  Location loc = generic.getLoc();
  for (auto [input, position] : toPack) {
    AffineMap map = maps[input->getOperandNumber()];
    auto sourceType = cast<MemRefType>(input->get().getType());
    SmallVector<int64_t> permutation;
    for (unsigned index = 0; index < map.getNumResults(); ++index)
      if (index != position)
        permutation.push_back(index);
    permutation.push_back(position);
    SmallVector<int64_t> shape;
    SmallVector<AffineExpr> results;
    for (int64_t index : permutation) {
      shape.push_back(sourceType.getDimSize(index));
      results.push_back(map.getResult(index));
    }
    rewriter.setInsertionPoint(generic);
    auto packed = rewriter.create<memref::AllocOp>(
        loc, MemRefType::get(shape, sourceType.getElementType()),
        rewriter.getI64IntegerAttr(64));
    rewriter.create<linalg::TransposeOp>(loc, input->get(), packed,
                                         permutation);
    rewriter.setInsertionPointAfter(generic);
    rewriter.create<memref::DeallocOp>(loc, packed);
    input->set(packed);
    maps[input->getOperandNumber()] =
        AffineMap::get(map.getNumDims(), 0, results, rewriter.getContext());
  }
  generic.setIndexingMapsAttr(rewriter.getAffineMapArrayAttr(maps));
  return true;
}

/// Puts a loop that every operand accesses contiguously innermost in ops
/// whose innermost loop is a reduction (matrix products, column sums), so
/// that LLVM vectorizes it, first transposing inputs that read the output's
/// last index along another dimension. Each output element still
/// accumulates over the reduction loops in the same order: only a parallel
/// loop moves, so the results are bit-identical.
static void interchangeReductionsOutward(ModuleOp module) {
  SmallVector<linalg::LinalgOp> candidates;
  module.walk([&](linalg::LinalgOp op) {
    if (op->getNumResults() == 0 && op.getNumLoops() > 1 &&
        op.getNumDpsInits() == 1 &&
        linalg::isReductionIterator(op.getIteratorTypesArray().back()))
      candidates.push_back(op);
  });
  IRRewriter rewriter(module.getContext());
  for (linalg::LinalgOp op : candidates) {
    unsigned loops = op.getNumLoops();
    // The loop chosen is the output's last walked index, so never one of a
    // single iteration (lastWalkedPosition): that would give the vectorizer
    // nothing and cost a copy of each input that reads it.
    std::optional<unsigned> chosen;
    for (unsigned loop = 0; loop < loops && !chosen; ++loop)
      if (isContiguousParallelLoop(op, loop))
        chosen = loop;
    // Otherwise the output's last index, if transposing inputs frees it.
    OpOperand *output = op.getDpsInitOperand(0);
    AffineMap outputMap = op.getMatchingIndexingMap(output);
    std::optional<unsigned> lastWalked =
        lastWalkedPosition(outputMap, output->get());
    auto outputLast =
        lastWalked ? dyn_cast<AffineDimExpr>(outputMap.getResult(*lastWalked))
                   : nullptr;
    if (!chosen && (!outputLast || !op.hasPureBufferSemantics()))
      continue;
    rewriter.setInsertionPoint(op);
    auto generic = dyn_cast<linalg::GenericOp>(op.getOperation());
    if (!generic) {
      FailureOr<linalg::GenericOp> generalized =
          linalg::generalizeNamedOp(rewriter, op);
      if (failed(generalized))
        continue;
      generic = *generalized;
    }
    if (!chosen) {
      unsigned loop = outputLast.getPosition();
      if (!linalg::isParallelIterator(generic.getIteratorTypesArray()[loop]) ||
          !packInputsAlongLoop(rewriter, generic, loop) ||
          !isContiguousParallelLoop(generic, loop))
        continue;
      chosen = loop;
    }
    SmallVector<unsigned> order;
    for (unsigned loop = 0; loop < loops; ++loop)
      if (loop != *chosen)
        order.push_back(loop);
    order.push_back(*chosen);
    (void)linalg::interchangeGenericOp(rewriter, generic, order);
  }
}

/// Marks an outlined op whose outermost loop runs on the OpenMP threads.
static constexpr llvm::StringLiteral kParallelOuterLoop =
    "mantissa.parallel_outer_loop";

/// Whether `op` is worth splitting across threads along its outermost
/// loop: that loop is parallel and indexes every output (so iterations
/// write disjoint elements), has at least two iterations, and the op has
/// enough work to pay for waking the threads (a few microseconds).
static bool shouldRunInParallel(linalg::LinalgOp op) {
  constexpr int64_t kMinimumIterations = 1 << 18;
  if (op.getNumLoops() == 0 ||
      !linalg::isParallelIterator(op.getIteratorTypesArray().front()))
    return false;
  for (OpOperand &init : op.getDpsInitsMutable())
    if (!llvm::any_of(op.getMatchingIndexingMap(&init).getResults(),
                      [](AffineExpr result) {
                        auto dim = dyn_cast<AffineDimExpr>(result);
                        return dim && dim.getPosition() == 0;
                      }))
      return false;
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  int64_t iterations = 1;
  for (int64_t range : ranges) {
    if (ShapedType::isDynamic(range))
      return false;
    iterations *= range;
  }
  return ranges.front() >= 2 && iterations >= kMinimumIterations;
}

/// Turns the outermost loop of each function marked kParallelOuterLoop
/// into an scf.parallel, which convert-scf-to-openmp distributes over the
/// OpenMP threads. Every output element is still computed by one thread in
/// the same order, so results do not change.
static void parallelizeOuterLoops(ModuleOp module) {
  IRRewriter rewriter(module.getContext());
  for (auto function : module.getOps<func::FuncOp>()) {
    if (!function->hasAttr(kParallelOuterLoop))
      continue;
    function->removeAttr(kParallelOuterLoop);
    auto loops = function.getBody().front().getOps<scf::ForOp>();
    if (loops.empty())
      continue;
    scf::ForOp loop = *loops.begin();
    if (loop.getNumResults() != 0)
      continue;
    rewriter.setInsertionPoint(loop);
    auto parallel = rewriter.create<scf::ParallelOp>(
        loop.getLoc(), ValueRange{loop.getLowerBound()},
        ValueRange{loop.getUpperBound()}, ValueRange{loop.getStep()});
    Block *body = parallel.getBody();
    rewriter.eraseOp(body->getTerminator());
    rewriter.mergeBlocks(loop.getBody(), body, body->getArguments());
    // scf.for's yield becomes scf.parallel's reduce terminator.
    rewriter.setInsertionPoint(body->getTerminator());
    rewriter.replaceOpWithNewOp<scf::ReduceOp>(body->getTerminator());
    rewriter.eraseOp(loop);
  }
}

/// Whether `base` is a buffer that overlaps no other base buffer: a
/// temporary (memref.alloc), a constant global (never written; two
/// memref.get_global of one global are two bases of one buffer, which
/// only a write could tell), or an argument of the function the op runs in
/// (the step's ABI: its argument and result buffers do not overlap,
/// docs/architecture.md; arguments the step only reads may, which no
/// write can observe).
static bool isDistinctBuffer(Value base, func::FuncOp function) {
  if (auto argument = dyn_cast<BlockArgument>(base))
    return argument.getOwner() == &function.getBody().front();
  if (auto global = base.getDefiningOp<memref::GetGlobalOp>()) {
    auto definition = SymbolTable::lookupNearestSymbolFrom<memref::GlobalOp>(
        global, global.getNameAttr());
    return definition && definition.getConstant();
  }
  return isa_and_nonnull<memref::AllocOp>(base.getDefiningOp());
}

/// Marks the arguments of `outlined`, the function that `op` of `function`
/// moved into with `arguments`, that no other argument may alias in memory
/// `op` writes (`llvm.noalias`): without it LLVM must assume that each
/// store may change what the next load reads, and neither vectorises an
/// elementwise loop whose trip count it unrolled nor hoists a load.
/// An argument is marked when its base buffer is distinct from every
/// other buffer and no other argument views the same base, or when no
/// argument writes that base. `op` is the only caller.
static void markNoAliasArguments(Operation *op, func::FuncOp function,
                                 ArrayRef<Value> arguments,
                                 func::FuncOp outlined) {
  mantissa::BufferAccesses accesses = mantissa::BufferAccesses::of(op);
  if (!accesses.known)
    return;
  llvm::SmallDenseMap<Value, unsigned> viewsOfBase;
  for (Value argument : arguments)
    if (isa<MemRefType>(argument.getType()))
      ++viewsOfBase[mantissa::getBaseBuffer(argument)];
  auto noAlias = UnitAttr::get(op->getContext());
  for (auto [index, argument] : llvm::enumerate(arguments)) {
    if (!isa<MemRefType>(argument.getType()))
      continue;
    Value base = mantissa::getBaseBuffer(argument);
    if (!isDistinctBuffer(base, function) ||
        (viewsOfBase[base] > 1 && accesses.writes.contains(base)))
      continue;
    outlined.setArgAttr(index, LLVM::LLVMDialect::getNoAliasAttrName(),
                        noAlias);
  }
}

/// Moves every linalg op of each function into a private function of its
/// own (named `<step>__<index>_<op>`), called in its place. A whole step as
/// one function holds thousands of loop nests, and LLVM's scalar evolution
/// analysis is quadratic in them (most of a minute for llama_medium); one
/// function per op keeps every analysis local, and profiles name the op.
static void outlineLinalgOps(ModuleOp module) {
  SmallVector<std::pair<func::FuncOp, SmallVector<Operation *>>> work;
  for (auto function : module.getOps<func::FuncOp>()) {
    SmallVector<Operation *> ops;
    function.walk([&](linalg::LinalgOp op) {
      if (op->getNumResults() == 0)
        ops.push_back(op);
    });
    work.emplace_back(function, std::move(ops));
  }
  OpBuilder moduleBuilder = OpBuilder::atBlockEnd(module.getBody());
  for (auto &[function, ops] : work) {
    for (auto [index, op] : llvm::enumerate(ops)) {
      // Operands and values captured by the body become arguments, except
      // constants, which are cloned so that they still fold.
      // (Scalar arguments would also cross the call in types such as bf16
      // that the CPU code only emulates.)
      llvm::SetVector<Value> used(op->operand_begin(), op->operand_end());
      getUsedValuesDefinedAbove(op->getRegions(), used);
      llvm::SetVector<Value> arguments;
      llvm::SetVector<Operation *> constants;
      for (Value value : used) {
        Operation *definition = value.getDefiningOp();
        if (definition && definition->hasTrait<OpTrait::ConstantLike>())
          constants.insert(definition);
        else
          arguments.insert(value);
      }
      SmallVector<Type> argumentTypes;
      for (Value argument : arguments)
        argumentTypes.push_back(argument.getType());
      std::string opName = op->getName().stripDialect().str();
      std::replace(opName.begin(), opName.end(), '.', '_');
      auto outlined = moduleBuilder.create<func::FuncOp>(
          op->getLoc(),
          llvm::formatv("{0}__{1}_{2}", function.getSymName(), index, opName)
              .str(),
          moduleBuilder.getFunctionType(argumentTypes, {}));
      outlined.setPrivate();
      if (shouldRunInParallel(cast<linalg::LinalgOp>(op)))
        outlined->setAttr(kParallelOuterLoop, UnitAttr::get(op->getContext()));
      markNoAliasArguments(op, function, arguments.getArrayRef(), outlined);
      Block *entry = outlined.addEntryBlock();
      OpBuilder bodyBuilder = OpBuilder::atBlockEnd(entry);
      IRMapping mapping;
      mapping.map(arguments.getArrayRef(), entry->getArguments());
      for (Operation *constant : constants)
        bodyBuilder.clone(*constant, mapping);
      bodyBuilder.clone(*op, mapping);
      bodyBuilder.create<func::ReturnOp>(op->getLoc());

      OpBuilder callBuilder(op);
      callBuilder.create<func::CallOp>(op->getLoc(), outlined,
                                       arguments.getArrayRef());
      op->erase();
    }
  }
}

/// Makes the ops that compute a result write it into the result's
/// out-parameter, where bufferization computed it into a temporary and
/// copied that out at the end: a temporary of the out-parameter's very type,
/// written and read only by ops of the function body, whose only other use
/// is that copy (and its deallocation), and an out-parameter nothing else
/// touches. Each result then costs no copy (every gradient of a step).
static void computeResultsInPlace(func::FuncOp function) {
  Block &body = function.getBody().front();
  SmallVector<memref::CopyOp> copies;
  for (Operation &op : body)
    if (auto copy = dyn_cast<memref::CopyOp>(op))
      copies.push_back(copy);
  for (memref::CopyOp copy : copies) {
    auto target = dyn_cast<BlockArgument>(copy.getTarget());
    auto alloc = copy.getSource().getDefiningOp<memref::AllocOp>();
    if (!target || target.getOwner() != &body || !alloc ||
        alloc->getBlock() != &body || alloc.getType() != target.getType() ||
        !target.hasOneUse())
      continue;
    // Every use of the temporary is an op of the body (or nested in one)
    // that comes before the copy, the copy itself, or its deallocation.
    bool movable = llvm::all_of(alloc->getUses(), [&](OpOperand &use) {
      Operation *user = use.getOwner();
      if (user == copy || isa<memref::DeallocOp>(user))
        return true;
      Operation *top = body.findAncestorOpInBlock(*user);
      return top && top->isBeforeInBlock(copy);
    });
    if (!movable)
      continue;
    for (Operation *user : llvm::make_early_inc_range(alloc->getUsers()))
      if (isa<memref::DeallocOp>(user))
        user->erase();
    copy.erase();
    alloc.getResult().replaceAllUsesWith(target);
    alloc.erase();
  }
}

namespace {

struct MarkArgumentsReadOnlyPass
    : mantissa::impl::MarkArgumentsReadOnlyPassBase<MarkArgumentsReadOnlyPass> {
  void runOnOperation() override {
    func::FuncOp function = getOperation();
    for (unsigned index = 0, e = function.getNumArguments(); index < e; ++index)
      function.setArgAttr(
          index, bufferization::BufferizationDialect::kWritableAttrName,
          BoolAttr::get(&getContext(), false));
  }
};

/// Whether `op` is a transpose written as a generic: one input read through
/// a permutation, the output written in order, the input yielded unchanged.
static bool isTransposeGeneric(Operation *op) {
  auto generic = dyn_cast_or_null<linalg::GenericOp>(op);
  if (!generic || generic.getNumDpsInputs() != 1 ||
      generic.getNumDpsInits() != 1 ||
      generic.getNumParallelLoops() != generic.getNumLoops() ||
      !generic.hasPureTensorSemantics())
    return false;
  SmallVector<AffineMap> maps = generic.getIndexingMapsArray();
  if (!maps[0].isPermutation() || !maps[1].isIdentity())
    return false;
  Block *body = generic.getBlock();
  auto yield = cast<linalg::YieldOp>(body->getTerminator());
  return body->getOperations().size() == 1 &&
         yield.getOperand(0) == body->getArgument(0);
}

/// Whether a contraction `op` can still be the runtime's GEMM when one
/// input, dense of `shape`, is read through `map` (a product that is not a
/// contraction can read anything): each group of loops (batch, M, N, K)
/// must index consecutive dimensions of it in the loops' order, so that the
/// group collapses to one stride (CallGemmLibrary.cpp), and its innermost
/// dimension must not be a batch one.
static bool readsAsStridedGemmOperand(linalg::GenericOp op, AffineMap map,
                                      ArrayRef<int64_t> shape) {
  if (op.getNumReductionLoops() == 0)
    return true;
  FailureOr<linalg::ContractionDimensions> dims =
      linalg::inferContractionDims(cast<linalg::LinalgOp>(op.getOperation()));
  if (failed(dims))
    return true;
  // The loop each non-unit dimension of the operand walks, in memory order.
  SmallVector<unsigned> loops;
  for (auto [position, result] : llvm::enumerate(map.getResults())) {
    if (shape[position] == 1)
      continue;
    auto dim = dyn_cast<AffineDimExpr>(result);
    if (!dim)
      return false;
    loops.push_back(dim.getPosition());
  }
  if (!loops.empty() && llvm::is_contained(dims->batch, loops.back()))
    return false;
  for (ArrayRef<unsigned> group :
       {ArrayRef<unsigned>(dims->batch), ArrayRef<unsigned>(dims->m),
        ArrayRef<unsigned>(dims->n), ArrayRef<unsigned>(dims->k)}) {
    SmallVector<size_t> positions;
    for (unsigned loop : group)
      if (const unsigned *at = llvm::find(loops, loop); at != loops.end())
        positions.push_back(at - loops.begin());
    for (size_t i = 1; i < positions.size(); ++i)
      if (positions[i] != positions[i - 1] + 1)
        return false;
  }
  return true;
}

/// The op that produces `value`, seen through tensor reshapes.
static Operation *producerThroughReshapes(Value value) {
  Operation *op = value.getDefiningOp();
  while (op && isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp>(op))
    op = op->getOperand(0).getDefiningOp();
  return op;
}

struct FuseTransposesPass
    : mantissa::impl::FuseTransposesPassBase<FuseTransposesPass> {
  void runOnOperation() override {
    func::FuncOp function = getOperation();
    IRRewriter rewriter(&getContext());
    SmallVector<linalg::TransposeOp> transposes;
    function.walk([&](linalg::TransposeOp op) {
      if (op.hasPureTensorSemantics())
        transposes.push_back(op);
    });
    for (linalg::TransposeOp op : transposes) {
      rewriter.setInsertionPoint(op);
      if (failed(linalg::generalizeNamedOp(rewriter, op)))
        return signalPassFailure();
    }
    // Named products that read a transpose, as generics that can take it.
    SmallVector<linalg::LinalgOp> products;
    function.walk([&](linalg::LinalgOp op) {
      if (!isa<linalg::MatmulOp, linalg::BatchMatmulOp>(op) ||
          !op.hasPureTensorSemantics())
        return;
      if (llvm::any_of(op.getDpsInputs(), [](Value input) {
            return isTransposeGeneric(producerThroughReshapes(input));
          }))
        products.push_back(op);
    });
    for (linalg::LinalgOp op : products) {
      rewriter.setInsertionPoint(op);
      if (failed(linalg::generalizeNamedOp(rewriter, op)))
        return signalPassFailure();
    }
    // Only transposes fuse, into every generic that reads them (through
    // reshapes, which move to the transpose's input), unless that makes a
    // product one the GEMM cannot take.
    linalg::ControlFusionFn onlyTransposes = [](OpOperand *fused) {
      Operation *producer = producerThroughReshapes(fused->get());
      if (!isTransposeGeneric(producer))
        return false;
      auto consumer = dyn_cast<linalg::GenericOp>(fused->getOwner());
      if (!consumer || fused->get().getDefiningOp() != producer)
        return true; // a reshape moving, nothing fused yet
      auto transpose = cast<linalg::GenericOp>(producer);
      return readsAsStridedGemmOperand(
          consumer,
          transpose.getIndexingMapsArray()[0].compose(
              consumer.getMatchingIndexingMap(fused)),
          cast<ShapedType>(transpose.getDpsInputs()[0].getType()).getShape());
    };
    RewritePatternSet patterns(&getContext());
    linalg::populateElementwiseOpsFusionPatterns(patterns, onlyTransposes);
    linalg::populateFoldReshapeOpsByExpansionPatterns(patterns, onlyTransposes);
    if (failed(applyPatternsAndFoldGreedily(function, std::move(patterns))))
      return signalPassFailure();
  }
};

struct ComputeResultsInPlacePass
    : mantissa::impl::ComputeResultsInPlacePassBase<ComputeResultsInPlacePass> {
  void runOnOperation() override {
    if (!getOperation().getBody().empty())
      computeResultsInPlace(getOperation());
  }
};

struct ConvertCopiesToLinalgPass
    : mantissa::impl::ConvertCopiesToLinalgPassBase<ConvertCopiesToLinalgPass> {
  void runOnOperation() override {
    getOperation().walk([](memref::CopyOp copy) {
      OpBuilder b(copy);
      b.create<linalg::CopyOp>(copy.getLoc(), copy.getSource(),
                               copy.getTarget());
      copy.erase();
    });
  }
};

struct InterchangeReductionsOutwardPass
    : mantissa::impl::InterchangeReductionsOutwardPassBase<
          InterchangeReductionsOutwardPass> {
  void runOnOperation() override {
    interchangeReductionsOutward(getOperation());
  }
};

struct OutlineLinalgOpsPass
    : mantissa::impl::OutlineLinalgOpsPassBase<OutlineLinalgOpsPass> {
  void runOnOperation() override { outlineLinalgOps(getOperation()); }
};

struct ParallelizeOuterLoopsPass
    : mantissa::impl::ParallelizeOuterLoopsPassBase<ParallelizeOuterLoopsPass> {
  void runOnOperation() override { parallelizeOuterLoops(getOperation()); }
};

struct InlineAllocaScopesPass
    : mantissa::impl::InlineAllocaScopesPassBase<InlineAllocaScopesPass> {
  void runOnOperation() override {
    SmallVector<memref::AllocaScopeOp> scopes;
    getOperation().walk(
        [&](memref::AllocaScopeOp scope) { scopes.push_back(scope); });
    IRRewriter rewriter(&getContext());
    for (memref::AllocaScopeOp scope : scopes) {
      if (scope.getNumResults() != 0)
        continue;
      Block *body = &scope.getBodyRegion().front();
      rewriter.eraseOp(body->getTerminator());
      rewriter.inlineBlockBefore(body, scope);
      rewriter.eraseOp(scope);
    }
  }
};

/// MLIR's f32 sin and cos approximations reduce the argument by k * pi/2 in
/// f32, which is exact only near zero: at the phases of timestep sinusoids
/// and rotary embeddings (1e3 to 1e5 radians) they are off by 1e-4 and more,
/// where torch's kernels (and the reference interpreter) are within an ulp.
/// Computed in f64 by libm (which the step library links) and rounded once,
/// they are correctly rounded but for rare double roundings.
template <typename MathOp>
struct SinCosThroughDouble : OpRewritePattern<MathOp> {
  using OpRewritePattern<MathOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(MathOp op,
                                PatternRewriter &rewriter) const override {
    Type type = op.getType();
    if (!getElementTypeOrSelf(type).isF32())
      return failure();
    Type wide = rewriter.getF64Type();
    if (auto vector = dyn_cast<VectorType>(type))
      wide = vector.clone(wide);
    Location loc = op.getLoc();
    Value extended = rewriter.create<arith::ExtFOp>(loc, wide, op.getOperand());
    Value result = rewriter.create<MathOp>(loc, extended);
    rewriter.replaceOpWithNewOp<arith::TruncFOp>(op, type, result);
    return success();
  }
};

struct ApproximateMathPass
    : mantissa::impl::ApproximateMathPassBase<ApproximateMathPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    // Added first, with a higher benefit than the approximations'.
    patterns.add<SinCosThroughDouble<math::SinOp>,
                 SinCosThroughDouble<math::CosOp>>(&getContext(),
                                                   /*benefit=*/2);
    populateMathPolynomialApproximationPatterns(patterns);
    if (failed(
            applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

struct MarkOutlinedNoInlinePass
    : mantissa::impl::MarkOutlinedNoInlinePassBase<MarkOutlinedNoInlinePass> {
  void runOnOperation() override {
    MLIRContext *context = &getContext();
    for (auto function : getOperation().getOps<LLVM::LLVMFuncOp>())
      if (function.isPrivate() && !function.isExternal())
        function.setPassthroughAttr(
            ArrayAttr::get(context, {StringAttr::get(context, "noinline")}));
  }
};

/// bufferizeTrainSteps as pipeline text: lowering and fusion on tensors,
/// then bufferization.
constexpr llvm::StringLiteral kLoweringStages =
    "mantissa-lower-train-to-linalg,"
    "func.func(mantissa-mark-arguments-read-only),";
constexpr llvm::StringLiteral kFusionStages = "linalg-fuse-elementwise-ops,";
/// The CPU step's transposes fuse into the ops that read them (the GEMM
/// reads strided operands; the GPU pipeline folds transposes into views
/// after bufferization instead).
constexpr llvm::StringLiteral kCpuTensorStages =
    "func.func(mantissa-fuse-transposes),";
/// After the CPU's tensor passes (and the widening of bf16 products, which
/// leaves equal widenings of one activation, and elementwise chains that
/// the first fusion could not join): equal ops merged, then what has one
/// reader fused into it, matrix products kept whole.
constexpr llvm::StringLiteral kCpuFusionAfterWidening =
    "func.func(mantissa-merge-equal-generics,"
    "mantissa-fuse-elementwise-keeping-products),";
constexpr llvm::StringLiteral kBufferizationStages =
    "empty-tensor-to-alloc-tensor,"
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map},"
    "buffer-results-to-out-params,"
    // Frees every temporary before the function returns.
    "ownership-based-buffer-deallocation,canonicalize,"
    "buffer-deallocation-simplification,"
    "bufferization-lower-deallocations,canonicalize,"
    "func.func(mantissa-compute-results-in-place),"
    "mantissa-convert-copies-to-linalg";

/// On the bufferized CPU step, two of the GPU step's buffer passes
/// (docs/gpu-step.md): a temporary that a copy moves into a result or a
/// slice is computed there, and outputs nobody reads are not written.
/// Neither changes a sum, so the step's bits stay. The GPU's other buffer
/// passes did not pay on the CPU (docs/architecture.md).
constexpr llvm::StringLiteral kCpuBufferStages =
    ",func.func(mantissa-fold-copies-into-producers,"
    "mantissa-drop-unread-outputs)";

/// lowerBufferizedToLLVM as pipeline text.
constexpr llvm::StringLiteral kLowerBufferizedStages =
    "func.func(convert-linalg-to-loops),expand-strided-metadata,lower-affine,"
    "mantissa-parallelize-outer-loops,convert-scf-to-openmp,"
    "mantissa-inline-alloca-scopes,mantissa-approximate-math,"
    "arith-emulate-unsupported-floats{source-types=bf16 target-type=f32},"
    "arith-expand{include-bf16=true},convert-scf-to-cf,"
    "convert-math-to-llvm,convert-arith-to-llvm,finalize-memref-to-llvm,"
    "convert-vector-to-llvm,"
    "convert-func-to-llvm{use-bare-ptr-memref-call-conv=1},"
    "convert-cf-to-llvm,convert-openmp-to-llvm,"
    "reconcile-unrealized-casts,mantissa-access-narrow-floats-as-integers,"
    "mantissa-route-gemm-calls-through-hook,mantissa-mark-outlined-noinline";

struct TrainCpuPipelineOptions
    : public PassPipelineOptions<TrainCpuPipelineOptions> {
  Option<mantissa::CpuGemmMode> gemm{
      *this, "gemm",
      llvm::cl::desc("How matrix products are computed: 'library' (the "
                     "runtime's oneDNN GEMM) or 'loops' (generated loops, "
                     "the interpreter's accumulation order)"),
      llvm::cl::init(mantissa::CpuGemmMode::Library),
      llvm::cl::values(
          clEnumValN(mantissa::CpuGemmMode::Library, "library",
                     "call the runtime's GEMM (oneDNN)"),
          clEnumValN(mantissa::CpuGemmMode::Loops, "loops",
                     "generated loops, bit-identical to the interpreter"))};
  Option<std::string> cpu{
      *this, "cpu",
      llvm::cl::desc("The CPU whose features decide whether bf16 products "
                     "become fp32 products of widened operands "
                     "(mantissa-widen-bf16-products); empty: they stay bf16"),
      llvm::cl::init("")};
  Option<bool> libraryBf16{
      *this, "library-bf16",
      llvm::cl::desc("Whether the running oneDNN computes bf16 matmuls"),
      llvm::cl::init(true)};
};

std::string trainCpuPipelineText(mantissa::CpuGemmMode gemm, StringRef cpu,
                                 bool libraryBf16) {
  std::string text = (kLoweringStages + kFusionStages + kCpuTensorStages).str();
  if (gemm == mantissa::CpuGemmMode::Library && !cpu.empty())
    text += ("func.func(mantissa-widen-bf16-products{cpu=" + cpu +
             " library-bf16=" + (libraryBf16 ? "true" : "false") + "}),")
                .str();
  text += kCpuFusionAfterWidening;
  text += kBufferizationStages;
  text += kCpuBufferStages;
  if (gemm == mantissa::CpuGemmMode::Library)
    text += ",mantissa-call-gemm-library";
  // Each op in its own function, those that read across their innermost
  // loop cut into strips; the temporaries go into one arena last, once no
  // pass looks for separate allocations (docs/architecture.md).
  text += ",mantissa-interchange-reductions-outward,mantissa-outline-linalg-"
          "ops,func.func(mantissa-tile-transposed-reads{cpu=" +
          cpu.str() + "},mantissa-pack-cpu-arena),";
  text += kLowerBufferizedStages;
  return text;
}

} // namespace

void mlir::mantissa::registerTrainCpuPipeline() {
  PassPipelineRegistration<TrainCpuPipelineOptions>(
      "mantissa-train-cpu-pipeline",
      "Lower train.step to LLVM-dialect CPU code (the step libraries' "
      "pipeline)",
      [](OpPassManager &pm, const TrainCpuPipelineOptions &options) {
        if (failed(parsePassPipeline(trainCpuPipelineText(options.gemm,
                                                          options.cpu,
                                                          options.libraryBf16),
                                     pm)))
          llvm::report_fatal_error("mantissa-train-cpu-pipeline is malformed");
      });
}

std::optional<mantissa::CpuGemmMode>
mlir::mantissa::parseCpuGemmMode(StringRef text) {
  if (text == "library")
    return CpuGemmMode::Library;
  if (text == "loops")
    return CpuGemmMode::Loops;
  return std::nullopt;
}

StringRef mlir::mantissa::stringifyCpuGemmMode(CpuGemmMode mode) {
  return mode == CpuGemmMode::Library ? "library" : "loops";
}

mantissa::CpuGemmMode mlir::mantissa::getCpuGemmMode() {
  const char *text = std::getenv("MANTISSA_CPU_GEMM");
  if (!text || !*text)
    return CpuGemmMode::Library;
  if (std::optional<CpuGemmMode> mode = parseCpuGemmMode(text))
    return *mode;
  llvm::errs() << "mantissa: error: MANTISSA_CPU_GEMM is '" << text
               << "'; expected 'library' (oneDNN, the default) or 'loops'\n";
  std::exit(1);
}

std::string mlir::mantissa::bufferizationPipelineText(StringRef tensorPasses) {
  std::string text = (kLoweringStages + kFusionStages).str();
  if (!tensorPasses.empty())
    text += (tensorPasses + ",").str();
  return text + kBufferizationStages.str();
}

LogicalResult mlir::mantissa::bufferizeTrainSteps(ModuleOp module,
                                                  StringRef tensorPasses) {
  return runPassPipeline(module, "builtin.module(" +
                                     bufferizationPipelineText(tensorPasses) +
                                     ")");
}

LogicalResult mlir::mantissa::lowerTrainStepsToLLVM(ModuleOp module,
                                                    CpuGemmMode gemm,
                                                    StringRef cpu,
                                                    bool libraryBf16) {
  std::string options = ("gemm=" + stringifyCpuGemmMode(gemm)).str();
  if (!cpu.empty())
    options +=
        (" cpu=" + cpu + " library-bf16=" + (libraryBf16 ? "true" : "false"))
            .str();
  return runPassPipeline(module, "builtin.module(mantissa-train-cpu-pipeline{" +
                                     options + "})");
}

LogicalResult mlir::mantissa::lowerBufferizedToLLVM(ModuleOp module) {
  return runPassPipeline(
      module, ("builtin.module(" + kLowerBufferizedStages + ")").str());
}

void mlir::mantissa::addPackedEntry(ModuleOp module, StringRef callee,
                                    StringRef entryName, bool indirect,
                                    unsigned passThrough) {
  auto function = module.lookupSymbol<LLVM::LLVMFuncOp>(callee);
  MLIRContext *context = module.getContext();
  Location loc = function.getLoc();
  auto pointerType = LLVM::LLVMPointerType::get(context);
  ArrayRef<Type> params = function.getFunctionType().getParams();
  size_t packed = params.size() - passThrough;
  SmallVector<Type> entryParams = {pointerType};
  llvm::append_range(entryParams, params.drop_front(packed));
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  auto entry = b.create<LLVM::LLVMFuncOp>(
      loc, entryName,
      LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(context),
                                  entryParams));
  Block *block = entry.addEntryBlock(b);
  b.setInsertionPointToStart(block);
  SmallVector<Value> values;
  for (auto [index, type] : llvm::enumerate(params.take_front(packed))) {
    Value slot = b.create<LLVM::GEPOp>(
        loc, pointerType, pointerType, block->getArgument(0),
        ArrayRef<LLVM::GEPArg>{static_cast<int32_t>(index)});
    if (!indirect) {
      values.push_back(b.create<LLVM::LoadOp>(loc, type, slot));
      continue;
    }
    Value pointer = b.create<LLVM::LoadOp>(loc, pointerType, slot);
    values.push_back(b.create<LLVM::LoadOp>(loc, type, pointer));
  }
  llvm::append_range(values, block->getArguments().drop_front());
  b.create<LLVM::CallOp>(loc, function, values);
  b.create<LLVM::ReturnOp>(loc, ValueRange{});
}
