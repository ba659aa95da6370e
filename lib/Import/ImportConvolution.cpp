//===- ImportConvolution.cpp - aten.convolution and its backward ----------===//
//
// Convolutions of any spatial rank (1-D, 2-D, 3-D), with stride, padding,
// dilation and groups, become GEMMs over gathered windows ("im2col"): one
// strided slice of the padded input per kernel offset, stacked, and one
// batched matrix product per group. The backward is the same gather for the
// weight gradient and its adjoint ("col2im": the product with the
// transposed weight, scattered back window by window) for the input
// gradient. Every backend then runs a convolution as GEMMs (cuBLAS on the
// GPU, the CPU step's matrix kernels) and slices, whose numerics the
// interpreter defines; the window copies cost memory (a kernel of k
// elements gathers k copies of the input), which the models this tool
// targets (patch embeddings, small convolutional stems) afford.
//
// As ATen's CPU kernels do for bf16/fp16 (oneDNN), products accumulate and
// bias and window sums are added in fp32, and each result is rounded once.
//
//===----------------------------------------------------------------------===//

#include "StepImporter.h"
#include "TensorBuilder.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Dialect/Train/IR/TrainTypeRules.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::importer;

namespace {

/// The shapes of one convolution: input `[N, C, S...]`, weight
/// `[F, C / groups, K...]`, output `[N, F, O...]`.
struct ConvolutionShape {
  int64_t batch = 0, channels = 0, features = 0, groups = 1;
  WindowGeometry window;

  int64_t groupChannels() const { return channels / groups; }
  int64_t groupFeatures() const { return features / groups; }
  int64_t positions() const {
    return ShapedType::getNumElements(window.output);
  }
  /// Rows of a group's gathered windows: `C / groups * prod(K)`.
  int64_t columnRows() const { return groupChannels() * window.numOffsets(); }
};

} // namespace

/// Reads and checks the geometry shared by the forward and the backward.
static FailureOr<ConvolutionShape> readConvolution(StepImporter &s, Value input,
                                                   Value weight) {
  ArrayRef<int64_t> inputShape = TensorBuilder::shapeOf(input);
  ArrayRef<int64_t> weightShape = TensorBuilder::shapeOf(weight);
  int64_t spatialRank = static_cast<int64_t>(weightShape.size()) - 2;
  if (spatialRank < 1 || spatialRank > 3)
    return s.fail(llvm::formatv("the weight has rank {0}; 1-D, 2-D and 3-D "
                                "convolutions (rank 3 to 5) are supported",
                                weightShape.size())
                      .str());
  if (static_cast<int64_t>(inputShape.size()) != spatialRank + 2)
    return s.fail(llvm::formatv("the input has shape {0} for a weight of shape "
                                "{1}; expected a batched input of rank {2}",
                                train::formatShape(inputShape),
                                train::formatShape(weightShape),
                                spatialRank + 2)
                      .str());
  if (s.boolArgument("transposed", false))
    return s.fail("transposed convolutions are not supported");
  ConvolutionShape shape;
  shape.batch = inputShape[0];
  shape.channels = inputShape[1];
  shape.features = weightShape[0];
  FailureOr<int64_t> groups = s.intArgument("groups", 1);
  if (failed(groups))
    return failure();
  shape.groups = *groups;
  if (shape.groups < 1 || shape.channels % shape.groups != 0 ||
      shape.features % shape.groups != 0 ||
      weightShape[1] * shape.groups != shape.channels)
    return s.fail(llvm::formatv("groups = {0} does not divide the input's {1} "
                                "channels into the weight's {2} per group and "
                                "its {3} output channels",
                                shape.groups, shape.channels, weightShape[1],
                                shape.features)
                      .str());
  FailureOr<SmallVector<int64_t>> stride =
      s.spatialArgument("stride", SmallVector<int64_t>(spatialRank, 1));
  if (failed(stride))
    return failure();
  FailureOr<SmallVector<int64_t>> padding =
      s.spatialArgument("padding", SmallVector<int64_t>(spatialRank, 0));
  if (failed(padding))
    return failure();
  FailureOr<SmallVector<int64_t>> dilation =
      s.spatialArgument("dilation", SmallVector<int64_t>(spatialRank, 1));
  if (failed(dilation))
    return failure();
  WindowGeometry &window = shape.window;
  window.stride = *stride;
  window.padding = *padding;
  window.dilation = *dilation;
  for (int64_t d = 0; d < spatialRank; ++d) {
    window.kernel.push_back(weightShape[2 + d]);
    window.input.push_back(inputShape[2 + d]);
    if (window.stride[d] < 1 || window.dilation[d] < 1 || window.padding[d] < 0)
      return s.fail(llvm::formatv("stride {0}, padding {1} and dilation {2} "
                                  "must be positive (padding non-negative)",
                                  train::formatShape(window.stride),
                                  train::formatShape(window.padding),
                                  train::formatShape(window.dilation))
                        .str());
    int64_t output = WindowGeometry::outputSize(
        window.input[d], window.kernel[d], window.stride[d], window.padding[d],
        window.dilation[d]);
    if (output < 1)
      return s.fail(llvm::formatv("the kernel {0} does not fit the padded "
                                  "input {1}",
                                  train::formatShape(window.kernel),
                                  train::formatShape(window.input))
                        .str());
    window.output.push_back(output);
  }
  return shape;
}

/// The gathered windows of `input` (already in the compute type), one matrix
/// per batch element and group: `[N * groups, C / groups * prod(K), P]`,
/// rows ordered as the weight's `(channel, kernel offset)` elements.
static Value gatherColumns(TensorBuilder &b, Value input,
                           const ConvolutionShape &shape) {
  Value padded = padSpatial(b, input, shape.window, 0.0);
  SmallVector<Value> slices;
  for (int64_t k = 0; k < shape.window.numOffsets(); ++k) {
    Value slice = windowSlice(b, padded, shape.window, shape.window.offset(k));
    slices.push_back(
        b.view(slice, {shape.batch, shape.channels, 1, shape.positions()}));
  }
  Value columns = b.concat(slices, 2);
  return b.view(columns, {shape.batch * shape.groups, shape.columnRows(),
                          shape.positions()});
}

/// The weight as one matrix per group, repeated for every batch element:
/// `[N * groups, F / groups, C / groups * prod(K)]`, or its transpose.
static Value weightMatrices(TensorBuilder &b, Value weight,
                            const ConvolutionShape &shape, bool transposed) {
  Value matrices = b.view(
      weight, {1, shape.groups, shape.groupFeatures(), shape.columnRows()});
  if (transposed)
    matrices = b.permute(matrices, {0, 1, 3, 2});
  ArrayRef<int64_t> perGroup = TensorBuilder::shapeOf(matrices).drop_front(2);
  SmallVector<int64_t> expanded = {shape.batch, shape.groups, perGroup[0],
                                   perGroup[1]};
  return b.view(b.expand(matrices, expanded),
                {shape.batch * shape.groups, perGroup[0], perGroup[1]});
}

/// `[N, F, O...]` with the spatial dimensions of the output.
static SmallVector<int64_t> outputShape(const ConvolutionShape &shape) {
  SmallVector<int64_t> result = {shape.batch, shape.features};
  llvm::append_range(result, shape.window.output);
  return result;
}

/// aten.convolution(input, weight, bias?, stride, padding, dilation,
/// transposed, output_padding, groups).
static LogicalResult importConvolution(StepImporter &s) {
  FailureOr<Value> input = s.tensorArgument("input");
  if (failed(input))
    return failure();
  FailureOr<Value> weight = s.tensorArgument("weight");
  if (failed(weight))
    return failure();
  FailureOr<Value> bias = s.optionalTensorArgument("bias");
  if (failed(bias))
    return failure();
  FailureOr<RankedTensorType> type = s.outputType();
  if (failed(type))
    return failure();
  FailureOr<ConvolutionShape> shape = readConvolution(s, *input, *weight);
  if (failed(shape))
    return failure();
  if (type->getShape() != ArrayRef<int64_t>(outputShape(*shape)))
    return s.fail(llvm::formatv("computes shape {0} where torch recorded {1}",
                                train::formatShape(outputShape(*shape)),
                                train::formatShape(type->getShape()))
                      .str());
  TensorBuilder b(s.builder, s.location);
  Type compute = train::computeType(type->getElementType());
  Value columns = gatherColumns(b, b.convert(*input, compute), *shape);
  Value weights = weightMatrices(b, b.convert(*weight, compute), *shape, false);
  Value result = b.view(b.bmm(weights, columns), outputShape(*shape));
  if (*bias) {
    SmallVector<int64_t> biasShape(shape->window.spatialRank() + 1, 1);
    biasShape[0] = shape->features;
    result = b.add(result, b.view(b.convert(*bias, compute), biasShape));
  }
  return s.setOutput(0, b.convert(result, type->getElementType()));
}

/// aten.convolution_backward(grad_output, input, weight, bias_sizes, stride,
/// padding, dilation, transposed, output_padding, groups, output_mask) ->
/// (grad_input, grad_weight, grad_bias), each only where output_mask asks.
static LogicalResult importConvolutionBackward(StepImporter &s) {
  FailureOr<Value> grad = s.tensorArgument("grad_output");
  if (failed(grad))
    return failure();
  FailureOr<Value> input = s.tensorArgument("input");
  if (failed(input))
    return failure();
  FailureOr<Value> weight = s.tensorArgument("weight");
  if (failed(weight))
    return failure();
  FailureOr<ConvolutionShape> shape = readConvolution(s, *input, *weight);
  if (failed(shape))
    return failure();
  if (TensorBuilder::shapeOf(*grad) != ArrayRef<int64_t>(outputShape(*shape)))
    return s.fail(
        llvm::formatv("grad_output has shape {0}, the convolution's "
                      "output {1}",
                      train::formatShape(TensorBuilder::shapeOf(*grad)),
                      train::formatShape(outputShape(*shape)))
            .str());
  FailureOr<SmallVector<bool, 3>> mask = s.outputMaskArgument();
  if (failed(mask))
    return failure();
  TensorBuilder b(s.builder, s.location);
  Type element = TensorBuilder::typeOf(*grad).getElementType();
  Type compute = train::computeType(element);
  Value gradCompute = b.convert(*grad, compute);
  Value gradMatrices =
      b.view(gradCompute, {shape->batch * shape->groups, shape->groupFeatures(),
                           shape->positions()});
  int64_t spatialRank = shape->window.spatialRank();

  if ((*mask)[0] && s.hasOutput(0)) {
    Value weights = weightMatrices(b, b.convert(*weight, compute), *shape,
                                   /*transposed=*/true);
    SmallVector<int64_t> columnShape = {shape->batch, shape->channels,
                                        shape->window.numOffsets()};
    llvm::append_range(columnShape, shape->window.output);
    Value columns = b.view(b.bmm(weights, gradMatrices), columnShape);
    SmallVector<int64_t> paddedShape = {shape->batch, shape->channels};
    llvm::append_range(paddedShape, shape->window.paddedInput());
    Value padded = b.full(paddedShape, compute, 0.0);
    SmallVector<int64_t> partShape = {shape->batch, shape->channels};
    llvm::append_range(partShape, shape->window.output);
    for (int64_t k = 0; k < shape->window.numOffsets(); ++k) {
      Value part = b.view(b.slice(columns, 2, k, k + 1), partShape);
      padded = b.add(padded, windowScatter(b, part, shape->window,
                                           shape->window.offset(k)));
    }
    Value gradInput = unpadSpatial(b, padded, shape->window);
    if (failed(s.setConvertedOutput(0, gradInput)))
      return failure();
  }
  if ((*mask)[1] && s.hasOutput(1)) {
    Value columns = gatherColumns(b, b.convert(*input, compute), *shape);
    Value products = b.bmm(gradMatrices, b.permute(columns, {0, 2, 1}));
    int64_t weightElements = shape->features * shape->columnRows();
    Value summed =
        b.sum(b.view(products, {shape->batch, weightElements}), {0}, false);
    Value gradWeight = b.view(summed, TensorBuilder::shapeOf(*weight));
    if (failed(s.setConvertedOutput(1, gradWeight)))
      return failure();
  }
  if ((*mask)[2] && s.hasOutput(2)) {
    SmallVector<int64_t> dims = {0};
    for (int64_t d = 0; d < spatialRank; ++d)
      dims.push_back(2 + d);
    Value gradBias = b.sum(gradCompute, dims, false);
    if (failed(s.setConvertedOutput(2, gradBias)))
      return failure();
  }
  return success();
}

void mlir::mantissa::importer::addConvolutionHandlers(HandlerTable &table) {
  addAtenHandler(table, "convolution.default", importConvolution);
  addAtenHandler(table, "convolution_backward.default",
                 importConvolutionBackward);
}
