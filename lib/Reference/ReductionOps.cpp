//===- ReductionOps.cpp - Reductions and softmax --------------------------===//
//
// sum, mean and amax over dimensions; softmax and log-softmax along one
// dimension with their gradients. Sums accumulate in double (integers in
// wrapping int64) and round once to the result type, which is at least as
// accurate as torch's fp32 cascade sums. The softmax family follows ATen's
// vectorised CPU kernels: the maximum is subtracted first, exponentials are
// taken in the compute type, and softmax multiplies by the reciprocal of
// the sum.
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "Numerics.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::reference;
using namespace mlir::mantissa::reference::kernels;

namespace {
enum class Reduction { Sum, Mean, Amax };
} // namespace

/// For every element of `inputShape`, in row-major order, calls
/// `fn(inputIndex, outputIndex)` where `outputIndex` is the row-major
/// position of the element's reduction in the result.
template <typename Fn>
static void forEachReduced(ArrayRef<int64_t> inputShape, ArrayRef<bool> reduced,
                           Fn fn) {
  int64_t count = numElementsOf(inputShape);
  if (count == 0)
    return;
  SmallVector<int64_t> keptShape(inputShape);
  for (auto [dim, isReduced] : llvm::enumerate(reduced))
    if (isReduced)
      keptShape[dim] = 1;
  SmallVector<int64_t> strides = rowMajorStrides(keptShape);
  for (auto [dim, isReduced] : llvm::enumerate(reduced))
    if (isReduced)
      strides[dim] = 0;
  IndexWalker walker(inputShape, strides);
  int64_t position = 0;
  do {
    fn(position++, walker.getOffset());
  } while (walker.next());
}

template <typename ReduceOpTy>
static LogicalResult evaluateReduce(ReduceOpTy op, Reduction kind,
                                    Environment &env) {
  RankedTensorType type = typeOf(op.getResult());
  Type element = type.getElementType();
  const Tensor &source = env.lookup(op.getInput());
  ArrayRef<int64_t> dims = op.getDims();
  SmallVector<bool> reduced(source.getRank(), dims.empty());
  int64_t reducedCount = 1;
  for (int64_t dim : dims)
    reduced[dim] = true;
  for (auto [dim, isReduced] : llvm::enumerate(reduced))
    if (isReduced)
      reducedCount *= source.getShape()[dim];

  // torch converts the input to the result (or requested) type first.
  Tensor input = convertTensor(source, element);
  Tensor result(element, type.getShape());
  int64_t outputCount = result.getNumElements();

  if (kind == Reduction::Amax) {
    if (reducedCount == 0 && outputCount != 0)
      return op.emitOpError() << "cannot take the maximum over an empty "
                                 "dimension of "
                              << source.getType();
    if (input.isFloatingPoint()) {
      SmallVector<double> best(outputCount,
                               -std::numeric_limits<double>::infinity());
      forEachReduced(input.getShape(), reduced, [&](int64_t in, int64_t out) {
        double value = input.getFloats()[in];
        if (std::isnan(value) || value > best[out])
          best[out] = std::isnan(best[out]) ? best[out] : value;
      });
      llvm::copy(best, result.getFloats().begin());
    } else {
      SmallVector<int64_t> best(outputCount,
                                std::numeric_limits<int64_t>::min());
      forEachReduced(input.getShape(), reduced, [&](int64_t in, int64_t out) {
        best[out] = std::max(best[out], input.getIntegers()[in]);
      });
      llvm::copy(best, result.getIntegers().begin());
    }
    env.bind(op.getResult(), std::move(result));
    return success();
  }

  if (!input.isFloatingPoint()) {
    SmallVector<uint64_t> sums(outputCount, 0);
    forEachReduced(input.getShape(), reduced, [&](int64_t in, int64_t out) {
      sums[out] += static_cast<uint64_t>(input.getIntegers()[in]);
    });
    for (int64_t i = 0; i < outputCount; ++i)
      result.getIntegers()[i] =
          wrapToInteger(static_cast<int64_t>(sums[i]), element);
    env.bind(op.getResult(), std::move(result));
    return success();
  }

  SmallVector<double> sums(outputCount, 0.0);
  forEachReduced(input.getShape(), reduced, [&](int64_t in, int64_t out) {
    sums[out] += input.getFloats()[in];
  });
  for (int64_t i = 0; i < outputCount; ++i) {
    double value = sums[i];
    if (kind == Reduction::Mean)
      value /= static_cast<double>(reducedCount);
    result.getFloats()[i] = roundToFloat(value, element);
  }
  env.bind(op.getResult(), std::move(result));
  return success();
}

/// Calls `fn(offsets)` for every line of `shape` along `dim`, with the
/// row-major offsets of the line's elements.
template <typename Fn>
static void forEachLine(ArrayRef<int64_t> shape, int64_t dim, Fn fn) {
  DimSplit split = splitAtDim(shape, dim);
  SmallVector<int64_t> offsets(split.size);
  for (int64_t outer = 0; outer < split.outer; ++outer) {
    for (int64_t inner = 0; inner < split.inner; ++inner) {
      for (int64_t d = 0; d < split.size; ++d)
        offsets[d] = (outer * split.size + d) * split.inner + inner;
      fn(ArrayRef<int64_t>(offsets));
    }
  }
}

template <typename SoftmaxOpTy>
static LogicalResult evaluateSoftmax(SoftmaxOpTy op, bool logarithm,
                                     Environment &env) {
  RankedTensorType type = typeOf(op.getResult());
  Type element = type.getElementType();
  const Tensor &input = env.lookup(op.getInput());
  if (failed(requireFloat(op, input, "input")))
    return failure();
  Tensor result(element, type.getShape());
  withComputeType(element, [&](auto zero) {
    using T = decltype(zero);
    SmallVector<T> shifted;
    forEachLine(input.getShape(), op.getDim(), [&](ArrayRef<int64_t> line) {
      T maximum = -std::numeric_limits<T>::infinity();
      for (int64_t offset : line) {
        auto value = static_cast<T>(input.getFloats()[offset]);
        if (std::isnan(value) || value > maximum)
          maximum = std::isnan(maximum) ? maximum : value;
      }
      shifted.resize(line.size());
      double sum = 0;
      for (auto [d, offset] : llvm::enumerate(line)) {
        shifted[d] = static_cast<T>(input.getFloats()[offset]) - maximum;
        sum += std::exp(shifted[d]);
      }
      if (logarithm) {
        T logSum = std::log(static_cast<T>(sum));
        for (auto [d, offset] : llvm::enumerate(line))
          result.getFloats()[offset] =
              roundToFloat(shifted[d] - logSum, element);
        return;
      }
      T reciprocal = T(1) / static_cast<T>(sum);
      for (auto [d, offset] : llvm::enumerate(line))
        result.getFloats()[offset] =
            roundToFloat(std::exp(shifted[d]) * reciprocal, element);
    });
  });
  env.bind(op.getResult(), std::move(result));
  return success();
}

/// softmax: `(grad - sum(grad * output)) * output`; log-softmax:
/// `grad - exp(output) * sum(grad)`; sums in double, the rest in the
/// compute type.
template <typename BackwardOpTy>
static LogicalResult evaluateSoftmaxBackward(BackwardOpTy op, bool logarithm,
                                             Environment &env) {
  RankedTensorType type = typeOf(op.getResult());
  Type element = type.getElementType();
  const Tensor &grad = env.lookup(op.getGrad());
  const Tensor &output = env.lookup(op.getOutput());
  if (failed(requireFloat(op, grad, "gradient")) ||
      failed(requireFloat(op, output, "output")))
    return failure();
  Tensor result(element, type.getShape());
  withComputeType(element, [&](auto zero) {
    using T = decltype(zero);
    forEachLine(grad.getShape(), op.getDim(), [&](ArrayRef<int64_t> line) {
      double sum = 0;
      for (int64_t offset : line) {
        auto g = static_cast<T>(grad.getFloats()[offset]);
        auto y = static_cast<T>(output.getFloats()[offset]);
        sum += logarithm ? static_cast<double>(g)
                         : static_cast<double>(g) * static_cast<double>(y);
      }
      auto total = static_cast<T>(sum);
      for (int64_t offset : line) {
        auto g = static_cast<T>(grad.getFloats()[offset]);
        auto y = static_cast<T>(output.getFloats()[offset]);
        T value = logarithm ? g - std::exp(y) * total : (g - total) * y;
        result.getFloats()[offset] = roundToFloat(value, element);
      }
    });
  });
  env.bind(op.getResult(), std::move(result));
  return success();
}

std::optional<LogicalResult> kernels::evaluateReductionOp(Operation *op,
                                                          Environment &env) {
  using namespace train;
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(op)
      .Case<SumOp>(
          [&](SumOp op) { return evaluateReduce(op, Reduction::Sum, env); })
      .Case<MeanOp>(
          [&](MeanOp op) { return evaluateReduce(op, Reduction::Mean, env); })
      .Case<AmaxOp>(
          [&](AmaxOp op) { return evaluateReduce(op, Reduction::Amax, env); })
      .Case<SoftmaxOp>([&](SoftmaxOp op) {
        return evaluateSoftmax(op, /*logarithm=*/false, env);
      })
      .Case<LogSoftmaxOp>([&](LogSoftmaxOp op) {
        return evaluateSoftmax(op, /*logarithm=*/true, env);
      })
      .Case<SoftmaxBackwardOp>([&](SoftmaxBackwardOp op) {
        return evaluateSoftmaxBackward(op, /*logarithm=*/false, env);
      })
      .Case<LogSoftmaxBackwardOp>([&](LogSoftmaxBackwardOp op) {
        return evaluateSoftmaxBackward(op, /*logarithm=*/true, env);
      })
      .Default([](Operation *) { return std::nullopt; });
}
