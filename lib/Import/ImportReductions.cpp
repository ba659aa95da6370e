//===- ImportReductions.cpp - Reductions and softmax ----------------------===//
//
// Sums, means and maxima over dimensions, all and any (counts of the non-zero
// elements), integer cumulative sums, and the softmax and log-softmax with
// their backward ops.
//
//===----------------------------------------------------------------------===//

#include "StepImporter.h"
#include "TensorBuilder.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Import/TorchImporter.h"

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::train;
using namespace mlir::mantissa::importer;
using llvm::StringRef;

template <typename OpTy>
static LogicalResult importReduction(StepImporter &s, bool allDimsByDefault) {
  FailureOr<Value> self = s.tensorArgument("self");
  if (failed(self))
    return failure();
  int64_t rank = s.rankOf(*self);
  SmallVector<int64_t> dims;
  if (!allDimsByDefault) {
    FailureOr<SmallVector<int64_t>> given = s.dimsArgument("dim", rank);
    if (failed(given))
      return failure();
    dims = std::move(*given);
  }
  // Reducing every dimension of a 0-d tensor is the identity in shape.
  if (rank == 0)
    dims.clear();
  bool keepdim = s.boolArgument("keepdim", false);
  TypeAttr dtype;
  if (const pt2::Argument *argument = s.findArgument("dtype")) {
    Type element =
        mlir::mantissa::getElementType(s.context, argument->scalarType);
    if (!element)
      return s.fail("unsupported reduction dtype");
    dtype = TypeAttr::get(element);
  }
  return s.emitSingle<OpTy>(*self, s.builder.getDenseI64ArrayAttr(dims),
                            keepdim, dtype);
}

/// all / any over `dim` (one or a list; every dimension when absent): the
/// count of non-zero elements, compared with the number reduced (all) or 0
/// (any). The result is bool, shaped as torch recorded it (keepdim or not).
static LogicalResult importAllOrAny(StepImporter &s, bool isAll) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<RankedTensorType> type =
      succeeded(self) ? s.outputType() : FailureOr<RankedTensorType>();
  if (failed(self) || failed(type))
    return failure();
  if (!type->getElementType().isInteger(1))
    return s.fail("only bool results are supported (uint8 inputs give uint8)");
  auto input = cast<RankedTensorType>(self->getType());
  int64_t rank = input.getRank();
  FailureOr<SmallVector<int64_t>> dims = s.dimsArgument("dim", rank);
  if (failed(dims))
    return failure();
  if (rank == 0)
    dims->clear();
  if (dims->empty())
    for (int64_t d = 0; d < rank; ++d)
      dims->push_back(d);
  int64_t reduced = 1;
  for (int64_t dim : *dims)
    reduced *= input.getDimSize(dim);
  Value truth = input.getElementType().isInteger(1)
                    ? *self
                    : Value(s.builder.create<NeScalarOp>(
                          s.location, *self, s.builder.getI64IntegerAttr(0)));
  Value count = s.builder.create<SumOp>(
      s.location, s.convert(truth, s.builder.getI64Type()), *dims,
      /*keepdim=*/true, TypeAttr());
  Value result =
      isAll ? Value(s.builder.create<EqScalarOp>(
                  s.location, count, s.builder.getI64IntegerAttr(reduced)))
            : Value(s.builder.create<GtScalarOp>(
                  s.location, count, s.builder.getI64IntegerAttr(0)));
  if (cast<RankedTensorType>(result.getType()) != *type)
    result = s.builder.create<ViewOp>(s.location, *type, result);
  return s.setOutput(0, result);
}

template <typename OpTy> static LogicalResult importSoftmax(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  if (failed(self))
    return failure();
  FailureOr<int64_t> dim = s.dimArgument("dim", s.rankOf(*self));
  if (failed(dim))
    return failure();
  if (s.boolArgument("half_to_float", false))
    return s.fail("half_to_float is only supported by torch on CUDA");
  return s.emitSingle<OpTy>(*self, *dim);
}

template <typename OpTy>
static LogicalResult importSoftmaxBackward(StepImporter &s) {
  FailureOr<Value> grad = s.tensorArgument("grad_output");
  FailureOr<Value> output = s.tensorArgument("output");
  if (failed(grad) || failed(output))
    return failure();
  FailureOr<int64_t> dim = s.dimArgument("dim", s.rankOf(*output));
  if (failed(dim))
    return failure();
  return s.emitSingle<OpTy>(*grad, *output, *dim);
}

/// cumsum of an integer or bool tensor (Hugging Face numbers positions and
/// finds packed sequences with it): a scan in ceil(log2 n) steps, each
/// adding the running sums shifted by 1, 2, 4, ... positions along `dim`,
/// exact in integers. A floating cumsum is refused: torch's CPU kernel adds
/// sequentially in double precision, which this order would not reproduce.
static LogicalResult importCumsum(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<RankedTensorType> type =
      succeeded(self) ? s.outputType() : FailureOr<RankedTensorType>();
  if (failed(self) || failed(type))
    return failure();
  FailureOr<int64_t> dim = s.dimArgument("dim", s.rankOf(*self));
  if (failed(dim))
    return failure();
  Type element = type->getElementType();
  if (!isa<IntegerType>(element) ||
      !isa<IntegerType>(getElementTypeOrSelf(self->getType())))
    return s.fail("cumsum is supported on integer and bool tensors only");
  TensorBuilder b(s.builder, s.location);
  Value sums = b.convert(*self, element);
  ArrayRef<int64_t> shape = type->getShape();
  int64_t size = shape.empty() ? 1 : shape[*dim];
  for (int64_t shift = 1; shift < size; shift *= 2) {
    SmallVector<int64_t> zerosShape(shape);
    zerosShape[*dim] = shift;
    Value shifted = b.concat(
        {b.full(zerosShape, element, 0), b.slice(sums, *dim, 0, size - shift)},
        *dim);
    sums = b.add(sums, shifted);
  }
  return s.setOutput(0, sums);
}

void mlir::mantissa::importer::addReductionHandlers(HandlerTable &table) {
  auto add = [&](StringRef overload, Handler handler) {
    addAtenHandler(table, overload, std::move(handler));
  };
  // Reductions and softmax.
  add("sum.dim_IntList",
      [](StepImporter &s) { return importReduction<SumOp>(s, false); });
  add("sum.default",
      [](StepImporter &s) { return importReduction<SumOp>(s, true); });
  add("mean.dim",
      [](StepImporter &s) { return importReduction<MeanOp>(s, false); });
  add("mean.default",
      [](StepImporter &s) { return importReduction<MeanOp>(s, true); });
  add("amax.default",
      [](StepImporter &s) { return importReduction<AmaxOp>(s, false); });
  for (StringRef name : {"all.dim", "all.dims", "all.default"})
    add(name, [](StepImporter &s) { return importAllOrAny(s, true); });
  for (StringRef name : {"any.dim", "any.dims", "any.default"})
    add(name, [](StepImporter &s) { return importAllOrAny(s, false); });
  add("cumsum.default", importCumsum);
  add("_softmax.default", importSoftmax<SoftmaxOp>);
  add("_log_softmax.default", importSoftmax<LogSoftmaxOp>);
  add("_softmax_backward_data.default",
      importSoftmaxBackward<SoftmaxBackwardOp>);
  add("_log_softmax_backward_data.default",
      importSoftmaxBackward<LogSoftmaxBackwardOp>);
}
