//===- ImportPooling.cpp - Pooling, nearest upsampling and backwards ------===//
//
// Max and average pooling of 2-D and 3-D inputs (torch traces 1-D pooling as
// 2-D), adaptive average pooling where each input size is a multiple of the
// output size, and nearest upsampling (1-D to 3-D), with their backward
// operators, become `train` operations as convolutions do
// (ImportConvolution.cpp): a window is one strided slice of the padded input
// per kernel offset (TensorBuilder.h's windowSlice), its adjoint a strided
// scatter (windowScatter). Every backend then runs them through slices,
// elementwise operations, reductions, gathers and scatters, whose numerics
// the interpreter defines.
//
// The numbers are those of ATen's CPU kernels, bit for bit where the
// operations' own numerics allow (test/Import/pooling-exact.test):
//  - max pooling starts from -inf at the window's first position inside the
//    input, keeps the first maximum in window order and lets NaN through
//    (the last NaN's position wins); its backward adds each gradient at the
//    recorded flat position of the input plane, in output order.
//  - average pooling sums a window in row-major order and divides by the
//    override, else by the window's size: clipped to the padded input, or
//    to the input where padding is not counted. Its backward divides first,
//    then adds into the window's positions. Adaptive pooling divides by
//    each kernel size in turn (`sum / kh / kw`), as ATen does.
//  - nearest upsampling reads source `floor(dst * scale)` computed in float,
//    `scale` being `1 / scale_factor` where one is given, else `in / out`
//    (ATen's nearest_idx); an integer factor becomes a broadcast and its
//    backward a sum of strided slices, any other an index_select and a
//    scatter-add.
// The forward sums of bf16 and fp16 values accumulate in fp32 and are
// rounded once. The backward kernels work in the gradient's own type, as
// ATen's do: each division and each addition into the input gradient (in
// ATen's order) is rounded to it. Maxima and copies are exact.
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

/// A pooling window over the trailing spatial dimensions of an input
/// `[L..., I...]`, `L` being batch and channels (or channels alone).
struct PoolingShape {
  SmallVector<int64_t> leading;
  /// The spatial sizes of the input.
  SmallVector<int64_t> input;
  /// How far the last window reaches past the padded input (ceil_mode), per
  /// spatial dimension: the input is extended on the right by as much.
  SmallVector<int64_t> extra;
  /// The window over the extended input (`window.input = input + extra`).
  WindowGeometry window;

  int64_t spatialRank() const { return input.size(); }
  SmallVector<int64_t> inputShape() const {
    SmallVector<int64_t> shape(leading);
    llvm::append_range(shape, input);
    return shape;
  }
  SmallVector<int64_t> outputShape() const {
    SmallVector<int64_t> shape(leading);
    llvm::append_range(shape, window.output);
    return shape;
  }
};

} // namespace

static int64_t product(ArrayRef<int64_t> values) {
  int64_t result = 1;
  for (int64_t value : values)
    result *= value;
  return result;
}

/// Checks that `value` `[L..., S...]` has one or two leading dimensions
/// before its `spatialRank` spatial ones.
static LogicalResult checkPoolingRank(StepImporter &s, Value value,
                                      int64_t spatialRank, StringRef name) {
  int64_t rank = TensorBuilder::shapeOf(value).size();
  if (rank == spatialRank + 1 || rank == spatialRank + 2)
    return success();
  return s.fail(llvm::formatv("{0} has shape {1}; expected {2} spatial "
                              "dimension(s) after one or two leading ones",
                              name,
                              train::formatShape(TensorBuilder::shapeOf(value)),
                              spatialRank)
                    .str());
}

/// Fails unless the `computed` shape of `what` is the one torch recorded.
static LogicalResult checkShape(StepImporter &s, ArrayRef<int64_t> computed,
                                ArrayRef<int64_t> recorded, StringRef what) {
  if (computed == recorded)
    return success();
  return s.fail(llvm::formatv("computes {0} of shape {1} where torch recorded "
                              "{2}",
                              what, train::formatShape(computed),
                              train::formatShape(recorded))
                    .str());
}

/// torch's pooled size (pooling_output_shape): with ceil_mode the last
/// window may be partial, but must start inside the input or left padding.
static int64_t pooledSize(int64_t input, int64_t kernel, int64_t stride,
                          int64_t padding, int64_t dilation, bool ceilMode) {
  int64_t span = input + 2 * padding - dilation * (kernel - 1) - 1 +
                 (ceilMode ? stride - 1 : 0);
  int64_t output =
      (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
  if (ceilMode && (output - 1) * stride >= input + padding)
    --output;
  return output;
}

/// Reads and checks the window of max (`withDilation`) or average pooling
/// of `input`.
static FailureOr<PoolingShape> readPooling(StepImporter &s, Value input,
                                           int64_t spatialRank,
                                           bool withDilation) {
  if (failed(checkPoolingRank(s, input, spatialRank, "the input")))
    return failure();
  ArrayRef<int64_t> inputShape = TensorBuilder::shapeOf(input);
  PoolingShape shape;
  shape.leading.assign(inputShape.drop_back(spatialRank).begin(),
                       inputShape.drop_back(spatialRank).end());
  shape.input.assign(inputShape.take_back(spatialRank).begin(),
                     inputShape.take_back(spatialRank).end());
  SmallVector<int64_t> ones(spatialRank, 1), zeros(spatialRank, 0);
  if (!s.findArgument("kernel_size"))
    return s.fail("missing integer list argument 'kernel_size'");
  FailureOr<SmallVector<int64_t>> kernel =
      s.spatialArgument("kernel_size", ones);
  if (failed(kernel))
    return failure();
  FailureOr<SmallVector<int64_t>> stride = s.spatialArgument("stride", *kernel);
  if (failed(stride))
    return failure();
  FailureOr<SmallVector<int64_t>> padding = s.spatialArgument("padding", zeros);
  if (failed(padding))
    return failure();
  FailureOr<SmallVector<int64_t>> dilation =
      withDilation ? s.spatialArgument("dilation", ones)
                   : FailureOr<SmallVector<int64_t>>(ones);
  if (failed(dilation))
    return failure();
  bool ceilMode = s.boolArgument("ceil_mode", false);
  WindowGeometry &window = shape.window;
  window.kernel = *kernel;
  window.stride = *stride;
  window.padding = *padding;
  window.dilation = *dilation;
  for (int64_t d = 0; d < spatialRank; ++d) {
    int64_t k = window.kernel[d], step = window.stride[d],
            pad = window.padding[d], dil = window.dilation[d];
    if (k < 1 || step < 1 || dil < 1 || pad < 0)
      return s.fail(llvm::formatv("kernel {0}, stride {1}, padding {2} and "
                                  "dilation {3} must be positive (padding "
                                  "non-negative)",
                                  train::formatShape(window.kernel),
                                  train::formatShape(window.stride),
                                  train::formatShape(window.padding),
                                  train::formatShape(window.dilation))
                        .str());
    if (pad > ((k - 1) * dil + 1) / 2)
      return s.fail(llvm::formatv("padding {0} is more than half the kernel "
                                  "{1} (dilation {2})",
                                  train::formatShape(window.padding),
                                  train::formatShape(window.kernel),
                                  train::formatShape(window.dilation))
                        .str());
    int64_t output = pooledSize(shape.input[d], k, step, pad, dil, ceilMode);
    if (output < 1)
      return s.fail(llvm::formatv("the kernel {0} does not fit the padded "
                                  "input {1}",
                                  train::formatShape(window.kernel),
                                  train::formatShape(shape.input))
                        .str());
    int64_t reach = (output - 1) * step + dil * (k - 1) + 1;
    shape.extra.push_back(
        std::max<int64_t>(0, reach - (shape.input[d] + 2 * pad)));
    window.input.push_back(shape.input[d] + shape.extra.back());
    window.output.push_back(output);
  }
  return shape;
}

/// `value` `[L..., I...]` extended on the right by `shape.extra` and padded
/// on both sides by the window's padding, with `fill`.
static Value padWindows(TensorBuilder &b, Value value,
                        const PoolingShape &shape, double fill) {
  int64_t rank = TensorBuilder::shapeOf(value).size();
  Type element = TensorBuilder::typeOf(value).getElementType();
  for (int64_t d = 0; d < shape.spatialRank(); ++d) {
    if (shape.extra[d] == 0)
      continue;
    int64_t dim = rank - shape.spatialRank() + d;
    SmallVector<int64_t> extended(TensorBuilder::shapeOf(value));
    extended[dim] += shape.extra[d];
    value = b.sliceScatter(b.full(extended, element, fill), value, dim, 0,
                           shape.input[d]);
  }
  return padSpatial(b, value, shape.window, fill);
}

/// The inverse of padWindows: the input's part of the padded dimensions.
static Value unpadWindows(TensorBuilder &b, Value value,
                          const PoolingShape &shape) {
  value = unpadSpatial(b, value, shape.window);
  int64_t rank = TensorBuilder::shapeOf(value).size();
  for (int64_t d = 0; d < shape.spatialRank(); ++d)
    if (shape.extra[d] != 0)
      value = b.slice(value, rank - shape.spatialRank() + d, 0, shape.input[d]);
  return value;
}

//===----------------------------------------------------------------------===//
// Constant index tensors
//===----------------------------------------------------------------------===//

/// A 1-D i64 tensor holding `values`: one `train.arange` per run in
/// arithmetic progression (a `train.full` where the run is constant or one
/// element long), concatenated. Window positions and nearest sources are
/// such runs, so this costs a few operations.
static Value indexVector(StepImporter &s, TensorBuilder &b,
                         ArrayRef<int64_t> values) {
  Type i64 = s.builder.getI64Type();
  SmallVector<Value> runs;
  for (size_t begin = 0; begin < values.size();) {
    size_t end = begin + 1;
    int64_t step = end < values.size() ? values[end] - values[begin] : 0;
    while (end < values.size() && values[end] - values[end - 1] == step)
      ++end;
    int64_t length = end - begin;
    if (step == 0 || length == 1) {
      runs.push_back(b.full({length}, i64, static_cast<double>(values[begin])));
    } else {
      int64_t start = values[begin];
      runs.push_back(s.builder.create<train::ArangeOp>(
          s.location, RankedTensorType::get({length}, i64),
          s.builder.getI64IntegerAttr(start),
          s.builder.getI64IntegerAttr(start + step * length),
          s.builder.getI64IntegerAttr(step)));
    }
    begin = end;
  }
  return b.concat(runs, 0);
}

/// `vectors[0][o0] + vectors[1][o1] + ...` (or the product, converted to
/// `element`) over the grid `[O0, O1, ...]` of the vectors' lengths.
static Value gridOf(StepImporter &s, TensorBuilder &b,
                    ArrayRef<SmallVector<int64_t>> vectors, bool multiply,
                    Type element) {
  int64_t rank = vectors.size();
  Value result;
  for (int64_t d = 0; d < rank; ++d) {
    SmallVector<int64_t> shape(rank, 1);
    shape[d] = vectors[d].size();
    Value vector =
        b.view(b.convert(indexVector(s, b, vectors[d]), element), shape);
    if (!result)
      result = vector;
    else
      result = multiply ? b.mul(result, vector) : b.add(result, vector);
  }
  return result;
}

/// `[L..., I...]` zeros of `grad`'s type into whose flattened spatial plane
/// each element of `grad` `[L..., O...]` is added at its position in
/// `planeIndex` `[prod(O), prod(L)]` (or `[prod(O), 1]`, the same for every
/// plane), in output order, each addition rounded: ATen's scatter of a max
/// pooling or nearest upsampling gradient.
static Value scatterAddPlanes(StepImporter &s, TensorBuilder &b, Value grad,
                              Value planeIndex, ArrayRef<int64_t> inputShape,
                              int64_t spatialRank) {
  ArrayRef<int64_t> gradShape = TensorBuilder::shapeOf(grad);
  int64_t planes = product(gradShape.drop_back(spatialRank));
  int64_t positions = product(gradShape.take_back(spatialRank));
  int64_t elements = product(inputShape.take_back(spatialRank));
  Type element = TensorBuilder::typeOf(grad).getElementType();
  // Planes last: the scatter's innermost loop then runs over planes, whose
  // writes cannot collide, so that the GPU spreads it over threads, while
  // each element still receives its gradients in output order.
  Value source = b.permute(b.view(grad, {planes, positions}), {1, 0});
  Value index = b.expand(planeIndex, {positions, planes});
  Value summed = s.builder.create<train::ScatterOp>(
      s.location, b.full({elements, planes}, element, 0.0), index, source,
      /*dim=*/0, "add");
  return b.view(b.permute(summed, {1, 0}), inputShape);
}

/// The strides of the spatial dimensions `sizes` in a flattened plane.
static SmallVector<int64_t> planeStrides(ArrayRef<int64_t> sizes) {
  SmallVector<int64_t> strides(sizes.size(), 1);
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * sizes[d + 1];
  return strides;
}

//===----------------------------------------------------------------------===//
// Max pooling
//===----------------------------------------------------------------------===//

/// aten.max_pool{2,3}d_with_indices(self, kernel_size, stride, padding,
/// dilation, ceil_mode) -> (values, indices into the flattened input plane).
static LogicalResult importMaxPool(StepImporter &s, int64_t spatialRank) {
  FailureOr<Value> input = s.tensorArgument("self");
  if (failed(input))
    return failure();
  FailureOr<PoolingShape> shape =
      readPooling(s, *input, spatialRank, /*withDilation=*/true);
  if (failed(shape))
    return failure();
  FailureOr<RankedTensorType> valueType = s.outputType(0);
  if (failed(valueType))
    return failure();
  SmallVector<int64_t> outputShape = shape->outputShape();
  if (failed(checkShape(s, outputShape, valueType->getShape(), "the maxima")))
    return failure();
  bool withIndices = s.hasOutput(1);
  TensorBuilder b(s.builder, s.location);
  const WindowGeometry &window = shape->window;
  Type element = TensorBuilder::typeOf(*input).getElementType();
  Type i64 = s.builder.getI64Type();
  double negativeInfinity = -std::numeric_limits<double>::infinity();
  Value padded = padWindows(b, *input, *shape, negativeInfinity);

  // Flat positions in the input plane: `sum_d position_d * planeStride_d`.
  SmallVector<int64_t> planeStride = planeStrides(shape->input);
  auto positions = [&](ArrayRef<int64_t> offset, bool firstInside) {
    SmallVector<SmallVector<int64_t>> vectors(spatialRank);
    for (int64_t d = 0; d < spatialRank; ++d)
      for (int64_t o = 0; o < window.output[d]; ++o) {
        int64_t position = o * window.stride[d] - window.padding[d] +
                           offset[d] * window.dilation[d];
        // ATen starts from the first position not left of the input.
        while (firstInside && position < 0)
          position += window.dilation[d];
        vectors[d].push_back(position * planeStride[d]);
      }
    return gridOf(s, b, vectors, /*multiply=*/false, i64);
  };

  SmallVector<int64_t> origin(spatialRank, 0);
  Value best = b.full(outputShape, element, negativeInfinity);
  Value index = positions(origin, /*firstInside=*/true);
  auto where = [&](Value condition, Value lhs, Value rhs) -> Value {
    return s.builder.create<train::WhereOp>(s.location, condition, lhs, rhs);
  };
  for (int64_t k = 0; k < window.numOffsets(); ++k) {
    SmallVector<int64_t> offset = window.offset(k);
    Value candidate = windowSlice(b, padded, window, offset);
    Value greater = s.builder.create<train::GtOp>(s.location, candidate, best);
    Value isNaN =
        s.builder.create<train::NeOp>(s.location, candidate, candidate);
    best = where(isNaN, candidate, where(greater, candidate, best));
    if (withIndices) {
      Value at = positions(offset, /*firstInside=*/false);
      index = where(isNaN, at, where(greater, at, index));
    }
  }
  if (failed(s.setOutput(0, b.convert(best, valueType->getElementType()))))
    return failure();
  if (!withIndices)
    return success();
  FailureOr<RankedTensorType> indexType = s.outputType(1);
  if (failed(indexType))
    return failure();
  if (failed(checkShape(s, outputShape, indexType->getShape(), "the indices")))
    return failure();
  index = b.expand(index, outputShape);
  return s.setOutput(1, b.convert(index, indexType->getElementType()));
}

/// aten.max_pool{2,3}d_with_indices_backward(grad_output, self,
/// kernel_size, stride, padding, dilation, ceil_mode, indices): each
/// gradient added at its index of the flattened input plane.
static LogicalResult importMaxPoolBackward(StepImporter &s,
                                           int64_t spatialRank) {
  FailureOr<Value> grad = s.tensorArgument("grad_output");
  if (failed(grad))
    return failure();
  FailureOr<Value> input = s.tensorArgument("self");
  if (failed(input))
    return failure();
  FailureOr<Value> indices = s.tensorArgument("indices");
  if (failed(indices))
    return failure();
  FailureOr<PoolingShape> shape =
      readPooling(s, *input, spatialRank, /*withDilation=*/true);
  if (failed(shape))
    return failure();
  FailureOr<RankedTensorType> type = s.outputType();
  if (failed(type))
    return failure();
  SmallVector<int64_t> outputShape = shape->outputShape();
  if (TensorBuilder::shapeOf(*grad) != ArrayRef<int64_t>(outputShape) ||
      TensorBuilder::shapeOf(*indices) != ArrayRef<int64_t>(outputShape))
    return s.fail(
        llvm::formatv("grad_output has shape {0} and indices {1}, the "
                      "pooling's output {2}",
                      train::formatShape(TensorBuilder::shapeOf(*grad)),
                      train::formatShape(TensorBuilder::shapeOf(*indices)),
                      train::formatShape(outputShape))
            .str());
  if (failed(checkShape(s, shape->inputShape(), type->getShape(),
                        "the input gradient")))
    return failure();
  TensorBuilder b(s.builder, s.location);
  int64_t planes = product(shape->leading);
  int64_t positions = product(shape->window.output);
  Value planeIndex = b.permute(b.view(*indices, {planes, positions}), {1, 0});
  Value gradInput =
      scatterAddPlanes(s, b, b.convert(*grad, type->getElementType()),
                       planeIndex, shape->inputShape(), shape->spatialRank());
  return s.setOutput(0, gradInput);
}

//===----------------------------------------------------------------------===//
// Average pooling
//===----------------------------------------------------------------------===//

/// What ATen divides each window's sum by, as an `element` number: the
/// override, else the window's size clipped to the padded input
/// (count_include_pad) or to the input. A window wholly outside the input
/// (its sum is zero) divides by one. A 0-d tensor, or `[O...]` where the
/// divisor varies.
static Value averageDivisor(StepImporter &s, TensorBuilder &b,
                            const PoolingShape &shape, bool countIncludePad,
                            std::optional<int64_t> divisorOverride,
                            Type element) {
  if (divisorOverride)
    return b.full({}, element, static_cast<double>(*divisorOverride));
  const WindowGeometry &window = shape.window;
  SmallVector<SmallVector<int64_t>> counts(shape.spatialRank());
  bool uniform = true;
  int64_t first = 1;
  for (int64_t d = 0; d < shape.spatialRank(); ++d) {
    for (int64_t o = 0; o < window.output[d]; ++o) {
      int64_t start = o * window.stride[d] - window.padding[d];
      int64_t end = std::min(start + window.kernel[d],
                             shape.input[d] + window.padding[d]);
      int64_t inside =
          std::min(end, shape.input[d]) - std::max<int64_t>(start, 0);
      int64_t count = countIncludePad ? end - start : inside;
      counts[d].push_back(count > 0 ? count : 1);
    }
    uniform &= llvm::all_equal(counts[d]);
    first *= counts[d].front();
  }
  if (uniform)
    return b.full({}, element, static_cast<double>(first));
  // Exact products of the counts, each rounded once to `element`.
  Type compute = train::computeType(element);
  return b.convert(gridOf(s, b, counts, /*multiply=*/true, compute), element);
}

/// The divisor that the arguments after the window's of avg_pool{2,3}d and
/// its backward (count_include_pad, divisor_override) ask for.
static FailureOr<Value> readAverageDivisor(StepImporter &s, TensorBuilder &b,
                                           const PoolingShape &shape,
                                           Type element) {
  bool countIncludePad = s.boolArgument("count_include_pad", true);
  std::optional<int64_t> divisorOverride;
  if (s.findArgument("divisor_override")) {
    FailureOr<int64_t> given = s.intArgument("divisor_override");
    if (failed(given))
      return failure();
    if (*given == 0)
      return s.fail("divisor_override must not be zero");
    divisorOverride = *given;
  }
  return averageDivisor(s, b, shape, countIncludePad, divisorOverride, element);
}

/// aten.avg_pool{2,3}d(self, kernel_size, stride, padding, ceil_mode,
/// count_include_pad, divisor_override).
static LogicalResult importAvgPool(StepImporter &s, int64_t spatialRank) {
  FailureOr<Value> input = s.tensorArgument("self");
  if (failed(input))
    return failure();
  FailureOr<PoolingShape> shape =
      readPooling(s, *input, spatialRank, /*withDilation=*/false);
  if (failed(shape))
    return failure();
  FailureOr<RankedTensorType> type = s.outputType();
  if (failed(type))
    return failure();
  if (failed(checkShape(s, shape->outputShape(), type->getShape(),
                        "the averages")))
    return failure();
  TensorBuilder b(s.builder, s.location);
  Type compute = train::computeType(type->getElementType());
  FailureOr<Value> divisor = readAverageDivisor(s, b, *shape, compute);
  if (failed(divisor))
    return failure();
  Value padded = padWindows(b, b.convert(*input, compute), *shape, 0.0);
  Value sum;
  for (int64_t k = 0; k < shape->window.numOffsets(); ++k) {
    Value slice =
        windowSlice(b, padded, shape->window, shape->window.offset(k));
    sum = sum ? b.add(sum, slice) : slice;
  }
  return s.setOutput(0,
                     b.convert(b.div(sum, *divisor), type->getElementType()));
}

/// aten.avg_pool{2,3}d_backward(grad_output, self, kernel_size, stride,
/// padding, ceil_mode, count_include_pad, divisor_override): each gradient
/// divided by its window's divisor (converted to the gradient's type, as
/// ATen converts it), then added into the window's positions, the windows
/// in row-major order.
static LogicalResult importAvgPoolBackward(StepImporter &s,
                                           int64_t spatialRank) {
  FailureOr<Value> grad = s.tensorArgument("grad_output");
  if (failed(grad))
    return failure();
  FailureOr<Value> input = s.tensorArgument("self");
  if (failed(input))
    return failure();
  FailureOr<PoolingShape> shape =
      readPooling(s, *input, spatialRank, /*withDilation=*/false);
  if (failed(shape))
    return failure();
  FailureOr<RankedTensorType> type = s.outputType();
  if (failed(type))
    return failure();
  if (failed(checkShape(s, shape->outputShape(), TensorBuilder::shapeOf(*grad),
                        "the pooling output")) ||
      failed(checkShape(s, shape->inputShape(), type->getShape(),
                        "the input gradient")))
    return failure();
  TensorBuilder b(s.builder, s.location);
  Type element = type->getElementType();
  FailureOr<Value> divisor = readAverageDivisor(s, b, *shape, element);
  if (failed(divisor))
    return failure();
  Value share = b.div(b.convert(*grad, element), *divisor);
  // An input position receives the windows of later output positions
  // through earlier kernel offsets: the offsets in reverse order add the
  // windows in ATen's order.
  Value padded;
  for (int64_t k = shape->window.numOffsets() - 1; k >= 0; --k) {
    Value part =
        windowScatter(b, share, shape->window, shape->window.offset(k));
    padded = padded ? b.add(padded, part) : part;
  }
  return s.setOutput(0, unpadWindows(b, padded, *shape));
}

//===----------------------------------------------------------------------===//
// Adaptive average pooling
//===----------------------------------------------------------------------===//

/// The kernel (and stride) of adaptive average pooling from `input` to
/// `output` sizes; only whole multiples are supported, where the adaptive
/// windows are those of plain pooling.
static FailureOr<SmallVector<int64_t>>
adaptiveKernel(StepImporter &s, ArrayRef<int64_t> input,
               ArrayRef<int64_t> output) {
  SmallVector<int64_t> kernel;
  for (auto [in, out] : llvm::zip_equal(input, output)) {
    if (out < 1 || in % out != 0)
      return s.fail(llvm::formatv("adaptive average pooling from {0} to {1}: "
                                  "only output sizes that divide the input "
                                  "sizes are supported",
                                  train::formatShape(input),
                                  train::formatShape(output))
                        .str());
    kernel.push_back(in / out);
  }
  return kernel;
}

/// `[L..., O0, K0, O1, K1, ...]`: each spatial dimension of `[L..., I...]`
/// split into windows (`withKernel`) or `[L..., O0, 1, O1, 1, ...]`.
static SmallVector<int64_t> windowedShape(ArrayRef<int64_t> leading,
                                          ArrayRef<int64_t> output,
                                          ArrayRef<int64_t> kernel,
                                          bool withKernel) {
  SmallVector<int64_t> shape(leading);
  for (auto [out, k] : llvm::zip_equal(output, kernel)) {
    shape.push_back(out);
    shape.push_back(withKernel ? k : 1);
  }
  return shape;
}

/// `value / kernel[0] / kernel[1] ...`, one rounding each, as ATen divides.
static Value divideByEach(TensorBuilder &b, Value value,
                          ArrayRef<int64_t> kernel) {
  Type element = TensorBuilder::typeOf(value).getElementType();
  for (int64_t k : kernel)
    value = b.div(value, b.full({}, element, static_cast<double>(k)));
  return value;
}

/// The window of plain pooling with `kernel` as kernel and stride over
/// `input`.
static WindowGeometry tilingWindow(ArrayRef<int64_t> input,
                                   ArrayRef<int64_t> kernel) {
  WindowGeometry window;
  window.kernel.assign(kernel.begin(), kernel.end());
  window.stride = window.kernel;
  window.padding.assign(kernel.size(), 0);
  window.dilation.assign(kernel.size(), 1);
  window.input.assign(input.begin(), input.end());
  for (auto [in, k] : llvm::zip_equal(input, kernel))
    window.output.push_back(in / k);
  return window;
}

/// Above this many kernel offsets, a window sum is one reduction rather
/// than a chain of slices (whose rounding is ATen's, the reduction's being
/// the backend's).
static constexpr int64_t kMaxSlicedOffsets = 64;

/// The sums over the tiles `kernel` of `value` `[L..., I...]`, in
/// row-major order within a tile (ATen's order) where the tiles are small.
static Value tileSums(TensorBuilder &b, Value value, ArrayRef<int64_t> kernel) {
  int64_t spatialRank = kernel.size();
  ArrayRef<int64_t> shape = TensorBuilder::shapeOf(value);
  ArrayRef<int64_t> leading = shape.drop_back(spatialRank);
  WindowGeometry window = tilingWindow(shape.take_back(spatialRank), kernel);
  if (window.numOffsets() <= kMaxSlicedOffsets) {
    Value sum;
    for (int64_t k = 0; k < window.numOffsets(); ++k) {
      Value slice = windowSlice(b, value, window, window.offset(k));
      sum = sum ? b.add(sum, slice) : slice;
    }
    return sum;
  }
  SmallVector<int64_t> kernelDims, outputShape(leading);
  llvm::append_range(outputShape, window.output);
  for (int64_t d = 0; d < spatialRank; ++d)
    kernelDims.push_back(leading.size() + 2 * d + 1);
  Value tiles =
      b.view(value, windowedShape(leading, window.output, kernel, true));
  return b.view(b.sum(tiles, kernelDims, /*keepdim=*/false), outputShape);
}

/// aten._adaptive_avg_pool{2,3}d(self, output_size): the windows' sums
/// divided by each kernel size.
static LogicalResult importAdaptiveAvgPool(StepImporter &s,
                                           int64_t spatialRank) {
  FailureOr<Value> input = s.tensorArgument("self");
  if (failed(input))
    return failure();
  if (failed(checkPoolingRank(s, *input, spatialRank, "the input")))
    return failure();
  FailureOr<SmallVector<int64_t>> outputSize =
      s.spatialArgument("output_size", SmallVector<int64_t>(spatialRank, 0));
  if (failed(outputSize))
    return failure();
  FailureOr<RankedTensorType> type = s.outputType();
  if (failed(type))
    return failure();
  ArrayRef<int64_t> inputShape = TensorBuilder::shapeOf(*input);
  ArrayRef<int64_t> leading = inputShape.drop_back(spatialRank);
  FailureOr<SmallVector<int64_t>> kernel =
      adaptiveKernel(s, inputShape.take_back(spatialRank), *outputSize);
  if (failed(kernel))
    return failure();
  SmallVector<int64_t> outputShape(leading);
  llvm::append_range(outputShape, *outputSize);
  if (failed(checkShape(s, outputShape, type->getShape(), "the averages")))
    return failure();
  TensorBuilder b(s.builder, s.location);
  Type compute = train::computeType(type->getElementType());
  Value sum = tileSums(b, b.convert(*input, compute), *kernel);
  return s.setOutput(
      0, b.convert(divideByEach(b, sum, *kernel), type->getElementType()));
}

/// aten._adaptive_avg_pool{2,3}d_backward(grad_output, self): each
/// gradient divided by each kernel size (rounded to its type each time, as
/// ATen divides) and broadcast over its window.
static LogicalResult importAdaptiveAvgPoolBackward(StepImporter &s,
                                                   int64_t spatialRank) {
  FailureOr<Value> grad = s.tensorArgument("grad_output");
  if (failed(grad))
    return failure();
  FailureOr<Value> input = s.tensorArgument("self");
  if (failed(input))
    return failure();
  if (failed(checkPoolingRank(s, *input, spatialRank, "the input")))
    return failure();
  FailureOr<RankedTensorType> type = s.outputType();
  if (failed(type))
    return failure();
  ArrayRef<int64_t> inputShape = TensorBuilder::shapeOf(*input);
  ArrayRef<int64_t> gradShape = TensorBuilder::shapeOf(*grad);
  ArrayRef<int64_t> leading = inputShape.drop_back(spatialRank);
  if (gradShape.size() != inputShape.size() ||
      gradShape.drop_back(spatialRank) != leading)
    return s.fail(llvm::formatv("grad_output has shape {0} for an input of "
                                "shape {1}",
                                train::formatShape(gradShape),
                                train::formatShape(inputShape))
                      .str());
  ArrayRef<int64_t> outputSize = gradShape.take_back(spatialRank);
  FailureOr<SmallVector<int64_t>> kernel =
      adaptiveKernel(s, inputShape.take_back(spatialRank), outputSize);
  if (failed(kernel))
    return failure();
  if (failed(checkShape(s, inputShape, type->getShape(), "the input gradient")))
    return failure();
  TensorBuilder b(s.builder, s.location);
  Value share =
      divideByEach(b, b.convert(*grad, type->getElementType()), *kernel);
  share = b.view(share, windowedShape(leading, outputSize, *kernel, false));
  share = b.expand(share, windowedShape(leading, outputSize, *kernel, true));
  return s.setOutput(
      0, b.convert(b.view(share, inputShape), type->getElementType()));
}

//===----------------------------------------------------------------------===//
// Nearest upsampling
//===----------------------------------------------------------------------===//

/// The source position of each of `output` positions upsampled from
/// `input` (ATen's nearest_idx, in float as ATen computes it).
static SmallVector<int64_t> nearestSources(int64_t input, int64_t output,
                                           std::optional<double> scale) {
  float ratio = scale && *scale > 0
                    ? static_cast<float>(1.0 / *scale)
                    : static_cast<float>(input) / static_cast<float>(output);
  SmallVector<int64_t> sources;
  for (int64_t o = 0; o < output; ++o) {
    if (output == input)
      sources.push_back(o);
    else if (output == 2 * input)
      sources.push_back(o >> 1);
    else
      sources.push_back(std::min(
          static_cast<int64_t>(std::floor(static_cast<float>(o) * ratio)),
          input - 1));
  }
  return sources;
}

/// The factor `f` when `sources` repeats each of `input` positions `f`
/// times in order (then upsampling is a broadcast); otherwise 0.
static int64_t uniformFactor(ArrayRef<int64_t> sources, int64_t input) {
  int64_t output = sources.size();
  if (output % input != 0)
    return 0;
  int64_t factor = output / input;
  for (int64_t o = 0; o < output; ++o)
    if (sources[o] != o / factor)
      return 0;
  return factor;
}

/// Scale factors by spatial dimension: `scale_factors` (the .vec forms) or
/// one optional float per dimension (`scales_h`, ...).
static FailureOr<SmallVector<std::optional<double>>>
readNearestScales(StepImporter &s, int64_t spatialRank) {
  SmallVector<std::optional<double>> scales(spatialRank);
  if (const pt2::Argument *factors = s.findArgument("scale_factors")) {
    if (factors->kind != pt2::ArgumentKind::Floats ||
        static_cast<int64_t>(factors->floatValues.size()) != spatialRank)
      return s.fail(llvm::formatv("argument 'scale_factors' must be a list of "
                                  "{0} floats",
                                  spatialRank)
                        .str());
    for (int64_t d = 0; d < spatialRank; ++d)
      scales[d] = factors->floatValues[d];
    return scales;
  }
  static const char *const names[3][3] = {{"scales"},
                                          {"scales_h", "scales_w"},
                                          {"scales_d", "scales_h", "scales_w"}};
  for (int64_t d = 0; d < spatialRank; ++d) {
    StringRef name = names[spatialRank - 1][d];
    if (!s.findArgument(name))
      continue;
    FailureOr<double> scale = s.floatArgument(name);
    if (failed(scale))
      return failure();
    scales[d] = *scale;
  }
  return scales;
}

/// Checks nearest upsampling shapes: `[N, C, I...]` to `[N, C, O...]`.
static LogicalResult checkNearestShapes(StepImporter &s,
                                        ArrayRef<int64_t> input,
                                        ArrayRef<int64_t> output,
                                        int64_t spatialRank) {
  int64_t rank = spatialRank + 2;
  if (static_cast<int64_t>(input.size()) == rank &&
      static_cast<int64_t>(output.size()) == rank &&
      input.take_front(2) == output.take_front(2) &&
      llvm::all_of(input, [](int64_t size) { return size > 0; }))
    return success();
  return s.fail(llvm::formatv("upsamples shape {0} to {1}; expected [N, C] "
                              "and {2} non-empty spatial dimension(s)",
                              train::formatShape(input),
                              train::formatShape(output), spatialRank)
                    .str());
}

/// aten.upsample_nearest{1,2,3}d(self, output_size, scales...) and its .vec
/// form (input, output_size?, scale_factors?): per spatial dimension a
/// broadcast (integer factors) or an index_select of the sources.
static LogicalResult importUpsampleNearest(StepImporter &s,
                                           int64_t spatialRank) {
  FailureOr<Value> input =
      s.tensorArgument(s.findArgument("input") ? "input" : "self");
  if (failed(input))
    return failure();
  FailureOr<RankedTensorType> type = s.outputType();
  if (failed(type))
    return failure();
  FailureOr<SmallVector<std::optional<double>>> scales =
      readNearestScales(s, spatialRank);
  if (failed(scales))
    return failure();
  ArrayRef<int64_t> inputShape = TensorBuilder::shapeOf(*input);
  if (failed(checkNearestShapes(s, inputShape, type->getShape(), spatialRank)))
    return failure();
  TensorBuilder b(s.builder, s.location);
  SmallVector<SmallVector<int64_t>> sources;
  SmallVector<int64_t> factors;
  for (int64_t d = 0; d < spatialRank; ++d) {
    sources.push_back(nearestSources(inputShape[2 + d], type->getDimSize(2 + d),
                                     (*scales)[d]));
    factors.push_back(uniformFactor(sources.back(), inputShape[2 + d]));
  }
  // Integer factors: `[N, C, I0, 1, I1, 1, ...]` broadcast to
  // `[N, C, I0, F0, I1, F1, ...]`.
  if (llvm::all_of(factors, [](int64_t factor) { return factor > 0; })) {
    ArrayRef<int64_t> spatial = inputShape.drop_front(2);
    Value split =
        b.view(*input, windowedShape(inputShape.take_front(2), spatial, factors,
                                     /*withKernel=*/false));
    Value repeated = b.expand(split, windowedShape(inputShape.take_front(2),
                                                   spatial, factors,
                                                   /*withKernel=*/true));
    return s.setOutput(0, b.convert(b.view(repeated, type->getShape()),
                                    type->getElementType()));
  }
  Value result = *input;
  for (int64_t d = 0; d < spatialRank; ++d)
    if (factors[d] != 1)
      result = s.builder.create<train::IndexSelectOp>(
          s.location, result, indexVector(s, b, sources[d]), 2 + d);
  return s.setOutput(0, b.convert(result, type->getElementType()));
}

/// aten.upsample_nearest{1,2,3}d_backward(grad_output, output_size,
/// input_size, scales...) and its .vec form (grad_output, output_size?,
/// input_size, scale_factors?): each input position receives the sum of
/// the gradients it was copied to, added in row-major order of the output
/// (ATen's order) and rounded to the gradient's type each time: with
/// integer factors, a chain of strided slices; otherwise a scatter-add.
static LogicalResult importUpsampleNearestBackward(StepImporter &s,
                                                   int64_t spatialRank) {
  FailureOr<Value> grad = s.tensorArgument("grad_output");
  if (failed(grad))
    return failure();
  FailureOr<SmallVector<int64_t>> inputSize = s.intsArgument("input_size");
  if (failed(inputSize))
    return failure();
  FailureOr<RankedTensorType> type = s.outputType();
  if (failed(type))
    return failure();
  FailureOr<SmallVector<std::optional<double>>> scales =
      readNearestScales(s, spatialRank);
  if (failed(scales))
    return failure();
  ArrayRef<int64_t> gradShape = TensorBuilder::shapeOf(*grad);
  if (failed(checkNearestShapes(s, *inputSize, gradShape, spatialRank)) ||
      failed(checkShape(s, *inputSize, type->getShape(), "the input gradient")))
    return failure();
  TensorBuilder b(s.builder, s.location);
  Value gradValue = b.convert(*grad, type->getElementType());
  ArrayRef<int64_t> input =
      ArrayRef<int64_t>(*inputSize).take_back(spatialRank);
  ArrayRef<int64_t> output = gradShape.take_back(spatialRank);
  SmallVector<SmallVector<int64_t>> sources;
  SmallVector<int64_t> factors;
  for (int64_t d = 0; d < spatialRank; ++d) {
    sources.push_back(nearestSources(input[d], output[d], (*scales)[d]));
    factors.push_back(uniformFactor(sources.back(), input[d]));
  }
  if (llvm::all_of(factors, [](int64_t factor) { return factor > 0; }))
    return s.setOutput(0, tileSums(b, gradValue, factors));
  SmallVector<int64_t> planeStride = planeStrides(input);
  for (int64_t d = 0; d < spatialRank; ++d)
    for (int64_t &source : sources[d])
      source *= planeStride[d];
  Value planeIndex =
      b.view(gridOf(s, b, sources, /*multiply=*/false, s.builder.getI64Type()),
             {product(output), 1});
  return s.setOutput(0, scatterAddPlanes(s, b, gradValue, planeIndex,
                                         *inputSize, spatialRank));
}

void mlir::mantissa::importer::addPoolingHandlers(HandlerTable &table) {
  auto add = [&](const std::string &name, int64_t spatialRank,
                 LogicalResult (*handler)(StepImporter &, int64_t)) {
    addAtenHandler(table, name, [handler, spatialRank](StepImporter &s) {
      return handler(s, spatialRank);
    });
  };
  // 1-D max, average and adaptive pooling reach the graph as 2-D.
  for (int64_t rank : {2, 3}) {
    std::string pool = std::to_string(rank) + "d";
    add("max_pool" + pool + "_with_indices.default", rank, importMaxPool);
    add("max_pool" + pool + "_with_indices_backward.default", rank,
        importMaxPoolBackward);
    add("avg_pool" + pool + ".default", rank, importAvgPool);
    add("avg_pool" + pool + "_backward.default", rank, importAvgPoolBackward);
    add("_adaptive_avg_pool" + pool + ".default", rank, importAdaptiveAvgPool);
    add("adaptive_avg_pool" + pool + ".default", rank, importAdaptiveAvgPool);
    add("_adaptive_avg_pool" + pool + "_backward.default", rank,
        importAdaptiveAvgPoolBackward);
  }
  for (int64_t rank : {1, 2, 3}) {
    std::string upsample = "upsample_nearest" + std::to_string(rank) + "d";
    for (StringRef overload : {".default", ".vec"}) {
      add(upsample + overload.str(), rank, importUpsampleNearest);
      add(upsample + "_backward" + overload.str(), rank,
          importUpsampleNearestBackward);
    }
  }
}
