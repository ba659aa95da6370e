//===- TrainToGPU.cpp - A train.step as a GPU program ---------------------===//
//
// The step is bufferized exactly as for the CPU (bufferizeTrainSteps), then
// read as a straight-line program over buffers:
//
// - Each temporary (memref.alloc) lives from its allocation to the last op
//   that uses it; the temporaries are packed into one arena, first fit,
//   reusing the bytes of dead ones (everything runs in order on one
//   stream).
// - Views (subview, expand/collapse_shape, ...) cost nothing: an op's operand
//   is its base buffer plus the view's static offset and strides, which the
//   kernel rebuilds with memref.reinterpret_cast. A transpose into a
//   temporary that is only read becomes such a view too, unless a GEMM
//   reading it would then no longer fit cuBLAS.
// - Matrix products cuBLAS can express (named or generic contractions whose
//   batch, row, column and reduction dimensions each collapse to one strided
//   dimension) become strided-batched GEMMs.
// - Every other linalg op, and the scatter loops of embedding backward,
//   becomes one kernel: its parallel loops are spread over the threads
//   (one output element each) and its reduction loops run in order within
//   each thread, so every element accumulates in the CPU code's order.
//
// The kernels are lowered through NVVM to PTX for sm_90 (libdevice for the
// transcendental functions, IEEE sqrt and division); with host kernels the
// same loop nests are also lowered for the CPU.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU.h"
#include "GpuAttentionKernels.h"
#include "GpuKernels.h"
#include "mantissa/Conversion/BufferAccesses.h"
#include "mantissa/Conversion/GemmMatching.h"

#include "mantissa/Conversion/TrainToLLVM.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <map>
#include <mutex>

using namespace mlir;
using namespace mlir::mantissa;

void mlir::mantissa::registerTrainToGPUDialects(DialectRegistry &registry) {
  registerTrainToLLVMDialects(registry);
  registry.insert<gpu::GPUDialect, NVVM::NVVMDialect>();
  registerGPUDialectTranslation(registry);
  registerNVVMDialectTranslation(registry);
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
}

namespace {

/// Arena and constant offsets are multiples of this (cuBLAS and vector
/// loads want aligned operands).
constexpr int64_t kBufferAlignment = 256;

int64_t alignTo(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

int64_t getBufferBytes(MemRefType type) {
  return std::max<int64_t>(1, type.getNumElements() *
                                  getStorageBytes(type.getElementType()));
}

/// Whether `op` sets every element of its one output to +0.0 (linalg.fill,
/// or a generic without inputs yielding the constant), returning that
/// output.
Value getZeroFilledOutput(Operation *op) {
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  if (!linalgOp || linalgOp.getNumDpsInits() != 1 ||
      linalgOp.getNumReductionLoops() != 0)
    return {};
  Value value;
  if (auto fill = dyn_cast<linalg::FillOp>(op)) {
    value = fill.getInputs().front();
  } else if (auto generic = dyn_cast<linalg::GenericOp>(op)) {
    if (generic.getNumDpsInputs() != 0 ||
        !generic.getMatchingIndexingMap(generic.getDpsInitOperand(0))
             .isIdentity())
      return {};
    value = cast<linalg::YieldOp>(generic.getBlock()->getTerminator())
                .getOperand(0);
    if (value.getParentBlock() == generic.getBlock())
      return {};
  } else {
    return {};
  }
  auto constant = value.getDefiningOp<arith::ConstantOp>();
  auto zero = constant ? dyn_cast<FloatAttr>(constant.getValue()) : nullptr;
  if (!zero || !zero.getValue().isPosZero())
    return {};
  return linalgOp.getDpsInitOperand(0)->get();
}

} // namespace

/// What an elementwise op does to a GEMM's fp32 result that cuBLASLt can do
/// in the GEMM's epilogue instead: round it once into `output` (fp32, or the
/// operands' narrow dtype), after adding `bias` (an input in the output's
/// dtype, widened to fp32) when there is one.
struct GemmEpilogueMatch {
  Value output;
  OpOperand *bias = nullptr;
};

/// Whether `op` is `output = round(gemmOutput)` or `output = round(widen(bias)
/// + gemmOutput)` (either order) over the same elements, identity-indexed
/// but for the bias: the lowering of mm/bmm (the cast of the result) and of
/// addmm with alpha = beta = 1.
static std::optional<GemmEpilogueMatch> matchGemmEpilogue(linalg::LinalgOp op,
                                                          Value gemmOutput) {
  auto generic = dyn_cast<linalg::GenericOp>(op.getOperation());
  if (!generic || !generic.hasPureBufferSemantics() ||
      generic.getNumDpsInits() != 1 || generic.getNumDpsInputs() < 1 ||
      generic.getNumDpsInputs() > 2 ||
      generic.getNumLoops() != generic.getNumParallelLoops())
    return std::nullopt;
  OpOperand *init = generic.getDpsInitOperand(0);
  if (!generic.getMatchingIndexingMap(init).isIdentity())
    return std::nullopt;
  Type outputType = getElementTypeOrSelf(init->get().getType());
  if (!isGemmDType(outputType))
    return std::nullopt;
  OpOperand *product = nullptr, *bias = nullptr;
  for (OpOperand *input : generic.getDpsInputOperands()) {
    bool isProduct = !product &&
                     getBaseBuffer(input->get()) == getBaseBuffer(gemmOutput) &&
                     input->get().getType() == gemmOutput.getType() &&
                     generic.getMatchingIndexingMap(input).isIdentity();
    (isProduct ? product : bias) = input;
  }
  if (!product ||
      (bias && getElementTypeOrSelf(bias->get().getType()) != outputType))
    return std::nullopt;
  Block *body = generic.getBlock();
  auto isArgument = [&](Value value, OpOperand *operand) {
    auto argument = dyn_cast<BlockArgument>(value);
    return argument && argument.getOwner() == body &&
           argument.getArgNumber() == operand->getOperandNumber();
  };
  Value result = cast<linalg::YieldOp>(body->getTerminator()).getOperand(0);
  if (!outputType.isF32()) {
    auto truncate = result.getDefiningOp<arith::TruncFOp>();
    if (!truncate || truncate->getBlock() != body)
      return std::nullopt;
    result = truncate.getIn();
  }
  if (!result.getType().isF32())
    return std::nullopt;
  if (!bias)
    return isArgument(result, product)
               ? std::optional(GemmEpilogueMatch{init->get(), nullptr})
               : std::nullopt;
  auto add = result.getDefiningOp<arith::AddFOp>();
  if (!add || add->getBlock() != body)
    return std::nullopt;
  for (int first = 0; first < 2; ++first) {
    Value sum = add->getOperand(first), addend = add->getOperand(1 - first);
    if (auto widen = addend.getDefiningOp<arith::ExtFOp>())
      addend = widen.getIn();
    if (isArgument(sum, product) && isArgument(addend, bias))
      return GemmEpilogueMatch{init->get(), bias};
  }
  return std::nullopt;
}

/// Whether every use of the temporary `base` (through views) is one of
/// `allowed` or its deallocation.
static bool isOnlyUsedBy(Value base, ArrayRef<Operation *> allowed) {
  SmallVector<Value> worklist = {base};
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    for (Operation *user : value.getUsers()) {
      if (isa<memref::DeallocOp>(user) || llvm::is_contained(allowed, user))
        continue;
      if (isa<ViewLikeOpInterface, memref::CastOp, memref::TransposeOp>(user) &&
          user->getNumResults() == 1) {
        worklist.push_back(user->getResult(0));
        continue;
      }
      return false;
    }
  }
  return true;
}

//===----------------------------------------------------------------------===//
// The program builder
//===----------------------------------------------------------------------===//

/// The one element of `operand` that each thread of `op` touches, when
/// there is one (the operand's map uses parallel loops only) and no two
/// threads share it: the element offset, in its base buffer, as
/// [offset, coefficient of each parallel loop] (thread coordinates in
/// `parallelDims` order, of extents `shape`).
static std::optional<SmallVector<int64_t>>
getThreadElement(linalg::LinalgOp op, OpOperand &operand,
                 ArrayRef<unsigned> parallelDims, ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(getViewLayout(operand.get(), strides, offset)))
    return std::nullopt;
  SmallVector<int64_t> element(1 + parallelDims.size(), 0);
  element[0] = offset;
  AffineMap map = op.getMatchingIndexingMap(&operand);
  for (auto [position, expr] : llvm::enumerate(map.getResults())) {
    if (auto constant = dyn_cast<AffineConstantExpr>(expr)) {
      element[0] += constant.getValue() * strides[position];
      continue;
    }
    auto dim = dyn_cast<AffineDimExpr>(expr);
    if (!dim)
      return std::nullopt;
    const unsigned *found = llvm::find(parallelDims, dim.getPosition());
    if (found == parallelDims.end())
      return std::nullopt; // a reduction loop: many elements per thread
    element[1 + (found - parallelDims.begin())] += strides[position];
  }
  // Distinct threads, distinct elements: the loops' strides nest.
  SmallVector<std::pair<int64_t, int64_t>> loops; // (coefficient, extent)
  for (auto [coefficient, extent] :
       llvm::zip_equal(ArrayRef(element).drop_front(), shape))
    if (extent > 1)
      loops.push_back({coefficient, extent});
  llvm::sort(loops);
  int64_t covered = 1;
  for (auto [coefficient, extent] : loops) {
    if (coefficient < covered)
      return std::nullopt;
    covered = coefficient * extent;
  }
  return element;
}

/// The parts of a split reduction's fold (kGpuFoldPartsAttr) that a warp
/// can run as a tree of shuffles: a power of two within a warp, its
/// partials' view first and its output second, and one combining op on
/// 32-bit values, applied to the running value and a partial.
static std::optional<int64_t> getTreeFoldParts(Operation *op) {
  auto generic = dyn_cast<linalg::GenericOp>(op);
  auto parts = op->getAttrOfType<IntegerAttr>(kGpuFoldPartsAttr);
  if (!generic || !parts || parts.getInt() < 2 || parts.getInt() > 32 ||
      !llvm::isPowerOf2_64(parts.getInt()) || generic.getNumDpsInputs() != 1 ||
      generic.getNumDpsInits() != 1)
    return std::nullopt;
  Block *body = generic.getBody();
  if (body->getOperations().size() != 2)
    return std::nullopt;
  Operation *combiner = &body->front();
  Type type = body->getArgument(1).getType();
  if (!isa<arith::AddFOp, arith::MaximumFOp, arith::MaxNumFOp,
           arith::MinimumFOp, arith::MinNumFOp, arith::AddIOp>(combiner) ||
      combiner->getNumOperands() != 2 || !type.isIntOrFloat() ||
      type.getIntOrFloatBitWidth() != 32 ||
      combiner->getResult(0) != body->getTerminator()->getOperand(0) ||
      !llvm::is_contained(combiner->getOperands(), body->getArgument(0)) ||
      !llvm::is_contained(combiner->getOperands(), body->getArgument(1)))
    return std::nullopt;
  return parts.getInt();
}

namespace {

class GpuProgramBuilder {
public:
  /// `arguments`: the step's, as the program takes them.
  GpuProgramBuilder(func::FuncOp function, train::StepOp step,
                    std::vector<GpuStepTensor> arguments,
                    GpuStepProgram &program)
      : function(function), step(step), arguments(std::move(arguments)),
        program(program), kernels(ModuleOp::create(function.getLoc())) {}

  LogicalResult build();
  OwningOpRef<ModuleOp> takeKernels() { return std::move(kernels); }
  /// The fused attention's kernels, by entry: which one, of what.
  struct Attention {
    AttentionKernel kind;
    AttentionKernelSpec spec;
  };
  const llvm::StringMap<Attention> &getAttentionKernels() const {
    return attentionKernels;
  }

private:
  LogicalResult visit(Operation *op);
  int64_t getBufferId(Value base);
  LogicalResult addConstant(memref::GetGlobalOp getGlobal);
  LogicalResult addKernel(Operation *op);
  LogicalResult addAttention(train::AttentionKernelOp op);
  LogicalResult fuseGemmEpilogue(linalg::LinalgOp op);
  void groupIndependentKernels();
  void packArena();

  func::FuncOp function;
  train::StepOp step;
  std::vector<GpuStepTensor> arguments;
  GpuStepProgram &program;
  OwningOpRef<ModuleOp> kernels;
  llvm::DenseMap<Value, int64_t> bufferIds;
  /// Program positions of each temporary's allocation and last use.
  struct Lifetime {
    int64_t buffer, begin, end;
  };
  std::vector<Lifetime> lifetimes;
  llvm::DenseMap<Value, size_t> lifetimeOf;
  int64_t position = 0;
  /// The buffers an op of the program writes and touches (reads or
  /// writes), and its position: each kernel's by entry.
  struct Touches {
    llvm::SmallDenseSet<int64_t> writes, touches;
    int64_t position = 0;
    /// For a linalg kernel: its threads' shape (its parallel loops, in
    /// order) and, per buffer, the one element each thread touches of it
    /// (getThreadElement) when every access of the buffer touches one.
    std::optional<SmallVector<int64_t>> threadShape;
    llvm::DenseMap<int64_t, std::optional<SmallVector<int64_t>>> elements;
    /// For the fold of a split reduction (kGpuFoldPartsAttr): the parts
    /// each output folds and the buffer of the partials.
    int64_t foldParts = 0, partialsBuffer = -1;
  };
  llvm::StringMap<Touches> kernelTouches;
  llvm::StringMap<Attention> attentionKernels;
  /// Whether `later` may run in the launch `earlier` although it depends on
  /// it: in every buffer where they conflict, each thread of both touches
  /// only one element, the same in both, and no other thread touches it.
  /// Then the thread stride it runs with there (its partners', all alike).
  std::optional<int64_t>
  dependsOnlyThreadLocally(const GpuStepOp &later,
                           const GpuStepOp &earlier) const;
  /// Whether `later` folds the partials that a member of `earlier` computed,
  /// thread t partial t: it may then run in that launch after it, output u
  /// on the threads from u * parts, where each lane loads the partial that
  /// it computed itself and the warp's shuffles do the rest. Anything else
  /// of the launch it conflicts with must be a member that nothing else of
  /// the launch conflicts with, touching only what `later`'s thread for the
  /// same iteration touches (the output's fill): the indices of those
  /// members, which move to the end of the launch, onto the fold's
  /// threads.
  std::optional<SmallVector<size_t>>
  foldsPartialsOf(const GpuStepOp &later, const GpuStepOp &earlier) const;
  /// Whether the later of two ops conflicts with the earlier on `buffer`:
  /// the earlier writes it, or the later writes what the earlier touches.
  static bool conflictsOn(const Touches &later, const Touches &earlier,
                          int64_t buffer) {
    return earlier.writes.contains(buffer) ||
           (later.writes.contains(buffer) && earlier.touches.contains(buffer));
  }
  /// Whether two ops conflict on any buffer.
  static bool conflict(const Touches &a, const Touches &b) {
    return llvm::any_of(
        a.touches, [&](int64_t buffer) { return conflictsOn(a, b, buffer); });
  }
  /// The last op, if it zeroed a view: its output, index and kernel.
  struct ZeroFill {
    Value output;
    size_t op;
    func::FuncOp kernel;
    Operation *fill;
  };
  std::optional<ZeroFill> lastZeroFill;
  /// The last op, if it is a GEMM: its linalg op and the zero fill merged
  /// into it (beta = 0), if any.
  struct LastGemm {
    linalg::LinalgOp op;
    Operation *fill;
  };
  std::optional<LastGemm> lastGemm;
};

} // namespace

int64_t GpuProgramBuilder::getBufferId(Value base) {
  // Every op that names a buffer extends its lifetime to here.
  if (auto lifetime = lifetimeOf.find(base); lifetime != lifetimeOf.end())
    lifetimes[lifetime->second].end = position;
  auto found = bufferIds.find(base);
  if (found != bufferIds.end())
    return found->second;
  // Only function arguments reach here unregistered.
  auto argument = cast<BlockArgument>(base);
  GpuStepBuffer buffer;
  int64_t numArguments = step.getNumArguments();
  int64_t index = argument.getArgNumber();
  buffer.kind = index < numArguments ? GpuStepBuffer::Kind::Argument
                                     : GpuStepBuffer::Kind::Result;
  buffer.index = index < numArguments ? index : index - numArguments;
  buffer.bytes = getBufferBytes(cast<MemRefType>(base.getType()));
  int64_t id = program.buffers.size();
  program.buffers.push_back(buffer);
  bufferIds[base] = id;
  return id;
}

LogicalResult GpuProgramBuilder::addConstant(memref::GetGlobalOp getGlobal) {
  auto global = SymbolTable::lookupNearestSymbolFrom<memref::GlobalOp>(
      getGlobal, getGlobal.getNameAttr());
  auto value =
      global ? dyn_cast_or_null<DenseElementsAttr>(global.getInitialValueAttr())
             : nullptr;
  if (!value)
    return getGlobal.emitOpError()
           << "has no dense initial value for the GPU program";
  MemRefType type = getGlobal.getType();
  int64_t width = getStorageBytes(type.getElementType());
  GpuStepBuffer buffer;
  buffer.kind = GpuStepBuffer::Kind::Constant;
  buffer.offset = alignTo(program.constants.size(), kBufferAlignment);
  buffer.bytes = getBufferBytes(type);
  program.constants.resize(buffer.offset + buffer.bytes, 0);
  uint8_t *out = program.constants.data() + buffer.offset;
  auto store = [&](const APInt &bits, int64_t index) {
    uint64_t word = bits.getZExtValue();
    for (int64_t byte = 0; byte < width; ++byte)
      out[index * width + byte] = uint8_t(word >> (8 * byte));
  };
  int64_t index = 0;
  if (isa<FloatType>(type.getElementType()))
    for (const APFloat &element : value.getValues<APFloat>())
      store(element.bitcastToAPInt(), index++);
  else
    for (const APInt &element : value.getValues<APInt>())
      store(element, index++);
  bufferIds[getGlobal.getResult()] = program.buffers.size();
  program.buffers.push_back(buffer);
  return success();
}

/// Adds a kernel function for `op` (a linalg op on buffers, or a loop nest)
/// to the kernel module: one argument per base buffer it touches (a flat
/// memref), the views it uses rebuilt from them by reinterpret_cast, its
/// constants cloned in.
LogicalResult GpuProgramBuilder::addKernel(Operation *op) {
  llvm::SetVector<Value> used(op->operand_begin(), op->operand_end());
  getUsedValuesDefinedAbove(op->getRegions(), used);
  llvm::SetVector<Value> bases;
  SmallVector<Value> views;
  llvm::SetVector<Operation *> constants;
  for (Value value : used) {
    if (isa<MemRefType>(value.getType())) {
      bases.insert(getBaseBuffer(value));
      views.push_back(value);
      continue;
    }
    Operation *definition = value.getDefiningOp();
    if (!definition || !definition->hasTrait<OpTrait::ConstantLike>())
      return op->emitOpError()
             << "uses a value the GPU program cannot pass to a kernel: "
             << value;
    constants.insert(definition);
  }
  MLIRContext *context = op->getContext();
  std::string name =
      llvm::formatv("{0}_k{1}", step.getSymName(), program.ops.size()).str();
  SmallVector<Type> argumentTypes;
  for (Value base : bases) {
    auto type = cast<MemRefType>(base.getType());
    argumentTypes.push_back(MemRefType::get(
        {std::max<int64_t>(1, type.getNumElements())}, type.getElementType()));
  }
  OpBuilder builder = OpBuilder::atBlockEnd(kernels->getBody());
  auto kernel = builder.create<func::FuncOp>(
      op->getLoc(), name, builder.getFunctionType(argumentTypes, {}));
  Block *entry = kernel.addEntryBlock();
  builder.setInsertionPointToStart(entry);
  IRMapping mapping;
  for (Value view : views) {
    SmallVector<int64_t> strides;
    int64_t offset;
    if (failed(getViewLayout(view, strides, offset)))
      return op->emitOpError()
             << "has an operand with a dynamic layout, which the GPU program "
                "cannot pass to a kernel";
    auto type = cast<MemRefType>(view.getType());
    Value base = entry->getArgument(
        std::distance(bases.begin(), llvm::find(bases, getBaseBuffer(view))));
    mapping.map(
        view, builder.create<memref::ReinterpretCastOp>(
                  op->getLoc(), type, base, offset, type.getShape(), strides));
  }
  for (Operation *constant : constants)
    builder.clone(*constant, mapping);
  Operation *clone = builder.clone(*op, mapping);
  builder.create<func::ReturnOp>(op->getLoc());

  GpuStepOp kernelOp;
  kernelOp.kind = GpuStepOp::Kind::Kernel;
  kernelOp.entry = name;
  kernelOp.source = describeOp(op);
  Touches &touches = kernelTouches[name];
  touches.position = position;
  if (std::optional<int64_t> parts = getTreeFoldParts(op)) {
    touches.foldParts = *parts;
    touches.partialsBuffer = getBufferId(getBaseBuffer(op->getOperand(0)));
    kernel->setAttr(kGpuFoldPartsAttr, builder.getI64IntegerAttr(*parts));
  }
  for (Value base : bases) {
    kernelOp.buffers.push_back(getBufferId(base));
    touches.touches.insert(kernelOp.buffers.back());
    if (writesBuffer(op, base))
      touches.writes.insert(kernelOp.buffers.back());
  }
  GpuStepOp::Member member;
  member.function = name;
  member.source = kernelOp.source;
  member.threadStride = std::max<int64_t>(1, touches.foldParts);
  auto all = llvm::seq<unsigned>(0, kernelOp.buffers.size());
  member.buffers.assign(all.begin(), all.end());
  kernelOp.members.push_back(std::move(member));
  // Which element of each buffer each thread touches, when the op reads
  // and writes memory only through its operands.
  if (auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
      linalgOp && llvm::all_of(views, [&](Value view) {
        return llvm::is_contained(op->getOperands(), view);
      })) {
    SmallVector<int64_t> ranges = linalgOp.getStaticLoopRanges();
    SmallVector<unsigned> parallelDims;
    SmallVector<int64_t> shape;
    for (auto [dim, iterator] :
         llvm::enumerate(linalgOp.getIteratorTypesArray()))
      if (linalg::isParallelIterator(iterator)) {
        parallelDims.push_back(dim);
        shape.push_back(ranges[dim]);
      }
    if (llvm::none_of(shape, ShapedType::isDynamic)) {
      touches.threadShape = shape;
      for (OpOperand &operand : op->getOpOperands()) {
        if (!isa<MemRefType>(operand.get().getType()))
          continue;
        int64_t id = getBufferId(getBaseBuffer(operand.get()));
        std::optional<SmallVector<int64_t>> element =
            getThreadElement(linalgOp, operand, parallelDims, shape);
        auto [entry, inserted] = touches.elements.try_emplace(id, element);
        if (!inserted && entry->second != element)
          entry->second = std::nullopt;
      }
    }
  }

  if (auto linalgOp = dyn_cast<linalg::LinalgOp>(clone)) {
    // Parallel loops first, so that they are the ones spread over threads;
    // the reduction loops keep their order.
    IRRewriter rewriter(context);
    rewriter.setInsertionPoint(clone);
    auto generic = dyn_cast<linalg::GenericOp>(clone);
    if (!generic) {
      FailureOr<linalg::GenericOp> generalized =
          linalg::generalizeNamedOp(rewriter, linalgOp);
      if (failed(generalized))
        return op->emitOpError() << "cannot be generalized for the GPU";
      generic = *generalized;
    }
    SmallVector<unsigned> order, reductions;
    for (auto [loop, iterator] :
         llvm::enumerate(generic.getIteratorTypesArray()))
      (linalg::isParallelIterator(iterator) ? order : reductions)
          .push_back(loop);
    int64_t parallel = order.size();
    llvm::append_range(order, reductions);
    bool identity = llvm::equal(order, llvm::seq<unsigned>(0, order.size()));
    if (!identity &&
        failed(linalg::interchangeGenericOp(rewriter, generic, order)))
      return op->emitOpError() << "cannot be interchanged for the GPU";
    kernel->setAttr(kThreadLoops, builder.getI64IntegerAttr(parallel));
  } else if (auto loops =
                 clone->getAttrOfType<IntegerAttr>(kGpuParallelLoopsAttr)) {
    // A nest built knowing which loops cannot collide.
    kernel->setAttr(kThreadLoops, loops);
    if (Attribute serial = clone->getAttr(kGpuSerialIterationsAttr))
      kernel->setAttr(kGpuSerialIterationsAttr, serial);
  } else {
    kernel->setAttr(kThreadScatterLoops, UnitAttr::get(context));
  }
  program.ops.push_back(std::move(kernelOp));
  return success();
}

/// The fused attention's launches (docs/gpu-step.md): the forward's one
/// kernel, or the backward's two (queries, then keys and values), each
/// reading its operands' views in place by their strides.
LogicalResult GpuProgramBuilder::addAttention(train::AttentionKernelOp op) {
  auto shapeOf = [](Value value) {
    return cast<MemRefType>(value.getType()).getShape();
  };
  ArrayRef<int64_t> shape = shapeOf(op.getInputs()[0]);
  AttentionKernelSpec spec;
  spec.batch = shape[0];
  spec.heads = shape[1];
  spec.sequence = shape[2];
  spec.headDim = shape[3];
  spec.scale = op.getScale().convertToDouble();
  // Each operand's buffer and its element (batch, head, row, column).
  llvm::DenseMap<const AttentionOperand *, int64_t> buffers;
  auto describe = [&](Value view, AttentionOperand &operand) -> LogicalResult {
    auto type = cast<MemRefType>(view.getType());
    SmallVector<int64_t> strides;
    int64_t offset;
    if (failed(getStridesAndOffset(type, strides, offset)) ||
        ShapedType::isDynamic(offset) ||
        llvm::any_of(strides, ShapedType::isDynamic))
      return op.emitOpError()
             << "reads or writes " << type
             << ", whose layout the attention kernels cannot address";
    Value base = getBaseBuffer(view);
    operand.elementType = type.getElementType();
    operand.elements = cast<MemRefType>(base.getType()).getNumElements();
    operand.offset = offset;
    // [B, H, S, D]; the mask [S, S] for every batch and head; lse and
    // delta [B, H, S].
    switch (strides.size()) {
    case 4:
      operand.strides = {strides[0], strides[1], strides[2], strides[3]};
      break;
    case 2:
      operand.strides = {0, 0, strides[0], strides[1]};
      break;
    default:
      operand.strides = {strides[0], strides[1], strides[2], 0};
      break;
    }
    buffers[&operand] = getBufferId(base);
    return success();
  };
  bool backward = op.getBackward();
  SmallVector<AttentionOperand *> inputs = {&spec.q, &spec.k, &spec.v,
                                            &spec.mask};
  SmallVector<AttentionOperand *> outputs = {&spec.out, &spec.lse};
  if (backward) {
    inputs.append({&spec.out, &spec.lse, &spec.dout});
    outputs = {&spec.dq, &spec.dk, &spec.dv, &spec.delta};
  }
  for (auto [value, operand] : llvm::zip_equal(op.getInputs(), inputs))
    if (failed(describe(value, *operand)))
      return failure();
  for (auto [value, operand] : llvm::zip_equal(op.getOutputs(), outputs))
    if (failed(describe(value, *operand)))
      return failure();
  std::string why = whyAttentionKernelsCannotRun(spec);
  if (!why.empty())
    return op.emitOpError() << "cannot run as the attention kernels: " << why;

  // The forward's one kernel, or the backward's two, each with its
  // operands' buffers in the order of its arguments.
  using Kind = AttentionKernel;
  SmallVector<Kind> kinds = {Kind::Forward};
  if (backward)
    kinds = {Kind::BackwardQuery, Kind::BackwardKeyValue};
  for (Kind kind : kinds) {
    GpuStepOp kernelOp;
    kernelOp.kind = GpuStepOp::Kind::Kernel;
    kernelOp.entry =
        llvm::formatv("{0}_attention{1}", step.getSymName(), program.ops.size())
            .str();
    kernelOp.source = describeOp(op);
    Touches &touches = kernelTouches[kernelOp.entry];
    touches.position = position;
    for (const AttentionArgument &argument :
         getAttentionKernelArguments(kind, spec)) {
      int64_t id = buffers.lookup(argument.operand);
      kernelOp.buffers.push_back(id);
      touches.touches.insert(id);
      if (isWrittenByAttentionKernel(kind, spec, argument.operand))
        touches.writes.insert(id);
    }
    attentionKernels[kernelOp.entry] = {kind, spec};
    program.ops.push_back(std::move(kernelOp));
  }
  return success();
}

LogicalResult GpuProgramBuilder::visit(Operation *op) {
  ++position;
  if (auto alloc = dyn_cast<memref::AllocOp>(op)) {
    if (!alloc.getType().hasStaticShape())
      return op->emitOpError() << "has a dynamic shape the GPU program cannot "
                                  "allocate ahead of time";
    GpuStepBuffer buffer;
    buffer.kind = GpuStepBuffer::Kind::Temporary;
    buffer.bytes = getBufferBytes(alloc.getType());
    int64_t id = program.buffers.size();
    program.buffers.push_back(buffer);
    bufferIds[alloc.getResult()] = id;
    lifetimeOf[alloc.getResult()] = lifetimes.size();
    lifetimes.push_back({id, position, position});
    return success();
  }
  // The deallocations all come at the end; lifetimes end at last uses.
  if (isa<memref::DeallocOp>(op))
    return success();
  if (auto getGlobal = dyn_cast<memref::GetGlobalOp>(op))
    return addConstant(getGlobal);
  if (isa<ViewLikeOpInterface, memref::CastOp, memref::TransposeOp,
          func::ReturnOp>(op) ||
      op->hasTrait<OpTrait::ConstantLike>())
    return success();
  if (auto attention = dyn_cast<train::AttentionKernelOp>(op)) {
    lastZeroFill.reset();
    lastGemm.reset();
    return addAttention(attention);
  }
  if (auto linalgOp = dyn_cast<linalg::LinalgOp>(op)) {
    if (std::optional<GpuStepOp> gemm = matchGemm(
            linalgOp, [&](Value base) { return getBufferId(base); })) {
      // C = A * B + 0 right after C was zeroed: one GEMM with beta = 0.
      Value output = linalgOp.getDpsInitOperand(0)->get();
      Operation *fill = nullptr;
      if (lastZeroFill && lastZeroFill->output == output &&
          lastZeroFill->op + 1 == program.ops.size()) {
        fill = lastZeroFill->fill;
        lastZeroFill->kernel.erase();
        program.ops.pop_back();
        gemm->beta = 0.0;
      }
      lastZeroFill.reset();
      program.ops.push_back(std::move(*gemm));
      lastGemm = LastGemm{linalgOp, fill};
      return success();
    }
    lastZeroFill.reset();
    if (lastGemm && succeeded(fuseGemmEpilogue(linalgOp))) {
      lastGemm.reset();
      return success();
    }
    lastGemm.reset();
    if (Value output = getZeroFilledOutput(op))
      lastZeroFill = ZeroFill{output, program.ops.size(), {}, op};
    if (failed(addKernel(op)))
      return failure();
    if (lastZeroFill)
      lastZeroFill->kernel = cast<func::FuncOp>(kernels->getBody()->back());
    return success();
  }
  lastZeroFill.reset();
  lastGemm.reset();
  if (isa<scf::ForOp>(op))
    return addKernel(op);
  return op->emitOpError() << "has no lowering to the GPU program";
}

/// Folds `op` into the GEMM just before it when it only rounds the GEMM's
/// fp32 result (a temporary nothing else reads) into its output, adding a
/// bias first or not (matchGemmEpilogue): the GEMM then writes that output
/// in its dtype, with cuBLASLt's bias epilogue, so neither the kernel nor
/// the fp32 temporary's traffic remain. The GEMM must start from zero (beta
/// = 0): the fold adds nothing then but moves the one rounding, which the
/// elementwise op did, into the GEMM.
LogicalResult GpuProgramBuilder::fuseGemmEpilogue(linalg::LinalgOp op) {
  GpuStepOp &gemm = program.ops.back();
  if (gemm.kind != GpuStepOp::Kind::Gemm || gemm.beta != 0.0 ||
      gemm.epilogue != rt::GemmEpilogue::None)
    return failure();
  linalg::LinalgOp producer = lastGemm->op;
  Value product = producer.getDpsInitOperand(0)->get();
  std::optional<GemmEpilogueMatch> match = matchGemmEpilogue(op, product);
  if (!match)
    return failure();
  Value temporary = getBaseBuffer(product);
  auto alloc = temporary.getDefiningOp<memref::AllocOp>();
  SmallVector<Operation *> allowed = {producer, op};
  if (lastGemm->fill)
    allowed.push_back(lastGemm->fill);
  if (!alloc || !isOnlyUsedBy(temporary, allowed))
    return failure();
  std::optional<GpuStepOp> fused = matchGemm(
      producer, [&](Value base) { return getBufferId(base); }, match->output);
  if (!fused)
    return failure();
  if (match->bias) {
    // cuBLASLt adds bias[r] to row r of every column of every batch: the
    // bias must step with the output's rows (the loops whose output stride
    // is below m) and stay put along the rest.
    FailureOr<LoopStrides> biasStrides = getLoopStrides(op, *match->bias);
    FailureOr<LoopStrides> outputStrides =
        getLoopStrides(op, *op.getDpsInitOperand(0));
    if (failed(biasStrides) || failed(outputStrides))
      return failure();
    SmallVector<int64_t> ranges = op.getStaticLoopRanges();
    for (auto [loop, range] : llvm::enumerate(ranges)) {
      if (range == 1)
        continue;
      int64_t outputStride = outputStrides->strides[loop];
      int64_t expected = outputStride < fused->m ? outputStride : 0;
      if (biasStrides->strides[loop] != expected)
        return failure();
    }
    Value bias = match->bias->get();
    fused->epilogue = rt::GemmEpilogue::Bias;
    fused->bias.buffer = getBufferId(getBaseBuffer(bias));
    fused->bias.offset = biasStrides->offset;
    fused->bias.dtype = getDType(getElementTypeOrSelf(bias.getType()));
  }
  fused->beta = 0.0;
  fused->alpha = gemm.alpha;
  gemm = std::move(*fused);
  ++program.fusedEpilogues;
  return success();
}

/// Runs kernels in one launch with an earlier kernel (a kernel op with
/// several members) when neither they nor anything in between (kernels,
/// GEMMs) touches what the other writes: moving the later one up to the
/// earlier launch then changes no result, and one launch of the largest
/// thread count does both, each on its threads. Every buffer of a launch is
/// alive at the launch (the arena must not give one member's memory to
/// another's).
void GpuProgramBuilder::groupIndependentKernels() {
  /// Ops a launch holds at most (each is a branch in its body), and how
  /// far back a kernel looks for one to join.
  constexpr size_t kMaxMembers = 16, kLookBack = 12;
  auto gemmTouches = [](const GpuStepOp &gemm) {
    Touches result;
    result.writes.insert(gemm.c.buffer);
    for (const GpuGemmOperand *operand : {&gemm.a, &gemm.b, &gemm.c})
      result.touches.insert(operand->buffer);
    if (gemm.epilogue != rt::GemmEpilogue::None)
      result.touches.insert(gemm.bias.buffer);
    return result;
  };
  std::vector<GpuStepOp> grouped;
  std::vector<Touches> touches;
  // An attention kernel runs alone: its warps own tiles, not elements.
  auto alone = [&](const GpuStepOp &op) {
    return op.kind == GpuStepOp::Kind::Kernel &&
           attentionKernels.count(op.entry);
  };
  for (GpuStepOp &op : program.ops) {
    if (op.kind != GpuStepOp::Kind::Kernel || alone(op)) {
      touches.push_back(alone(op) ? kernelTouches.find(op.entry)->second
                                  : gemmTouches(op));
      grouped.push_back(std::move(op));
      continue;
    }
    const Touches &own = kernelTouches.find(op.entry)->second;
    // The latest launch this kernel can join, looking back past what it is
    // independent of.
    std::optional<size_t> target;
    // The threads it runs on in that launch: independent of it, its own.
    int64_t stride = op.members.front().threadStride;
    for (size_t back = 0; back < std::min(kLookBack, grouped.size()); ++back) {
      size_t index = grouped.size() - 1 - back;
      const Touches &other = touches[index];
      bool independent = llvm::none_of(op.buffers, [&](int64_t buffer) {
        return conflictsOn(own, other, buffer);
      });
      bool roomy = grouped[index].kind == GpuStepOp::Kind::Kernel &&
                   !alone(grouped[index]) &&
                   grouped[index].members.size() < kMaxMembers;
      if (!independent) {
        std::optional<int64_t> local =
            roomy ? dependsOnlyThreadLocally(op, grouped[index]) : std::nullopt;
        if (local) {
          // On the threads of the members it depends on.
          target = index;
          stride = *local;
        } else if (std::optional<SmallVector<size_t>> moved =
                       roomy ? foldsPartialsOf(op, grouped[index])
                             : std::nullopt) {
          target = index;
          stride = own.foldParts;
          // The output's fill, independent of the rest of the launch, last,
          // on the fold's threads.
          auto &members = grouped[index].members;
          for (size_t position : llvm::reverse(*moved)) {
            GpuStepOp::Member member = std::move(members[position]);
            members.erase(members.begin() + position);
            member.threadStride = stride;
            members.push_back(std::move(member));
          }
        }
        break;
      }
      if (roomy) {
        target = index;
        break;
      }
    }
    if (!target) {
      touches.push_back(own);
      grouped.push_back(std::move(op));
      continue;
    }
    GpuStepOp &group = grouped[*target];
    Touches &groupTouches = touches[*target];
    GpuStepOp::Member member = std::move(op.members.front());
    member.buffers.clear();
    member.threadStride = stride;
    for (int64_t buffer : op.buffers) {
      auto found = llvm::find(group.buffers, buffer);
      member.buffers.push_back(std::distance(group.buffers.begin(), found));
      if (found == group.buffers.end())
        group.buffers.push_back(buffer);
    }
    group.members.push_back(std::move(member));
    group.source += " + " + op.source;
    groupTouches.writes.insert(own.writes.begin(), own.writes.end());
    groupTouches.touches.insert(own.touches.begin(), own.touches.end());
  }
  // Every buffer of a launch alive when it runs.
  llvm::DenseMap<int64_t, size_t> lifetimeOfBuffer;
  for (auto [index, lifetime] : llvm::enumerate(lifetimes))
    lifetimeOfBuffer[lifetime.buffer] = index;
  for (auto [op, touched] : llvm::zip_equal(grouped, touches)) {
    if (op.kind != GpuStepOp::Kind::Kernel || op.members.size() < 2)
      continue;
    for (int64_t buffer : op.buffers)
      if (auto found = lifetimeOfBuffer.find(buffer);
          found != lifetimeOfBuffer.end()) {
        Lifetime &lifetime = lifetimes[found->second];
        lifetime.begin = std::min(lifetime.begin, touched.position);
        lifetime.end = std::max(lifetime.end, touched.position);
      }
  }
  program.ops = std::move(grouped);
}

std::optional<int64_t>
GpuProgramBuilder::dependsOnlyThreadLocally(const GpuStepOp &later,
                                            const GpuStepOp &earlier) const {
  const Touches &own = kernelTouches.find(later.entry)->second;
  if (!own.threadShape)
    return std::nullopt;
  // A fold's threads are fixed (a tree over its parts); any other kernel
  // takes its partners' stride.
  int64_t ownStride = later.members.front().threadStride;
  std::optional<int64_t> stride;
  for (const GpuStepOp::Member &member : earlier.members) {
    const Touches &other = kernelTouches.find(member.function)->second;
    for (int64_t buffer : later.buffers) {
      if (!conflictsOn(own, other, buffer))
        continue;
      // The same threads, each touching one element that no other thread
      // touches, the same in both: thread t runs the earlier member's
      // iteration, then the later op's, on that element alone.
      if (other.threadShape != own.threadShape ||
          (stride && *stride != member.threadStride) ||
          (ownStride != 1 && ownStride != member.threadStride))
        return std::nullopt;
      stride = member.threadStride;
      auto mine = own.elements.find(buffer);
      auto theirs = other.elements.find(buffer);
      if (mine == own.elements.end() || theirs == other.elements.end() ||
          !mine->second || mine->second != theirs->second)
        return std::nullopt;
    }
  }
  return stride.value_or(ownStride);
}

std::optional<SmallVector<size_t>>
GpuProgramBuilder::foldsPartialsOf(const GpuStepOp &later,
                                   const GpuStepOp &earlier) const {
  const Touches &own = kernelTouches.find(later.entry)->second;
  int64_t parts = own.foldParts;
  if (parts < 2 || !own.threadShape)
    return std::nullopt;
  // Thread t of the partials' generic computes partial t: its threads are
  // the outputs' then the part, and it writes [output..., part] densely.
  SmallVector<int64_t> partialThreads(*own.threadShape);
  partialThreads.push_back(parts);
  SmallVector<int64_t> dense(1 + partialThreads.size(), 0);
  int64_t stride = 1;
  for (size_t dim = partialThreads.size(); dim-- > 0;) {
    dense[1 + dim] = partialThreads[dim] > 1 ? stride : 0;
    stride *= partialThreads[dim];
  }
  bool computed = false;
  SmallVector<size_t> moved;
  for (auto [index, member] : llvm::enumerate(earlier.members)) {
    const Touches &other = kernelTouches.find(member.function)->second;
    bool conflicts = false;
    for (int64_t buffer : later.buffers) {
      if (!conflictsOn(own, other, buffer))
        continue;
      conflicts = true;
      if (member.threadStride != 1 || !other.threadShape)
        return std::nullopt;
      auto element = other.elements.find(buffer);
      if (element == other.elements.end() || !element->second)
        return std::nullopt;
      if (buffer != own.partialsBuffer) {
        // Thread-local to the fold (the output's fill).
        auto mine = own.elements.find(buffer);
        if (*other.threadShape != *own.threadShape ||
            mine == own.elements.end() || mine->second != element->second)
          return std::nullopt;
        continue;
      }
      SmallVector<int64_t> written(*element->second);
      for (auto [position, extent] : llvm::enumerate(partialThreads))
        if (extent == 1)
          written[1 + position] = 0;
      if (*other.threadShape != partialThreads || written != dense)
        return std::nullopt;
      computed = true;
    }
    if (conflicts && !other.writes.contains(own.partialsBuffer))
      moved.push_back(index);
  }
  // What moves must not conflict with anything else of the launch.
  for (size_t index : moved) {
    const Touches &mover =
        kernelTouches.find(earlier.members[index].function)->second;
    for (auto [other, member] : llvm::enumerate(earlier.members))
      if (other != index &&
          conflict(mover, kernelTouches.find(member.function)->second))
        return std::nullopt;
  }
  if (!computed)
    return std::nullopt;
  return moved;
}

/// First fit: each temporary takes the lowest offset that no temporary
/// alive at the same time occupies.
void GpuProgramBuilder::packArena() {
  // Placed temporaries by lifetime index: [offset, end) in the arena.
  std::map<size_t, std::pair<int64_t, int64_t>> placed;
  // In the order lifetimes start (grouped kernels move some starts up).
  SmallVector<size_t> order =
      llvm::to_vector(llvm::seq<size_t>(0, lifetimes.size()));
  llvm::stable_sort(order, [&](size_t a, size_t b) {
    return lifetimes[a].begin < lifetimes[b].begin;
  });
  for (size_t index : order) {
    const Lifetime &lifetime = lifetimes[index];
    // Free every temporary released before this one is allocated.
    for (auto it = placed.begin(); it != placed.end();) {
      if (lifetimes[it->first].end < lifetime.begin)
        it = placed.erase(it);
      else
        ++it;
    }
    SmallVector<std::pair<int64_t, int64_t>> ranges;
    for (auto &entry : placed)
      ranges.push_back(entry.second);
    llvm::sort(ranges);
    int64_t bytes =
        alignTo(program.buffers[lifetime.buffer].bytes, kBufferAlignment);
    int64_t offset = 0;
    for (auto [begin, end] : ranges) {
      if (begin - offset >= bytes)
        break;
      offset = std::max(offset, end);
    }
    placed[index] = {offset, offset + bytes};
    program.buffers[lifetime.buffer].offset = offset;
    program.arenaBytes = std::max(program.arenaBytes, offset + bytes);
  }
}

/// A step tensor of `type` as the step programs declare it.
static GpuStepTensor makeStepTensor(Type type, StringRef name,
                                    GpuStepTensor::Role role) {
  auto tensor = cast<RankedTensorType>(type);
  GpuStepTensor result;
  result.name = name.str();
  result.role = role;
  result.dtype = getDType(tensor.getElementType());
  result.shape.assign(tensor.getShape().begin(), tensor.getShape().end());
  result.bytes = std::max<int64_t>(
      1, tensor.getNumElements() * getStorageBytes(tensor.getElementType()));
  return result;
}

GpuStepTensor mlir::mantissa::getStepArgumentTensor(train::StepOp step,
                                                    unsigned index) {
  using Role = GpuStepTensor::Role;
  train::TensorInfoAttr info = step.getTensorInfo(index);
  Role role = Role::Parameter;
  switch (info.getKind()) {
  case train::TensorKind::parameter:
    role = Role::Parameter;
    break;
  // Constants (lifted tensors, non-persistent buffers) are read-only model
  // state, as buffers without mutations.
  case train::TensorKind::buffer:
  case train::TensorKind::constant:
    role = Role::Buffer;
    break;
  case train::TensorKind::user_input:
    role = Role::UserInput;
    break;
  }
  return makeStepTensor(step.getArgumentTypes()[index], info.getFqn(), role);
}

GpuStepTensor mlir::mantissa::getStepResultTensor(train::StepOp step,
                                                  unsigned index) {
  using Role = GpuStepTensor::Role;
  train::ResultInfoAttr info = step.getResultInfo(index);
  Role role = Role::Loss;
  switch (info.getKind()) {
  case train::ResultKind::loss:
    role = Role::Loss;
    break;
  case train::ResultKind::gradient:
    role = Role::Gradient;
    break;
  case train::ResultKind::buffer_mutation:
    role = Role::BufferMutation;
    break;
  case train::ResultKind::user_output:
    role = Role::UserOutput;
    break;
  }
  return makeStepTensor(step.getResultTypes()[index],
                        info.getFqn() ? info.getFqn().getValue() : "", role);
}

LogicalResult GpuProgramBuilder::build() {
  program.stepName = step.getSymName().str();
  program.blockSize = kBlockSize;
  program.arguments = arguments;
  for (unsigned index = 0, e = step.getNumResults(); index < e; ++index)
    program.results.push_back(getStepResultTensor(step, index));
  for (Operation &op : function.getBody().front())
    if (failed(visit(&op)))
      return failure();
  groupIndependentKernels();
  packArena();
  return success();
}

namespace {

/// The conversion kernels of docs/gpu-step.md: element `index` of `count`
/// from `source` to `target` (three 64-bit integers: addresses and the
/// count).
void buildConversion(OpBuilder &builder, Location loc, Type from, Type to,
                     Value source, Value target, Value index) {
  MLIRContext *context = builder.getContext();
  auto pointer = LLVM::LLVMPointerType::get(context);
  Value offset =
      builder.create<arith::IndexCastOp>(loc, builder.getI64Type(), index);
  auto element = [&](Value address, Type type) {
    Value base = builder.create<LLVM::IntToPtrOp>(loc, pointer, address);
    return builder.create<LLVM::GEPOp>(loc, pointer, type, base,
                                       ValueRange{offset});
  };
  Value value = builder.create<LLVM::LoadOp>(loc, from, element(source, from));
  Type f32 = builder.getF32Type();
  // Through fp32, which holds every bf16 and fp16 value exactly.
  if (from != f32)
    value = builder.create<arith::ExtFOp>(loc, f32, value);
  if (to != f32)
    value = builder.create<arith::TruncFOp>(loc, to, value);
  builder.create<LLVM::StoreOp>(loc, value, element(target, to));
}

std::string getConversionName(Type from, Type to) {
  auto name = [](Type type) {
    return type.isF32() ? "f32" : type.isBF16() ? "bf16" : "f16";
  };
  return llvm::formatv("mantissa_convert_{0}_to_{1}", name(from), name(to))
      .str();
}

void addConversionKernels(gpu::GPUModuleOp gpuModule) {
  MLIRContext *context = gpuModule.getContext();
  Location loc = gpuModule.getLoc();
  Type i64 = IntegerType::get(context, 64);
  auto type = FunctionType::get(context, {i64, i64, i64}, {});
  SmallVector<Type> dtypes = {Float32Type::get(context),
                              BFloat16Type::get(context),
                              Float16Type::get(context)};
  for (Type from : dtypes) {
    for (Type to : dtypes) {
      if (from == to)
        continue;
      std::string name = getConversionName(from, to);
      OpBuilder builder = getModuleEndBuilder(gpuModule);
      auto kernel = builder.create<gpu::GPUFuncOp>(loc, name, type);
      kernel->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                      builder.getUnitAttr());
      Block &entry = kernel.getBody().front();
      builder.setInsertionPointToStart(&entry);
      Value index = buildThreadIndex(builder, loc);
      Value count = builder.create<arith::IndexCastOp>(
          loc, builder.getIndexType(), entry.getArgument(2));
      auto guard = builder.create<scf::IfOp>(
          loc,
          builder.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, index,
                                        count),
          false);
      builder.create<gpu::ReturnOp>(loc);
      builder.setInsertionPoint(guard.thenBlock()->getTerminator());
      buildConversion(builder, loc, from, to, entry.getArgument(0),
                      entry.getArgument(1), index);
    }
  }
}

/// libdevice.10.bc: $MANTISSA_LIBDEVICE, else the one CMake found in the
/// CUDA toolkit; empty when neither exists.
std::string getLibdevicePath() {
  if (const char *path = std::getenv("MANTISSA_LIBDEVICE"); path && *path)
    return path;
#ifdef MANTISSA_LIBDEVICE
  if (llvm::sys::fs::exists(MANTISSA_LIBDEVICE))
    return MANTISSA_LIBDEVICE;
#endif
  return "";
}

/// `pow(x, 2)` as `x * x`: one correctly rounded product, as pow itself
/// rounds the square (RMSNorm's x.pow(2)), instead of a libdevice call
/// inside the reduction loop.
void squareConstantPowers(gpu::GPUModuleOp gpuModule) {
  SmallVector<math::PowFOp> powers;
  gpuModule.walk([&](math::PowFOp power) {
    FloatAttr exponent;
    if (matchPattern(power.getRhs(), m_Constant(&exponent)) &&
        exponent.getValueAsDouble() == 2.0)
      powers.push_back(power);
  });
  for (math::PowFOp power : powers) {
    OpBuilder builder(power);
    Value square = builder.create<arith::MulFOp>(power.getLoc(), power.getLhs(),
                                                 power.getLhs());
    power.replaceAllUsesWith(square);
    power.erase();
  }
}

/// sqrt and fabs as LLVM intrinsics (sqrt.rn.f32, abs.f32), as the AdamW
/// kernels do: libdevice's __nv_sqrtf is approximate unless a reflection
/// flag says otherwise.
void useIntrinsicsForExactMath(gpu::GPUModuleOp gpuModule) {
  SmallVector<Operation *> ops;
  gpuModule.walk([&](Operation *op) {
    if (isa<math::SqrtOp, math::AbsFOp>(op) &&
        op->getResult(0).getType().isF32())
      ops.push_back(op);
  });
  for (Operation *op : ops) {
    OpBuilder builder(op);
    // As calls: the NVVM conversion marks the intrinsic ops illegal.
    StringRef name = isa<math::SqrtOp>(op) ? "llvm.sqrt.f32" : "llvm.fabs.f32";
    Value result = builder
                       .create<LLVM::CallIntrinsicOp>(
                           op->getLoc(), op->getResult(0).getType(),
                           builder.getStringAttr(name), op->getOperands())
                       .getResult(0);
    op->getResult(0).replaceAllUsesWith(result);
    op->erase();
  }
}

} // namespace

FailureOr<std::string>
mlir::mantissa::compileGpuModuleToPtx(ModuleOp container,
                                      gpu::GPUModuleOp gpuModule) {
  std::string ptx;
  // Transcendental functions (exp, log, pow, tanh, erf, ...) are
  // libdevice's, as CUDA's own math library computes them for torch.
  std::string libdevice = getLibdevicePath();
  if (failed(runPassPipeline(
          container,
          "builtin.module(expand-strided-metadata,lower-affine,"
          "arith-emulate-unsupported-floats{source-types=bf16 "
          "target-type=f32},convert-scf-to-cf,"
          "nvvm-attach-target{chip=sm_90 features=+ptx80 O=3" +
              (libdevice.empty() ? std::string() : " l=" + libdevice) + "})")))
    return failure();
  useIntrinsicsForExactMath(gpuModule);
  if (failed(runPassPipeline(
          container, "builtin.module(gpu.module(convert-gpu-to-nvvm{"
                     "use-bare-ptr-memref-call-conv=1},canonicalize,cse,"
                     "reconcile-unrealized-casts),"
                     "gpu-module-to-binary{format=isa})")))
    return failure();
  container->walk([&](gpu::BinaryOp binary) {
    for (Attribute object : binary.getObjects())
      if (auto objectAttr = dyn_cast<gpu::ObjectAttr>(object))
        ptx += objectAttr.getObject().getValue().str();
  });
  // The object is a C string; ptxas rejects the NUL.
  while (!ptx.empty() && ptx.back() == '\0')
    ptx.pop_back();
  if (ptx.empty())
    return gpuModule.emitOpError() << "the GPU pipeline produced no PTX";
  size_t unresolved = ptx.find(".extern .func");
  if (unresolved != std::string::npos)
    return gpuModule.emitOpError()
           << "the PTX calls functions it does not define ("
           << StringRef(ptx).substr(unresolved).split('\n').first
           << "): libdevice was "
           << (libdevice.empty() ? "not found"
                                 : "not linked (" + libdevice + ")")
           << "; set MANTISSA_LIBDEVICE to libdevice.10.bc";

  return ptx;
}

FailureOr<GpuStepProgram>
mlir::mantissa::compileTrainStepForGpu(train::StepOp step,
                                       bool withHostKernels) {
  MLIRContext *context = step.getContext();
  DialectRegistry registry;
  registerTrainToGPUDialects(registry);
  context->appendDialectRegistry(registry);
  context->loadDialect<gpu::GPUDialect, NVVM::NVVMDialect, LLVM::LLVMDialect,
                       scf::SCFDialect, memref::MemRefDialect,
                       vector::VectorDialect, math::MathDialect>();

  OwningOpRef<ModuleOp> module = ModuleOp::create(step.getLoc());
  auto gpuStep = cast<train::StepOp>(step->clone());
  module->push_back(gpuStep);
  // Parameters in their gather dtype, read without widening
  // (docs/gpu-step.md).
  if (failed(runPassPipeline(*module,
                             "builtin.module(mantissa-read-gathered-parameters,"
                             "mantissa-add-into-slices,"
                             "mantissa-fuse-attention)")))
    return failure();
  std::vector<GpuStepTensor> arguments;
  for (unsigned index = 0, e = gpuStep.getNumArguments(); index < e; ++index)
    arguments.push_back(getStepArgumentTensor(gpuStep, index));
  // Temporaries recomputed in their readers where that moves fewer bytes,
  // what that leaves with one reader fused as usual, then products that
  // every reader rounds rounded once, in the GEMM (docs/gpu-step.md).
  if (failed(bufferizeTrainSteps(
          *module, "func.func(mantissa-recompute-widening-producers),"
                   "linalg-fuse-elementwise-ops,"
                   "func.func(mantissa-round-products-once)")))
    return failure();
  auto function = module->lookupSymbol<func::FuncOp>(step.getSymName());
  if (!function)
    return step.emitOpError() << "did not lower to a function";

  // Fewer, fuller kernels, and long reductions in two steps
  // (docs/gpu-step.md).
  if (failed(runPassPipeline(
          *module,
          "builtin.module(func.func(mantissa-materialize-operand-casts,"
          "mantissa-fold-transposes-into-views,"
          "mantissa-segment-scatter-accumulations,"
          "mantissa-fold-copies-into-producers,mantissa-share-roundings,"
          "mantissa-split-reductions,mantissa-fuse-parallel-kernels))")))
    return failure();
  GpuStepProgram program;
  GpuProgramBuilder builder(function, step, std::move(arguments), program);
  if (failed(builder.build()))
    return failure();
  OwningOpRef<ModuleOp> kernels = builder.takeKernels();
  if (failed(runPassPipeline(
          *kernels, "builtin.module(func.func(convert-linalg-to-loops))")))
    return failure();

  // The GPU module: one gpu.func per kernel function, then the conversions.
  OwningOpRef<ModuleOp> gpuContainer = ModuleOp::create(step.getLoc());
  (*gpuContainer)
      ->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                UnitAttr::get(context));
  OpBuilder containerBuilder = OpBuilder::atBlockEnd(gpuContainer->getBody());
  auto gpuModule = containerBuilder.create<gpu::GPUModuleOp>(
      step.getLoc(), (step.getSymName() + "_kernels").str());
  const llvm::StringMap<GpuProgramBuilder::Attention> &attention =
      builder.getAttentionKernels();
  // Attention kernels of the same shapes and layouts (every layer's) are
  // one gpu.func, launched on each layer's buffers.
  std::map<std::string, std::pair<std::string, AttentionLaunch>> built;
  for (GpuStepOp &op : program.ops) {
    if (op.kind != GpuStepOp::Kind::Kernel)
      continue;
    auto fused = attention.find(op.entry);
    if (fused == attention.end()) {
      if (failed(buildGpuKernel(op, *kernels, gpuModule)))
        return failure();
      continue;
    }
    std::string key =
        describeAttentionKernel(fused->second.kind, fused->second.spec);
    auto [found, added] = built.try_emplace(key, op.entry, AttentionLaunch());
    if (added)
      found->second.second =
          buildAttentionKernel(gpuModule, op.entry, fused->second.kind,
                               fused->second.spec, program.blockSize);
    op.entry = found->second.first;
    const AttentionLaunch &launch = found->second.second;
    op.grid = launch.grid;
    op.threads = launch.warps * 32;
    op.serialIterations =
        std::max<int64_t>(1, int64_t(std::lround(launch.stepsPerWarp)));
    op.opsPerIteration = std::max<int64_t>(1, launch.opsPerStep);
    op.tensorFlops = launch.tensorFlops();
  }
  addConversionKernels(gpuModule);
  squareConstantPowers(gpuModule);
  if (withHostKernels) {
    program.hostKernels = ModuleOp::create(step.getLoc());
    if (failed(emulateGpuKernels(gpuModule, *program.hostKernels)))
      return failure();
  }

  FailureOr<std::string> ptx = compileGpuModuleToPtx(*gpuContainer, gpuModule);
  if (failed(ptx))
    return failure();
  program.ptx = std::move(*ptx);
  return program;
}
