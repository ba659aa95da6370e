//===- ImportIndexing.cpp - Gathers and scatters by index -----------------===//
//
// Embeddings and their backward, index_put, index_select, gather and the
// scatters: each one `train` operation that reads or writes a tensor at the
// positions an index tensor names.
//
//===----------------------------------------------------------------------===//

#include "StepImporter.h"
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
  add("gather.default", importIndexedAlongDim<GatherOp>);
  add("scatter.src", [](StepImporter &s) { return importScatter(s, "none"); });
  add("scatter_add.default",
      [](StepImporter &s) { return importScatter(s, "add"); });
  add("scatter.value", importScatterValue);
}
