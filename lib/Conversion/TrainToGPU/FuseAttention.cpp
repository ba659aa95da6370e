//===- FuseAttention.cpp - Causal-softmax attention as one op each way ----===//
//
// mantissa-fuse-attention (Passes.td): the joint graph's attention, as
// torch exports it under autocast, becomes train.attention_kernel forward
// and backward, which the GPU program runs as flash-attention kernels.
// Masked (causal, or any [S, S] bool mask, or one per batch or head such
// as a padded batch's [B, 1, 1, S] key padding mask) or not masked at all
// (an encoder's: no `where`s, the op `unmasked`).
//
// Forward, per layer (B batches, H heads, S positions, D per head):
//
//   scores = bmm(bf16 q, bf16 k^T)           [B*H, S, S] bf16
//   x = where(mask, -inf, view(scores) * scale)
//   p = softmax(cast<f32>(x), dim = -1)      [B, H, S, S] f32
//   out = bmm(cast<bf16>(view(p)), v)        [B*H, S, D] bf16
//
// Backward (dout the gradient of out):
//
//   dv = bmm(cast<bf16>(view(p)^T), dout)
//   dp = bmm(dout, v^T)
//   t = view(dp) * p;  ds = t - p * sum(t, -1)
//   g = cast<bf16>(view(where(mask, 0, ds) * scale))
//
// A model exported in bf16 has the same graph with dp widened to fp32
// before the product and ds rounded to bf16 before it is masked and scaled
// (in bf16); the backward op then rounds it there too (rounded_gradient).
//   dk^T = bmm(q^T, g);  dq = bmm(g, k)
//
// Every operand is reached through views that merge or split [B, H],
// transposes of the last two dimensions and roundings to bf16 (of fp32 or
// of a widened bf16 value), from a [B, H, S, D] tensor; the fused ops take
// those tensors rounded to bf16 once. Where the probabilities have other
// readers, nothing is fused. The ops the fusion leaves unused go, and so do
// the view and transpose round trips between the fused ops' results and
// their readers.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/FusedAttention.h"
#include "mantissa/Conversion/Passes.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_FUSEATTENTIONPASS
#include "mantissa/Conversion/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

RankedTensorType typeOf(Type type) { return dyn_cast<RankedTensorType>(type); }
RankedTensorType typeOf(Value value) { return typeOf(value.getType()); }

/// Whether `permute` swaps the last two dimensions only.
bool swapsLastTwo(train::PermuteOp permute) {
  ArrayRef<int64_t> dims = permute.getDims();
  int64_t rank = dims.size();
  if (rank < 2)
    return false;
  for (int64_t i = 0; i < rank - 2; ++i)
    if (dims[i] != i)
      return false;
  return dims[rank - 2] == rank - 1 && dims[rank - 1] == rank - 2;
}

/// Whether `view` merges the first two dimensions of a 4-D tensor or
/// splits the first of a 3-D one (so [B, H, a, b] <-> [B * H, a, b]).
bool mergesBatchAndHeads(train::ViewOp view) {
  RankedTensorType from = typeOf(view.getInput()), to = typeOf(view.getType());
  if (!from || !to)
    return false;
  if (from.getRank() == 3 && to.getRank() == 4)
    std::swap(from, to);
  if (from.getRank() != 4 || to.getRank() != 3)
    return false;
  ArrayRef<int64_t> four = from.getShape(), three = to.getShape();
  return four[0] * four[1] == three[0] && four[2] == three[1] &&
         four[3] == three[2];
}

/// A matrix operand traced back to a [B, H, rows, columns] tensor: the
/// operand is `source` (rounded to bf16 once), transposed or not.
struct Traced {
  Value source;
  bool transposed = false;
};

/// Traces `value` back through views of [B, H], transposes of the last two
/// dimensions and casts between fp32 and bf16, to the farthest 4-D tensor
/// on the way.
std::optional<Traced> trace(Value value) {
  std::optional<Traced> found;
  bool transposed = false;
  Type bf16 = BFloat16Type::get(value.getContext());
  while (value) {
    RankedTensorType type = typeOf(value);
    if (!type)
      break;
    Type element = type.getElementType();
    if (!element.isF32() && element != bf16)
      break;
    if (type.getRank() == 4)
      found = Traced{value, transposed};
    Operation *op = value.getDefiningOp();
    if (auto cast = dyn_cast_or_null<train::CastOp>(op)) {
      value = cast.getInput();
    } else if (auto view = dyn_cast_or_null<train::ViewOp>(op);
               view && mergesBatchAndHeads(view)) {
      value = view.getInput();
    } else if (auto permute = dyn_cast_or_null<train::PermuteOp>(op);
               permute && swapsLastTwo(permute)) {
      value = permute.getInput();
      transposed = !transposed;
    } else {
      break;
    }
  }
  return found;
}

/// Whether `value` is a train.full of `expected`.
bool isFull(Value value, double expected) {
  auto full = value.getDefiningOp<train::FullOp>();
  auto real = full ? dyn_cast<FloatAttr>(full.getValue()) : FloatAttr();
  return real && real.getValueAsDouble() == expected;
}

/// `op`'s scalar as a double, if a float.
std::optional<double> getScale(train::MulScalarOp op) {
  if (auto real = dyn_cast<FloatAttr>(op.getScalar()))
    return real.getValueAsDouble();
  return std::nullopt;
}

/// Users of `value` through views, casts and transposes (the leaves:
/// anything else).
SmallVector<Operation *> leafUsers(Value value) {
  SmallVector<Operation *> leaves;
  SmallVector<Value> work = {value};
  while (!work.empty()) {
    Value next = work.pop_back_val();
    for (Operation *user : next.getUsers()) {
      auto permute = dyn_cast<train::PermuteOp>(user);
      if (isa<train::ViewOp, train::CastOp>(user) ||
          (permute && swapsLastTwo(permute)))
        work.push_back(user->getResult(0));
      else if (!llvm::is_contained(leaves, user))
        leaves.push_back(user);
    }
  }
  return leaves;
}

/// One layer's attention, forward and backward, as matched.
struct Attention {
  Value query, key, value, mask, gradient;
  double scale;
  train::BatchMatmulOp scores, out, dv, dp, dq, dkTransposed;
  /// Whether the graph rounds the scores' gradient to bf16 before it
  /// scales it (in bf16 again): a model exported in bf16.
  bool roundedGradient = false;
  /// The op the backward must come before (the first of the backward's
  /// products).
  Operation *backwardAt;
};

/// Whether `traced` is `expected`'s source, transposed as given.
bool isSource(std::optional<Traced> traced, Value expected, bool transposed) {
  return traced && traced->source == expected &&
         traced->transposed == transposed;
}

/// Matches the forward and backward around `softmax`.
std::optional<Attention> match(train::SoftmaxOp softmax) {
  MLIRContext *context = softmax.getContext();
  Type bf16 = BFloat16Type::get(context);
  RankedTensorType probabilities = typeOf(softmax.getType());
  if (!probabilities || probabilities.getRank() != 4 || softmax.getDim() != 3 ||
      !probabilities.getElementType().isF32())
    return std::nullopt;
  Value input = softmax.getInput();
  if (auto cast = input.getDefiningOp<train::CastOp>())
    input = cast.getInput();
  // Masked (-inf where the mask is true), or not at all: every query sees
  // every key, as in an encoder.
  Value mask;
  if (auto masked = input.getDefiningOp<train::WhereOp>()) {
    if (!isFull(masked.getLhs(), -INFINITY))
      return std::nullopt;
    mask = masked.getCondition();
    input = masked.getRhs();
  }
  auto scaled = input.getDefiningOp<train::MulScalarOp>();
  std::optional<double> scale = scaled ? getScale(scaled) : std::nullopt;
  auto scoresView =
      scaled ? scaled.getInput().getDefiningOp<train::ViewOp>() : nullptr;
  if (!scale || !scoresView || !mergesBatchAndHeads(scoresView))
    return std::nullopt;
  auto scores = scoresView.getInput().getDefiningOp<train::BatchMatmulOp>();
  if (!scores || typeOf(scores.getType()).getElementType() != bf16 ||
      typeOf(scores.getLhs()).getElementType() != bf16)
    return std::nullopt;
  std::optional<Traced> query = trace(scores.getLhs());
  std::optional<Traced> keyTransposed = trace(scores.getRhs());
  if (!query || query->transposed || !keyTransposed ||
      !keyTransposed->transposed)
    return std::nullopt;
  Attention attention;
  attention.scores = scores;
  attention.query = query->source;
  attention.key = keyTransposed->source;
  attention.mask = mask;
  attention.scale = *scale;
  RankedTensorType maskType = mask ? typeOf(mask) : RankedTensorType();
  ArrayRef<int64_t> shape = typeOf(attention.query).getShape();
  if ((mask &&
       (!maskType || !maskType.hasStaticShape() ||
        !maskType.getElementType().isInteger(1) ||
        !train::AttentionKernelOp::isMaskShape(maskType.getShape(), shape))) ||
      typeOf(attention.key).getShape() != shape ||
      !whyAttentionShapeIsUnsupported(shape[2], shape[3]).empty())
    return std::nullopt;

  // The probabilities' readers: the forward product, the values'
  // gradient, and the softmax backward's two products.
  train::MulOp product, correction;
  for (Operation *user : leafUsers(softmax.getResult())) {
    if (auto bmm = dyn_cast<train::BatchMatmulOp>(user)) {
      std::optional<Traced> lhs = trace(bmm.getLhs());
      if (!lhs || lhs->source != softmax.getResult())
        return std::nullopt;
      (lhs->transposed ? attention.dv : attention.out) = bmm;
    } else if (auto mul = dyn_cast<train::MulOp>(user)) {
      Value other =
          mul.getLhs() == softmax.getResult() ? mul.getRhs() : mul.getLhs();
      (other.getDefiningOp<train::SumOp>() ? correction : product) = mul;
    } else {
      return std::nullopt;
    }
  }
  if (!attention.out || !attention.dv || !product || !correction)
    return std::nullopt;
  std::optional<Traced> value = trace(attention.out.getRhs());
  if (!value || value->transposed || typeOf(value->source).getShape() != shape)
    return std::nullopt;
  attention.value = value->source;
  attention.gradient = attention.dv.getRhs();

  // t = view(dp) * p, dp = bmm(dout, v^T); ds = t - p * sum(t, -1).
  Value dpView = product.getLhs() == softmax.getResult() ? product.getRhs()
                                                         : product.getLhs();
  // Widened to fp32 first where the graph is bf16 throughout.
  if (auto widened = dpView.getDefiningOp<train::CastOp>())
    dpView = widened.getInput();
  auto dpReshape = dpView.getDefiningOp<train::ViewOp>();
  auto dp = dpReshape && mergesBatchAndHeads(dpReshape)
                ? dpReshape.getInput().getDefiningOp<train::BatchMatmulOp>()
                : nullptr;
  if (!dp || dp.getLhs() != attention.gradient ||
      !isSource(trace(dp.getRhs()), attention.value, true))
    return std::nullopt;
  attention.dp = dp;
  auto sum = (correction.getLhs() == softmax.getResult() ? correction.getRhs()
                                                         : correction.getLhs())
                 .getDefiningOp<train::SumOp>();
  if (!sum || sum.getInput() != product.getResult() || !sum.getKeepdim() ||
      sum.getDims() != ArrayRef<int64_t>{3} ||
      !llvm::hasNItems(product->getUses(), 2))
    return std::nullopt;
  train::SubOp difference;
  for (Operation *user : product->getUsers())
    if (auto sub = dyn_cast<train::SubOp>(user);
        sub && sub.getLhs() == product.getResult() &&
        sub.getRhs() == correction.getResult())
      difference = sub;
  if (!difference || !difference->hasOneUse())
    return std::nullopt;
  // Rounded to bf16 before it is masked and scaled where the graph is bf16
  // throughout.
  Value scoresGradient = difference.getResult();
  if (auto rounding = dyn_cast<train::CastOp>(*difference->user_begin())) {
    if (typeOf(rounding.getType()).getElementType() != bf16 ||
        !rounding->hasOneUse())
      return std::nullopt;
    scoresGradient = rounding.getResult();
    attention.roundedGradient = true;
  }
  // Zero where the mask is true (unmasked: nowhere).
  if (attention.mask) {
    auto zeroed = dyn_cast<train::WhereOp>(*scoresGradient.user_begin());
    if (!zeroed || zeroed.getCondition() != attention.mask ||
        !isFull(zeroed.getLhs(), 0.0) || zeroed.getRhs() != scoresGradient ||
        !zeroed->hasOneUse())
      return std::nullopt;
    scoresGradient = zeroed.getResult();
  }
  auto rescaled = dyn_cast<train::MulScalarOp>(*scoresGradient.user_begin());
  if (!rescaled || getScale(rescaled) != attention.scale)
    return std::nullopt;

  // dk^T = bmm(q^T, g), dq = bmm(g, k), g the rounded scores' gradient.
  for (Operation *user : leafUsers(rescaled.getResult())) {
    auto bmm = dyn_cast<train::BatchMatmulOp>(user);
    if (!bmm)
      return std::nullopt;
    std::optional<Traced> lhs = trace(bmm.getLhs());
    std::optional<Traced> rhs = trace(bmm.getRhs());
    if (typeOf(bmm.getLhs()).getElementType() != bf16)
      return std::nullopt;
    if (isSource(rhs, rescaled.getResult(), false) &&
        isSource(lhs, attention.query, true))
      attention.dkTransposed = bmm;
    else if (isSource(lhs, rescaled.getResult(), false) &&
             isSource(rhs, attention.key, false))
      attention.dq = bmm;
    else
      return std::nullopt;
  }
  if (!attention.dq || !attention.dkTransposed)
    return std::nullopt;
  // Every product bf16, as the kernels compute them.
  for (train::BatchMatmulOp bmm :
       {attention.out, attention.dv, dp, attention.dq, attention.dkTransposed})
    if (typeOf(bmm.getType()).getElementType() != bf16 ||
        typeOf(bmm.getLhs()).getElementType() != bf16)
      return std::nullopt;
  attention.backwardAt = attention.dv->isBeforeInBlock(dp)
                             ? attention.dv.getOperation()
                             : dp.getOperation();
  // The backward comes where the forward's results exist (in a joint
  // graph, always).
  if (!attention.out->isBeforeInBlock(attention.backwardAt))
    return std::nullopt;
  return attention;
}

/// Replaces the matched products by the fused ops' results.
void rewrite(Attention attention) {
  MLIRContext *context = attention.query.getContext();
  Type bf16 = BFloat16Type::get(context), f32 = Float32Type::get(context);
  ArrayRef<int64_t> shape = typeOf(attention.query).getShape();
  auto tensorOf = [&](ArrayRef<int64_t> dims, Type element) {
    return RankedTensorType::get(dims, element);
  };
  RankedTensorType full = tensorOf(shape, bf16);
  RankedTensorType rows = tensorOf(shape.take_front(3), f32);
  // Each fused op where the products it replaces came from.
  auto locationOf = [&](ArrayRef<train::BatchMatmulOp> products) {
    SmallVector<Location> locations;
    for (train::BatchMatmulOp product : products)
      locations.push_back(product.getLoc());
    return FusedLoc::get(context, locations);
  };
  Location loc = locationOf({attention.scores, attention.out});
  OpBuilder b(attention.out);
  auto rounded = [&](Value value) -> Value {
    if (typeOf(value).getElementType() == bf16)
      return value;
    return b.create<train::CastOp>(value.getLoc(), full, value);
  };
  auto empty = [&](RankedTensorType type) -> Value {
    return b.create<tensor::EmptyOp>(loc, type.getShape(),
                                     type.getElementType());
  };
  FloatAttr scale = b.getF64FloatAttr(attention.scale);
  Value query = rounded(attention.query), key = rounded(attention.key),
        value = rounded(attention.value);
  // The inputs before the forward's results: q, k, v and the mask, if any.
  SmallVector<Value> inputs = {query, key, value};
  if (attention.mask)
    inputs.push_back(attention.mask);
  UnitAttr unmasked = attention.mask ? UnitAttr() : b.getUnitAttr();
  auto forward = b.create<train::AttentionKernelOp>(
      loc, TypeRange{full, rows}, inputs, ValueRange{empty(full), empty(rows)},
      UnitAttr(), scale, UnitAttr(), unmasked);
  auto replace = [&](train::BatchMatmulOp product, Value by) {
    product.replaceAllUsesWith(
        b.create<train::ViewOp>(product.getLoc(), product.getType(), by)
            .getResult());
  };
  replace(attention.out, forward.getResult(0));

  b.setInsertionPoint(attention.backwardAt);
  loc = locationOf(
      {attention.dv, attention.dp, attention.dq, attention.dkTransposed});
  Value gradient =
      b.create<train::ViewOp>(loc, full, attention.gradient).getResult();
  inputs.append({forward.getResult(0), forward.getResult(1), gradient});
  auto backward = b.create<train::AttentionKernelOp>(
      loc, TypeRange{full, full, full, rows}, inputs,
      ValueRange{empty(full), empty(full), empty(full), empty(rows)},
      b.getUnitAttr(), scale,
      attention.roundedGradient ? b.getUnitAttr() : UnitAttr(), unmasked);
  replace(attention.dq, backward.getResult(0));
  replace(attention.dv, backward.getResult(2));
  Value keyGradient = b.create<train::PermuteOp>(
      loc, backward.getResult(1), b.getDenseI64ArrayAttr({0, 1, 3, 2}));
  replace(attention.dkTransposed, keyGradient);
}

/// Folds the round trips the rewrite leaves between the fused ops' [B, H,
/// S, D] results and the graph's [B * H, ...] readers: a view to the type
/// it started from, a view of a view, a permute of a permute that undoes
/// it. Returns whether it changed anything.
bool foldRoundTrips(Block &body) {
  bool changed = false;
  for (Operation &op : llvm::make_early_inc_range(body)) {
    if (auto view = dyn_cast<train::ViewOp>(op)) {
      Value input = view.getInput();
      if (auto inner = input.getDefiningOp<train::ViewOp>()) {
        view.getInputMutable().assign(inner.getInput());
        input = inner.getInput();
        changed = true;
      }
      if (input.getType() == view.getType() && !view->use_empty()) {
        view.replaceAllUsesWith(input);
        changed = true;
      }
    } else if (auto permute = dyn_cast<train::PermuteOp>(op)) {
      auto inner = permute.getInput().getDefiningOp<train::PermuteOp>();
      if (!inner || permute->use_empty())
        continue;
      ArrayRef<int64_t> outer = permute.getDims(), first = inner.getDims();
      bool identity = true;
      for (auto [position, dim] : llvm::enumerate(outer))
        identity &= first[dim] == int64_t(position);
      if (identity) {
        permute.replaceAllUsesWith(inner.getInput());
        changed = true;
      }
    }
  }
  return changed;
}

struct FuseAttentionPass
    : public mantissa::impl::FuseAttentionPassBase<FuseAttentionPass> {
  void runOnOperation() override {
    getOperation().walk([](train::StepOp step) {
      SmallVector<train::SoftmaxOp> softmaxes(
          step.getBody().getOps<train::SoftmaxOp>());
      bool changed = false;
      for (train::SoftmaxOp softmax : softmaxes)
        if (std::optional<Attention> attention = match(softmax)) {
          rewrite(*attention);
          changed = true;
        }
      if (!changed)
        return;
      Block &body = step.getBody().front();
      while (foldRoundTrips(body)) {
      }
      // What the fused ops leave unused, last reader first.
      for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
        if (op.use_empty() && isMemoryEffectFree(&op) &&
            !op.hasTrait<OpTrait::IsTerminator>())
          op.erase();
    });
  }
};

} // namespace
