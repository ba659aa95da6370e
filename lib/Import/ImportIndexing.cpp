//===- ImportIndexing.cpp - Gathers and scatters by index -----------------===//
//
// Embeddings and their backward, index_put, index_select, gather and the
// scatters: each one `train` operation that reads or writes a tensor at the
// positions an index tensor names. Advanced indexing (index.Tensor, and
// index_put with several index tensors) becomes index_select / index_put on
// the indexed dimensions flattened into one.
//
//===----------------------------------------------------------------------===//

#include "StepImporter.h"
#include "TensorBuilder.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Dialect/Train/IR/TrainTypeRules.h"
#include "llvm/Support/FormatVariadic.h"
#include <optional>
#include <string>

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::train;
using namespace mlir::mantissa::importer;
using llvm::StringRef;

static LogicalResult importEmbedding(StepImporter &s) {
  FailureOr<Value> weight = s.tensorArgument("weight");
  FailureOr<Value> indices = s.tensorArgument("indices");
  if (failed(weight) || failed(indices))
    return failure();
  return s.emitSingle<EmbeddingOp>(*weight, *indices);
}

static LogicalResult importEmbeddingBackward(StepImporter &s) {
  FailureOr<Value> grad = s.tensorArgument("grad_output");
  FailureOr<Value> indices = s.tensorArgument("indices");
  FailureOr<int64_t> numWeights = s.intArgument("num_weights");
  FailureOr<int64_t> paddingIdx = s.intArgument("padding_idx", -1);
  if (failed(grad) || failed(indices) || failed(numWeights) ||
      failed(paddingIdx))
    return failure();
  if (s.boolArgument("scale_grad_by_freq", false))
    return s.fail("scale_grad_by_freq is not supported");
  return s.emitSingle<EmbeddingBackwardOp>(*grad, *indices, *numWeights,
                                           *paddingIdx);
}

static LogicalResult importAdvancedIndexPut(StepImporter &s, Value self,
                                            Value values);

static LogicalResult importIndexPut(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<Value> values = s.tensorArgument("values");
  if (failed(self) || failed(values))
    return failure();
  const pt2::Argument *indices = s.findArgument("indices");
  std::optional<std::string> indexName;
  if (indices && indices->kind == pt2::ArgumentKind::Tensors &&
      indices->tensorNames.size() == 1)
    indexName = indices->tensorNames.front();
  else if (indices && indices->kind == pt2::ArgumentKind::OptionalTensors &&
           indices->optionalTensorNames.size() == 1)
    indexName = indices->optionalTensorNames.front();
  if (!indexName || !s.findTensor(*indexName))
    return importAdvancedIndexPut(s, *self, *values);
  return s.emitSingle<IndexPutOp>(*self, s.findTensor(*indexName), *values,
                                  s.boolArgument("accumulate", false));
}

//===----------------------------------------------------------------------===//
// Advanced indexing: index.Tensor and index_put with several index tensors
//===----------------------------------------------------------------------===//

namespace {

/// What `self[indices]` addresses. With the index tensors on adjacent
/// dimensions (Nones elsewhere, as torch's decompositions of nearest
/// upsampling and its backward write them), `source` is `self`; otherwise
/// it is `self` with the indexed dimensions moved to the front in order
/// (`permutation`), where torch puts the broadcast index dimensions of the
/// result. `source` is seen as `[P, M, Q]` (the dimensions before, the
/// indexed ones flattened, the ones after), and `linear` holds the
/// row-major position in the `M` indexed elements of every index, `[K]`
/// with K the elements of the indices' broadcast shape.
struct AdvancedIndex {
  Value source;
  SmallVector<int64_t> permutation;
  SmallVector<int64_t> before, broadcast, after;
  int64_t indexedElements = 1;
  Value linear;

  SmallVector<int64_t> selfView() const {
    return {ShapedType::getNumElements(before), indexedElements,
            ShapedType::getNumElements(after)};
  }
  SmallVector<int64_t> resultView() const {
    return {ShapedType::getNumElements(before),
            ShapedType::getNumElements(broadcast),
            ShapedType::getNumElements(after)};
  }
  /// The shape of `self[indices]`: torch keeps the broadcast index
  /// dimensions where the indexed ones were.
  SmallVector<int64_t> resultShape() const {
    SmallVector<int64_t> shape(before);
    llvm::append_range(shape, broadcast);
    llvm::append_range(shape, after);
    return shape;
  }
};

} // namespace

/// Reads the `indices` list of index.Tensor / index_put against `self`.
static FailureOr<AdvancedIndex> readAdvancedIndex(StepImporter &s, Value self) {
  const pt2::Argument *indices = s.findArgument("indices");
  SmallVector<Value> given;
  if (indices && indices->kind == pt2::ArgumentKind::OptionalTensors) {
    for (const std::optional<std::string> &name :
         indices->optionalTensorNames) {
      Value value = name ? s.findTensor(*name) : Value();
      if (name && !value)
        return s.fail("index tensor '" + *name + "' is not defined");
      given.push_back(value);
    }
  } else if (indices && indices->kind == pt2::ArgumentKind::Tensors) {
    for (const std::string &name : indices->tensorNames) {
      Value value = s.findTensor(name);
      if (!value)
        return s.fail("index tensor '" + name + "' is not defined");
      given.push_back(value);
    }
  } else {
    return s.fail("argument 'indices' is not a list of optional tensors");
  }
  ArrayRef<int64_t> shape = TensorBuilder::shapeOf(self);
  if (given.size() > shape.size())
    return s.fail(llvm::formatv("{0} indices for a tensor of rank {1}",
                                given.size(), shape.size())
                      .str());
  SmallVector<int64_t> indexed;
  for (auto [dim, value] : llvm::enumerate(given)) {
    if (!value)
      continue;
    if (!isa<IntegerType>(TensorBuilder::typeOf(value).getElementType()) ||
        TensorBuilder::typeOf(value).getElementType().isInteger(1))
      return s.fail(llvm::formatv("index {0} is not an integer tensor (a "
                                  "boolean mask selects a data-dependent "
                                  "number of elements, which a static step "
                                  "cannot hold)",
                                  dim)
                        .str());
    indexed.push_back(dim);
  }
  if (indexed.empty())
    return s.fail("no index tensor in 'indices'");
  TensorBuilder b(s.builder, s.location);
  AdvancedIndex index;
  index.source = self;
  int64_t first = indexed.front(), last = indexed.back();
  if (last - first + 1 != static_cast<int64_t>(indexed.size())) {
    // Non-adjacent: the indexed dimensions first, then the others in order.
    index.permutation.assign(indexed.begin(), indexed.end());
    for (int64_t dim = 0, rank = shape.size(); dim < rank; ++dim)
      if (dim >= static_cast<int64_t>(given.size()) || !given[dim])
        index.permutation.push_back(dim);
    SmallVector<Value> moved;
    for (int64_t dim : indexed)
      moved.push_back(given[dim]);
    given = moved;
    index.source = b.permute(self, index.permutation);
    shape = TensorBuilder::shapeOf(index.source);
    first = 0;
    last = indexed.size() - 1;
  }
  index.before.assign(shape.begin(), shape.begin() + first);
  index.after.assign(shape.begin() + last + 1, shape.end());
  std::optional<SmallVector<int64_t>> broadcast = SmallVector<int64_t>();
  for (int64_t dim = first; dim <= last; ++dim) {
    broadcast =
        train::broadcastShapes(*broadcast, TensorBuilder::shapeOf(given[dim]));
    if (!broadcast)
      return s.fail("the index tensors do not broadcast to one shape");
    index.indexedElements *= shape[dim];
  }
  index.broadcast = *broadcast;
  // linear = sum over the indexed dimensions of (i < 0 ? i + size : i) times
  // the row-major stride of that dimension among the indexed ones.
  Type i64 = s.builder.getI64Type();
  int64_t stride = index.indexedElements;
  for (int64_t dim = first; dim <= last; ++dim) {
    stride /= shape[dim];
    Value position = b.expand(b.convert(given[dim], i64), index.broadcast);
    Value negative =
        b.convert(s.builder.create<train::LtScalarOp>(
                      s.location, position, s.builder.getI64IntegerAttr(0)),
                  i64);
    position = b.add(position, b.mul(negative, b.full({}, i64, shape[dim])));
    Value term = b.mul(position, b.full({}, i64, stride));
    index.linear = index.linear ? b.add(index.linear, term) : term;
  }
  index.linear =
      b.view(index.linear, {ShapedType::getNumElements(index.broadcast)});
  return index;
}

/// index.Tensor(self, indices): `self[indices]` as one index_select of the
/// flattened indexed dimensions.
static LogicalResult importIndexTensor(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  if (failed(self))
    return failure();
  FailureOr<AdvancedIndex> index = readAdvancedIndex(s, *self);
  if (failed(index))
    return failure();
  TensorBuilder b(s.builder, s.location);
  Value selected = s.builder.create<IndexSelectOp>(
      s.location, b.view(index->source, index->selfView()), index->linear,
      s.builder.getI64IntegerAttr(1));
  return s.setOutput(0, b.view(selected, index->resultShape()));
}

/// index_put(self, indices, values, accumulate) with several index tensors
/// or one off the leading dimension: the indexed dimensions flattened and
/// moved to the front, where train.index_put writes (or accumulates, in
/// the order of the values' elements, as ATen's serial CPU kernel does).
static LogicalResult importAdvancedIndexPut(StepImporter &s, Value self,
                                            Value values) {
  FailureOr<AdvancedIndex> index = readAdvancedIndex(s, self);
  if (failed(index))
    return failure();
  TensorBuilder b(s.builder, s.location);
  Type elementType = TensorBuilder::typeOf(self).getElementType();
  Value source =
      b.view(b.expand(b.convert(values, elementType), index->resultShape()),
             index->resultView());
  Value written = s.builder.create<IndexPutOp>(
      s.location,
      b.permute(b.view(index->source, index->selfView()), {1, 0, 2}),
      index->linear, b.permute(source, {1, 0, 2}),
      s.boolArgument("accumulate", false));
  Value result = b.view(b.permute(written, {1, 0, 2}),
                        TensorBuilder::shapeOf(index->source));
  if (!index->permutation.empty()) {
    // Back from the indexed dimensions first to `self`'s order.
    SmallVector<int64_t> inverse(index->permutation.size());
    for (auto [position, dim] : llvm::enumerate(index->permutation))
      inverse[dim] = position;
    result = b.permute(result, inverse);
  }
  return s.setOutput(0, result);
}

/// index_select and gather: `self` indexed by `index` along `dim`.
template <typename OpTy>
static LogicalResult importIndexedAlongDim(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<Value> index = s.tensorArgument("index");
  if (failed(self) || failed(index))
    return failure();
  FailureOr<int64_t> dim = s.dimArgument("dim", s.rankOf(*self));
  if (failed(dim))
    return failure();
  return s.emitSingle<OpTy>(*self, *index, *dim);
}

static LogicalResult importScatter(StepImporter &s, StringRef reduce) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<Value> index = s.tensorArgument("index");
  FailureOr<Value> source = s.tensorArgument("src");
  if (failed(self) || failed(index) || failed(source))
    return failure();
  FailureOr<int64_t> dim = s.dimArgument("dim", s.rankOf(*self));
  if (failed(dim))
    return failure();
  return s.emitSingle<ScatterOp>(*self, *index, *source, *dim, reduce);
}

static LogicalResult importScatterValue(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<Value> index = s.tensorArgument("index");
  FailureOr<Attribute> value = s.scalarArgument("value");
  if (failed(self) || failed(index) || failed(value))
    return failure();
  FailureOr<int64_t> dim = s.dimArgument("dim", s.rankOf(*self));
  if (failed(dim))
    return failure();
  return s.emitSingle<ScatterValueOp>(*self, *index, *value, *dim);
}

void mlir::mantissa::importer::addIndexingHandlers(HandlerTable &table) {
  auto add = [&](StringRef overload, Handler handler) {
    addAtenHandler(table, overload, std::move(handler));
  };
  // Indexing.
  add("embedding.default", importEmbedding);
  add("embedding_dense_backward.default", importEmbeddingBackward);
  add("index_put.default", importIndexPut);
  add("index.Tensor", importIndexTensor);
  add("index_select.default", importIndexedAlongDim<IndexSelectOp>);
  add("gather.default", importIndexedAlongDim<GatherOp>);
  add("scatter.src", [](StepImporter &s) { return importScatter(s, "none"); });
  add("scatter_add.default",
      [](StepImporter &s) { return importScatter(s, "add"); });
  add("scatter.value", importScatterValue);
}
