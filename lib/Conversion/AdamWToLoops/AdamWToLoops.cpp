//===- AdamWToLoops.cpp - train.adamw_update to loops and kernels ---------===//
//
// Expands the fused AdamW update of a shard group into one pass over its
// buffers: a vectorised tile loop for the CPU, or one GPU kernel launch.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/AdamWToLoops/Passes.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_LOWERADAMWPASS
#include "mantissa/Conversion/AdamWToLoops/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;
using train::AdamWUpdateOp;
using train::DType;
using Member = AdamWUpdateOp::Member;
using MasterKind = AdamWUpdateOp::MasterKind;

namespace {

/// The buffers of a group, in operand order.
enum Role : unsigned {
  GradRole,
  ParamRole,
  MasterRole,
  ExpAvgRole,
  ExpAvgSqRole,
  MaxExpAvgSqRole,
  NumRoles
};

/// Elements one GPU thread updates per tile: 128 bits of a 16-bit dtype.
constexpr int64_t kGpuChunk = 8;

/// Members with the same dtypes and master share their code.
struct Kind {
  DType grad, param, moments;
  MasterKind master;

  static Kind of(const Member &member) {
    return {member.grad, member.param, member.moments, member.master};
  }
  bool operator==(const Kind &other) const {
    return grad == other.grad && param == other.param &&
           moments == other.moments && master == other.master;
  }
  bool isLowPrecisionArm() const {
    return master == MasterKind::None && param != DType::fp32;
  }
};

/// Where a member's tiles start and which code updates it.
struct Placement {
  Member member;
  unsigned kind;
  int64_t firstTile;
  int64_t numTiles;
};

/// The element type a member keeps in the buffer of `role`. A remainder
/// master is handled on its bits: the bf16 parameter and the remainder are
/// both read as i16.
Type getStorageType(MLIRContext *context, const Kind &kind, Role role) {
  switch (role) {
  case GradRole:
    return train::getElementType(context, kind.grad);
  case ParamRole:
    if (kind.master == MasterKind::Remainder)
      return IntegerType::get(context, 16);
    return train::getElementType(context, kind.param);
  case MasterRole:
    if (kind.master == MasterKind::Remainder)
      return IntegerType::get(context, 16);
    return Float32Type::get(context);
  case ExpAvgRole:
  case ExpAvgSqRole:
  case MaxExpAvgSqRole:
    return train::getElementType(context, kind.moments);
  case NumRoles:
    break;
  }
  llvm_unreachable("unknown buffer role");
}

unsigned getByteWidth(Type type) { return type.getIntOrFloatBitWidth() / 8; }

//===----------------------------------------------------------------------===//
// Small IR helpers
//===----------------------------------------------------------------------===//

/// Builds element-wise arithmetic on either scalars (`width` 0) or vectors of
/// `width` lanes, splatting scalar operands as needed.
struct ElementBuilder {
  OpBuilder &b;
  Location loc;
  int64_t width;
  /// Whether the target rounds to bf16 in hardware (the GPU's cvt.rn).
  bool nativeBF16 = false;

  Type shaped(Type element) const {
    return width ? Type(VectorType::get({width}, element)) : element;
  }
  Value splat(Value scalar) const {
    if (!width)
      return scalar;
    return b.create<vector::BroadcastOp>(loc, shaped(scalar.getType()), scalar);
  }
  Value f32(double value) const {
    return splat(b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(value)));
  }
  Value integer(Type type, int64_t value) const {
    return splat(
        b.create<arith::ConstantOp>(loc, b.getIntegerAttr(type, value)));
  }
  /// Widens a stored float to f32 (exact).
  Value widen(Value raw) const {
    Type element = getElementTypeOrSelf(raw.getType());
    if (element.isF32())
      return raw;
    return b.create<arith::ExtFOp>(loc, shaped(b.getF32Type()), raw);
  }
  /// Rounds f32 to a stored float type (nearest-even).
  Value narrow(Value value, Type element) const {
    if (element.isF32())
      return value;
    if (element.isBF16() && !nativeBF16)
      return bitsToBF16(roundToBF16Bits(value));
    return b.create<arith::TruncFOp>(loc, shaped(element), value);
  }
  /// f32 -> the bits of its bf16 rounding in the high half of an i32, the
  /// low half zero (round to nearest-even, NaN to the quiet NaN 0x7FC0), as
  /// arith-expand rounds but in operations every x86 vector unit has. NaN is
  /// replaced by 0x7FC00000 before the rounding, which keeps it: one
  /// unordered compare (a test of the magnitude's bits is three AVX2
  /// instructions and two constants: AVX2 has no unsigned 32-bit compare),
  /// and no select after the rounding, which LLVM would narrow to the i16
  /// result and then scalarise on x86 (a <8 x i1> from an f32 compare
  /// selecting i16 lanes). The widened value is the i32 itself. On an AVX2
  /// target the update is bound by its instruction count and the 16 vector
  /// registers, not by memory.
  Value roundToBF16Bits(Value value) const {
    Type i32 = b.getI32Type();
    Value isNaN =
        b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNO, value, value);
    Value bits = b.create<arith::SelectOp>(
        loc, isNaN, integer(i32, 0x7FC00000),
        b.create<arith::BitcastOp>(loc, shaped(i32), value));
    Value lowestKept = b.create<arith::AndIOp>(
        loc, b.create<arith::ShRUIOp>(loc, bits, integer(i32, 16)),
        integer(i32, 1));
    return b.create<arith::AndIOp>(
        loc,
        b.create<arith::AddIOp>(
            loc, b.create<arith::AddIOp>(loc, bits, integer(i32, 0x7FFF)),
            lowestKept),
        integer(i32, int32_t(0xFFFF0000u)));
  }
  /// `value` (an f32 holding a bf16), or 0x7FC00000 for NaN: its bf16
  /// rounding.
  Value canonicalizeBF16NaN(Value value) const {
    Value isNaN =
        b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::UNO, value, value);
    Value bits = b.create<arith::SelectOp>(
        loc, isNaN, integer(b.getI32Type(), 0x7FC00000),
        b.create<arith::BitcastOp>(loc, shaped(b.getI32Type()), value));
    return b.create<arith::BitcastOp>(loc, value.getType(), bits);
  }
  /// The bf16 whose bits are the high half of `bits` (roundToBF16Bits).
  Value bitsToBF16(Value bits) const {
    Value high =
        b.create<arith::ShRUIOp>(loc, bits, integer(b.getI32Type(), 16));
    Value half = b.create<arith::TruncIOp>(loc, shaped(b.getI16Type()), high);
    return b.create<arith::BitcastOp>(loc, shaped(b.getBF16Type()), half);
  }
  /// Rounds f32 to `dtype` and back: torch's rounding after an in-place op.
  Value round(Value value, Type element) const {
    if (element.isF32())
      return value;
    if (element.isBF16() && !nativeBF16)
      return b.create<arith::BitcastOp>(loc, shaped(b.getF32Type()),
                                        roundToBF16Bits(value));
    return widen(narrow(value, element));
  }
};

Value indexConstant(OpBuilder &b, Location loc, int64_t value) {
  return b.create<arith::ConstantIndexOp>(loc, value);
}

//===----------------------------------------------------------------------===//
// Scalars of the step
//===----------------------------------------------------------------------===//

/// The fp32 scalars of one step (see AdamWScalars.h for their meaning).
struct StepScalars {
  Value decay, lerpWeight, beta2, oneMinusBeta2, biasCorrection2Sqrt, eps,
      negStepSize;
  /// The gradients' multiplier (clipping); null when the op has none.
  Value gradScale;
  /// Code for gradScale == 1 (a loop version, see emitCpuLoop): the
  /// multiply and rounding of a bf16 gradient leave it unchanged, except
  /// that a NaN becomes the quiet NaN 0x7FC0 as the rounding makes it.
  bool unitGradScale = false;

  /// The GPU kernel's scalar parameters, in order (gradScale last, 1.0
  /// when the op has none).
  SmallVector<Value> asList(OpBuilder &b, Location loc) const {
    Value scale =
        gradScale
            ? gradScale
            : Value(b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(1.0)));
    return {decay, lerpWeight,  beta2, oneMinusBeta2, biasCorrection2Sqrt,
            eps,   negStepSize, scale};
  }
  static StepScalars fromList(ValueRange values) {
    return {values[0], values[1], values[2], values[3],
            values[4], values[5], values[6], values[7]};
  }
};
constexpr unsigned kNumStepScalars = 8;

/// Computes the step's scalars from the op's hyperparameters as torch's
/// Python code does: in f64, converted to f32 only where a tensor op takes
/// them. `1 - lr * wd` is a separate multiply and subtract (no contraction).
StepScalars emitStepScalars(OpBuilder &b, Location loc, AdamWUpdateOp op) {
  Type f32 = b.getF32Type();
  Value one = b.create<arith::ConstantOp>(loc, b.getF64FloatAttr(1.0));
  Value half = b.create<arith::ConstantOp>(loc, b.getF64FloatAttr(0.5));
  Value step = b.create<arith::SIToFPOp>(loc, b.getF64Type(), op.getStep());
  auto toF32 = [&](Value value) -> Value {
    return b.create<arith::TruncFOp>(loc, f32, value);
  };
  auto sub = [&](Value lhs, Value rhs) -> Value {
    return b.create<arith::SubFOp>(loc, lhs, rhs);
  };
  Value biasCorrection1 =
      sub(one, b.create<math::PowFOp>(loc, op.getBeta1(), step));
  Value biasCorrection2 =
      sub(one, b.create<math::PowFOp>(loc, op.getBeta2(), step));
  Value stepSize = b.create<arith::DivFOp>(loc, op.getLr(), biasCorrection1);
  StepScalars scalars;
  scalars.decay = toF32(
      sub(one, b.create<arith::MulFOp>(loc, op.getLr(), op.getWeightDecay())));
  scalars.lerpWeight = toF32(sub(one, op.getBeta1()));
  scalars.beta2 = toF32(op.getBeta2());
  scalars.oneMinusBeta2 = toF32(sub(one, op.getBeta2()));
  scalars.biasCorrection2Sqrt =
      toF32(b.create<math::PowFOp>(loc, biasCorrection2, half));
  scalars.eps = toF32(op.getEps());
  scalars.negStepSize = toF32(b.create<arith::NegFOp>(loc, stepSize));
  scalars.gradScale = op.getGradScale();
  return scalars;
}

//===----------------------------------------------------------------------===//
// Memory access
//===----------------------------------------------------------------------===//

/// Typed views of the group's byte buffers. They are all made before the
/// loops (prepare), so that every use is dominated by its view.
class BufferViews {
public:
  BufferViews(ArrayRef<Value> buffers) : buffers(buffers) {}

  /// Makes the views that members of `kinds` access: `memref<?xT>` views and,
  /// with `withChunks`, `memref<?xvector<(16/width)xT>>` views (one element
  /// per 128 bits, 16-byte aligned) of every buffer from its byte 0.
  void prepare(OpBuilder &b, Location loc, ArrayRef<Kind> kinds,
               bool withChunks) {
    for (const Kind &kind : kinds)
      for (unsigned role = 0; role < NumRoles; ++role) {
        if (!buffers[role])
          continue;
        if (role == MasterRole && kind.master == MasterKind::None)
          continue;
        Type element = getStorageType(b.getContext(), kind, Role(role));
        makeView(b, loc, Role(role), element, scalarViews);
        if (withChunks)
          makeView(b, loc, Role(role), getChunkType(element), chunkViews);
      }
  }

  Value getScalarView(Role role, Type element) const {
    return lookup(scalarViews, role, element);
  }
  Value getChunkView(Role role, Type element) const {
    return lookup(chunkViews, role, getChunkType(element));
  }

private:
  static Type getChunkType(Type element) {
    return VectorType::get({16 / getByteWidth(element)}, element);
  }
  using Cache = DenseMap<std::pair<unsigned, Type>, Value>;
  static Value lookup(const Cache &cache, Role role, Type element) {
    Value view = cache.lookup({role, element});
    assert(view && "view was not prepared");
    return view;
  }
  void makeView(OpBuilder &b, Location loc, Role role, Type element,
                Cache &cache) {
    Value &view = cache[{role, element}];
    if (view)
      return;
    Value buffer = buffers[role];
    unsigned elementBytes =
        isa<VectorType>(element) ? 16 : getByteWidth(element);
    Value bytes = b.create<memref::DimOp>(loc, buffer, 0);
    Value size = b.create<arith::DivUIOp>(loc, bytes,
                                          indexConstant(b, loc, elementBytes));
    auto type = MemRefType::get({ShapedType::kDynamic}, element);
    view = b.create<memref::ViewOp>(loc, type, buffer, indexConstant(b, loc, 0),
                                    ValueRange{size});
    if (isa<VectorType>(element))
      b.create<memref::AssumeAlignmentOp>(loc, view, 16);
  }

  SmallVector<Value> buffers;
  Cache scalarViews;
  Cache chunkViews;
};

/// How a chunk of elements is loaded and stored: one element, a CPU vector
/// (`vector.load` from the scalar view), or 8 GPU elements in 128-bit pieces
/// (loads of the chunk view, concatenated).
struct ChunkAccess {
  enum Mode { Scalar, CpuVector, GpuVector } mode;
  int64_t width;
  BufferViews &views;

  Value load(OpBuilder &b, Location loc, Role role, Type element,
             Value index) const {
    switch (mode) {
    case Scalar:
      return b.create<memref::LoadOp>(loc, views.getScalarView(role, element),
                                      index);
    case CpuVector:
      return b.create<vector::LoadOp>(loc, VectorType::get({width}, element),
                                      views.getScalarView(role, element),
                                      index);
    case GpuVector: {
      int64_t lanes = 16 / getByteWidth(element);
      Value view = views.getChunkView(role, element);
      Value first =
          b.create<arith::DivUIOp>(loc, index, indexConstant(b, loc, lanes));
      SmallVector<Value> pieces;
      for (int64_t piece = 0; piece < width / lanes; ++piece) {
        Value at =
            b.create<arith::AddIOp>(loc, first, indexConstant(b, loc, piece));
        pieces.push_back(b.create<memref::LoadOp>(loc, view, at));
      }
      return concat(b, loc, pieces);
    }
    }
    llvm_unreachable("unknown access mode");
  }

  void store(OpBuilder &b, Location loc, Role role, Value value,
             Value index) const {
    Type element = getElementTypeOrSelf(value.getType());
    switch (mode) {
    case Scalar:
      b.create<memref::StoreOp>(loc, value, views.getScalarView(role, element),
                                index);
      return;
    case CpuVector:
      b.create<vector::StoreOp>(loc, value, views.getScalarView(role, element),
                                index);
      return;
    case GpuVector: {
      int64_t lanes = 16 / getByteWidth(element);
      Value view = views.getChunkView(role, element);
      Value first =
          b.create<arith::DivUIOp>(loc, index, indexConstant(b, loc, lanes));
      for (int64_t piece = 0; piece < width / lanes; ++piece) {
        Value part = value;
        if (lanes != width)
          part = b.create<vector::ExtractStridedSliceOp>(
              loc, value, ArrayRef<int64_t>{piece * lanes},
              ArrayRef<int64_t>{lanes}, ArrayRef<int64_t>{1});
        Value at =
            b.create<arith::AddIOp>(loc, first, indexConstant(b, loc, piece));
        b.create<memref::StoreOp>(loc, part, view, at);
      }
      return;
    }
    }
    llvm_unreachable("unknown access mode");
  }

private:
  static Value concat(OpBuilder &b, Location loc, ArrayRef<Value> pieces) {
    Value result = pieces.front();
    for (Value piece : pieces.drop_front()) {
      int64_t size = cast<VectorType>(result.getType()).getNumElements() +
                     cast<VectorType>(piece.getType()).getNumElements();
      SmallVector<int64_t> mask = llvm::to_vector(llvm::seq<int64_t>(0, size));
      result = b.create<vector::ShuffleOp>(loc, result, piece, mask);
    }
    return result;
  }
};

//===----------------------------------------------------------------------===//
// The element update
//===----------------------------------------------------------------------===//

/// The remainder master (`master: fp32_split`, runtime DType.h's
/// splitFp32Master): the bf16 parameter is the master rounded to nearest-
/// even, exactly the copy an fp32 master keeps, and the remainder is the
/// master's bits minus the parameter's, d in [-2^15, 2^15], stored as its low
/// 16 bits. Only d = +2^15 (an exact tie kept at its even truncation) shares
/// its 16 bits with d = -2^15; it is marked by the sign bit of the member's
/// exp_avg_sq, which Adam's second moment never needs (it is >= +0).
///
/// Reconstructs fp32 masters: (high << 16) + sext(low), plus 2^16 for a
/// marked tie.
Value decodeRemainder(const ElementBuilder &e, Value high, Value remainder,
                      Value upperTie) {
  OpBuilder &b = e.b;
  Type i32 = e.shaped(b.getI32Type());
  Value bits = b.create<arith::AddIOp>(
      e.loc,
      b.create<arith::ShLIOp>(e.loc, b.create<arith::ExtUIOp>(e.loc, i32, high),
                              e.integer(b.getI32Type(), 16)),
      b.create<arith::ExtSIOp>(e.loc, i32, remainder));
  bits = b.create<arith::AddIOp>(
      e.loc, bits,
      b.create<arith::SelectOp>(e.loc, upperTie,
                                e.integer(b.getI32Type(), 0x10000),
                                e.integer(b.getI32Type(), 0)));
  return b.create<arith::BitcastOp>(e.loc, e.shaped(b.getF32Type()), bits);
}

/// Splits an fp32 master into its bf16 copy (the master rounded as the
/// fp32-master arm rounds it), its 16-bit remainder and the tie mark.
/// NaN keeps a zero remainder and no mark.
struct EncodedRemainder {
  Value high, low, upperTie;
};
EncodedRemainder encodeRemainder(const ElementBuilder &e, Value master) {
  OpBuilder &b = e.b;
  Type i32 = b.getI32Type();
  Type i16 = e.shaped(b.getI16Type());
  Value bits = b.create<arith::BitcastOp>(e.loc, e.shaped(i32), master);
  // The copy's bits in the high half of an i32: on the CPU computed there
  // (ElementBuilder::roundToBF16Bits, whose NaN compare is the one below),
  // on the GPU from cvt.rn's bf16.
  Value high, highBits;
  if (e.nativeBF16) {
    high = b.create<arith::BitcastOp>(e.loc, i16,
                                      e.narrow(master, b.getBF16Type()));
    highBits = b.create<arith::ShLIOp>(
        e.loc, b.create<arith::ExtUIOp>(e.loc, e.shaped(i32), high),
        e.integer(i32, 16));
  } else {
    highBits = e.roundToBF16Bits(master);
    high = b.create<arith::BitcastOp>(e.loc, i16, e.bitsToBF16(highBits));
  }
  Value difference = b.create<arith::SubIOp>(e.loc, bits, highBits);
  Value isNaN =
      b.create<arith::CmpFOp>(e.loc, arith::CmpFPredicate::UNO, master, master);
  Value low =
      b.create<arith::SelectOp>(e.loc, isNaN, e.integer(i32, 0), difference);
  Value upperTie = b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::eq, low,
                                           e.integer(i32, 0x8000));
  return {high, b.create<arith::TruncIOp>(e.loc, i16, low), upperTie};
}

/// Whether the sign bit of an f32 is set (-0.0 included).
Value hasSignBit(const ElementBuilder &e, Value value) {
  OpBuilder &b = e.b;
  Type i32 = b.getI32Type();
  Value bits = b.create<arith::BitcastOp>(e.loc, e.shaped(i32), value);
  return b.create<arith::CmpIOp>(e.loc, arith::CmpIPredicate::slt, bits,
                                 e.integer(i32, 0));
}

/// `value` with its sign bit cleared (|value|, NaN kept).
Value clearSignBit(const ElementBuilder &e, Value value) {
  OpBuilder &b = e.b;
  Type i32 = b.getI32Type();
  Value bits = b.create<arith::BitcastOp>(e.loc, e.shaped(i32), value);
  Value cleared =
      b.create<arith::AndIOp>(e.loc, bits, e.integer(i32, 0x7FFFFFFF));
  return b.create<arith::BitcastOp>(e.loc, value.getType(), cleared);
}

/// IEEE square root. On the GPU it is the LLVM intrinsic (sqrt.rn.f32):
/// the NVVM conversion would call libdevice's __nv_sqrtf, which is the
/// approximate sqrt unless __CUDA_PREC_SQRT is reflected as 1.
Value emitSqrt(OpBuilder &b, Location loc, Value value, bool forGpu) {
  if (!forGpu)
    return b.create<math::SqrtOp>(loc, value);
  std::string name = "llvm.sqrt.";
  if (auto vector = dyn_cast<VectorType>(value.getType()))
    name += "v" + std::to_string(vector.getNumElements());
  name += "f32";
  return b
      .create<LLVM::CallIntrinsicOp>(loc, value.getType(),
                                     b.getStringAttr(name), ValueRange{value})
      .getResult(0);
}

/// Emits the update of one chunk (one element or one vector of elements) of
/// a member of `kind`; `indices` is the chunk's first element in each
/// buffer's typed view.
void emitChunkUpdate(OpBuilder &b, Location loc, const Kind &kind,
                     const ChunkAccess &access, ArrayRef<Value> indices,
                     const StepScalars &scalars, Value lerpCoeff,
                     Value lerpSmall, bool amsgrad, bool maximize,
                     bool forGpu) {
  MLIRContext *context = b.getContext();
  ElementBuilder e{b, loc,
                   access.mode == ChunkAccess::Scalar ? 0 : access.width,
                   /*nativeBF16=*/forGpu};
  auto storage = [&](Role role) { return getStorageType(context, kind, role); };
  auto load = [&](Role role) {
    return access.load(b, loc, role, storage(role), indices[role]);
  };
  auto store = [&](Role role, Value value) {
    access.store(b, loc, role, value, indices[role]);
  };
  Type paramType = train::getElementType(context, kind.param);
  Type momentsType = storage(ExpAvgRole);
  // Without a master, a bf16/fp16 parameter is updated as torch updates it:
  // each in-place op computes in fp32 and rounds to the parameter's dtype.
  Type roundingType =
      kind.isLowPrecisionArm() ? paramType : Type(b.getF32Type());
  auto round = [&](Value value) { return e.round(value, roundingType); };

  Value grad = e.widen(load(GradRole));
  // clip_grad_norm_'s grad.mul_(coefficient), rounded to the gradient's
  // dtype as the in-place op rounds (exact when the scale is 1).
  if (scalars.unitGradScale)
    grad = e.canonicalizeBF16NaN(grad);
  else if (scalars.gradScale)
    grad =
        e.round(b.create<arith::MulFOp>(loc, grad, e.splat(scalars.gradScale)),
                storage(GradRole));
  if (maximize)
    grad = b.create<arith::NegFOp>(loc, grad);

  Value expAvg = e.widen(load(ExpAvgRole));
  Value expAvgSq = e.widen(load(ExpAvgSqRole));
  Value param;
  switch (kind.master) {
  case MasterKind::None:
    param = e.widen(load(ParamRole));
    break;
  case MasterKind::FP32:
    param = load(MasterRole);
    break;
  case MasterKind::Remainder:
    // The sign of exp_avg_sq marks the master's upper tie (decodeRemainder).
    param = decodeRemainder(e, load(ParamRole), load(MasterRole),
                            hasSignBit(e, expAvgSq));
    expAvgSq = clearSignBit(e, expAvgSq);
    break;
  }

  // param.mul_(1 - lr * weight_decay)
  Value decayed =
      round(b.create<arith::MulFOp>(loc, param, e.splat(scalars.decay)));
  // exp_avg.lerp_(grad, 1 - beta1): ATen's vectorised lerp is
  // fma(w, end - self, self) for |w| < 0.5, else fma(w - 1, end - self, end).
  Value difference = b.create<arith::SubFOp>(loc, grad, expAvg);
  // A splat condition keeps the (uniform) choice a vector blend.
  Value lerpBase =
      b.create<arith::SelectOp>(loc, e.splat(lerpSmall), expAvg, grad);
  Value newExpAvg = round(
      b.create<math::FmaOp>(loc, e.splat(lerpCoeff), difference, lerpBase));
  // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2): the
  // addcmul kernel's (value * grad) * grad + self is contracted to an FMA.
  Value scaledSq =
      round(b.create<arith::MulFOp>(loc, expAvgSq, e.splat(scalars.beta2)));
  Value scaledGrad =
      b.create<arith::MulFOp>(loc, e.splat(scalars.oneMinusBeta2), grad);
  Value newExpAvgSq =
      round(b.create<math::FmaOp>(loc, scaledGrad, grad, scaledSq));
  Value second = newExpAvgSq;
  Value newMax;
  if (amsgrad) {
    // torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
    newMax = b.create<arith::MaximumFOp>(loc, e.widen(load(MaxExpAvgSqRole)),
                                         newExpAvgSq);
    second = newMax;
  }
  // denom = (second.sqrt() / bias_correction2_sqrt).add_(eps); the tensor-
  // scalar add casts eps to the tensor's dtype first.
  Value root = round(emitSqrt(b, loc, second, forGpu));
  Value scaledRoot = round(
      b.create<arith::DivFOp>(loc, root, e.splat(scalars.biasCorrection2Sqrt)));
  Value eps = e.round(e.splat(scalars.eps), roundingType);
  Value denom = round(b.create<arith::AddFOp>(loc, scaledRoot, eps));
  // param.addcdiv_(exp_avg, denom, value=-step_size):
  // self + (value * exp_avg) / denom.
  Value step = b.create<arith::DivFOp>(
      loc,
      b.create<arith::MulFOp>(loc, e.splat(scalars.negStepSize), newExpAvg),
      denom);
  Value newParam = round(b.create<arith::AddFOp>(loc, decayed, step));

  store(ExpAvgRole, e.narrow(newExpAvg, momentsType));
  if (amsgrad)
    store(MaxExpAvgSqRole, e.narrow(newMax, momentsType));
  switch (kind.master) {
  case MasterKind::None:
    store(ExpAvgSqRole, e.narrow(newExpAvgSq, momentsType));
    store(ParamRole, e.narrow(newParam, paramType));
    break;
  case MasterKind::FP32:
    store(ExpAvgSqRole, e.narrow(newExpAvgSq, momentsType));
    store(MasterRole, newParam);
    store(ParamRole, e.narrow(newParam, paramType));
    break;
  case MasterKind::Remainder: {
    EncodedRemainder encoded = encodeRemainder(e, newParam);
    store(ParamRole, encoded.high);
    store(MasterRole, encoded.low);
    // newExpAvgSq >= +0 (or NaN): negating it (exact, also after rounding
    // to the moments' dtype) sets only its sign bit, the tie mark.
    Value marked = b.create<arith::SelectOp>(
        loc, encoded.upperTie, b.create<arith::NegFOp>(loc, newExpAvgSq),
        newExpAvgSq);
    store(ExpAvgSqRole, e.narrow(marked, momentsType));
    break;
  }
  }
}

//===----------------------------------------------------------------------===//
// Tiles and member lookup
//===----------------------------------------------------------------------===//

/// The values the member lookup yields for a tile.
enum LookupField : unsigned {
  KindField,
  FirstTileField,
  CountField,
  GradOffsetField,
  ParamOffsetField,
  MasterOffsetField,
  MomentsOffsetField,
  NumLookupFields
};

/// Finds the member of `tile` by binary search over the members' first
/// tiles, unrolled into scf.if on constants, and yields its fields.
SmallVector<Value> emitMemberLookup(OpBuilder &b, Location loc, Value tile,
                                    ArrayRef<Placement> placements) {
  if (placements.size() == 1) {
    const Placement &p = placements.front();
    const Member &m = p.member;
    return {indexConstant(b, loc, p.kind),
            indexConstant(b, loc, p.firstTile),
            indexConstant(b, loc, m.count),
            indexConstant(b, loc, m.gradOffset),
            indexConstant(b, loc, m.paramOffset),
            indexConstant(b, loc, m.masterOffset),
            indexConstant(b, loc, m.momentsOffset)};
  }
  size_t middle = placements.size() / 2;
  Value inUpperHalf = b.create<arith::CmpIOp>(
      loc, arith::CmpIPredicate::uge, tile,
      indexConstant(b, loc, placements[middle].firstTile));
  SmallVector<Type> types(NumLookupFields, b.getIndexType());
  auto ifOp = b.create<scf::IfOp>(loc, types, inUpperHalf,
                                  /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    b.create<scf::YieldOp>(
        loc, emitMemberLookup(b, loc, tile, placements.drop_front(middle)));
    b.setInsertionPointToStart(ifOp.elseBlock());
    b.create<scf::YieldOp>(
        loc, emitMemberLookup(b, loc, tile, placements.take_front(middle)));
  }
  return SmallVector<Value>(ifOp.getResults());
}

/// Emits `body(kind)` for the kind `kindValue` names: inline for one kind,
/// else an scf.index_switch (the last kind is the default case).
void emitKindSwitch(OpBuilder &b, Location loc, Value kindValue,
                    size_t numKinds,
                    function_ref<void(OpBuilder &, unsigned)> body) {
  if (numKinds == 1) {
    body(b, 0);
    return;
  }
  SmallVector<int64_t> cases =
      llvm::to_vector(llvm::seq<int64_t>(0, numKinds - 1));
  auto switchOp = b.create<scf::IndexSwitchOp>(loc, TypeRange{}, kindValue,
                                               cases, cases.size());
  OpBuilder::InsertionGuard guard(b);
  for (unsigned kind = 0; kind < numKinds; ++kind) {
    Region &region = kind + 1 < numKinds ? switchOp.getCaseRegions()[kind]
                                         : switchOp.getDefaultRegion();
    Block *block = b.createBlock(&region);
    b.setInsertionPointToStart(block);
    body(b, kind);
    b.create<scf::YieldOp>(loc);
  }
}

/// The lowering of one op, shared by both targets.
class AdamWLowering {
public:
  AdamWLowering(AdamWUpdateOp op, int64_t tileSize)
      : op(op), members(op.getMemberList()), tileSize(tileSize) {
    int64_t tile = 0;
    for (const Member &member : members) {
      Kind kind = Kind::of(member);
      auto it = llvm::find(kinds, kind);
      unsigned kindIndex = it - kinds.begin();
      if (it == kinds.end())
        kinds.push_back(kind);
      int64_t numTiles = llvm::divideCeil(member.count, tileSize);
      placements.push_back({member, kindIndex, tile, numTiles});
      tile += numTiles;
    }
    numTiles = tile;
  }

  /// The operands that are buffers, by role (null where absent).
  SmallVector<Value> getBuffers() {
    return {op.getGrad(),   op.getParam(),    op.getMaster(),
            op.getExpAvg(), op.getExpAvgSq(), op.getMaxExpAvgSq()};
  }

  int64_t getNumTiles() const { return numTiles; }
  ArrayRef<Kind> getKinds() const { return kinds; }

  /// Emits the lerp coefficient and branch of `scalars` (uniform values).
  std::pair<Value, Value> emitLerpCoefficients(OpBuilder &b, Location loc,
                                               const StepScalars &scalars) {
    // |w| < 0.5, without fabs (which the NVVM conversion rejects).
    Value weight = scalars.lerpWeight;
    Value small = b.create<arith::AndIOp>(
        loc,
        b.create<arith::CmpFOp>(
            loc, arith::CmpFPredicate::OLT, weight,
            b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(0.5))),
        b.create<arith::CmpFOp>(
            loc, arith::CmpFPredicate::OGT, weight,
            b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(-0.5))));
    Value weightMinusOne = b.create<arith::SubFOp>(
        loc, weight, b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(1.0)));
    Value coeff = b.create<arith::SelectOp>(loc, small, weight, weightMinusOne);
    return {coeff, small};
  }

  /// Per-role element index of the first element `element` of the member
  /// whose byte offsets are in `fields`.
  SmallVector<Value> emitIndices(OpBuilder &b, Location loc, const Kind &kind,
                                 ArrayRef<Value> fields, Value element) {
    SmallVector<Value> indices(NumRoles);
    auto offsetField = [](Role role) -> LookupField {
      switch (role) {
      case GradRole:
        return GradOffsetField;
      case ParamRole:
        return ParamOffsetField;
      case MasterRole:
        return MasterOffsetField;
      default:
        return MomentsOffsetField;
      }
    };
    for (unsigned role = 0; role < NumRoles; ++role) {
      Type type = getStorageType(b.getContext(), kind, Role(role));
      Value first =
          b.create<arith::DivUIOp>(loc, fields[offsetField(Role(role))],
                                   indexConstant(b, loc, getByteWidth(type)));
      indices[role] = b.create<arith::AddIOp>(loc, first, element);
    }
    return indices;
  }

  /// CPU: updates tiles [firstTile, lastTile) in a loop, each with a vector
  /// loop and a scalar tail.
  void emitCpuLoop(OpBuilder &b, Location loc, BufferViews &views,
                   const StepScalars &scalars, Value firstTile, Value lastTile,
                   int64_t vectorWidth, bool gpuElementCode) {
    Value lerpCoeff, lerpSmall;
    std::tie(lerpCoeff, lerpSmall) = emitLerpCoefficients(b, loc, scalars);
    ChunkAccess vectorAccess{gpuElementCode ? ChunkAccess::GpuVector
                                            : ChunkAccess::CpuVector,
                             vectorWidth, views};
    ChunkAccess scalarAccess{ChunkAccess::Scalar, 1, views};
    Value one = indexConstant(b, loc, 1);
    auto tileLoop = b.create<scf::ForOp>(loc, firstTile, lastTile, one);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(tileLoop.getBody());
    Value tile = tileLoop.getInductionVar();
    SmallVector<Value> fields = emitMemberLookup(b, loc, tile, placements);
    emitKindSwitch(
        b, loc, fields[KindField], kinds.size(),
        [&](OpBuilder &b, unsigned kindIndex) {
          const Kind &kind = kinds[kindIndex];
          Value tileInMember =
              b.create<arith::SubIOp>(loc, tile, fields[FirstTileField]);
          Value begin = b.create<arith::MulIOp>(
              loc, tileInMember, indexConstant(b, loc, tileSize));
          Value end = b.create<arith::MinUIOp>(
              loc,
              b.create<arith::AddIOp>(loc, begin,
                                      indexConstant(b, loc, tileSize)),
              fields[CountField]);
          Value length = b.create<arith::SubIOp>(loc, end, begin);
          Value vectorLength = b.create<arith::MulIOp>(
              loc,
              b.create<arith::DivUIOp>(loc, length,
                                       indexConstant(b, loc, vectorWidth)),
              indexConstant(b, loc, vectorWidth));
          Value vectorEnd = b.create<arith::AddIOp>(loc, begin, vectorLength);
          auto emitLoop = [&](Value from, Value to, int64_t step,
                              const ChunkAccess &access,
                              const StepScalars &loopScalars, Value small) {
            auto loop = b.create<scf::ForOp>(loc, from, to,
                                             indexConstant(b, loc, step));
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPointToStart(loop.getBody());
            SmallVector<Value> indices =
                emitIndices(b, loc, kind, fields, loop.getInductionVar());
            emitChunkUpdate(b, loc, kind, access, indices, loopScalars,
                            lerpCoeff, small, op.getAmsgrad(), op.getMaximize(),
                            /*forGpu=*/gpuElementCode);
          };
          // Versions of the vector loop for uniform conditions, each bit for
          // bit the code it replaces; on AVX2 (16 vector registers) the loop
          // is bound by its instructions, and these take 11 of them:
          // - the lerp's branch (|1 - beta1| < 0.5), a blend whose mask,
          //   spilled, is rebuilt in every iteration;
          // - a gradient scale of 1 (whenever clipping's norm is below the
          //   limit): a bf16 gradient's multiply and rounding leave it
          //   unchanged but for NaN (StepScalars::unitGradScale).
          auto emitIf = [&](Value condition,
                            function_ref<void(bool)> emitVersion) {
            auto version = b.create<scf::IfOp>(loc, condition,
                                               /*withElseRegion=*/true);
            OpBuilder::InsertionGuard guard(b);
            b.setInsertionPointToStart(version.thenBlock());
            emitVersion(true);
            b.setInsertionPointToStart(version.elseBlock());
            emitVersion(false);
          };
          auto emitLerpVersions = [&](const StepScalars &loopScalars) {
            if (gpuElementCode) {
              emitLoop(begin, vectorEnd, vectorWidth, vectorAccess, loopScalars,
                       lerpSmall);
              return;
            }
            emitIf(lerpSmall, [&](bool small) {
              emitLoop(begin, vectorEnd, vectorWidth, vectorAccess, loopScalars,
                       b.create<arith::ConstantOp>(loc, b.getBoolAttr(small)));
            });
          };
          if (scalars.gradScale && !gpuElementCode &&
              getStorageType(b.getContext(), kind, GradRole).isBF16()) {
            Value isOne = b.create<arith::CmpFOp>(
                loc, arith::CmpFPredicate::OEQ, scalars.gradScale,
                b.create<arith::ConstantOp>(loc, b.getF32FloatAttr(1.0)));
            emitIf(isOne, [&](bool unit) {
              StepScalars loopScalars = scalars;
              loopScalars.unitGradScale = unit;
              emitLerpVersions(loopScalars);
            });
          } else {
            emitLerpVersions(scalars);
          }
          emitLoop(vectorEnd, end, 1, scalarAccess, scalars, lerpSmall);
        });
  }

  /// GPU: the body of the kernel; the blocks stride over tiles
  /// [firstTile, endTile), each block a tile at a time in chunks of
  /// `blockSize * 8` elements, each thread 8 consecutive elements with
  /// 128-bit accesses, or fewer one at a time at the end of a member.
  void emitGpuKernelBody(OpBuilder &b, Location loc, BufferViews &views,
                         const StepScalars &scalars, Value firstTile,
                         Value endTile, int64_t blockSize) {
    Value lerpCoeff, lerpSmall;
    std::tie(lerpCoeff, lerpSmall) = emitLerpCoefficients(b, loc, scalars);
    ChunkAccess vectorAccess{ChunkAccess::GpuVector, kGpuChunk, views};
    ChunkAccess scalarAccess{ChunkAccess::Scalar, 1, views};
    Value thread = b.create<gpu::ThreadIdOp>(loc, gpu::Dimension::x);
    Value block = b.create<gpu::BlockIdOp>(loc, gpu::Dimension::x);
    Value grid = b.create<gpu::GridDimOp>(loc, gpu::Dimension::x);
    Value threadFirst =
        b.create<arith::MulIOp>(loc, thread, indexConstant(b, loc, kGpuChunk));
    auto tileLoop = b.create<scf::ForOp>(
        loc, b.create<arith::AddIOp>(loc, firstTile, block), endTile, grid);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(tileLoop.getBody());
    Value tile = tileLoop.getInductionVar();
    SmallVector<Value> fields = emitMemberLookup(b, loc, tile, placements);
    emitKindSwitch(
        b, loc, fields[KindField], kinds.size(),
        [&](OpBuilder &b, unsigned kindIndex) {
          const Kind &kind = kinds[kindIndex];
          Value tileInMember =
              b.create<arith::SubIOp>(loc, tile, fields[FirstTileField]);
          Value tileBegin = b.create<arith::MulIOp>(
              loc, tileInMember, indexConstant(b, loc, tileSize));
          auto chunkLoop = b.create<scf::ForOp>(
              loc, threadFirst, indexConstant(b, loc, tileSize),
              indexConstant(b, loc, blockSize * kGpuChunk));
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(chunkLoop.getBody());
          Value first = b.create<arith::AddIOp>(loc, tileBegin,
                                                chunkLoop.getInductionVar());
          Value count = fields[CountField];
          Value inMember = b.create<arith::CmpIOp>(
              loc, arith::CmpIPredicate::ult, first, count);
          auto inside = b.create<scf::IfOp>(loc, inMember, false);
          b.setInsertionPointToStart(inside.thenBlock());
          Value chunkEnd = b.create<arith::AddIOp>(
              loc, first, indexConstant(b, loc, kGpuChunk));
          Value whole = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ule,
                                                chunkEnd, count);
          auto split = b.create<scf::IfOp>(loc, whole, true);
          b.setInsertionPointToStart(split.thenBlock());
          emitChunkUpdate(b, loc, kind, vectorAccess,
                          emitIndices(b, loc, kind, fields, first), scalars,
                          lerpCoeff, lerpSmall, op.getAmsgrad(),
                          op.getMaximize(),
                          /*forGpu=*/true);
          b.setInsertionPointToStart(split.elseBlock());
          auto tail =
              b.create<scf::ForOp>(loc, first, count, indexConstant(b, loc, 1));
          b.setInsertionPointToStart(tail.getBody());
          emitChunkUpdate(
              b, loc, kind, scalarAccess,
              emitIndices(b, loc, kind, fields, tail.getInductionVar()),
              scalars, lerpCoeff, lerpSmall, op.getAmsgrad(), op.getMaximize(),
              /*forGpu=*/true);
        });
  }

private:
  AdamWUpdateOp op;
  SmallVector<Member> members;
  SmallVector<Kind> kinds;
  SmallVector<Placement> placements;
  int64_t tileSize;
  int64_t numTiles = 0;
};

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

struct LowerAdamWPass
    : public mantissa::impl::LowerAdamWPassBase<LowerAdamWPass> {
  using LowerAdamWPassBase::LowerAdamWPassBase;

  void runOnOperation() override {
    if (target != "cpu" && target != "gpu") {
      getOperation().emitError()
          << "mantissa-lower-adamw: unknown target '" << std::string(target)
          << "' (expected 'cpu' or 'gpu')";
      return signalPassFailure();
    }
    if (testGpuElementCode && vectorWidth != kGpuChunk) {
      getOperation().emitError()
          << "mantissa-lower-adamw: test-gpu-element-code needs vector-width "
          << kGpuChunk;
      return signalPassFailure();
    }
    if (target == "gpu" && (tileSize <= 0 || tileSize % kGpuChunk != 0)) {
      getOperation().emitError()
          << "mantissa-lower-adamw: tile-size " << int64_t(tileSize)
          << " must be a positive multiple of " << kGpuChunk
          << " on the GPU (a thread's chunk)";
      return signalPassFailure();
    }
    if (vectorWidth == 0 || tileSize <= 0 || tileSize % vectorWidth != 0) {
      getOperation().emitError()
          << "mantissa-lower-adamw: tile-size " << int64_t(tileSize)
          << " must be a positive multiple of vector-width "
          << unsigned(vectorWidth);
      return signalPassFailure();
    }
    SmallVector<AdamWUpdateOp> ops;
    getOperation().walk([&](AdamWUpdateOp op) { ops.push_back(op); });
    for (AdamWUpdateOp op : ops) {
      LogicalResult result =
          target == "cpu" ? lowerForCpu(op) : lowerForGpu(op);
      if (failed(result))
        return signalPassFailure();
    }
  }

  /// The op's tiles: [p * T / n, (p + 1) * T / n) for slice(p, n), else
  /// all T.
  static std::pair<Value, Value> emitSliceTiles(OpBuilder &b, Location loc,
                                                AdamWUpdateOp op,
                                                const AdamWLowering &lowering) {
    Value numTiles = indexConstant(b, loc, lowering.getNumTiles());
    if (!op.getPart())
      return {indexConstant(b, loc, 0), numTiles};
    auto boundary = [&](Value part) -> Value {
      return b.create<arith::DivUIOp>(
          loc, b.create<arith::MulIOp>(loc, part, numTiles), op.getParts());
    };
    return {boundary(op.getPart()),
            boundary(b.create<arith::AddIOp>(loc, op.getPart(),
                                             indexConstant(b, loc, 1)))};
  }

  LogicalResult lowerForCpu(AdamWUpdateOp op) {
    OpBuilder b(op);
    Location loc = op.getLoc();
    AdamWLowering lowering(op, tileSize);
    StepScalars scalars = emitStepScalars(b, loc, op);
    BufferViews views(lowering.getBuffers());
    views.prepare(b, loc, lowering.getKinds(),
                  /*withChunks=*/testGpuElementCode);
    auto [firstTile, lastTile] = emitSliceTiles(b, loc, op, lowering);
    lowering.emitCpuLoop(b, loc, views, scalars, firstTile, lastTile,
                         vectorWidth, testGpuElementCode);
    op.erase();
    return success();
  }

  LogicalResult lowerForGpu(AdamWUpdateOp op) {
    ModuleOp module = getOperation();
    Location loc = op.getLoc();
    AdamWLowering lowering(op, tileSize);
    module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                    UnitAttr::get(module.getContext()));

    // The kernel: the op's buffers, the step's fp32 scalars, then the
    // tiles [first, end) it updates (a rank's shard).
    SmallVector<Value> buffers;
    for (Value buffer : lowering.getBuffers())
      if (buffer)
        buffers.push_back(buffer);
    SmallVector<Type> argTypes = llvm::to_vector(
        llvm::map_range(buffers, [](Value v) { return v.getType(); }));
    argTypes.append(kNumStepScalars, Float32Type::get(module.getContext()));
    argTypes.append(2, IndexType::get(module.getContext()));

    auto parent = op->getParentOfType<FunctionOpInterface>();
    std::string baseName =
        (parent ? parent.getName() : StringRef("adamw")).str();
    OpBuilder moduleBuilder = OpBuilder::atBlockEnd(module.getBody());
    auto gpuModule =
        moduleBuilder.create<gpu::GPUModuleOp>(loc, baseName + "_kernels");
    SymbolTable(module).insert(gpuModule);
    OpBuilder kernelBuilder = OpBuilder::atBlockBegin(gpuModule.getBody());
    auto kernel = kernelBuilder.create<gpu::GPUFuncOp>(
        loc, baseName + "_kernel", kernelBuilder.getFunctionType(argTypes, {}));
    kernel->setAttr(gpu::GPUDialect::getKernelFuncAttrName(),
                    kernelBuilder.getUnitAttr());
    kernel.setKnownBlockSizeAttr(
        kernelBuilder.getDenseI32ArrayAttr({int32_t(gpuBlockSize), 1, 1}));
    {
      OpBuilder b = OpBuilder::atBlockBegin(&kernel.getBody().front());
      ValueRange args = kernel.getArguments();
      SmallVector<Value> kernelBuffers(NumRoles);
      unsigned next = 0;
      for (auto [role, buffer] : llvm::enumerate(lowering.getBuffers()))
        if (buffer)
          kernelBuffers[role] = args[next++];
      BufferViews views(kernelBuffers);
      views.prepare(b, loc, lowering.getKinds(), /*withChunks=*/true);
      StepScalars scalars = StepScalars::fromList(args.drop_front(next));
      Value firstTile = args[next + kNumStepScalars];
      Value endTile = args[next + kNumStepScalars + 1];
      lowering.emitGpuKernelBody(b, loc, views, scalars, firstTile, endTile,
                                 gpuBlockSize);
      b.create<gpu::ReturnOp>(loc);
    }

    // The launch, in place of the op.
    OpBuilder b(op);
    StepScalars scalars = emitStepScalars(b, loc, op);
    auto [firstTile, endTile] = emitSliceTiles(b, loc, op, lowering);
    SmallVector<Value> operands = buffers;
    llvm::append_range(operands, scalars.asList(b, loc));
    operands.push_back(firstTile);
    operands.push_back(endTile);
    Value one = indexConstant(b, loc, 1);
    // One block per tile (at least one, for an empty slice).
    Value blocks = b.create<arith::MaxUIOp>(
        loc, b.create<arith::SubIOp>(loc, endTile, firstTile), one);
    gpu::KernelDim3 grid{blocks, one, one};
    gpu::KernelDim3 blockSize{indexConstant(b, loc, gpuBlockSize), one, one};
    b.create<gpu::LaunchFuncOp>(loc, kernel, grid, blockSize, Value(),
                                operands);
    op.erase();
    return success();
  }
};

} // namespace
