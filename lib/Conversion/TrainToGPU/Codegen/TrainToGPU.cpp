//===- TrainToGPU.cpp - A train.step as a GPU program ---------------------===//
//
// The code generator, the last stage of the GPU pipeline. The step goes
// through the train-level rewrites (lib/Transforms/GPU), is bufferized
// exactly as for the CPU (bufferizeTrainSteps) with the tensor- and
// buffer-level passes (lib/Conversion/TrainToGPU/Buffers; the last two
// decide which kernels share a launch and where each temporary lives in the
// arena), in the order buildTrainGpuPipeline below defines, then is read as
// a straight-line program over buffers, each op as GpuStepOps.h says:
//
// - Views (subview, expand/collapse_shape, ...) cost nothing: an op's operand
//   is its base buffer plus the view's static offset and strides, which the
//   kernel rebuilds with memref.reinterpret_cast.
// - Matrix products cuBLAS can express become strided-batched GEMMs, with
//   the zero fill before them (beta = 0) and the rounding after them
//   (cuBLASLt's epilogue) absorbed.
// - Every other linalg op, and the scatter loops of embedding backward,
//   becomes one kernel function: its parallel loops are spread over the
//   threads (one output element each) and its reduction loops run in order
//   within each thread; the kernels of one launch (mantissa-group-launches'
//   marks) become that launch's members.
// - train.attention_kernel becomes the fused attention's kernels.
//
// The kernels are lowered through NVVM to PTX for sm_90 (libdevice for the
// transcendental functions, IEEE sqrt and division); a caller may read the
// finished gpu.module first (GpuKernelsObserver: the tests' host emulation,
// lib/Conversion/TrainToGPU/HostEmulation, which this library does not
// link).
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU.h"
#include "GpuAttentionKernels.h"
#include "GpuKernels.h"
#include "GpuVectorAccesses.h"
#include "mantissa/Conversion/StepSignature.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/GemmMatching.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/GpuStepOps.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h"

#include "mantissa/Conversion/TrainToLLVM.h"
#include "mantissa/Transforms/GPU/Passes.h"
#include "mantissa/Transforms/Passes.h"
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
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
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
  registry.insert<gpu::GPUDialect, NVVM::NVVMDialect, nvgpu::NVGPUDialect>();
  registerGPUDialectTranslation(registry);
  registerNVVMDialectTranslation(registry);
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
}

namespace {

class GpuProgramBuilder {
public:
  /// `arguments`: the step's, as the program takes them.
  GpuProgramBuilder(func::FuncOp function, train::StepOp step,
                    std::vector<StepTensor> arguments, GpuStepProgram &program)
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
  LogicalResult visit(Operation *op, const GpuStepOpRole &role);
  int64_t getBufferId(Value base);
  LogicalResult addConstant(memref::GetGlobalOp getGlobal);
  LogicalResult addKernel(Operation *op);
  LogicalResult addAttention(train::AttentionKernelOp op);
  /// Appends a kernel op of one member, or adds that member to its launch
  /// (the launch marks of mantissa-group-launches on `op`).
  void addToLaunch(Operation *op, GpuStepOp kernelOp);
  /// A name for the next op of the program.
  std::string getNextName(StringRef kind) {
    return llvm::formatv("{0}_{1}{2}", step.getSymName(), kind, namedOps++)
        .str();
  }

  func::FuncOp function;
  train::StepOp step;
  std::vector<StepTensor> arguments;
  GpuStepProgram &program;
  OwningOpRef<ModuleOp> kernels;
  llvm::DenseMap<Value, int64_t> bufferIds;
  int64_t namedOps = 0;
  /// Whether a temporary the program touches had no place in the arena.
  bool unplaced = false;
  /// Each launch's kernel op, by its mark, and each member's place in it.
  llvm::DenseMap<int64_t, size_t> launches;
  llvm::StringMap<int64_t> memberPlaces;
  llvm::StringMap<Attention> attentionKernels;
};

} // namespace

int64_t GpuProgramBuilder::getBufferId(Value base) {
  auto found = bufferIds.find(base);
  if (found != bufferIds.end())
    return found->second;
  GpuStepBuffer buffer;
  buffer.bytes = getGpuBufferBytes(cast<MemRefType>(base.getType()));
  int64_t id = program.buffers.size();
  bufferIds[base] = id;
  // A temporary, at the offset mantissa-pack-arena gave it, or an argument.
  if (auto alloc = base.getDefiningOp<memref::AllocOp>()) {
    buffer.kind = GpuStepBuffer::Kind::Temporary;
    if (auto offset = alloc->getAttrOfType<IntegerAttr>(kGpuArenaOffsetAttr)) {
      buffer.offset = offset.getInt();
    } else {
      alloc.emitOpError()
          << "has no place in the arena (mantissa-pack-arena did not run)";
      unplaced = true;
    }
    program.buffers.push_back(buffer);
    return id;
  }
  // Constants are registered where they are read from their globals.
  auto argument = cast<BlockArgument>(base);
  int64_t numArguments = step.getNumArguments();
  int64_t index = argument.getArgNumber();
  buffer.kind = index < numArguments ? GpuStepBuffer::Kind::Argument
                                     : GpuStepBuffer::Kind::Result;
  buffer.index = index < numArguments ? index : index - numArguments;
  program.buffers.push_back(buffer);
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
  buffer.offset = llvm::alignTo(program.constants.size(), kGpuBufferAlignment);
  buffer.bytes = getGpuBufferBytes(type);
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
  std::string name = getNextName("k");
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
  std::optional<int64_t> parts = getTreeFoldParts(op);
  if (parts)
    kernel->setAttr(kGpuFoldPartsAttr, builder.getI64IntegerAttr(*parts));
  for (Value base : bases)
    kernelOp.buffers.push_back(getBufferId(base));
  GpuStepOp::Member member;
  member.function = name;
  member.source = kernelOp.source;
  member.threadStride = std::max<int64_t>(1, parts.value_or(1));
  auto all = llvm::seq<unsigned>(0, kernelOp.buffers.size());
  member.buffers.assign(all.begin(), all.end());
  kernelOp.members.push_back(std::move(member));

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
  addToLaunch(op, std::move(kernelOp));
  return success();
}

void GpuProgramBuilder::addToLaunch(Operation *op, GpuStepOp kernelOp) {
  std::optional<GpuLaunchMark> mark = getGpuLaunchMark(op);
  if (!mark) {
    program.ops.push_back(std::move(kernelOp));
    return;
  }
  GpuStepOp::Member member = std::move(kernelOp.members.front());
  member.threadStride = mark->threadStride;
  member.rowColumns = mark->rowColumns;
  memberPlaces[member.function] = mark->member;
  auto [found, added] = launches.try_emplace(mark->launch, program.ops.size());
  if (added) {
    kernelOp.members.front() = std::move(member);
    program.ops.push_back(std::move(kernelOp));
    return;
  }
  // The member's buffers as positions in the launch's.
  GpuStepOp &launch = program.ops[found->second];
  member.buffers.clear();
  for (int64_t buffer : kernelOp.buffers) {
    auto position = llvm::find(launch.buffers, buffer);
    member.buffers.push_back(std::distance(launch.buffers.begin(), position));
    if (position == launch.buffers.end())
      launch.buffers.push_back(buffer);
  }
  launch.members.push_back(std::move(member));
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
  spec.roundedGradient = op.getRoundedGradient();
  spec.fp32Scores = op.getFp32Scores();
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
    // [B, H, S, D]; the mask [S, S] for every batch and head, or
    // [B or 1, H or 1, S or 1, S]; lse and delta [B, H, S].
    switch (strides.size()) {
    case 4:
      operand.strides = {strides[0], strides[1], strides[2], strides[3]};
      // A dimension of 1 broadcasts (a key padding mask [B, 1, 1, S]).
      for (int64_t dim = 0; dim < 4; ++dim)
        if (type.getDimSize(dim) == 1)
          operand.strides[dim] = 0;
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
  // No mask operand where the op is unmasked: spec.mask stays without an
  // element type, which the kernels take for every key visible.
  SmallVector<AttentionOperand *> inputs = {&spec.q, &spec.k, &spec.v};
  if (op.getMask())
    inputs.push_back(&spec.mask);
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
    kernelOp.entry = getNextName("attention");
    kernelOp.source = describeOp(op);
    for (const AttentionArgument &argument :
         getAttentionKernelArguments(kind, spec))
      kernelOp.buffers.push_back(buffers.lookup(argument.operand));
    attentionKernels[kernelOp.entry] = {kind, spec};
    program.ops.push_back(std::move(kernelOp));
  }
  return success();
}

LogicalResult GpuProgramBuilder::visit(Operation *op,
                                       const GpuStepOpRole &role) {
  using Kind = GpuStepOpRole::Kind;
  switch (role.kind) {
  case Kind::Free:
    if (auto getGlobal = dyn_cast<memref::GetGlobalOp>(op))
      return addConstant(getGlobal);
    return success();
  case Kind::InGemm:
    return success();
  case Kind::Gemm: {
    std::optional<GpuStepOp> gemm =
        buildGpuGemm(cast<linalg::LinalgOp>(op), role,
                     [&](Value base) { return getBufferId(base); });
    if (!gemm)
      return op->emitOpError() << "matched a GEMM that cannot be built";
    if (role.epilogue)
      ++program.fusedEpilogues;
    ++namedOps;
    program.ops.push_back(std::move(*gemm));
    return success();
  }
  case Kind::Attention:
    return addAttention(cast<train::AttentionKernelOp>(op));
  case Kind::Kernel:
    return addKernel(op);
  }
  llvm_unreachable("unknown role");
}

LogicalResult GpuProgramBuilder::build() {
  program.stepName = step.getSymName().str();
  program.blockSize = kBlockSize;
  program.arguments = arguments;
  for (unsigned index = 0, e = step.getNumResults(); index < e; ++index)
    program.results.push_back(getStepResultTensor(step, index));
  Block &body = function.getBody().front();
  FailureOr<llvm::DenseMap<Operation *, GpuStepOpRole>> roles =
      getGpuStepOpRoles(body);
  if (failed(roles))
    return failure();
  for (Operation &op : body)
    if (failed(visit(&op, roles->find(&op)->second)))
      return failure();
  if (unplaced)
    return failure();
  // Each launch's members in their places.
  for (GpuStepOp &op : program.ops) {
    if (op.members.size() < 2)
      continue;
    llvm::sort(op.members, [&](const GpuStepOp::Member &a,
                               const GpuStepOp::Member &b) {
      return memberPlaces.lookup(a.function) < memberPlaces.lookup(b.function);
    });
    op.source = op.members.front().source;
    for (const GpuStepOp::Member &member : llvm::drop_begin(op.members))
      op.source += " + " + member.source;
  }
  if (auto bytes = function->getAttrOfType<IntegerAttr>(kGpuArenaBytesAttr))
    program.arenaBytes = bytes.getInt();
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

void mlir::mantissa::registerTrainToGPUPasses() {
  static std::once_flag registered;
  std::call_once(registered, [] {
    registerTrainCpuPipelinePasses();
    registerReadGatheredParametersPass();
    registerTransformsGPUPasses();
    registerTrainToGPUBuffersPasses();
    PassPipelineRegistration<>(
        "mantissa-train-gpu-pipeline",
        "The GPU step's passes up to the program writer: train-level "
        "rewrites, bufferization, and the buffer-level passes that shape "
        "its kernels",
        buildTrainGpuPipeline);
  });
}

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
          container, "builtin.module(gpu.module(convert-nvgpu-to-nvvm,"
                     "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},"
                     "canonicalize,cse,reconcile-unrealized-casts))")))
    return failure();
  alignVectorAccesses(gpuModule);
  if (failed(runPassPipeline(
          container, "builtin.module(gpu-module-to-binary{format=isa})")))
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

/// The train-level rewrites: parameters in their gather dtype, read
/// without widening, then the rewrites that fuse attention and keep
/// temporaries from being written (docs/gpu-step.md).
constexpr llvm::StringLiteral kTrainRewrites =
    "mantissa-read-gathered-parameters,"
    "mantissa-add-into-slices,"
    "mantissa-scatters-as-comparisons,"
    "mantissa-fuse-attention,"
    "mantissa-elementwise-through-concats,"
    "mantissa-log-softmax-as-differences";

/// Before bufferization, on tensors: temporaries recomputed in their
/// readers where that moves fewer bytes, what that leaves with one reader
/// fused as usual, then products that every reader rounds rounded once, in
/// the GEMM (docs/gpu-step.md).
constexpr llvm::StringLiteral kTensorPasses =
    "func.func(mantissa-recompute-widening-producers),"
    "linalg-fuse-elementwise-ops,"
    "func.func(mantissa-round-products-once)";

/// On buffers: fewer, fuller kernels, and long reductions in two steps
/// (docs/gpu-step.md).
constexpr llvm::StringLiteral kBufferPasses =
    "func.func(mantissa-materialize-operand-casts,"
    "mantissa-reuse-written-roundings,"
    "mantissa-fold-transposes-into-views,"
    "mantissa-segment-scatter-accumulations,"
    "mantissa-fold-copies-into-producers,mantissa-share-roundings,"
    "mantissa-split-reductions,mantissa-fuse-producers-into-partials,"
    "mantissa-fuse-parallel-kernels,"
    "mantissa-drop-unread-outputs,"
    "mantissa-group-launches,mantissa-pack-arena)";

/// Adds the passes of pipeline text `text` to `pm`; the texts above are
/// fixed, so a failure is a bug of this file.
static void addPipelineText(OpPassManager &pm, const std::string &text) {
  if (failed(parsePassPipeline(text, pm)))
    llvm::report_fatal_error(
        llvm::Twine("the GPU step's pass pipeline is malformed: ") + text);
}

void mlir::mantissa::buildTrainGpuRewritePipeline(OpPassManager &pm) {
  registerTrainToGPUPasses();
  addPipelineText(pm, kTrainRewrites.str());
}

void mlir::mantissa::buildTrainGpuBufferPipeline(OpPassManager &pm) {
  registerTrainToGPUPasses();
  addPipelineText(pm, bufferizationPipelineText(kTensorPasses) + "," +
                          kBufferPasses.str());
}

void mlir::mantissa::buildTrainGpuPipeline(OpPassManager &pm) {
  buildTrainGpuRewritePipeline(pm);
  buildTrainGpuBufferPipeline(pm);
}

/// Runs the passes `build` adds on `module`.
static LogicalResult
runTrainGpuPipeline(ModuleOp module,
                    llvm::function_ref<void(OpPassManager &)> build) {
  PassManager pm(module.getContext());
  build(pm);
  return pm.run(module);
}

FailureOr<GpuStepProgram>
mlir::mantissa::compileTrainStepForGpu(train::StepOp step,
                                       GpuKernelsObserver observeKernels) {
  MLIRContext *context = step.getContext();
  DialectRegistry registry;
  registerTrainToGPUDialects(registry);
  context->appendDialectRegistry(registry);
  context->loadDialect<gpu::GPUDialect, NVVM::NVVMDialect, LLVM::LLVMDialect,
                       scf::SCFDialect, memref::MemRefDialect,
                       vector::VectorDialect, math::MathDialect,
                       nvgpu::NVGPUDialect>();

  registerTrainToGPUPasses();
  OwningOpRef<ModuleOp> module = ModuleOp::create(step.getLoc());
  auto gpuStep = cast<train::StepOp>(step->clone());
  module->push_back(gpuStep);
  if (failed(runTrainGpuPipeline(*module, buildTrainGpuRewritePipeline)))
    return failure();
  // The signature the program records: the rewrites' (parameters in their
  // gather dtype), before bufferization turns the step into a function.
  std::vector<StepTensor> arguments;
  for (unsigned index = 0, e = gpuStep.getNumArguments(); index < e; ++index)
    arguments.push_back(getStepArgumentTensor(gpuStep, index));
  if (failed(runTrainGpuPipeline(*module, buildTrainGpuBufferPipeline)))
    return failure();
  auto function = module->lookupSymbol<func::FuncOp>(step.getSymName());
  if (!function)
    return step.emitOpError() << "did not lower to a function";
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
  if (observeKernels && failed(observeKernels(gpuModule)))
    return failure();

  FailureOr<std::string> ptx = compileGpuModuleToPtx(*gpuContainer, gpuModule);
  if (failed(ptx))
    return failure();
  program.ptx = std::move(*ptx);
  return program;
}
