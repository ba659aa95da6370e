//===- FuseAttention.cpp - Causal-softmax attention as one op each way ----===//
//
// mantissa-fuse-attention (Passes.td): the joint graph's attention, as
// torch exports it under autocast, becomes train.attention_kernel forward
// and backward, which the GPU program runs as flash-attention kernels.
// Masked (causal, or any [S, S] bool mask, or one per batch or head such
// as a padded batch's [B, 1, 1, S] key padding mask), or by an fp32 mask
// added to the scaled scores (BERT's, Hugging Face's, ALiBi's), or not
// masked at all (an encoder's: no `where`s, the op `unmasked`). Attention
// written out, as below, or F.scaled_dot_product_attention as the importer
// decomposes torch's operator (matchSdpa; in a bf16 model also with a bf16
// float mask, which the graph widens and the fused ops take widened once).
//
// Forward, per layer (B batches, H heads, S positions, D per head):
//
//   scores = bmm(bf16 q, bf16 k^T)           [B*H, S, S] bf16
//   x = where(mask, -inf, view(scores) * scale)
//       (or view(scores) * scale + mask, an fp32 mask, then x is fp32)
//   p = softmax(cast<f32>(x), dim = -1)      [B, H, S, S] f32
//   out = bmm(cast<bf16>(view(p)), v)        [B*H, S, D] bf16
//
// Backward (dout the gradient of out):
//
//   dv = bmm(cast<bf16>(view(p)^T), dout)
//   dp = bmm(dout, v^T)
//   t = view(dp) * p;  ds = t - p * sum(t, -1)
//   g = cast<bf16>(view(where(mask, 0, ds) * scale))  (an fp32 mask: no where)
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

#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Transforms/GPU/FusedAttention.h"
#include "mantissa/Transforms/GPU/Passes.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_FUSEATTENTIONPASS
#include "mantissa/Transforms/GPU/Passes.h.inc"
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
  /// Where the mask is the one that keeps (true: the key is seen), as
  /// SDPA's bool attn_mask: the fused ops take its negation.
  bool maskKeeps = false;
  /// Where the mask is fp32 and added to the scaled scores (an additive
  /// mask or a bias such as ALiBi's): the fused ops take it as it is.
  bool maskAdds = false;
  double scale;
  /// The products the fused ops replace, whose results they give (dk's
  /// transposed, k^T's gradient, where `keyGradientTransposed`).
  train::BatchMatmulOp scores, out, dv, dp, dq, dk;
  bool keyGradientTransposed = true;
  /// Whether the graph rounds the scores' gradient to bf16 before it
  /// scales it (in bf16 again): a model exported in bf16.
  bool roundedGradient = false;
  /// Whether the graph keeps the scores and dp in fp32 (products of bf16
  /// operands with fp32 results), as torch's SDPA kernels do.
  bool fp32Scores = false;
  /// The op the backward must come before (the first of the backward's
  /// products).
  Operation *backwardAt;
};

/// Whether `traced` is `expected`'s source, transposed as given.
bool isSource(std::optional<Traced> traced, Value expected, bool transposed) {
  return traced && traced->source == expected &&
         traced->transposed == transposed;
}

/// The [B, H, S, D] query and key whose product `scores` is, q k^T.
std::optional<std::pair<Value, Value>>
tracedQueryAndKey(train::BatchMatmulOp scores) {
  std::optional<Traced> query = trace(scores.getLhs());
  std::optional<Traced> keyTransposed = trace(scores.getRhs());
  if (!query || query->transposed || !keyTransposed ||
      !keyTransposed->transposed)
    return std::nullopt;
  return std::pair{query->source, keyTransposed->source};
}

/// Whether `bmm` reads and writes bf16, as the kernels compute it.
bool isBf16Product(train::BatchMatmulOp bmm) {
  return typeOf(bmm.getType()).getElementType().isBF16() &&
         typeOf(bmm.getLhs()).getElementType().isBF16();
}

/// Whether every product of `attention` is bf16, as the kernels compute
/// them.
bool allProductsBf16(const Attention &attention) {
  return llvm::all_of(
      std::initializer_list<train::BatchMatmulOp>{
          attention.scores, attention.out, attention.dv, attention.dp,
          attention.dq, attention.dk},
      isBf16Product);
}

/// Sets where the backward goes: before the first of the products that
/// read the output's gradient. Fails where that would come before the
/// forward's results or the gradient itself (in a joint graph, never).
bool placeBackward(Attention &attention) {
  attention.backwardAt = attention.dv->isBeforeInBlock(attention.dp)
                             ? attention.dv.getOperation()
                             : attention.dp.getOperation();
  Operation *gradient = attention.gradient.getDefiningOp();
  return attention.out->isBeforeInBlock(attention.backwardAt) &&
         (!gradient || gradient->isBeforeInBlock(attention.backwardAt));
}

/// Whether `attention`'s mask, if any, is one the fused ops take: a
/// static [S, S] or [B or 1, H or 1, S or 1, S], bool or (added) fp32, or
/// bf16 or fp16 where the graph adds it widened to fp32 scores (SDPA's;
/// the rewrite widens it once).
bool isFusableMask(const Attention &attention) {
  if (!attention.mask)
    return true;
  RankedTensorType type = typeOf(attention.mask);
  if (!type || !type.hasStaticShape() ||
      !train::AttentionKernelOp::isMaskShape(
          type.getShape(), typeOf(attention.query).getShape()))
    return false;
  Type element = type.getElementType();
  if (!attention.maskAdds)
    return element.isInteger(1);
  return element.isF32() ||
         (attention.fp32Scores && (element.isBF16() || element.isF16()));
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
  bool maskAdds = false;
  if (auto masked = input.getDefiningOp<train::WhereOp>()) {
    if (!isFull(masked.getLhs(), -INFINITY))
      return std::nullopt;
    mask = masked.getCondition();
    input = masked.getRhs();
  } else if (auto sum = input.getDefiningOp<train::AddOp>()) {
    // An additive mask (fp32, added to the bf16 scaled scores in fp32).
    bool scoresLeft =
        isa_and_nonnull<train::MulScalarOp>(sum.getLhs().getDefiningOp());
    input = scoresLeft ? sum.getLhs() : sum.getRhs();
    mask = scoresLeft ? sum.getRhs() : sum.getLhs();
    maskAdds = true;
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
  std::optional<std::pair<Value, Value>> queryAndKey =
      tracedQueryAndKey(scores);
  if (!queryAndKey)
    return std::nullopt;
  Attention attention;
  attention.scores = scores;
  std::tie(attention.query, attention.key) = *queryAndKey;
  attention.mask = mask;
  attention.maskAdds = maskAdds;
  attention.scale = *scale;
  ArrayRef<int64_t> shape = typeOf(attention.query).getShape();
  if (!isFusableMask(attention) || typeOf(attention.key).getShape() != shape ||
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
  // Zero where the mask is true (unmasked, or a mask that adds: nowhere).
  if (attention.mask && !attention.maskAdds) {
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
      attention.dk = bmm;
    else if (isSource(lhs, rescaled.getResult(), false) &&
             isSource(rhs, attention.key, false))
      attention.dq = bmm;
    else
      return std::nullopt;
  }
  if (!attention.dq || !attention.dk)
    return std::nullopt;
  // Every product bf16, as the kernels compute them.
  if (!allProductsBf16(attention))
    return std::nullopt;
  if (!placeBackward(attention))
    return std::nullopt;
  return attention;
}

//===----------------------------------------------------------------------===//
// F.scaled_dot_product_attention, as ImportAttention.cpp decomposes torch's
// fused operator and its backward
//===----------------------------------------------------------------------===//

/// `value` with the views and casts that produced it looked through.
Value throughViewsAndCasts(Value value) {
  while (Operation *op = value.getDefiningOp()) {
    if (!isa<train::ViewOp, train::CastOp>(op))
      break;
    value = op->getOperand(0);
  }
  return value;
}

/// Whether `value` is `arange(0, size)` (through views).
bool isRange(Value value, int64_t size) {
  auto range = throughViewsAndCasts(value).getDefiningOp<train::ArangeOp>();
  auto integer = [](Attribute attr) -> std::optional<int64_t> {
    if (auto value = dyn_cast<IntegerAttr>(attr))
      return value.getInt();
    return std::nullopt;
  };
  return range && integer(range.getStart()) == 0 &&
         integer(range.getEnd()) == size && integer(range.getStep()) == 1;
}

/// The scores `[B * H, L, S]` of a decomposed SDPA: `bmm(q, k^T) * scale`,
/// then -inf where a mask is true (`masked_fill`: the causal mask
/// `column > row` of two aranges, or the negation of a bool attn_mask
/// expanded to the scores), or a float attn_mask added.
struct SdpaScores {
  train::BatchMatmulOp product;
  Value query, key;
  double scale = 0;
  /// The [S, S] causal mask (true: hidden), or the attn_mask as given
  /// (true: seen; fp32: added), or neither.
  Value causal, keeps, adds;
};

/// The attn_mask a decomposed SDPA reads: expanded to [B, H, L, S] and
/// viewed as the scores' [B * H, L, S] (either step absent where it has
/// nothing to do), widened to the scores' fp32 (a bf16 model's mask; an
/// fp32 mask as it is).
Value attentionMaskOf(Value expanded) {
  if (Value narrow = train::getWidenedSource(expanded))
    expanded = narrow;
  if (auto view = expanded.getDefiningOp<train::ViewOp>();
      view && mergesBatchAndHeads(view))
    expanded = view.getInput();
  if (auto expand = expanded.getDefiningOp<train::ExpandOp>())
    expanded = expand.getInput();
  return expanded;
}

std::optional<SdpaScores> matchSdpaScores(Value masked) {
  SdpaScores scores;
  Value input = masked;
  if (auto fill = input.getDefiningOp<train::MaskedFillOp>()) {
    auto value = dyn_cast<FloatAttr>(fill.getValue());
    if (!value || !std::isinf(value.getValueAsDouble()) ||
        value.getValueAsDouble() > 0)
      return std::nullopt;
    Value hidden = fill.getMask();
    if (auto negation = hidden.getDefiningOp<train::LogicalNotOp>()) {
      scores.keeps = attentionMaskOf(negation.getInput());
    } else if (auto gt = hidden.getDefiningOp<train::GtOp>()) {
      ArrayRef<int64_t> shape = typeOf(hidden).getShape();
      if (shape.size() != 2 || !isRange(gt.getLhs(), shape[1]) ||
          !isRange(gt.getRhs(), shape[0]) ||
          typeOf(gt.getLhs()).getShape() != ArrayRef<int64_t>{1, shape[1]} ||
          typeOf(gt.getRhs()).getShape() != ArrayRef<int64_t>{shape[0], 1})
        return std::nullopt;
      scores.causal = hidden;
    } else {
      return std::nullopt;
    }
    input = fill.getInput();
  } else if (auto sum = input.getDefiningOp<train::AddOp>()) {
    // A float attn_mask, added (in fp32) to the scaled scores.
    scores.adds = attentionMaskOf(sum.getRhs());
    input = sum.getLhs();
  }
  auto scaled = input.getDefiningOp<train::MulScalarOp>();
  std::optional<double> scale = scaled ? getScale(scaled) : std::nullopt;
  auto product = scaled
                     ? scaled.getInput().getDefiningOp<train::BatchMatmulOp>()
                     : nullptr;
  if (!scale || !product)
    return std::nullopt;
  std::optional<std::pair<Value, Value>> queryAndKey =
      tracedQueryAndKey(product);
  if (!queryAndKey)
    return std::nullopt;
  scores.product = product;
  std::tie(scores.query, scores.key) = *queryAndKey;
  scores.scale = *scale;
  return scores;
}

/// Whether the forward's and the backward's recomputed scores are the same.
bool sameScores(const SdpaScores &a, const SdpaScores &b) {
  return a.query == b.query && a.key == b.key && a.scale == b.scale &&
         bool(a.causal) == bool(b.causal) && a.keeps == b.keeps &&
         a.adds == b.adds;
}

/// Whether `lse` is the log-sum-exp of `scores` over the keys as the
/// importer writes it: `log(sum(exp(s - max))) + max`, max = amax(s).
bool isLogSumExp(Value lse, Value scores) {
  auto add = lse.getDefiningOp<train::AddOp>();
  if (!add)
    return false;
  auto log = add.getLhs().getDefiningOp<train::LogOp>();
  auto sum = log ? log.getInput().getDefiningOp<train::SumOp>() : nullptr;
  auto exp =
      sum ? throughViewsAndCasts(sum.getInput()).getDefiningOp<train::ExpOp>()
          : nullptr;
  auto shifted =
      exp ? throughViewsAndCasts(exp.getInput()).getDefiningOp<train::SubOp>()
          : nullptr;
  auto max = throughViewsAndCasts(add.getRhs()).getDefiningOp<train::AmaxOp>();
  return shifted && max && shifted.getLhs() == scores &&
         throughViewsAndCasts(shifted.getRhs()) == max.getResult() &&
         max.getInput() == scores;
}

/// Whether `value` is `source` through casts and transposes of the last
/// two dimensions, transposed as given.
bool reads(Value value, Value source, bool transposed) {
  bool swapped = false;
  while (value != source) {
    Operation *op = value.getDefiningOp();
    auto permute = dyn_cast_or_null<train::PermuteOp>(op);
    if (permute && swapsLastTwo(permute))
      swapped = !swapped;
    else if (!isa_and_nonnull<train::CastOp>(op))
      return false;
    value = op->getOperand(0);
  }
  return swapped == transposed;
}

/// The product among `users` whose left operand is `source` (transposed
/// as given), if exactly one.
train::BatchMatmulOp productReading(ArrayRef<Operation *> users, Value source,
                                    bool transposed) {
  train::BatchMatmulOp found;
  for (Operation *user : users) {
    auto bmm = dyn_cast<train::BatchMatmulOp>(user);
    if (bmm && reads(bmm.getLhs(), source, transposed)) {
      if (found)
        return nullptr;
      found = bmm;
    }
  }
  return found;
}

/// The single train.mul_scalar by `scale` that reads `value`, its only
/// reader.
train::MulScalarOp scaledBy(Value value, double scale) {
  if (!value.hasOneUse())
    return nullptr;
  auto scaled = dyn_cast<train::MulScalarOp>(*value.user_begin());
  return scaled && getScale(scaled) == scale ? scaled : nullptr;
}

/// Whether `value` is a bf16 value widened to fp32.
bool isWidenedBf16(Value value) {
  Value source = train::getWidenedSource(value);
  return source && typeOf(value).getElementType().isF32() &&
         typeOf(source).getElementType().isBF16();
}

/// Whether the products of a decomposed SDPA are what the kernels compute
/// with fp32 scores: the scores' and dp's in fp32 on bf16 operands (as
/// compute: bf16 leaves the products torch's kernel keeps in fp32), the
/// others bf16.
bool sdpaProductsAsKernels(const Attention &attention) {
  for (train::BatchMatmulOp bmm : {attention.scores, attention.dp})
    if (!typeOf(bmm.getType()).getElementType().isF32() ||
        !isWidenedBf16(bmm.getLhs()) || !isWidenedBf16(bmm.getRhs()))
      return false;
  return llvm::all_of(
      std::initializer_list<train::BatchMatmulOp>{attention.out, attention.dv,
                                                  attention.dq, attention.dk},
      isBf16Product);
}

/// Matches SDPA's forward around `softmax` ([B * H, L, S], the scores'
/// only softmax) and its backward among `exps`, which recomputes the
/// probabilities from the forward's log-sum-exp:
///
///   p = exp(s - lse)              s recomputed as in the forward
///   dv = bmm(p^T, dout);  dp = bmm(dout, v^T)
///   ds = p * (dp - sum(dout * out, -1)) * scale
///   dq = bmm(ds, k);  dk = bmm(ds^T, q)
///
/// Under compute: bf16, and in a model exported in bf16 (whose operator
/// the importer writes so itself), the scores and dp are fp32 products of
/// bf16 operands, as torch's kernels keep them (fp32_scores); p and ds
/// are rounded to bf16 for the products that read them, as the fused
/// kernels round them.
std::optional<Attention> matchSdpa(train::SoftmaxOp softmax,
                                   ArrayRef<train::ExpOp> exps) {
  RankedTensorType probabilities = typeOf(softmax.getType());
  if (!probabilities || probabilities.getRank() != 3 || softmax.getDim() != 2 ||
      !probabilities.getElementType().isF32())
    return std::nullopt;
  Value masked = throughViewsAndCasts(softmax.getInput());
  std::optional<SdpaScores> forward = matchSdpaScores(masked);
  if (!forward)
    return std::nullopt;
  Attention attention;
  attention.query = forward->query;
  attention.key = forward->key;
  attention.scale = forward->scale;
  attention.scores = forward->product;
  attention.mask = forward->causal  ? forward->causal
                   : forward->keeps ? forward->keeps
                                    : forward->adds;
  attention.maskKeeps = bool(forward->keeps);
  attention.maskAdds = bool(forward->adds);
  attention.fp32Scores = true;
  attention.keyGradientTransposed = false;
  ArrayRef<int64_t> shape = typeOf(attention.query).getShape();
  if (!isFusableMask(attention) || typeOf(attention.key).getShape() != shape ||
      !whyAttentionShapeIsUnsupported(shape[2], shape[3]).empty())
    return std::nullopt;

  // out = bmm(p, v), the probabilities' only reader.
  SmallVector<Operation *> readers = leafUsers(softmax.getResult());
  attention.out = productReading(readers, softmax.getResult(), false);
  if (!attention.out || readers.size() != 1)
    return std::nullopt;
  std::optional<Traced> value = trace(attention.out.getRhs());
  if (!value || value->transposed || typeOf(value->source).getShape() != shape)
    return std::nullopt;
  attention.value = value->source;

  // The backward: exp(s - lse) of the same scores and this forward's lse.
  train::ExpOp recomputed;
  for (train::ExpOp exp : exps) {
    auto shifted =
        throughViewsAndCasts(exp.getInput()).getDefiningOp<train::SubOp>();
    if (!shifted)
      continue;
    std::optional<SdpaScores> again = matchSdpaScores(shifted.getLhs());
    if (again && sameScores(*forward, *again) &&
        isLogSumExp(throughViewsAndCasts(shifted.getRhs()), masked)) {
      if (recomputed)
        return std::nullopt;
      recomputed = exp;
    }
  }
  if (!recomputed)
    return std::nullopt;
  Value p = recomputed.getResult();
  SmallVector<Operation *> pReaders = leafUsers(p);
  attention.dv = productReading(pReaders, p, true);
  train::MulOp gradScores;
  for (Operation *reader : pReaders)
    if (auto mul = dyn_cast<train::MulOp>(reader))
      gradScores = gradScores ? nullptr : mul;
  if (!attention.dv || !gradScores || pReaders.size() != 2)
    return std::nullopt;
  attention.gradient = attention.dv.getRhs();
  Value gradient = throughViewsAndCasts(attention.gradient);

  // ds = p * (dp - rowsum(dout * out)).
  Value difference =
      gradScores.getLhs() == p ? gradScores.getRhs() : gradScores.getLhs();
  auto sub = difference.getDefiningOp<train::SubOp>();
  auto dp = sub ? sub.getLhs().getDefiningOp<train::BatchMatmulOp>() : nullptr;
  auto rowDot =
      sub ? throughViewsAndCasts(sub.getRhs()).getDefiningOp<train::SumOp>()
          : nullptr;
  if (!dp || !rowDot || !sub->hasOneUse() ||
      throughViewsAndCasts(dp.getLhs()) != gradient ||
      !isSource(trace(dp.getRhs()), attention.value, true))
    return std::nullopt;
  attention.dp = dp;
  auto dot =
      throughViewsAndCasts(rowDot.getInput()).getDefiningOp<train::MulOp>();
  Value out = attention.out.getResult();
  if (!dot || !rowDot.getKeepdim() ||
      rowDot.getDims() != ArrayRef<int64_t>{2} ||
      !((throughViewsAndCasts(dot.getLhs()) == gradient &&
         throughViewsAndCasts(dot.getRhs()) == out) ||
        (throughViewsAndCasts(dot.getRhs()) == gradient &&
         throughViewsAndCasts(dot.getLhs()) == out)))
    return std::nullopt;

  // ds scaled, then dq = bmm(ds, k), dk = bmm(ds^T, q): its only readers.
  train::MulScalarOp scaled = scaledBy(gradScores.getResult(), attention.scale);
  if (!scaled)
    return std::nullopt;
  Value ds = scaled.getResult();
  SmallVector<Operation *> dsReaders = leafUsers(ds);
  attention.dq = productReading(dsReaders, ds, false);
  attention.dk = productReading(dsReaders, ds, true);
  if (!attention.dq || !attention.dk || dsReaders.size() != 2 ||
      !isSource(trace(attention.dq.getRhs()), attention.key, false) ||
      !isSource(trace(attention.dk.getRhs()), attention.query, false) ||
      !sdpaProductsAsKernels(attention))
    return std::nullopt;
  if (!placeBackward(attention))
    return std::nullopt;
  return attention;
}

/// Replaces the matched products by the fused ops' results; `masks` holds
/// the masks made so far for the fused ops from the graph's (keep masks
/// negated, narrow additive masks widened), each made once.
void rewrite(Attention attention, llvm::DenseMap<Value, Value> &masks) {
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
  if (attention.mask) {
    // One negation or widening per mask, where the first layer reads it.
    Value &prepared = masks[attention.mask];
    if (!prepared) {
      RankedTensorType type = typeOf(attention.mask);
      if (attention.maskKeeps)
        prepared = b.create<train::LogicalNotOp>(loc, type, attention.mask);
      else if (attention.maskAdds && !type.getElementType().isF32())
        prepared = b.create<train::CastOp>(loc, tensorOf(type.getShape(), f32),
                                           attention.mask);
      else
        prepared = attention.mask;
    }
    inputs.push_back(prepared);
  }
  UnitAttr unmasked = attention.mask ? UnitAttr() : b.getUnitAttr();
  UnitAttr fp32Scores = attention.fp32Scores ? b.getUnitAttr() : UnitAttr();
  auto forward = b.create<train::AttentionKernelOp>(
      loc, TypeRange{full, rows}, inputs, ValueRange{empty(full), empty(rows)},
      UnitAttr(), scale, UnitAttr(), unmasked, fp32Scores);
  auto replace = [&](Value replaced, Value by) {
    replaced.replaceAllUsesWith(
        b.create<train::ViewOp>(replaced.getLoc(), replaced.getType(), by)
            .getResult());
  };
  replace(attention.out.getResult(), forward.getResult(0));

  b.setInsertionPoint(attention.backwardAt);
  loc = locationOf({attention.dv, attention.dp, attention.dq, attention.dk});
  Value gradient =
      b.create<train::ViewOp>(loc, full, attention.gradient).getResult();
  inputs.append({forward.getResult(0), forward.getResult(1), gradient});
  auto backward = b.create<train::AttentionKernelOp>(
      loc, TypeRange{full, full, full, rows}, inputs,
      ValueRange{empty(full), empty(full), empty(full), empty(rows)},
      b.getUnitAttr(), scale,
      attention.roundedGradient ? b.getUnitAttr() : UnitAttr(), unmasked,
      fp32Scores);
  replace(attention.dq.getResult(), backward.getResult(0));
  replace(attention.dv.getResult(), backward.getResult(2));
  Value keyGradient = backward.getResult(1);
  if (attention.keyGradientTransposed)
    keyGradient = b.create<train::PermuteOp>(
        loc, keyGradient, b.getDenseI64ArrayAttr({0, 1, 3, 2}));
  replace(attention.dk.getResult(), keyGradient);
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
      SmallVector<train::ExpOp> exps(step.getBody().getOps<train::ExpOp>());
      llvm::DenseMap<Value, Value> masks;
      bool changed = false;
      for (train::SoftmaxOp softmax : softmaxes) {
        std::optional<Attention> attention = match(softmax);
        if (!attention)
          attention = matchSdpa(softmax, exps);
        if (attention) {
          rewrite(*attention, masks);
          changed = true;
        }
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
