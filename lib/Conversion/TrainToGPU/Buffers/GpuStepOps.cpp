//===- GpuStepOps.cpp - How the GPU program runs a bufferized step --------===//
//
// The roles of a bufferized step's ops in the GPU program, the GEMMs with
// what they absorb, and the launch marks: GpuStepOps.h.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/GpuStepOps.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/GemmMatching.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Interfaces/DestinationStyleOpInterface.h"
#include "mlir/Interfaces/ViewLikeInterface.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace mlir::mantissa;

int64_t mlir::mantissa::getGpuBufferBytes(MemRefType type) {
  return std::max<int64_t>(1, type.getNumElements() *
                                  getStorageBytes(type.getElementType()));
}

namespace {

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
std::optional<GemmEpilogueMatch> matchGemmEpilogue(linalg::LinalgOp op,
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

} // namespace

std::optional<int64_t> mlir::mantissa::getTreeFoldParts(Operation *op) {
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

/// The fill of a GEMM's output the GEMM must absorb for an epilogue, and
/// the epilogue, as one GEMM: the unfused product's alpha, beta = 0, the
/// rounding into the epilogue's output and its bias.
std::optional<rt::GpuStepOp>
buildGemmWithEpilogue(linalg::LinalgOp op, const GpuStepOpRole &role,
                      function_ref<int64_t(Value)> getBufferId) {
  auto epilogue = dyn_cast<linalg::LinalgOp>(role.epilogue);
  if (!epilogue || !role.fill)
    return std::nullopt;
  Value product = op.getDpsInitOperand(0)->get();
  std::optional<GemmEpilogueMatch> match = matchGemmEpilogue(epilogue, product);
  if (!match)
    return std::nullopt;
  Value temporary = getBaseBuffer(product);
  if (!temporary.getDefiningOp<memref::AllocOp>() ||
      !isOnlyUsedBy(temporary, {op, epilogue, role.fill}))
    return std::nullopt;
  // (Its fp32 temporary is no buffer of the program.)
  std::optional<rt::GpuStepOp> unfused =
      matchGemm(op, [](Value) -> int64_t { return 0; });
  std::optional<rt::GpuStepOp> fused =
      matchGemm(op, getBufferId, match->output);
  if (!unfused || !fused)
    return std::nullopt;
  if (match->bias) {
    // cuBLASLt adds bias[r] to row r of every column of every batch: the
    // bias must step with the output's rows (the loops whose output stride
    // is below m) and stay put along the rest.
    FailureOr<LoopStrides> biasStrides = getLoopStrides(epilogue, *match->bias);
    FailureOr<LoopStrides> outputStrides =
        getLoopStrides(epilogue, *epilogue.getDpsInitOperand(0));
    if (failed(biasStrides) || failed(outputStrides))
      return std::nullopt;
    SmallVector<int64_t> ranges = epilogue.getStaticLoopRanges();
    for (auto [loop, range] : llvm::enumerate(ranges)) {
      if (range == 1)
        continue;
      int64_t outputStride = outputStrides->strides[loop];
      int64_t expected = outputStride < fused->m ? outputStride : 0;
      if (biasStrides->strides[loop] != expected)
        return std::nullopt;
    }
    Value bias = match->bias->get();
    fused->epilogue = rt::GemmEpilogue::Bias;
    fused->bias.buffer = getBufferId(getBaseBuffer(bias));
    fused->bias.offset = biasStrides->offset;
    fused->bias.dtype = getDType(getElementTypeOrSelf(bias.getType()));
  }
  fused->beta = 0.0;
  fused->alpha = unfused->alpha;
  return fused;
}

} // namespace

std::optional<rt::GpuStepOp>
mlir::mantissa::buildGpuGemm(linalg::LinalgOp op, const GpuStepOpRole &role,
                             function_ref<int64_t(Value)> getBufferId) {
  if (role.epilogue)
    return buildGemmWithEpilogue(op, role, getBufferId);
  std::optional<rt::GpuStepOp> gemm = matchGemm(op, getBufferId);
  // C = A * B + 0 right after C was zeroed: beta = 0.
  if (gemm && role.fill)
    gemm->beta = 0.0;
  return gemm;
}

FailureOr<llvm::DenseMap<Operation *, GpuStepOpRole>>
mlir::mantissa::getGpuStepOpRoles(Block &body) {
  using Kind = GpuStepOpRole::Kind;
  llvm::DenseMap<Operation *, GpuStepOpRole> roles;
  // The op before, among those that run: a kernel that zeroes an output (a
  // GEMM of that output right after absorbs it), or a GEMM with its fill
  // and no epilogue yet (an elementwise op right after may become it).
  Operation *fill = nullptr, *gemm = nullptr;
  auto noBuffer = [](Value) -> int64_t { return 0; };
  for (Operation &op : body) {
    GpuStepOpRole role;
    if (isa<memref::AllocOp, memref::DeallocOp, memref::GetGlobalOp,
            ViewLikeOpInterface, memref::CastOp, memref::TransposeOp,
            func::ReturnOp>(op) ||
        op.hasTrait<OpTrait::ConstantLike>()) {
      roles[&op] = role;
      continue;
    }
    Operation *fillBefore = std::exchange(fill, nullptr);
    Operation *gemmBefore = std::exchange(gemm, nullptr);
    auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
    if (linalgOp && isGemm(linalgOp)) {
      role.kind = Kind::Gemm;
      if (fillBefore && getZeroFilledOutput(fillBefore) ==
                            linalgOp.getDpsInitOperand(0)->get()) {
        role.fill = fillBefore;
        roles[fillBefore].kind = Kind::InGemm;
      }
      gemm = &op;
    } else if (linalgOp) {
      role.kind = Kind::Kernel;
      if (gemmBefore) {
        GpuStepOpRole fused = roles[gemmBefore];
        fused.epilogue = &op;
        if (buildGpuGemm(cast<linalg::LinalgOp>(gemmBefore), fused, noBuffer)) {
          roles[gemmBefore] = fused;
          role.kind = Kind::InGemm;
        }
      }
      if (role.kind == Kind::Kernel && getZeroFilledOutput(&op))
        fill = &op;
    } else if (isa<train::AttentionKernelOp>(op)) {
      role.kind = Kind::Attention;
    } else if (isa<scf::ForOp>(op)) {
      role.kind = Kind::Kernel;
    } else {
      return op.emitOpError() << "has no lowering to the GPU program";
    }
    roles[&op] = role;
  }
  return roles;
}

GpuOpBuffers mlir::mantissa::getGpuOpBuffers(Operation *op,
                                             const GpuStepOpRole &role) {
  using Kind = GpuStepOpRole::Kind;
  GpuOpBuffers result;
  switch (role.kind) {
  case Kind::Free:
  case Kind::InGemm:
    break;
  case Kind::Kernel: {
    llvm::SetVector<Value> used(op->operand_begin(), op->operand_end());
    getUsedValuesDefinedAbove(op->getRegions(), used);
    for (Value value : used) {
      if (!isa<MemRefType>(value.getType()))
        continue;
      result.reads.push_back(value);
      if (writesBuffer(op, getBaseBuffer(value)))
        result.writes.push_back(value);
    }
    break;
  }
  case Kind::Gemm: {
    auto contraction = cast<linalg::LinalgOp>(op);
    llvm::append_range(result.reads, contraction.getDpsInputs());
    Value product = contraction.getDpsInits().front();
    auto epilogue = dyn_cast_or_null<linalg::LinalgOp>(role.epilogue);
    if (!epilogue) {
      // beta = 1 reads the output.
      if (!role.fill)
        result.reads.push_back(product);
      result.writes.push_back(product);
      break;
    }
    // The bias.
    for (Value input : epilogue.getDpsInputs())
      if (getBaseBuffer(input) != getBaseBuffer(product))
        result.reads.push_back(input);
    result.writes.push_back(epilogue.getDpsInits().front());
    break;
  }
  case Kind::Attention: {
    auto destination = cast<DestinationStyleOpInterface>(op);
    llvm::append_range(result.reads, destination.getDpsInputs());
    llvm::append_range(result.writes, destination.getDpsInits());
    break;
  }
  }
  return result;
}

std::optional<GpuLaunchMark> mlir::mantissa::getGpuLaunchMark(Operation *op) {
  auto launch = op->getAttrOfType<IntegerAttr>(kGpuLaunchAttr);
  auto member = op->getAttrOfType<IntegerAttr>(kGpuLaunchMemberAttr);
  auto stride = op->getAttrOfType<IntegerAttr>(kGpuThreadStrideAttr);
  if (!launch || !member || !stride)
    return std::nullopt;
  auto columns = op->getAttrOfType<IntegerAttr>(kGpuRowColumnsAttr);
  return GpuLaunchMark{launch.getInt(), member.getInt(), stride.getInt(),
                       columns ? columns.getInt() : 0};
}
