//===- TrainComputeOps.cpp - Type inference of the compute ops ------------===//
//
// Result shapes and element types of the operations imported from ATen, as
// torch computes them, and their verifiers.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::mantissa::train;
using mlir::mantissa::train::detail::ElementwiseKind;
namespace trainDetail = mlir::mantissa::train::detail;

static RankedTensorType tensorOf(ArrayRef<int64_t> shape, Type elementType) {
  return RankedTensorType::get(shape, elementType);
}

static int64_t numElements(ArrayRef<int64_t> shape) {
  int64_t count = 1;
  for (int64_t size : shape)
    count *= size;
  return count;
}

/// Checks that `dim` is a valid, normalised dimension of a rank-`rank`
/// tensor.
static LogicalResult checkDim(std::optional<Location> location, int64_t dim,
                              int64_t rank, StringRef what) {
  if (dim < 0 || dim >= std::max<int64_t>(rank, 1))
    return emitOptionalError(location, what, " ", dim,
                             " is out of range for a tensor of rank ", rank);
  return success();
}

/// The element type an elementwise op of `kind` produces from the promoted
/// type of its operands.
static Type applyKind(Type promoted, ElementwiseKind kind) {
  MLIRContext *context = promoted.getContext();
  switch (kind) {
  case ElementwiseKind::Arithmetic:
  case ElementwiseKind::SameType:
    return promoted;
  case ElementwiseKind::Compare:
    return IntegerType::get(context, 1);
  case ElementwiseKind::TrueDivide:
  case ElementwiseKind::FloatMath:
    return isIntegral(promoted) ? Float32Type::get(context) : promoted;
  }
  llvm_unreachable("unknown elementwise kind");
}

LogicalResult trainDetail::inferBinaryOp(std::optional<Location> location,
                                         Type lhs, Type rhs,
                                         ElementwiseKind kind,
                                         SmallVectorImpl<Type> &inferred) {
  auto lhsType = cast<RankedTensorType>(lhs);
  auto rhsType = cast<RankedTensorType>(rhs);
  auto shape = broadcastShapes(lhsType.getShape(), rhsType.getShape());
  if (!shape)
    return emitOptionalError(
        location, "shapes ", formatShape(lhsType.getShape()), " and ",
        formatShape(rhsType.getShape()), " do not broadcast");
  Type promoted = resultType(
      lhs.getContext(), {{lhsType.getElementType(), lhsType.getRank() == 0},
                         {rhsType.getElementType(), rhsType.getRank() == 0}});
  inferred.push_back(tensorOf(*shape, applyKind(promoted, kind)));
  return success();
}

LogicalResult trainDetail::inferScalarOp(std::optional<Location> location,
                                         Type input, Attribute scalar,
                                         ElementwiseKind kind,
                                         SmallVectorImpl<Type> &inferred) {
  auto inputType = cast<RankedTensorType>(input);
  Type promoted =
      resultType(input.getContext(),
                 {{inputType.getElementType(), inputType.getRank() == 0},
                  {scalarElementType(scalar), false, /*isScalar=*/true}});
  inferred.push_back(tensorOf(inputType.getShape(), applyKind(promoted, kind)));
  return success();
}

LogicalResult trainDetail::inferUnaryOp(std::optional<Location> location,
                                        Type input, ElementwiseKind kind,
                                        SmallVectorImpl<Type> &inferred) {
  auto inputType = cast<RankedTensorType>(input);
  inferred.push_back(tensorOf(inputType.getShape(),
                              applyKind(inputType.getElementType(), kind)));
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

static LogicalResult verifyApproximate(Operation *op, StringRef approximate) {
  if (approximate != "none" && approximate != "tanh")
    return op->emitOpError()
           << "approximate must be \"none\" or \"tanh\", got \"" << approximate
           << "\"";
  return success();
}

LogicalResult GeluOp::verify() {
  return verifyApproximate(*this, getApproximate());
}

/// An activation's gradient: the type of its gradient and input, which
/// must agree (torch's *_backward kernels take both in one dtype).
static LogicalResult inferActivationGradient(std::optional<Location> location,
                                             StringRef name, Type grad,
                                             Type input,
                                             SmallVectorImpl<Type> &inferred) {
  if (grad != input)
    return emitOptionalError(location, "gradient and input of ", name,
                             " differ in type");
  inferred.push_back(grad);
  return success();
}

LogicalResult GeluBackwardOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  return inferActivationGradient(location, "gelu_backward",
                                 adaptor.getGrad().getType(),
                                 adaptor.getInput().getType(), inferred);
}

LogicalResult SiluBackwardOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  return inferActivationGradient(location, "silu_backward",
                                 adaptor.getGrad().getType(),
                                 adaptor.getInput().getType(), inferred);
}

LogicalResult GeluBackwardOp::verify() {
  return verifyApproximate(*this, getApproximate());
}

LogicalResult WhereOp::inferReturnTypes(MLIRContext *context,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &inferred) {
  auto condition = cast<RankedTensorType>(adaptor.getCondition().getType());
  auto lhs = cast<RankedTensorType>(adaptor.getLhs().getType());
  auto rhs = cast<RankedTensorType>(adaptor.getRhs().getType());
  if (!condition.getElementType().isInteger(1))
    return emitOptionalError(location, "condition must be a tensor of i1, got ",
                             condition);
  auto shape = broadcastShapes(condition.getShape(), lhs.getShape());
  if (shape)
    shape = broadcastShapes(*shape, rhs.getShape());
  if (!shape)
    return emitOptionalError(location, "shapes ",
                             formatShape(condition.getShape()), ", ",
                             formatShape(lhs.getShape()), " and ",
                             formatShape(rhs.getShape()), " do not broadcast");
  Type element =
      resultType(context, {{lhs.getElementType(), lhs.getRank() == 0},
                           {rhs.getElementType(), rhs.getRank() == 0}});
  inferred.push_back(tensorOf(*shape, element));
  return success();
}

LogicalResult MaskedFillOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> location,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &inferred) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  auto mask = cast<RankedTensorType>(adaptor.getMask().getType());
  auto shape = broadcastShapes(input.getShape(), mask.getShape());
  if (!mask.getElementType().isInteger(1) || !shape ||
      ArrayRef<int64_t>(*shape) != input.getShape())
    return emitOptionalError(location, "mask ", mask,
                             " must be i1 and broadcast to the input ", input);
  inferred.push_back(input);
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions and softmax
//===----------------------------------------------------------------------===//

/// Shape and type of a reduction of `input` over `dims`.
static LogicalResult inferReduction(std::optional<Location> location,
                                    Type input, ArrayRef<int64_t> dims,
                                    bool keepdim, Type elementType,
                                    SmallVectorImpl<Type> &inferred) {
  auto inputType = cast<RankedTensorType>(input);
  int64_t rank = inputType.getRank();
  for (auto [index, dim] : llvm::enumerate(dims)) {
    if (failed(checkDim(location, dim, rank, "reduction dimension")))
      return failure();
    if (index > 0 && dims[index - 1] >= dim)
      return emitOptionalError(
          location, "reduction dimensions must be sorted and unique");
  }
  SmallVector<int64_t> shape;
  for (int64_t dim = 0; dim < rank; ++dim) {
    bool reduced = dims.empty() || llvm::is_contained(dims, dim);
    if (!reduced)
      shape.push_back(inputType.getDimSize(dim));
    else if (keepdim)
      shape.push_back(1);
  }
  inferred.push_back(tensorOf(shape, elementType));
  return success();
}

LogicalResult SumOp::inferReturnTypes(MLIRContext *context,
                                      std::optional<Location> location,
                                      Adaptor adaptor,
                                      SmallVectorImpl<Type> &inferred) {
  Type element = getElementTypeOrSelf(adaptor.getInput().getType());
  if (adaptor.getDtype())
    element = *adaptor.getDtype();
  else if (isIntegral(element))
    element = IntegerType::get(context, 64);
  return inferReduction(location, adaptor.getInput().getType(),
                        adaptor.getDims(), adaptor.getKeepdim(), element,
                        inferred);
}

LogicalResult MeanOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> location,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &inferred) {
  Type element = getElementTypeOrSelf(adaptor.getInput().getType());
  if (adaptor.getDtype())
    element = *adaptor.getDtype();
  if (isIntegral(element))
    return emitOptionalError(location, "mean needs a floating-point type, got ",
                             element);
  return inferReduction(location, adaptor.getInput().getType(),
                        adaptor.getDims(), adaptor.getKeepdim(), element,
                        inferred);
}

LogicalResult AmaxOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> location,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &inferred) {
  Type element = adaptor.getDtype()
                     ? *adaptor.getDtype()
                     : getElementTypeOrSelf(adaptor.getInput().getType());
  return inferReduction(location, adaptor.getInput().getType(),
                        adaptor.getDims(), adaptor.getKeepdim(), element,
                        inferred);
}

template <typename SoftmaxOpTy>
static LogicalResult verifySoftmaxDim(SoftmaxOpTy op, Type input) {
  int64_t rank = cast<RankedTensorType>(input).getRank();
  auto dim = static_cast<int64_t>(op.getDim());
  if (dim < 0 || dim >= std::max<int64_t>(rank, 1))
    return op.emitOpError() << "dimension " << dim
                            << " is out of range for a tensor of rank " << rank;
  if (!isa<FloatType>(getElementTypeOrSelf(input)))
    return op.emitOpError() << "needs a floating-point input, got " << input;
  return success();
}

LogicalResult SoftmaxOp::verify() {
  return verifySoftmaxDim(*this, getInput().getType());
}

LogicalResult LogSoftmaxOp::verify() {
  return verifySoftmaxDim(*this, getInput().getType());
}

template <typename AdaptorTy>
static LogicalResult inferSoftmaxBackward(std::optional<Location> location,
                                          AdaptorTy adaptor,
                                          SmallVectorImpl<Type> &inferred) {
  auto grad = cast<RankedTensorType>(adaptor.getGrad().getType());
  auto output = cast<RankedTensorType>(adaptor.getOutput().getType());
  if (grad.getShape() != output.getShape())
    return emitOptionalError(location, "gradient ", grad, " and output ",
                             output, " differ in shape");
  inferred.push_back(grad);
  return success();
}

LogicalResult SoftmaxBackwardOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  return inferSoftmaxBackward(location, adaptor, inferred);
}
LogicalResult SoftmaxBackwardOp::verify() {
  return verifySoftmaxDim(*this, getOutput().getType());
}

LogicalResult LogSoftmaxBackwardOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  return inferSoftmaxBackward(location, adaptor, inferred);
}
LogicalResult LogSoftmaxBackwardOp::verify() {
  return verifySoftmaxDim(*this, getOutput().getType());
}

//===----------------------------------------------------------------------===//
// Matrix products and norms
//===----------------------------------------------------------------------===//

/// `[..., m, k] x [..., k, n]` with equal batch dimensions and element types.
static LogicalResult inferMatmul(std::optional<Location> location, Type lhs,
                                 Type rhs, int64_t rank,
                                 SmallVectorImpl<Type> &inferred) {
  auto lhsType = cast<RankedTensorType>(lhs);
  auto rhsType = cast<RankedTensorType>(rhs);
  if (lhsType.getRank() != rank || rhsType.getRank() != rank)
    return emitOptionalError(location, "operands must have rank ", rank,
                             ", got ", lhs, " and ", rhs);
  if (lhsType.getElementType() != rhsType.getElementType())
    return emitOptionalError(location, "operands differ in element type: ", lhs,
                             " and ", rhs);
  ArrayRef<int64_t> l = lhsType.getShape(), r = rhsType.getShape();
  if (l.drop_back(2) != r.drop_back(2) || l[rank - 1] != r[rank - 2])
    return emitOptionalError(location, "shapes ", formatShape(l), " and ",
                             formatShape(r), " cannot be multiplied");
  SmallVector<int64_t> shape(l.drop_back());
  shape.push_back(r.back());
  inferred.push_back(tensorOf(shape, lhsType.getElementType()));
  return success();
}

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  return inferMatmul(location, adaptor.getLhs().getType(),
                     adaptor.getRhs().getType(), 2, inferred);
}

LogicalResult BatchMatmulOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> location,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &inferred) {
  return inferMatmul(location, adaptor.getLhs().getType(),
                     adaptor.getRhs().getType(), 3, inferred);
}

LogicalResult AddmmOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &inferred) {
  if (failed(inferMatmul(location, adaptor.getLhs().getType(),
                         adaptor.getRhs().getType(), 2, inferred)))
    return failure();
  auto product = cast<RankedTensorType>(inferred.back());
  auto bias = cast<RankedTensorType>(adaptor.getBias().getType());
  auto shape = broadcastShapes(bias.getShape(), product.getShape());
  if (!shape || ArrayRef<int64_t>(*shape) != product.getShape() ||
      bias.getElementType() != product.getElementType())
    return emitOptionalError(location, "bias ", bias,
                             " does not broadcast to the product ", product);
  return success();
}

/// The input's shape with its trailing `normalizedRank` dimensions set to 1.
static FailureOr<SmallVector<int64_t>>
statisticsShape(std::optional<Location> location, RankedTensorType input,
                int64_t normalizedRank) {
  if (normalizedRank < 1 || normalizedRank > input.getRank())
    return emitOptionalError(location, "cannot normalise over the last ",
                             normalizedRank, " dimensions of ", input);
  SmallVector<int64_t> shape(input.getShape());
  for (int64_t i = input.getRank() - normalizedRank; i < input.getRank(); ++i)
    shape[i] = 1;
  return shape;
}

/// Checks that an affine weight or bias has the normalised shape.
static LogicalResult checkAffine(std::optional<Location> location, Value value,
                                 RankedTensorType input, int64_t normalizedRank,
                                 StringRef what) {
  if (!value)
    return success();
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getShape() != input.getShape().take_back(normalizedRank))
    return emitOptionalError(location, what, " ", type,
                             " does not match the normalised dimensions of ",
                             input);
  return success();
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  int64_t normalizedRank = adaptor.getNormalizedRank();
  auto stats = statisticsShape(location, input, normalizedRank);
  if (failed(stats) ||
      failed(checkAffine(location, adaptor.getWeight(), input, normalizedRank,
                         "weight")) ||
      failed(checkAffine(location, adaptor.getBias(), input, normalizedRank,
                         "bias")))
    return failure();
  inferred.push_back(input);
  inferred.push_back(tensorOf(*stats, input.getElementType()));
  inferred.push_back(tensorOf(*stats, input.getElementType()));
  return success();
}

LogicalResult LayerNormBackwardOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  int64_t normalizedRank = adaptor.getNormalizedRank();
  if (adaptor.getGrad().getType() != input)
    return emitOptionalError(location, "gradient and input differ in type");
  if (failed(statisticsShape(location, input, normalizedRank)))
    return failure();
  auto affineType = tensorOf(input.getShape().take_back(normalizedRank),
                             input.getElementType());
  inferred.push_back(input);
  inferred.push_back(adaptor.getWeight() ? adaptor.getWeight().getType()
                                         : Type(affineType));
  inferred.push_back(adaptor.getBias() ? adaptor.getBias().getType()
                                       : Type(affineType));
  return success();
}

LogicalResult RmsNormOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &inferred) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  int64_t normalizedRank = adaptor.getNormalizedRank();
  auto stats = statisticsShape(location, input, normalizedRank);
  if (failed(stats) || failed(checkAffine(location, adaptor.getWeight(), input,
                                          normalizedRank, "weight")))
    return failure();
  inferred.push_back(input);
  inferred.push_back(tensorOf(*stats, computeType(input.getElementType())));
  return success();
}

LogicalResult RmsNormBackwardOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  int64_t normalizedRank = adaptor.getNormalizedRank();
  if (failed(statisticsShape(location, input, normalizedRank)))
    return failure();
  inferred.push_back(input);
  inferred.push_back(
      adaptor.getWeight()
          ? adaptor.getWeight().getType()
          : Type(tensorOf(input.getShape().take_back(normalizedRank),
                          input.getElementType())));
  return success();
}

//===----------------------------------------------------------------------===//
// Shapes
//===----------------------------------------------------------------------===//

LogicalResult ViewOp::verify() {
  auto input = cast<RankedTensorType>(getInput().getType());
  auto result = cast<RankedTensorType>(getType());
  if (input.getElementType() != result.getElementType())
    return emitOpError() << "cannot change the element type";
  if (numElements(input.getShape()) != numElements(result.getShape()))
    return emitOpError() << "cannot view " << formatShape(input.getShape())
                         << " (" << numElements(input.getShape())
                         << " elements) as " << formatShape(result.getShape())
                         << " (" << numElements(result.getShape())
                         << " elements)";
  return success();
}

OpFoldResult ViewOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  // A view of a view is one view.
  if (auto inner = getInput().getDefiningOp<ViewOp>()) {
    getInputMutable().assign(inner.getInput());
    return getResult();
  }
  return {};
}

LogicalResult PermuteOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &inferred) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  ArrayRef<int64_t> dims = adaptor.getDims();
  if (static_cast<int64_t>(dims.size()) != input.getRank())
    return emitOptionalError(location, "permutation ", formatShape(dims),
                             " does not match rank ", input.getRank());
  SmallVector<bool> seen(dims.size(), false);
  SmallVector<int64_t> shape;
  for (int64_t dim : dims) {
    if (dim < 0 || dim >= input.getRank() || seen[dim])
      return emitOptionalError(location, formatShape(dims),
                               " is not a permutation");
    seen[dim] = true;
    shape.push_back(input.getDimSize(dim));
  }
  inferred.push_back(tensorOf(shape, input.getElementType()));
  return success();
}

LogicalResult ExpandOp::verify() {
  auto input = cast<RankedTensorType>(getInput().getType());
  auto result = cast<RankedTensorType>(getType());
  auto shape = broadcastShapes(input.getShape(), result.getShape());
  if (input.getElementType() != result.getElementType() || !shape ||
      ArrayRef<int64_t>(*shape) != result.getShape())
    return emitOpError() << "cannot expand " << input << " to " << result;
  return success();
}

/// The length of `slice(start, end, step)` of a dimension of `size`, with
/// torch's clamping of out-of-range bounds.
static int64_t sliceLength(int64_t size, int64_t start, int64_t end,
                           int64_t step) {
  start = normalizeSliceBound(start, size);
  end = normalizeSliceBound(end, size);
  return end <= start ? 0 : (end - start + step - 1) / step;
}

static FailureOr<RankedTensorType> slicedType(std::optional<Location> location,
                                              RankedTensorType input,
                                              int64_t dim, int64_t start,
                                              int64_t end, int64_t step) {
  if (failed(checkDim(location, dim, input.getRank(), "slice dimension")))
    return failure();
  if (step < 1)
    return emitOptionalError(location, "slice step must be positive, got ",
                             step);
  SmallVector<int64_t> shape(input.getShape());
  shape[dim] = sliceLength(shape[dim], start, end, step);
  return tensorOf(shape, input.getElementType());
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> location,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &inferred) {
  auto sliced =
      slicedType(location, cast<RankedTensorType>(adaptor.getInput().getType()),
                 adaptor.getDim(), adaptor.getStart(), adaptor.getEnd(),
                 adaptor.getStep());
  if (failed(sliced))
    return failure();
  inferred.push_back(*sliced);
  return success();
}

LogicalResult SliceScatterOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  auto sliced =
      slicedType(location, input, adaptor.getDim(), adaptor.getStart(),
                 adaptor.getEnd(), adaptor.getStep());
  if (failed(sliced))
    return failure();
  auto source = cast<RankedTensorType>(adaptor.getSource().getType());
  if (source.getShape() != sliced->getShape())
    return emitOptionalError(location, "source ", source,
                             " does not fit the slice ", *sliced);
  inferred.push_back(input);
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *context,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  ValueRange inputs = adaptor.getInputs();
  if (inputs.empty())
    return emitOptionalError(location, "needs at least one input");
  auto first = cast<RankedTensorType>(inputs.front().getType());
  int64_t dim = adaptor.getDim();
  if (failed(
          checkDim(location, dim, first.getRank(), "concatenation dimension")))
    return failure();
  SmallVector<int64_t> shape(first.getShape());
  shape[dim] = 0;
  SmallVector<PromotionOperand> operands;
  for (Value input : inputs) {
    auto type = cast<RankedTensorType>(input.getType());
    for (int64_t i = 0; i < type.getRank(); ++i)
      if (type.getRank() != first.getRank() ||
          (i != dim && type.getDimSize(i) != first.getDimSize(i)))
        return emitOptionalError(location, "cannot concatenate ", type,
                                 " with ", first, " along dimension ", dim);
    shape[dim] += type.getDimSize(dim);
    operands.push_back({type.getElementType(), false});
  }
  inferred.push_back(tensorOf(shape, resultType(context, operands)));
  return success();
}

//===----------------------------------------------------------------------===//
// Indexing
//===----------------------------------------------------------------------===//

static LogicalResult checkIndices(std::optional<Location> location,
                                  Type indices) {
  Type element = getElementTypeOrSelf(indices);
  if (!element.isInteger(64) && !element.isInteger(32))
    return emitOptionalError(location, "indices must be i64 or i32, got ",
                             indices);
  return success();
}

LogicalResult EmbeddingOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> location,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &inferred) {
  auto weight = cast<RankedTensorType>(adaptor.getWeight().getType());
  auto indices = cast<RankedTensorType>(adaptor.getIndices().getType());
  if (weight.getRank() != 2)
    return emitOptionalError(location, "embedding table must be 2-D, got ",
                             weight);
  if (failed(checkIndices(location, indices)))
    return failure();
  SmallVector<int64_t> shape(indices.getShape());
  shape.push_back(weight.getDimSize(1));
  inferred.push_back(tensorOf(shape, weight.getElementType()));
  return success();
}

LogicalResult EmbeddingBackwardOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  auto grad = cast<RankedTensorType>(adaptor.getGrad().getType());
  auto indices = cast<RankedTensorType>(adaptor.getIndices().getType());
  if (failed(checkIndices(location, indices)))
    return failure();
  if (grad.getRank() != indices.getRank() + 1 ||
      grad.getShape().drop_back() != indices.getShape())
    return emitOptionalError(location, "gradient ", grad,
                             " does not match indices ", indices);
  inferred.push_back(tensorOf(
      {static_cast<int64_t>(adaptor.getNumWeights()), grad.getShape().back()},
      grad.getElementType()));
  return success();
}

LogicalResult IndexPutOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> location,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &inferred) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  auto indices = cast<RankedTensorType>(adaptor.getIndices().getType());
  auto values = cast<RankedTensorType>(adaptor.getValues().getType());
  if (failed(checkIndices(location, indices)))
    return failure();
  if (input.getRank() < 1)
    return emitOptionalError(location, "cannot index a 0-d tensor");
  SmallVector<int64_t> indexed(indices.getShape());
  llvm::append_range(indexed, input.getShape().drop_front());
  auto shape = broadcastShapes(values.getShape(), indexed);
  if (!shape || ArrayRef<int64_t>(*shape) != ArrayRef<int64_t>(indexed))
    return emitOptionalError(location, "values ", values,
                             " do not broadcast to the indexed shape ",
                             formatShape(indexed));
  inferred.push_back(input);
  return success();
}

LogicalResult IndexSelectOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> location,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &inferred) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  auto index = cast<RankedTensorType>(adaptor.getIndex().getType());
  if (failed(checkIndices(location, index)) ||
      failed(
          checkDim(location, adaptor.getDim(), input.getRank(), "dimension")))
    return failure();
  if (index.getRank() > 1)
    return emitOptionalError(location, "index must be 1-D, got ", index);
  SmallVector<int64_t> shape(input.getShape());
  if (!shape.empty())
    shape[adaptor.getDim()] = index.getNumElements();
  inferred.push_back(tensorOf(shape, input.getElementType()));
  return success();
}

/// gather/scatter: index has the input's rank and fits inside it off `dim`.
static LogicalResult checkGatherIndex(std::optional<Location> location,
                                      RankedTensorType input,
                                      RankedTensorType index, int64_t dim) {
  if (failed(checkIndices(location, index)) ||
      failed(checkDim(location, dim, input.getRank(), "dimension")))
    return failure();
  if (index.getRank() != input.getRank())
    return emitOptionalError(location, "index ", index,
                             " must have the rank of the input ", input);
  for (int64_t i = 0; i < input.getRank(); ++i)
    if (i != dim && index.getDimSize(i) > input.getDimSize(i))
      return emitOptionalError(location, "index ", index,
                               " is larger than the input ", input,
                               " in dimension ", i);
  return success();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> location,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &inferred) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  auto index = cast<RankedTensorType>(adaptor.getIndex().getType());
  if (failed(checkGatherIndex(location, input, index, adaptor.getDim())))
    return failure();
  inferred.push_back(tensorOf(index.getShape(), input.getElementType()));
  return success();
}

LogicalResult ScatterOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> location,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &inferred) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  auto index = cast<RankedTensorType>(adaptor.getIndex().getType());
  auto source = cast<RankedTensorType>(adaptor.getSource().getType());
  if (failed(checkGatherIndex(location, input, index, adaptor.getDim())))
    return failure();
  if (source.getElementType() != input.getElementType() ||
      source.getRank() != index.getRank())
    return emitOptionalError(location, "source ", source,
                             " does not match the input ", input);
  inferred.push_back(input);
  return success();
}

LogicalResult ScatterOp::verify() {
  if (getReduce() != "none" && getReduce() != "add")
    return emitOpError() << "reduce must be \"none\" or \"add\", got \""
                         << getReduce() << "\"";
  return success();
}

LogicalResult ScatterValueOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> location, Adaptor adaptor,
    SmallVectorImpl<Type> &inferred) {
  auto input = cast<RankedTensorType>(adaptor.getInput().getType());
  auto index = cast<RankedTensorType>(adaptor.getIndex().getType());
  if (failed(checkGatherIndex(location, input, index, adaptor.getDim())))
    return failure();
  inferred.push_back(input);
  return success();
}

//===----------------------------------------------------------------------===//
// Creation
//===----------------------------------------------------------------------===//

/// A scalar attribute as a double.
static double scalarValue(Attribute scalar) {
  if (auto floatAttr = dyn_cast<FloatAttr>(scalar))
    return floatAttr.getValueAsDouble();
  if (auto boolAttr = dyn_cast<BoolAttr>(scalar))
    return boolAttr.getValue();
  return static_cast<double>(cast<IntegerAttr>(scalar).getInt());
}

LogicalResult ArangeOp::verify() {
  double start = scalarValue(getStart()), end = scalarValue(getEnd()),
         step = scalarValue(getStep());
  if (step == 0)
    return emitOpError() << "step must not be zero";
  int64_t expected = std::max<int64_t>(
      0, static_cast<int64_t>(std::ceil((end - start) / step)));
  int64_t actual = cast<RankedTensorType>(getType()).getDimSize(0);
  if (actual != expected)
    return emitOpError() << "range holds " << expected
                         << " elements but the result has " << actual;
  return success();
}
