//===- ImportAttention.cpp - Scaled dot-product attention -----------------===//
//
// What torch.export emits for F.scaled_dot_product_attention on the CPU: the
// fused `_scaled_dot_product_flash_attention_for_cpu` (output and
// log-sum-exp) and its backward, before decomposition; the forward-only
// `scaled_dot_product_attention`; and `_safe_softmax`, which the decomposed
// math form uses for masked rows. Each becomes batched GEMMs, masks and a
// softmax in `train`, as torch's math path computes them: scores are
// `q k^T * scale`, then the causal mask and `attn_mask` (a bool mask keeps
// where true, a float mask is added), softmax over the keys. The backward
// recomputes the probabilities from the saved log-sum-exp, as the fused
// kernel does, instead of keeping an [L, S] tensor from the forward (unless
// torch >= 2.9 decomposed the forward and hands it the attention weights
// themselves in the log-sum-exp's place; keys and values with fewer heads
// than the queries, enable_gqa's, are repeated per group), and
// scales the scores' gradient before the products that read it. bf16 and
// fp16 inputs are computed as torch's kernel computes them: the scores, dp
// and the rows of dout * out in fp32 on the inputs' values (marked
// train::kFp32AccumulateAttrName), the probabilities and the scores'
// gradient rounded to the inputs' dtype for the products that read them,
// which accumulate in fp32 and round once. Under `compute: bf16` an fp32
// model's attention gets the same form from the autocast pass, which reads
// the marks: the fused kernels take either (FuseAttention.cpp).
//
//===----------------------------------------------------------------------===//

#include "StepImporter.h"
#include "TensorBuilder.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Dialect/Train/IR/TrainTypeRules.h"
#include "llvm/Support/FormatVariadic.h"
#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::importer;

namespace {

/// Query `[..., L, E]`, key `[..., S, E]`, value `[..., S, Ev]` with the same
/// leading (batch, head) dimensions, flattened into one batch dimension.
struct AttentionShape {
  SmallVector<int64_t> leading;
  int64_t batch = 1, queries = 0, keys = 0, headDim = 0, valueDim = 0;
  double scale = 1.0;
  bool causal = false;
  Value mask;

  SmallVector<int64_t> with(ArrayRef<int64_t> trailing) const {
    SmallVector<int64_t> shape(leading);
    llvm::append_range(shape, trailing);
    return shape;
  }
};

} // namespace

static FailureOr<AttentionShape> readAttention(StepImporter &s, Value query,
                                               Value key, Value value) {
  ArrayRef<int64_t> q = TensorBuilder::shapeOf(query);
  ArrayRef<int64_t> k = TensorBuilder::shapeOf(key);
  ArrayRef<int64_t> v = TensorBuilder::shapeOf(value);
  if (q.size() < 3 || k.size() != q.size() || v.size() != q.size() ||
      q.drop_back(2) != k.drop_back(2) || q.drop_back(2) != v.drop_back(2) ||
      q.back() != k.back() || k[k.size() - 2] != v[v.size() - 2])
    return s.fail(llvm::formatv("query {0}, key {1} and value {2} are not "
                                "[..., L, E], [..., S, E] and [..., S, Ev] "
                                "with the same leading dimensions",
                                train::formatShape(q), train::formatShape(k),
                                train::formatShape(v))
                      .str());
  AttentionShape shape;
  shape.leading.assign(q.begin(), q.end() - 2);
  shape.batch = ShapedType::getNumElements(shape.leading);
  shape.queries = q[q.size() - 2];
  shape.keys = k[k.size() - 2];
  shape.headDim = q.back();
  shape.valueDim = v.back();
  FailureOr<double> dropout = s.floatArgument("dropout_p", 0.0);
  if (failed(dropout))
    return failure();
  if (*dropout != 0.0)
    return s.fail(llvm::formatv("dropout_p = {0}: attention dropout needs "
                                "random numbers, which are not supported; "
                                "export with dropout off (model.eval() or "
                                "dropout_p=0)",
                                *dropout)
                      .str());
  shape.causal = s.boolArgument("is_causal", false);
  shape.scale = 1.0 / std::sqrt(static_cast<double>(shape.headDim));
  if (s.findArgument("scale")) {
    FailureOr<double> scale = s.floatArgument("scale");
    if (failed(scale))
      return failure();
    shape.scale = *scale;
  }
  FailureOr<Value> mask = s.optionalTensorArgument("attn_mask");
  if (failed(mask))
    return failure();
  shape.mask = *mask;
  if (shape.mask &&
      !train::broadcastShapes(TensorBuilder::shapeOf(shape.mask),
                              shape.with({shape.queries, shape.keys})))
    return s.fail(
        llvm::formatv(
            "attn_mask {0} does not broadcast to the "
            "scores {1}",
            train::formatShape(TensorBuilder::shapeOf(shape.mask)),
            train::formatShape(shape.with({shape.queries, shape.keys})))
            .str());
  return shape;
}

/// `[..., rows, columns]` as `[batch, rows, columns]` of `elementType`, the
/// dtype of the products' operands.
static Value flatten(TensorBuilder &b, Value value, const AttentionShape &shape,
                     Type elementType) {
  ArrayRef<int64_t> dims = TensorBuilder::shapeOf(value);
  return b.convert(
      b.view(value, {shape.batch, dims[dims.size() - 2], dims.back()}),
      elementType);
}

static Value transposed(TensorBuilder &b, Value value) {
  return b.permute(value, {0, 2, 1});
}

/// `value`'s defining op marked as one that torch's kernel computes in
/// fp32 from operands in the compute dtype.
static Value accumulatedInFp32(Value value) {
  Operation *op = value.getDefiningOp();
  op->setAttr(train::kFp32AccumulateAttrName, UnitAttr::get(op->getContext()));
  return value;
}

/// The product `lhs rhs` in `compute` (fp32 for bf16 and fp16 operands),
/// as torch's kernel computes the scores and dp: on the operands' values,
/// widened after any transpose so that the product reads them as they are.
static Value productInFp32(TensorBuilder &b, Value lhs, Value rhs,
                           Type compute) {
  return accumulatedInFp32(
      b.bmm(b.convert(lhs, compute), b.convert(rhs, compute)));
}

/// The scaled and masked scores `[batch, L, S]`, in `compute`.
static Value maskedScores(StepImporter &s, TensorBuilder &b, Value query,
                          Value key, const AttentionShape &shape,
                          Type compute) {
  Value scores = b.mulScalar(
      productInFp32(b, query, transposed(b, key), compute), shape.scale);
  OpBuilder &builder = s.builder;
  Location loc = s.location;
  Attribute minusInfinity =
      builder.getF64FloatAttr(-std::numeric_limits<double>::infinity());
  if (shape.causal) {
    // Query i sees keys j <= i (the top-left aligned lower triangle).
    Type i64 = builder.getI64Type();
    auto range = [&](int64_t size) {
      return builder.create<train::ArangeOp>(
          loc, RankedTensorType::get({size}, i64), builder.getI64IntegerAttr(0),
          builder.getI64IntegerAttr(size), builder.getI64IntegerAttr(1));
    };
    Value rows = b.view(range(shape.queries), {shape.queries, 1});
    Value columns = b.view(range(shape.keys), {1, shape.keys});
    Value future = builder.create<train::GtOp>(loc, columns, rows);
    scores =
        builder.create<train::MaskedFillOp>(loc, scores, future, minusInfinity);
  }
  if (shape.mask) {
    SmallVector<int64_t> full = shape.with({shape.queries, shape.keys});
    Value mask = b.view(b.expand(shape.mask, full),
                        {shape.batch, shape.queries, shape.keys});
    if (TensorBuilder::typeOf(mask).getElementType().isInteger(1))
      scores = builder.create<train::MaskedFillOp>(
          loc, scores, builder.create<train::LogicalNotOp>(loc, mask),
          minusInfinity);
    else
      scores = b.add(scores, b.convert(mask, compute));
  }
  return scores;
}

/// Grouped-query attention (enable_gqa): queries [B, Hq, L, E], keys and
/// values [B, Hkv, S, E] with Hq a multiple of Hkv, each key/value head
/// serving Hq / Hkv consecutive query heads as torch repeats them
/// (repeat_interleave). Repeats `key` and `value` to Hq heads and returns
/// the group size, 1 when the heads agree or do not divide (readAttention
/// then names the shapes).
static int64_t repeatKeyValueHeads(TensorBuilder &b, Value query, Value &key,
                                   Value &value) {
  ArrayRef<int64_t> q = TensorBuilder::shapeOf(query);
  ArrayRef<int64_t> k = TensorBuilder::shapeOf(key);
  ArrayRef<int64_t> v = TensorBuilder::shapeOf(value);
  if (q.size() != 4 || k.size() != 4 || v.size() != 4 || k[1] != v[1] ||
      k[1] == q[1] || k[1] == 0 || q[1] % k[1] != 0)
    return 1;
  int64_t group = q[1] / k[1];
  for (Value *operand : {&key, &value}) {
    ArrayRef<int64_t> shape = TensorBuilder::shapeOf(*operand);
    Value split = b.view(*operand, {shape[0], shape[1], 1, shape[2], shape[3]});
    Value repeated =
        b.expand(split, {shape[0], shape[1], group, shape[2], shape[3]});
    *operand = b.view(repeated, {shape[0], q[1], shape[2], shape[3]});
  }
  return group;
}

/// _scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p,
/// is_causal, *, attn_mask, scale) -> (output, logsumexp), and the
/// forward-only scaled_dot_product_attention (output alone).
static LogicalResult importAttention(StepImporter &s) {
  FailureOr<Value> query = s.tensorArgument("query");
  if (failed(query))
    return failure();
  FailureOr<Value> key = s.tensorArgument("key");
  if (failed(key))
    return failure();
  FailureOr<Value> value = s.tensorArgument("value");
  if (failed(value))
    return failure();
  TensorBuilder b(s.builder, s.location);
  Value repeatedKey = *key, repeatedValue = *value;
  if (s.boolArgument("enable_gqa", false))
    repeatKeyValueHeads(b, *query, repeatedKey, repeatedValue);
  key = repeatedKey;
  value = repeatedValue;
  FailureOr<AttentionShape> shape = readAttention(s, *query, *key, *value);
  if (failed(shape))
    return failure();
  FailureOr<RankedTensorType> outputType = s.outputType(0);
  if (failed(outputType))
    return failure();
  Type elementType = TensorBuilder::typeOf(*query).getElementType();
  Type compute = train::computeType(elementType);
  Value q = flatten(b, *query, *shape, elementType);
  Value k = flatten(b, *key, *shape, elementType);
  Value v = flatten(b, *value, *shape, elementType);
  Value scores = maskedScores(s, b, q, k, *shape, compute);
  Value probabilities = s.builder.create<train::SoftmaxOp>(
      s.location, scores, s.builder.getI64IntegerAttr(2));
  Value output = b.view(b.bmm(b.convert(probabilities, elementType), v),
                        shape->with({shape->queries, shape->valueDim}));
  if (failed(s.setConvertedOutput(0, output)))
    return failure();
  if (!s.hasOutput(1))
    return success();
  // logsumexp = max + log(sum(exp(scores - max))), in fp32 as torch keeps it.
  Value rowMax = b.amax(scores, {2}, /*keepdim=*/true);
  Value shifted =
      s.builder.create<train::ExpOp>(s.location, b.sub(scores, rowMax));
  Value logSum =
      s.builder.create<train::LogOp>(s.location, b.sum(shifted, {2}, false));
  Value lse = b.add(logSum, b.view(rowMax, {shape->batch, shape->queries}));
  return s.setConvertedOutput(1, b.view(lse, shape->with({shape->queries})));
}

/// The probabilities `[batch, L, S]` in `compute` when the backward's
/// `logsumexp` operand holds them instead, else a null value. torch 2.x's
/// `_export_forward_backward` decomposes the forward into
/// `_scaled_dot_product_attention_math`, whose second result is the masked
/// softmax `[..., L, S]`, but keeps the fused backward and hands it that
/// result in the log-sum-exp's place. torch's own run of such a joint graph
/// reads the probabilities as log-sum-exps and computes wrong gradients;
/// eager torch's gradients, which this importer reproduces, are those of the
/// probabilities themselves (the mask and causality are already in them).
static Value savedProbabilities(TensorBuilder &b, Value logsumexp,
                                const AttentionShape &shape, Type compute) {
  if (TensorBuilder::shapeOf(logsumexp) !=
      ArrayRef<int64_t>(shape.with({shape.queries, shape.keys})))
    return Value();
  return b.convert(b.view(logsumexp, {shape.batch, shape.queries, shape.keys}),
                   compute);
}

/// _scaled_dot_product_flash_attention_for_cpu_backward(grad_out, query, key,
/// value, out, logsumexp, dropout_p, is_causal, *, attn_mask, scale) ->
/// (grad_query, grad_key, grad_value).
static LogicalResult importAttentionBackward(StepImporter &s) {
  Value gradOut, query, key, value, out, logsumexp;
  for (auto [name, operand] :
       {std::pair<StringRef, Value *>{"grad_out", &gradOut},
        {"query", &query},
        {"key", &key},
        {"value", &value},
        {"out", &out},
        {"logsumexp", &logsumexp}}) {
    FailureOr<Value> given = s.tensorArgument(name);
    if (failed(given))
      return failure();
    *operand = *given;
  }
  TensorBuilder b(s.builder, s.location);
  // The backward of enable_gqa attention: keys and values with fewer heads.
  Value originals[3] = {query, key, value};
  int64_t group = repeatKeyValueHeads(b, query, key, value);
  FailureOr<AttentionShape> shape = readAttention(s, query, key, value);
  if (failed(shape))
    return failure();
  Type elementType = TensorBuilder::typeOf(query).getElementType();
  Type compute = train::computeType(elementType);
  Value q = flatten(b, query, *shape, elementType);
  Value k = flatten(b, key, *shape, elementType);
  Value v = flatten(b, value, *shape, elementType);
  Value dO = flatten(b, gradOut, *shape, elementType);
  Value o = flatten(b, out, *shape, elementType);
  Value probabilities = savedProbabilities(b, logsumexp, *shape, compute);
  if (!probabilities) {
    Value lse = b.convert(b.view(logsumexp, {shape->batch, shape->queries, 1}),
                          compute);
    Value scores = maskedScores(s, b, q, k, *shape, compute);
    probabilities =
        s.builder.create<train::ExpOp>(s.location, b.sub(scores, lse));
  }
  Value wideGradOut = b.convert(dO, compute);
  Value gradProbabilities =
      productInFp32(b, wideGradOut, transposed(b, v), compute);
  Value rowDot =
      b.sum(accumulatedInFp32(b.mul(wideGradOut, b.convert(o, compute))), {2},
            /*keepdim=*/true);
  // The gradient of the scaled scores: what the products of dq and dk
  // read (rounded to the inputs' dtype), as the fused kernels take it.
  Value gradScores = b.convert(
      b.mulScalar(b.mul(probabilities, b.sub(gradProbabilities, rowDot)),
                  shape->scale),
      elementType);
  Value roundedProbabilities = b.convert(probabilities, elementType);
  Value gradQuery = b.bmm(gradScores, k);
  Value gradKey = b.bmm(transposed(b, gradScores), q);
  Value gradValue = b.bmm(transposed(b, roundedProbabilities), dO);
  Value grads[3] = {gradQuery, gradKey, gradValue};
  if (group > 1) {
    // Each shared key/value head's gradient sums its group's, in fp32 for
    // bf16 and fp16 inputs.
    for (unsigned i = 1; i < 3; ++i) {
      ArrayRef<int64_t> shape = TensorBuilder::shapeOf(originals[i]);
      Value grouped =
          b.view(grads[i], {shape[0], shape[1], group, shape[2], shape[3]});
      grads[i] = b.convert(b.sum(b.convert(grouped, compute), {2}, false),
                           elementType);
    }
  }
  for (unsigned i = 0; i < 3; ++i)
    if (s.hasOutput(i) &&
        failed(s.setConvertedOutput(
            i, b.view(grads[i], TensorBuilder::shapeOf(originals[i])))))
      return failure();
  return success();
}

/// _safe_softmax(self, dim, dtype?): softmax, except that rows whose every
/// element is -inf give zeros instead of NaN.
static LogicalResult importSafeSoftmax(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  if (failed(self))
    return failure();
  int64_t rank = TensorBuilder::shapeOf(*self).size();
  FailureOr<int64_t> dim = s.dimArgument("dim", rank);
  if (failed(dim))
    return failure();
  FailureOr<RankedTensorType> type = s.outputType();
  if (failed(type))
    return failure();
  TensorBuilder b(s.builder, s.location);
  Value input = b.convert(*self, type->getElementType());
  Value softmax = s.builder.create<train::SoftmaxOp>(
      s.location, input, s.builder.getI64IntegerAttr(*dim));
  Value rowMax = b.amax(input, {*dim}, /*keepdim=*/true);
  Value masked = s.builder.create<train::EqScalarOp>(
      s.location, rowMax,
      s.builder.getF64FloatAttr(-std::numeric_limits<double>::infinity()));
  return s.setOutput(
      0, s.builder.create<train::MaskedFillOp>(s.location, softmax, masked,
                                               s.builder.getI64IntegerAttr(0)));
}

void mlir::mantissa::importer::addAttentionHandlers(HandlerTable &table) {
  addAtenHandler(table, "_scaled_dot_product_flash_attention_for_cpu.default",
                 importAttention);
  addAtenHandler(table,
                 "_scaled_dot_product_flash_attention_for_cpu_backward.default",
                 importAttentionBackward);
  addAtenHandler(table, "scaled_dot_product_attention.default",
                 importAttention);
  addAtenHandler(table, "_safe_softmax.default", importSafeSoftmax);
}
