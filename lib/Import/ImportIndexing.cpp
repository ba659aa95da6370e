//===- ImportIndexing.cpp - Gathers and scatters by index -----------------===//
//
// Embeddings and their backward, index_put, index_select, gather and the
// scatters: each one `train` operation that reads or writes a tensor at the
// positions an index tensor names. Advanced indexing with integer tensors
// (index.Tensor) becomes an index_select at a linear index.
//
//===----------------------------------------------------------------------===//

#include "StepImporter.h"
#include "TensorBuilder.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
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
    return s.fail(
        "only one index tensor on the leading dimension is supported");
  return s.emitSingle<IndexPutOp>(*self, s.findTensor(*indexName), *values,
                                  s.boolArgument("accumulate", false));
}

/// index.Tensor, `self[i0, i1, ...]` with integer index tensors on the
/// leading dimensions (Hugging Face builds its attention masks this way):
/// the indices broadcast together, negative ones count from the end, and
/// the result is `broadcast shape + self.shape[k:]`. Imported as one
/// index_select of the flattened leading dimensions at the linear index
/// `sum(i_d * stride_d)`, so every backend runs an existing gather.
static LogicalResult importIndexTensor(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<RankedTensorType> type =
      succeeded(self) ? s.outputType() : FailureOr<RankedTensorType>();
  if (failed(self) || failed(type))
    return failure();
  const pt2::Argument *argument = s.findArgument("indices");
  std::vector<std::optional<std::string>> names;
  if (argument && argument->kind == pt2::ArgumentKind::OptionalTensors)
    names = argument->optionalTensorNames;
  else if (argument && argument->kind == pt2::ArgumentKind::Tensors)
    names.assign(argument->tensorNames.begin(), argument->tensorNames.end());
  else
    return s.fail("argument 'indices' must be a list of tensors");
  while (!names.empty() && !names.back())
    names.pop_back();
  SmallVector<Value> indices;
  for (const std::optional<std::string> &name : names) {
    if (!name)
      return s.fail("a None before an index tensor (x[:, i]) is not "
                    "supported: only leading dimensions can be indexed");
    Value index = s.findTensor(*name);
    if (!index)
      return s.fail("argument 'indices' names the undefined tensor '" + *name +
                    "'");
    Type element = getElementTypeOrSelf(index.getType());
    if (!isa<IntegerType>(element) || element.isInteger(1))
      return s.fail("index tensor '" + *name +
                    "' is not an integer tensor: boolean masks select a "
                    "data-dependent number of elements");
    indices.push_back(index);
  }
  ArrayRef<int64_t> selfShape = TensorBuilder::shapeOf(*self);
  int64_t count = indices.size();
  if (count == 0 || count > static_cast<int64_t>(selfShape.size()))
    return s.fail(llvm::Twine("expected 1 to ") +
                  llvm::Twine(selfShape.size()) + " index tensors, got " +
                  llvm::Twine(count));
  // The indices' broadcast shape is the result's leading part.
  int64_t rest = selfShape.size() - count;
  ArrayRef<int64_t> resultShape = type->getShape();
  ArrayRef<int64_t> broadcast = resultShape.drop_back(rest);
  TensorBuilder b(s.builder, s.location);
  Type i64 = s.builder.getI64Type();
  Value linear;
  int64_t stride = 1;
  for (int64_t d = count - 1; d >= 0; --d) {
    int64_t size = selfShape[d];
    Value index = b.convert(indices[d], i64);
    Value negative = s.builder.create<LtScalarOp>(
        s.location, index, s.builder.getI64IntegerAttr(0));
    Value wrapped = s.builder.create<AddScalarOp>(
        s.location, index, s.builder.getI64IntegerAttr(size));
    index = s.builder.create<WhereOp>(s.location, negative, wrapped, index);
    if (stride != 1)
      index = s.builder.create<MulScalarOp>(
          s.location, index, s.builder.getI64IntegerAttr(stride));
    index = b.expand(index, broadcast);
    linear = linear ? b.add(linear, index) : index;
    stride *= size;
  }
  SmallVector<int64_t> flatShape = {stride};
  llvm::append_range(flatShape, selfShape.drop_front(count));
  int64_t numIndices = 1;
  for (int64_t size : broadcast)
    numIndices *= size;
  Value rows = s.builder.create<IndexSelectOp>(
      s.location, b.view(*self, flatShape), b.view(linear, {numIndices}),
      s.builder.getI64IntegerAttr(0));
  return s.setOutput(0, b.view(rows, resultShape));
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
  add("index_select.default", importIndexedAlongDim<IndexSelectOp>);
  add("index.Tensor", importIndexTensor);
  add("gather.default", importIndexedAlongDim<GatherOp>);
  add("scatter.src", [](StepImporter &s) { return importScatter(s, "none"); });
  add("scatter_add.default",
      [](StepImporter &s) { return importScatter(s, "add"); });
  add("scatter.value", importScatterValue);
}
