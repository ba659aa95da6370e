//===- CallGemmLibrary.cpp - Matrix products as calls of the runtime's GEMM
//===//
//
// mantissa-call-gemm-library (linalg contractions on buffers become calls of
// @mantissa_cpu_gemm with a constant descriptor) and
// mantissa-route-gemm-calls-through-hook (on the LLVM dialect, those calls
// go through the exported pointer the loader sets). The descriptor's layout
// is the runtime's (mantissa/Runtime/CpuGemm.h).
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToLinalg/Passes.h"
#include "mantissa/Format/CpuGemmAbi.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <array>
#include <map>

using namespace mlir;

namespace mlir::mantissa {
#define GEN_PASS_DEF_CALLGEMMLIBRARYPASS
#define GEN_PASS_DEF_ROUTEGEMMCALLSTHROUGHHOOKPASS
#include "mantissa/Conversion/TrainToLinalg/Passes.h.inc"
} // namespace mlir::mantissa

namespace {

constexpr llvm::StringLiteral kGemmFunction = "mantissa_cpu_gemm";

using Descriptor = std::array<int64_t, kGemmFieldCount>;

/// The descriptor's element type code, if the library takes `type`.
std::optional<int64_t> gemmType(Type type) {
  if (type.isF32())
    return kGemmF32;
  if (type.isBF16())
    return kGemmBF16;
  return std::nullopt;
}

/// `value`, seen through an arith.extf to f32 (how the named ops and the
/// lowering widen bf16 operands) and an arith.truncf to bf16 before it (a
/// cast to bf16 that elementwise fusion moved into the product).
Value skipConversions(Value value, int &ops) {
  if (auto extension = value.getDefiningOp<arith::ExtFOp>()) {
    value = extension.getIn();
    ++ops;
    if (auto rounding = value.getDefiningOp<arith::TruncFOp>();
        rounding && rounding.getType().isBF16() &&
        rounding.getIn().getType().isF32()) {
      value = rounding.getIn();
      ++ops;
    }
  }
  return value;
}

/// Whether the body of `op` is `yield out + ext(in0) * ext(in1)` in f32.
bool isMultiplyAccumulateBody(linalg::LinalgOp op) {
  Block *body = op.getBlock();
  if (body->getNumArguments() != 3)
    return false;
  auto yield = cast<linalg::YieldOp>(body->getTerminator());
  if (yield.getNumOperands() != 1)
    return false;
  auto add = yield.getOperand(0).getDefiningOp<arith::AddFOp>();
  if (!add || !add.getType().isF32())
    return false;
  Value out = body->getArgument(2);
  Value product = add.getLhs() == out   ? add.getRhs()
                  : add.getRhs() == out ? add.getLhs()
                                        : Value();
  auto multiply = product ? product.getDefiningOp<arith::MulFOp>() : nullptr;
  if (!multiply)
    return false;
  int conversions = 0;
  Value lhs = skipConversions(multiply.getLhs(), conversions);
  Value rhs = skipConversions(multiply.getRhs(), conversions);
  Value in0 = body->getArgument(0), in1 = body->getArgument(1);
  if (!((lhs == in0 && rhs == in1) || (lhs == in1 && rhs == in0)))
    return false;
  // Nothing else in the body (index ops, other uses of the arguments).
  return body->getOperations().size() == size_t(3 + conversions);
}

/// The rounding to bf16 of input `index` of a multiply-accumulate body, if
/// it has one: the input is f32 in memory and the product reads it rounded.
arith::TruncFOp roundingOf(linalg::LinalgOp op, unsigned index) {
  BlockArgument argument = op.getBlock()->getArgument(index);
  if (!argument.hasOneUse())
    return nullptr;
  return dyn_cast<arith::TruncFOp>(*argument.getUsers().begin());
}

/// One operand's static strides per loop dimension (0 for loops it does not
/// index), its offset, or nothing for dynamic layouts and non-permutations.
struct OperandLayout {
  SmallVector<int64_t> loopStrides;
  int64_t offset = 0;
};

/// With `dense`, as the operand's row-major bf16 copy will be laid out.
std::optional<OperandLayout> layoutOf(linalg::LinalgOp op, OpOperand &operand,
                                      bool dense = false) {
  auto type = dyn_cast<MemRefType>(operand.get().getType());
  if (!type || !type.hasStaticShape())
    return std::nullopt;
  if (dense)
    type = MemRefType::get(type.getShape(), type.getElementType());
  SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(getStridesAndOffset(type, strides, offset)) ||
      ShapedType::isDynamic(offset) ||
      llvm::any_of(strides, ShapedType::isDynamic))
    return std::nullopt;
  AffineMap map = op.getMatchingIndexingMap(&operand);
  if (!map.isProjectedPermutation(/*allowZeroInResults=*/false))
    return std::nullopt;
  OperandLayout layout;
  layout.loopStrides.assign(op.getNumLoops(), 0);
  layout.offset = offset;
  for (auto [position, result] : llvm::enumerate(map.getResults()))
    layout.loopStrides[cast<AffineDimExpr>(result).getPosition()] =
        strides[position];
  return layout;
}

/// The size and stride of one group of loops (batch, M, N or K) collapsed
/// into one dimension in each of `layouts`, or nothing when some operand
/// does not lay the group out as one strided dimension in a common order.
struct Collapsed {
  int64_t size = 1;
  SmallVector<int64_t> strides; // per operand of `layouts`; 0: size 1
};

std::optional<Collapsed> collapse(ArrayRef<unsigned> loops,
                                  ArrayRef<int64_t> ranges,
                                  ArrayRef<const OperandLayout *> layouts) {
  SmallVector<unsigned> kept;
  for (unsigned loop : loops)
    if (ranges[loop] != 1)
      kept.push_back(loop);
  Collapsed result;
  result.strides.assign(layouts.size(), 0);
  if (kept.empty())
    return result;
  // Outermost first, by the first operand's strides.
  llvm::sort(kept, [&](unsigned x, unsigned y) {
    return layouts[0]->loopStrides[x] > layouts[0]->loopStrides[y];
  });
  for (auto [index, layout] : llvm::enumerate(layouts)) {
    for (size_t i = 0; i + 1 < kept.size(); ++i)
      if (layout->loopStrides[kept[i]] !=
          layout->loopStrides[kept[i + 1]] * ranges[kept[i + 1]])
        return std::nullopt;
    result.strides[index] = layout->loopStrides[kept.back()];
  }
  for (unsigned loop : kept)
    result.size *= ranges[loop];
  return result;
}

/// The descriptor of `op` if the runtime's GEMM computes it.
std::optional<Descriptor> describeProduct(linalg::LinalgOp op) {
  if (!op.hasPureBufferSemantics() || op.getNumDpsInputs() != 2 ||
      op.getNumDpsInits() != 1 || !linalg::isaContractionOpInterface(op) ||
      !isMultiplyAccumulateBody(op))
    return std::nullopt;
  OpOperand *a = op.getDpsInputOperand(0), *b = op.getDpsInputOperand(1);
  OpOperand *c = op.getDpsInitOperand(0);
  // An input the body rounds to bf16 is given to the library as a bf16
  // copy (materializeRoundings).
  bool roundA = roundingOf(op, 0) != nullptr;
  bool roundB = roundingOf(op, 1) != nullptr;
  auto elementOf = [&](OpOperand *operand) -> Type {
    if ((operand == a && roundA) || (operand == b && roundB))
      return BFloat16Type::get(op.getContext());
    return cast<MemRefType>(operand->get().getType()).getElementType();
  };
  std::optional<int64_t> typeA = gemmType(elementOf(a));
  std::optional<int64_t> typeB = gemmType(elementOf(b));
  // A bf16 output would be a bf16 accumulation: left to the loops.
  if (!typeA || !typeB || *typeA != *typeB || !elementOf(c).isF32())
    return std::nullopt;
  FailureOr<linalg::ContractionDimensions> dims =
      linalg::inferContractionDims(op);
  if (failed(dims) || dims->k.empty())
    return std::nullopt;
  std::optional<OperandLayout> layoutA = layoutOf(op, *a, roundA);
  std::optional<OperandLayout> layoutB = layoutOf(op, *b, roundB);
  std::optional<OperandLayout> layoutC = layoutOf(op, *c);
  if (!layoutA || !layoutB || !layoutC)
    return std::nullopt;
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  if (llvm::any_of(ranges, ShapedType::isDynamic))
    return std::nullopt;
  std::optional<Collapsed> batch =
      collapse(dims->batch, ranges, {&*layoutA, &*layoutB, &*layoutC});
  std::optional<Collapsed> m =
      collapse(dims->m, ranges, {&*layoutA, &*layoutC});
  std::optional<Collapsed> n =
      collapse(dims->n, ranges, {&*layoutB, &*layoutC});
  std::optional<Collapsed> k =
      collapse(dims->k, ranges, {&*layoutA, &*layoutB});
  // Dot products (M = N = 1, such as a norm gain's gradient summed over
  // tokens) gain nothing from a GEMM kernel; the loops vectorise them.
  if (!batch || !m || !n || !k || (m->size == 1 && n->size == 1))
    return std::nullopt;
  // A dimension of size one gets the stride a dense row-major matrix
  // would give it, which every kernel accepts.
  int64_t strideAK = k->strides[0] ? k->strides[0] : 1;
  int64_t strideAM = m->strides[0] ? m->strides[0] : k->size * strideAK;
  int64_t strideBN = n->strides[0] ? n->strides[0] : 1;
  int64_t strideBK = k->strides[1] ? k->strides[1] : n->size * strideBN;
  int64_t strideCN = n->strides[1] ? n->strides[1] : 1;
  int64_t strideCM = m->strides[1] ? m->strides[1] : n->size * strideCN;
  // The kernels' layouts: C contiguous along N, A and B contiguous along
  // one of their two dimensions.
  if (strideCN != 1 || (strideAK != 1 && strideAM != 1) ||
      (strideBN != 1 && strideBK != 1))
    return std::nullopt;
  auto batchStride = [&](unsigned operand, int64_t matrixEnd) {
    return batch->strides[operand] ? batch->strides[operand] : matrixEnd;
  };
  Descriptor d;
  d[kGemmAbi] = mantissa::rt::kCpuGemmAbi;
  d[kGemmTypeA] = *typeA;
  d[kGemmTypeB] = *typeB;
  d[kGemmTypeC] = kGemmF32;
  d[kGemmBatch] = batch->size;
  d[kGemmM] = m->size;
  d[kGemmN] = n->size;
  d[kGemmK] = k->size;
  d[kGemmStrideABatch] =
      batchStride(0, std::max(m->size * strideAM, k->size * strideAK));
  d[kGemmStrideAM] = strideAM;
  d[kGemmStrideAK] = strideAK;
  d[kGemmStrideBBatch] =
      batchStride(1, std::max(k->size * strideBK, n->size * strideBN));
  d[kGemmStrideBK] = strideBK;
  d[kGemmStrideBN] = strideBN;
  d[kGemmStrideCBatch] = batchStride(2, m->size * strideCM);
  d[kGemmStrideCM] = strideCM;
  d[kGemmStrideCN] = strideCN;
  d[kGemmAccumulate] = 1;
  d[kGemmRoundC] = 0;
  return d;
}

/// Whether `value` is the constant +0.0 (not -0.0: a sum added to -0.0 can
/// be -0.0, a sum written never is unless it is -0.0 itself).
bool isPositiveZero(Value value) {
  FloatAttr constant;
  return matchPattern(value, m_Constant(&constant)) &&
         constant.getValue().isPosZero();
}

/// The buffer `op` sets to +0.0 in every element, if it is such a fill: a
/// linalg.fill, or the all-parallel generic without inputs that tensor
/// fusion makes of one.
Value zeroFilledBuffer(Operation *op) {
  if (auto fill = dyn_cast<linalg::FillOp>(op))
    return fill.hasPureBufferSemantics() && isPositiveZero(fill.value())
               ? fill.output()
               : Value();
  auto generic = dyn_cast<linalg::GenericOp>(op);
  if (!generic || !generic.hasPureBufferSemantics() ||
      generic.getNumDpsInputs() != 0 || generic.getNumDpsInits() != 1 ||
      generic.getNumParallelLoops() != generic.getNumLoops() ||
      !generic.getIndexingMapsArray()[0].isPermutation())
    return Value();
  Block *body = generic.getBlock();
  auto yield = cast<linalg::YieldOp>(body->getTerminator());
  if (body->getOperations().size() != 1 || yield.getNumOperands() != 1 ||
      !isPositiveZero(yield.getOperand(0)))
    return Value();
  return generic.getDpsInitOperand(0)->get();
}

/// `buffer` seen through reshapes and casts: views of all of its elements.
Value throughWholeViews(Value buffer) {
  while (true) {
    if (auto expand = buffer.getDefiningOp<memref::ExpandShapeOp>())
      buffer = expand.getSrc();
    else if (auto collapse = buffer.getDefiningOp<memref::CollapseShapeOp>())
      buffer = collapse.getSrc();
    else if (auto cast = buffer.getDefiningOp<memref::CastOp>())
      buffer = cast.getSource();
    else
      return buffer;
  }
}

/// The buffer `buffer` is a view of (through any view ops).
Value rootOf(Value buffer) {
  while (auto view = buffer.getDefiningOp<ViewLikeOpInterface>())
    buffer = view.getViewSource();
  return buffer;
}

bool isAllocation(Value buffer) {
  return buffer.getDefiningOp<memref::AllocOp>() ||
         buffer.getDefiningOp<memref::AllocaOp>();
}

/// Every value of the function that may refer to `root`'s memory: `root`,
/// and, for each op using one of them, its memref results, those of the ops
/// around it, and its regions' memref arguments (views, and anything else
/// that could pass the buffer on).
llvm::DenseSet<Value> aliasesOf(Value root) {
  llvm::DenseSet<Value> aliases = {root};
  SmallVector<Value> worklist = {root};
  auto add = [&](Value value) {
    if (isa<BaseMemRefType>(value.getType()) && aliases.insert(value).second)
      worklist.push_back(value);
  };
  while (!worklist.empty()) {
    Value value = worklist.pop_back_val();
    for (Operation *user : value.getUsers()) {
      for (Operation *op = user; op && !isa<FunctionOpInterface>(op);
           op = op->getParentOp())
        for (Value result : op->getResults())
          add(result);
      for (Region &region : user->getRegions())
        for (Block &block : region)
          for (BlockArgument argument : block.getArguments())
            add(argument);
    }
  }
  return aliases;
}

/// Whether `op` (and what it nests) can neither read nor write the memory of
/// `aliases` (those of `root`): it uses none of them but to make views, its
/// effects are all known (no calls), and they are on this function's
/// allocations, on its other arguments where `root` is one (the step's
/// buffers never overlap), or, where `root` is an allocation, on arguments
/// and globals.
bool leavesAlone(Operation *op, Value root,
                 const llvm::DenseSet<Value> &aliases) {
  WalkResult uses = op->walk([&](Operation *nested) {
    // A view touches no element (what uses it is checked in its turn).
    if (isa<ViewLikeOpInterface>(nested) && isMemoryEffectFree(nested))
      return WalkResult::advance();
    return llvm::any_of(nested->getOperands(),
                        [&](Value v) { return aliases.contains(v); })
               ? WalkResult::interrupt()
               : WalkResult::advance();
  });
  if (uses.wasInterrupted())
    return false;
  std::optional<SmallVector<MemoryEffects::EffectInstance>> effects =
      getEffectsRecursively(op);
  if (!effects)
    return false;
  bool localRoot = isAllocation(root);
  return llvm::all_of(*effects, [&](const MemoryEffects::EffectInstance &e) {
    if (isa<MemoryEffects::Allocate, MemoryEffects::Free>(e.getEffect()))
      return true;
    Value target = e.getValue();
    if (!target || !isa<BaseMemRefType>(target.getType()))
      return false;
    Value targetRoot = rootOf(target);
    if (isAllocation(targetRoot))
      return true;
    // Another argument: the step's argument and result buffers never
    // overlap (docs/architecture.md).
    if (isa<BlockArgument>(root) && isa<BlockArgument>(targetRoot) &&
        targetRoot != root)
      return true;
    // Memory not of this function: distinct from a local allocation that
    // no op in between uses, unless it came from an address.
    return localRoot && (isa<BlockArgument>(targetRoot) ||
                         targetRoot.getDefiningOp<memref::GetGlobalOp>());
  });
}

/// The fill of `product`'s output with +0.0 that the library can write
/// over instead of adding to, if there is one: in the same block, before
/// it, on the whole output (the product writes each element of it), with
/// nothing in between that touches that memory, and the product reading
/// that memory only as its output.
Operation *zeroFillBefore(linalg::LinalgOp product, const Descriptor &d) {
  Value output = product.getDpsInitOperand(0)->get();
  auto type = dyn_cast<MemRefType>(output.getType());
  if (!type || !type.hasStaticShape() ||
      type.getNumElements() != d[kGemmBatch] * d[kGemmM] * d[kGemmN])
    return nullptr;
  Value root = rootOf(output);
  llvm::DenseSet<Value> aliases = aliasesOf(root);
  for (OpOperand *input : product.getDpsInputOperands())
    if (aliases.contains(input->get()))
      return nullptr;
  Value whole = throughWholeViews(output);
  for (Operation *op = product->getPrevNode(); op; op = op->getPrevNode()) {
    if (Value filled = zeroFilledBuffer(op);
        filled && throughWholeViews(filled) == whole)
      return op;
    if (!leavesAlone(op, root, aliases))
      return nullptr;
  }
  return nullptr;
}

/// What a copy of a product's output does to each element on the way.
enum class CopyKind {
  /// Moves it unchanged (`linalg.copy`, or a generic yielding its input):
  /// how an fp32 gradient reaches the step's result buffer.
  Plain,
  /// Rounds it to bf16 and widens it back (`extf(truncf(x))`, to nearest
  /// even): how a product's bf16 result becomes an fp32 gradient or an
  /// operand widened for the next product under `compute: bf16`.
  Rounding,
  /// Rounds it to bf16 into a bf16 buffer (`truncf(x)`): how a product's
  /// result becomes the bf16 activation the elementwise ops after it read
  /// under `compute: bf16`.
  Narrowing,
};

/// What `op` does, if it only copies its one f32 buffer into another f32
/// buffer of the same shape, element by element, or rounds it into a bf16
/// buffer laid out alike (CopyKind).
std::optional<CopyKind> copyKindOf(linalg::LinalgOp op) {
  if (!op.hasPureBufferSemantics() || op.getNumDpsInputs() != 1 ||
      op.getNumDpsInits() != 1 ||
      op.getNumParallelLoops() != op.getNumLoops() ||
      !llvm::all_of(op.getIndexingMapsArray(),
                    [](AffineMap map) { return map.isIdentity(); }))
    return std::nullopt;
  auto in = cast<MemRefType>(op.getDpsInputOperand(0)->get().getType());
  auto out = cast<MemRefType>(op.getDpsInitOperand(0)->get().getType());
  bool narrows = out.getElementType().isBF16();
  if (!in.getElementType().isF32() || in.getShape() != out.getShape() ||
      !(narrows || out.getElementType().isF32()))
    return std::nullopt;
  // A narrowing copy's output must be laid out as the product's, whose
  // descriptor then serves C as it is.
  if (narrows &&
      (in.getLayout() != out.getLayout() || !in.getLayout().isIdentity()))
    return std::nullopt;
  if (isa<linalg::CopyOp>(op))
    return narrows ? std::nullopt : std::optional(CopyKind::Plain);
  auto generic = dyn_cast<linalg::GenericOp>(op.getOperation());
  if (!generic)
    return std::nullopt;
  Block *body = generic.getBody();
  size_t ops = body->getOperations().size();
  Value yielded = body->getTerminator()->getOperand(0);
  if (!narrows && ops == 1 && yielded == body->getArgument(0))
    return CopyKind::Plain;
  // Otherwise the body first rounds its input to bf16, to nearest even.
  auto truncate = dyn_cast<arith::TruncFOp>(body->front());
  if (!truncate || truncate.getIn() != body->getArgument(0) ||
      !truncate.getType().isBF16() || truncate.getRoundingmodeAttr())
    return std::nullopt;
  if (narrows)
    return ops == 2 && yielded == truncate.getResult()
               ? std::optional(CopyKind::Narrowing)
               : std::nullopt;
  auto extend = dyn_cast<arith::ExtFOp>(truncate->getNextNode());
  if (ops != 3 || !extend || extend.getIn() != truncate.getResult() ||
      yielded != extend.getResult())
    return std::nullopt;
  return CopyKind::Rounding;
}

/// A copy of a product's output (copyKindOf) and what it does.
struct OutputCopy {
  linalg::LinalgOp op;
  CopyKind kind;
  /// The allocation of the copy's output, when it comes after the product
  /// and must move before it.
  memref::AllocOp hoistedAllocation = nullptr;
};

/// The copy (copyKindOf) that is all that is done with `product`'s output,
/// if there is one: the output is a temporary that the product writes
/// whole (not adding to it: `fill`, its fill of +0.0, goes), read by that
/// one later op of the block and otherwise only freed; nothing in between
/// touches the copy's output, which the product does not read. The product
/// can then write the copy's output, the library rounding it where the
/// copy would have (kGemmRoundC).
std::optional<OutputCopy> copyAfter(linalg::LinalgOp product,
                                    const Descriptor &d, Operation *fill) {
  Value output = product.getDpsInitOperand(0)->get();
  if (d[kGemmAccumulate] || !output.getDefiningOp<memref::AllocOp>())
    return std::nullopt;
  std::optional<OutputCopy> copy;
  for (Operation *user : output.getUsers()) {
    if (user == product.getOperation() || user == fill ||
        isa<memref::DeallocOp>(user))
      continue;
    auto linalgOp = dyn_cast<linalg::LinalgOp>(user);
    std::optional<CopyKind> kind =
        linalgOp ? copyKindOf(linalgOp) : std::nullopt;
    if (copy || !kind || linalgOp.getDpsInputOperand(0)->get() != output ||
        user->getBlock() != product->getBlock() ||
        !product->isBeforeInBlock(user))
      return std::nullopt;
    copy = OutputCopy{linalgOp, *kind};
  }
  if (!copy)
    return std::nullopt;
  // The product must see the copy's output: made before it, or allocated
  // (without operands) between the two, which the caller then moves before
  // the product (hoistedAllocation).
  Value target = copy->op.getDpsInitOperand(0)->get();
  if (Operation *definition = target.getDefiningOp();
      definition && !(definition->getBlock() == product->getBlock() &&
                      definition->isBeforeInBlock(product))) {
    auto alloc = dyn_cast<memref::AllocOp>(definition);
    if (!alloc || alloc->getNumOperands() != 0 ||
        alloc->getBlock() != product->getBlock() ||
        !product->isBeforeInBlock(alloc))
      return std::nullopt;
    copy->hoistedAllocation = alloc;
  }
  Value root = rootOf(target);
  llvm::DenseSet<Value> aliases = aliasesOf(root);
  for (OpOperand *input : product.getDpsInputOperands())
    if (aliases.contains(input->get()))
      return std::nullopt;
  for (Operation *op = product->getNextNode(); op != copy->op.getOperation();
       op = op->getNextNode())
    if (!leavesAlone(op, root, aliases))
      return std::nullopt;
  return copy;
}

/// Erases the temporary `buffer` (its allocation and deallocation) when
/// nothing else uses it.
void eraseIfOnlyFreed(Value buffer) {
  if (!llvm::all_of(buffer.getUsers(), [](Operation *user) {
        return isa<memref::DeallocOp>(user);
      }))
    return;
  for (Operation *user : llvm::make_early_inc_range(buffer.getUsers()))
    user->erase();
  buffer.getDefiningOp()->erase();
}

/// Replaces each input of `op` that its body rounds to bf16 (an f32 buffer)
/// by a bf16 copy made just before: the same rounding (arith.truncf, to
/// nearest even), done once per element instead of once per use, in a
/// layout the library reads. The caller frees the copies.
void materializeRoundings(OpBuilder &b, linalg::LinalgOp op,
                          SmallVector<Value> &inputs) {
  for (unsigned index = 0; index < 2; ++index) {
    if (!roundingOf(op, index))
      continue;
    Location loc = op.getLoc();
    auto type = cast<MemRefType>(inputs[index].getType());
    auto copyType = MemRefType::get(type.getShape(), b.getBF16Type());
    Value copy =
        b.create<memref::AllocOp>(loc, copyType, b.getI64IntegerAttr(64));
    AffineMap identity = b.getMultiDimIdentityMap(type.getRank());
    b.create<linalg::GenericOp>(
        loc, ValueRange{inputs[index]}, ValueRange{copy},
        ArrayRef<AffineMap>{identity, identity},
        SmallVector<utils::IteratorType>(type.getRank(),
                                         utils::IteratorType::parallel),
        [](OpBuilder &nb, Location l, ValueRange args) {
          nb.create<linalg::YieldOp>(l, ValueRange{nb.create<arith::TruncFOp>(
                                            l, nb.getBF16Type(), args[0])});
        });
    inputs[index] = copy;
  }
}

struct CallGemmLibraryPass
    : mantissa::impl::CallGemmLibraryPassBase<CallGemmLibraryPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    /// Each product, its descriptor, and the buffer it writes when that is
    /// not its own output (a narrowing copy's bf16 buffer, which the op's
    /// body cannot name).
    struct Call {
      linalg::LinalgOp op;
      Descriptor d;
      Value narrowedOutput;
    };
    SmallVector<Call> products;
    // Fills of outputs that the library writes instead of adding to (each
    // the fill of one product: the next product on that buffer would have
    // this one in between).
    SmallVector<Operation *> overwrittenFills;
    // Copies of products' outputs (and their roundings) that the library
    // does instead, writing the copies' outputs.
    SmallVector<linalg::LinalgOp> outputCopies;
    // Collected first: a copy's allocation may move before its product.
    SmallVector<linalg::LinalgOp> linalgOps;
    module.walk([&](linalg::LinalgOp op) { linalgOps.push_back(op); });
    for (linalg::LinalgOp op : linalgOps) {
      std::optional<Descriptor> d = describeProduct(op);
      if (!d)
        continue;
      Operation *fill = zeroFillBefore(op, *d);
      if (fill) {
        overwrittenFills.push_back(fill);
        (*d)[kGemmAccumulate] = 0;
      }
      // The product writes where its copy wrote, if the library takes
      // that layout, and rounds there where the copy rounded.
      std::optional<OutputCopy> copy = copyAfter(op, *d, fill);
      if (copy && copy->hoistedAllocation)
        copy->hoistedAllocation->moveBefore(op);
      Value narrowedOutput;
      if (copy && copy->kind == CopyKind::Narrowing) {
        // The copy's output has the temporary's shape and strides.
        (*d)[kGemmTypeC] = kGemmBF16;
        (*d)[kGemmAccumulate] = 0;
        (*d)[kGemmRoundC] = 1;
        narrowedOutput = copy->op.getDpsInitOperand(0)->get();
        outputCopies.push_back(copy->op);
      } else if (copy) {
        OpOperand &output = *op.getDpsInitOperand(0);
        Value temporary = output.get();
        output.set(copy->op.getDpsInitOperand(0)->get());
        if (std::optional<Descriptor> moved = describeProduct(op)) {
          (*moved)[kGemmAccumulate] = 0;
          (*moved)[kGemmRoundC] = copy->kind == CopyKind::Rounding;
          *d = *moved;
          outputCopies.push_back(copy->op);
        } else {
          output.set(temporary);
        }
      }
      products.push_back({op, *d, narrowedOutput});
    }

    if (products.empty())
      return;
    // A sum written instead of added to +0.0 has the same bits, except that
    // -0.0 stays -0.0 (0.0 + -0.0 is 0.0).
    for (Operation *fill : overwrittenFills)
      fill->erase();
    // The copies, and the temporaries nothing uses any more.
    for (linalg::LinalgOp copy : outputCopies) {
      Value temporary = copy.getDpsInputOperand(0)->get();
      copy->erase();
      eraseIfOnlyFreed(temporary);
    }
    OpBuilder moduleBuilder = OpBuilder::atBlockBegin(module.getBody());
    Type index = moduleBuilder.getIndexType();
    auto callee = module.lookupSymbol<func::FuncOp>(kGemmFunction);
    if (!callee) {
      callee = moduleBuilder.create<func::FuncOp>(
          module.getLoc(), kGemmFunction,
          moduleBuilder.getFunctionType({index, index, index, index}, {}));
      callee.setPrivate();
    }
    auto descriptorType =
        MemRefType::get({kGemmFieldCount}, moduleBuilder.getI64Type());
    std::map<Descriptor, memref::GlobalOp> globals;
    for (auto &[op, d, narrowedOutput] : products) {
      memref::GlobalOp &global = globals[d];
      if (!global) {
        global = moduleBuilder.create<memref::GlobalOp>(
            module.getLoc(),
            llvm::formatv("__mantissa_gemm_{0}", globals.size() - 1).str(),
            moduleBuilder.getStringAttr("private"), descriptorType,
            DenseIntElementsAttr::get(
                RankedTensorType::get({kGemmFieldCount},
                                      moduleBuilder.getI64Type()),
                ArrayRef<int64_t>(d)),
            /*constant=*/true, /*alignment=*/nullptr);
      }
      OpBuilder b(op);
      Location loc = op.getLoc();
      Value temporary = op.getDpsInitOperand(0)->get();
      Value output = narrowedOutput ? narrowedOutput : temporary;
      SmallVector<Value> inputs = {op.getDpsInputOperand(0)->get(),
                                   op.getDpsInputOperand(1)->get()};
      materializeRoundings(b, op, inputs);
      auto addressOf = [&](Value buffer) -> Value {
        Value aligned =
            b.create<memref::ExtractAlignedPointerAsIndexOp>(loc, buffer);
        auto type = cast<MemRefType>(buffer.getType());
        SmallVector<int64_t> strides;
        int64_t offset = 0;
        (void)getStridesAndOffset(type, strides, offset);
        int64_t bytes = type.getElementTypeBitWidth() / 8;
        if (offset == 0)
          return aligned;
        return b.create<arith::AddIOp>(
            loc, aligned,
            b.create<arith::ConstantIndexOp>(loc, offset * bytes));
      };
      Value descriptor = b.create<memref::GetGlobalOp>(loc, descriptorType,
                                                       global.getSymName());
      b.create<func::CallOp>(
          loc, callee,
          ValueRange{
              b.create<memref::ExtractAlignedPointerAsIndexOp>(loc, descriptor),
              addressOf(inputs[0]), addressOf(inputs[1]), addressOf(output)});
      OpBuilder after(op);
      after.setInsertionPointAfter(op);
      for (auto [index, input] : llvm::enumerate(inputs))
        if (input != op.getDpsInputOperand(index)->get())
          after.create<memref::DeallocOp>(loc, input);
      op->erase();
      if (output != temporary)
        eraseIfOnlyFreed(temporary);
    }
  }
};

struct RouteGemmCallsThroughHookPass
    : mantissa::impl::RouteGemmCallsThroughHookPassBase<
          RouteGemmCallsThroughHookPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto declaration = module.lookupSymbol<LLVM::LLVMFuncOp>(kGemmFunction);
    if (!declaration)
      return;
    if (!declaration.isExternal()) {
      declaration.emitError()
          << "@" << kGemmFunction
          << " is the runtime's; the step must not define it";
      return signalPassFailure();
    }
    MLIRContext *context = &getContext();
    auto pointer = LLVM::LLVMPointerType::get(context);
    OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
    auto hook = b.create<LLVM::GlobalOp>(
        module.getLoc(), pointer, /*isConstant=*/false, LLVM::Linkage::External,
        mantissa::rt::kCpuGemmHookSymbol, Attribute());
    {
      Block *init = b.createBlock(&hook.getInitializerRegion());
      b.setInsertionPointToStart(init);
      b.create<LLVM::ReturnOp>(
          module.getLoc(),
          b.create<LLVM::ZeroOp>(module.getLoc(), pointer).getResult());
    }
    SmallVector<LLVM::CallOp> calls;
    module.walk([&](LLVM::CallOp call) {
      if (call.getCallee() == kGemmFunction)
        calls.push_back(call);
    });
    LLVM::LLVMFunctionType type = declaration.getFunctionType();
    for (LLVM::CallOp call : calls) {
      OpBuilder cb(call);
      Location loc = call.getLoc();
      Value address = cb.create<LLVM::AddressOfOp>(loc, hook);
      Value function = cb.create<LLVM::LoadOp>(loc, pointer, address);
      SmallVector<Value> operands = {function};
      llvm::append_range(operands, call.getArgOperands());
      cb.create<LLVM::CallOp>(loc, type, operands);
      call.erase();
    }
    declaration.erase();
  }
};

} // namespace
