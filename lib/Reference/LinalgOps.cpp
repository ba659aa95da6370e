//===- LinalgOps.cpp - Matrix products and normalisation ------------------===//
//
// mm, bmm and addmm accumulate in double and round once; layer_norm and the
// norm gradients compute their statistics and results in double and round
// once per output. rms_norm follows ATen's rms_norm_composite step by step
// in the compute type (upcast, mean of squares, add eps, rsqrt, multiply by
// the rounded rstd and the weight, round to the input's type).
//
//===----------------------------------------------------------------------===//

#include "Kernels.h"
#include "Numerics.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "llvm/ADT/TypeSwitch.h"
#include <cmath>
#include <limits>
#include <tuple>

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::reference;
using namespace mlir::mantissa::reference::kernels;

//===----------------------------------------------------------------------===//
// Matrix products
//===----------------------------------------------------------------------===//

/// `accumulator[m, n] += lhs[m, k] x rhs[k, n]` in double, summing over `k`
/// in order.
static void multiplyAccumulate(ArrayRef<double> lhs, ArrayRef<double> rhs,
                               MutableArrayRef<double> accumulator, int64_t m,
                               int64_t k, int64_t n) {
  for (int64_t row = 0; row < m; ++row) {
    double *out = accumulator.data() + row * n;
    for (int64_t inner = 0; inner < k; ++inner) {
      double scale = lhs[row * k + inner];
      const double *rhsRow = rhs.data() + inner * n;
      for (int64_t column = 0; column < n; ++column)
        out[column] += scale * rhsRow[column];
    }
  }
}

/// Batched `lhs x rhs` (rank 2 or 3) into double accumulators.
static std::vector<double> product(const Tensor &lhs, const Tensor &rhs) {
  ArrayRef<int64_t> l = lhs.getShape(), r = rhs.getShape();
  int64_t batch = l.size() == 3 ? l[0] : 1;
  int64_t m = l[l.size() - 2], k = l.back(), n = r.back();
  std::vector<double> accumulator(batch * m * n, 0.0);
  for (int64_t b = 0; b < batch; ++b)
    multiplyAccumulate(
        lhs.getFloats().slice(b * m * k, m * k),
        rhs.getFloats().slice(b * k * n, k * n),
        MutableArrayRef<double>(accumulator).slice(b * m * n, m * n), m, k, n);
  return accumulator;
}

static LogicalResult checkFloatOperands(Operation *op, const Tensor &lhs,
                                        const Tensor &rhs) {
  return success(succeeded(requireFloat(op, lhs, "left operand")) &&
                 succeeded(requireFloat(op, rhs, "right operand")));
}

static LogicalResult evaluateMatmul(Operation *op, Environment &env) {
  RankedTensorType type = typeOf(op->getResult(0));
  const Tensor &lhs = env.lookup(op->getOperand(0));
  const Tensor &rhs = env.lookup(op->getOperand(1));
  if (failed(checkFloatOperands(op, lhs, rhs)))
    return failure();
  std::vector<double> accumulator = product(lhs, rhs);
  env.bind(op->getResult(0), Tensor::fromDoubles(type.getElementType(),
                                                 type.getShape(), accumulator));
  return success();
}

/// `beta * bias + alpha * (lhs x rhs)`; a zero beta ignores the bias (NaN
/// included), as BLAS and torch do.
static LogicalResult evaluateAddmm(train::AddmmOp op, Environment &env) {
  RankedTensorType type = typeOf(op.getResult());
  const Tensor &lhs = env.lookup(op.getLhs());
  const Tensor &rhs = env.lookup(op.getRhs());
  if (failed(checkFloatOperands(op, lhs, rhs)))
    return failure();
  Tensor bias = broadcastTensor(env.lookup(op.getBias()), type.getShape());
  double alpha = op.getAlpha().convertToDouble();
  double beta = op.getBeta().convertToDouble();
  std::vector<double> accumulator = product(lhs, rhs);
  for (auto [index, value] : llvm::enumerate(accumulator)) {
    value *= alpha;
    if (beta != 0)
      value += beta * bias.getFloats()[index];
  }
  env.bind(op.getResult(), Tensor::fromDoubles(type.getElementType(),
                                               type.getShape(), accumulator));
  return success();
}

//===----------------------------------------------------------------------===//
// Normalisation
//===----------------------------------------------------------------------===//

/// The rows (leading dimensions) and row length (the trailing
/// `normalizedRank` dimensions) a norm works on.
static std::pair<int64_t, int64_t> normShape(ArrayRef<int64_t> shape,
                                             int64_t normalizedRank) {
  int64_t split = static_cast<int64_t>(shape.size()) - normalizedRank;
  return {numElementsOf(shape.take_front(split)),
          numElementsOf(shape.drop_front(split))};
}

/// Element `column` of an optional affine tensor, or `fallback`.
static double affineAt(const Tensor *affine, int64_t column, double fallback) {
  return affine ? affine->getAsDouble(column) : fallback;
}

static LogicalResult evaluateLayerNorm(train::LayerNormOp op,
                                       Environment &env) {
  const Tensor &input = env.lookup(op.getInput());
  const Tensor *weight = op.getWeight() ? &env.lookup(op.getWeight()) : nullptr;
  const Tensor *bias = op.getBias() ? &env.lookup(op.getBias()) : nullptr;
  if (failed(requireFloat(op, input, "input")))
    return failure();
  auto [rows, length] = normShape(input.getShape(), op.getNormalizedRank());
  double eps = op.getEps().convertToDouble();
  RankedTensorType resultType = typeOf(op.getResult());
  RankedTensorType meanType = typeOf(op.getMean());
  RankedTensorType rstdType = typeOf(op.getRstd());
  Tensor result(resultType.getElementType(), resultType.getShape());
  Tensor mean(meanType.getElementType(), meanType.getShape());
  Tensor rstd(rstdType.getElementType(), rstdType.getShape());
  for (int64_t row = 0; row < rows; ++row) {
    ArrayRef<double> x = input.getFloats().slice(row * length, length);
    double sum = 0;
    for (double value : x)
      sum += value;
    double rowMean = length ? sum / length : 0;
    double squares = 0;
    for (double value : x)
      squares += (value - rowMean) * (value - rowMean);
    double variance = length ? squares / length : 0;
    double rowRstd = 1.0 / std::sqrt(variance + eps);
    mean.getFloats()[row] = roundToFloat(rowMean, meanType.getElementType());
    rstd.getFloats()[row] = roundToFloat(rowRstd, rstdType.getElementType());
    for (int64_t column = 0; column < length; ++column) {
      double normalized = (x[column] - rowMean) * rowRstd;
      double value = normalized * affineAt(weight, column, 1.0) +
                     affineAt(bias, column, 0.0);
      result.getFloats()[row * length + column] =
          roundToFloat(value, resultType.getElementType());
    }
  }
  env.bind(op.getResult(), std::move(result));
  env.bind(op.getMean(), std::move(mean));
  env.bind(op.getRstd(), std::move(rstd));
  return success();
}

/// With `xhat = (x - mean) * rstd` and `g = grad * weight`:
/// `grad_input = rstd * (g - mean(g) - xhat * mean(g * xhat))`,
/// `grad_weight = sum_rows(grad * xhat)`, `grad_bias = sum_rows(grad)`.
static LogicalResult evaluateLayerNormBackward(train::LayerNormBackwardOp op,
                                               Environment &env) {
  const Tensor &grad = env.lookup(op.getGrad());
  const Tensor &input = env.lookup(op.getInput());
  const Tensor &mean = env.lookup(op.getMean());
  const Tensor &rstd = env.lookup(op.getRstd());
  const Tensor *weight = op.getWeight() ? &env.lookup(op.getWeight()) : nullptr;
  if (failed(requireFloat(op, grad, "gradient")) ||
      failed(requireFloat(op, input, "input")) ||
      failed(requireFloat(op, mean, "mean")) ||
      failed(requireFloat(op, rstd, "rstd")))
    return failure();
  auto [rows, length] = normShape(input.getShape(), op.getNormalizedRank());
  RankedTensorType inputType = typeOf(op.getGradInput());
  RankedTensorType weightType = typeOf(op.getGradWeight());
  RankedTensorType biasType = typeOf(op.getGradBias());
  std::vector<double> gradInput(rows * length), gradWeight(length, 0.0),
      gradBias(length, 0.0);
  std::vector<double> normalized(length), scaled(length);
  for (int64_t row = 0; row < rows; ++row) {
    double rowMean = mean.getFloats()[row], rowRstd = rstd.getFloats()[row];
    double sumScaled = 0, sumScaledNormalized = 0;
    for (int64_t column = 0; column < length; ++column) {
      int64_t index = row * length + column;
      double dy = grad.getFloats()[index];
      normalized[column] = (input.getFloats()[index] - rowMean) * rowRstd;
      scaled[column] = dy * affineAt(weight, column, 1.0);
      sumScaled += scaled[column];
      sumScaledNormalized += scaled[column] * normalized[column];
      gradWeight[column] += dy * normalized[column];
      gradBias[column] += dy;
    }
    for (int64_t column = 0; column < length; ++column)
      gradInput[row * length + column] =
          rowRstd * (scaled[column] - sumScaled / length -
                     normalized[column] * sumScaledNormalized / length);
  }
  env.bind(op.getGradInput(),
           Tensor::fromDoubles(inputType.getElementType(), inputType.getShape(),
                               gradInput));
  env.bind(op.getGradWeight(),
           Tensor::fromDoubles(weightType.getElementType(),
                               weightType.getShape(), gradWeight));
  env.bind(op.getGradBias(),
           Tensor::fromDoubles(biasType.getElementType(), biasType.getShape(),
                               gradBias));
  return success();
}

/// The eps torch's rms_norm uses when none is given: the machine epsilon of
/// the compute type (rms_norm_composite's `numeric_limits<opmath>`).
static double defaultRmsNormEps(Type inputType) {
  if (inputType.isF64())
    return std::numeric_limits<double>::epsilon();
  return std::numeric_limits<float>::epsilon();
}

static LogicalResult evaluateRmsNorm(train::RmsNormOp op, Environment &env) {
  const Tensor &input = env.lookup(op.getInput());
  if (failed(requireFloat(op, input, "input")))
    return failure();
  const Tensor *weight = op.getWeight() ? &env.lookup(op.getWeight()) : nullptr;
  int64_t rows, length;
  std::tie(rows, length) = normShape(input.getShape(), op.getNormalizedRank());
  RankedTensorType resultType = typeOf(op.getResult());
  RankedTensorType rstdType = typeOf(op.getRstd());
  Tensor result(resultType.getElementType(), resultType.getShape());
  Tensor rstd(rstdType.getElementType(), rstdType.getShape());
  double eps = op.getEps() ? op.getEps()->convertToDouble()
                           : defaultRmsNormEps(input.getElementType());
  withComputeType(input.getElementType(), [&](auto zero) {
    using T = decltype(zero);
    for (int64_t row = 0; row < rows; ++row) {
      ArrayRef<double> x = input.getFloats().slice(row * length, length);
      double squares = 0;
      for (double value : x) {
        T square = static_cast<T>(value) * static_cast<T>(value);
        squares += square;
      }
      T meanSquare = static_cast<T>(length ? squares / length : 0);
      T rowRstd = T(1) / std::sqrt(meanSquare + static_cast<T>(eps));
      rowRstd =
          static_cast<T>(roundToFloat(rowRstd, rstdType.getElementType()));
      rstd.getFloats()[row] = rowRstd;
      for (int64_t column = 0; column < length; ++column) {
        T value = static_cast<T>(x[column]) * rowRstd;
        if (weight)
          value *= static_cast<T>(weight->getAsDouble(column));
        result.getFloats()[row * length + column] =
            roundToFloat(value, resultType.getElementType());
      }
    }
  });
  env.bind(op.getResult(), std::move(result));
  env.bind(op.getRstd(), std::move(rstd));
  return success();
}

/// With `xhat = x * rstd` and `g = grad * weight`:
/// `grad_input = rstd * (g - xhat * mean(g * xhat))`,
/// `grad_weight = sum_rows(grad * xhat)`.
static LogicalResult evaluateRmsNormBackward(train::RmsNormBackwardOp op,
                                             Environment &env) {
  const Tensor &grad = env.lookup(op.getGrad());
  const Tensor &input = env.lookup(op.getInput());
  const Tensor &rstd = env.lookup(op.getRstd());
  const Tensor *weight = op.getWeight() ? &env.lookup(op.getWeight()) : nullptr;
  if (failed(requireFloat(op, grad, "gradient")) ||
      failed(requireFloat(op, input, "input")) ||
      failed(requireFloat(op, rstd, "rstd")))
    return failure();
  auto [rows, length] = normShape(input.getShape(), op.getNormalizedRank());
  RankedTensorType inputType = typeOf(op.getGradInput());
  RankedTensorType weightType = typeOf(op.getGradWeight());
  std::vector<double> gradInput(rows * length), gradWeight(length, 0.0);
  std::vector<double> normalized(length), scaled(length);
  for (int64_t row = 0; row < rows; ++row) {
    double rowRstd = rstd.getFloats()[row];
    double sumScaledNormalized = 0;
    for (int64_t column = 0; column < length; ++column) {
      int64_t index = row * length + column;
      double dy = grad.getFloats()[index];
      normalized[column] = input.getFloats()[index] * rowRstd;
      scaled[column] = dy * affineAt(weight, column, 1.0);
      sumScaledNormalized += scaled[column] * normalized[column];
      gradWeight[column] += dy * normalized[column];
    }
    for (int64_t column = 0; column < length; ++column)
      gradInput[row * length + column] =
          rowRstd *
          (scaled[column] - normalized[column] * sumScaledNormalized / length);
  }
  env.bind(op.getGradInput(),
           Tensor::fromDoubles(inputType.getElementType(), inputType.getShape(),
                               gradInput));
  env.bind(op.getGradWeight(),
           Tensor::fromDoubles(weightType.getElementType(),
                               weightType.getShape(), gradWeight));
  return success();
}

std::optional<LogicalResult> kernels::evaluateLinalgOp(Operation *op,
                                                       Environment &env) {
  using namespace train;
  return llvm::TypeSwitch<Operation *, std::optional<LogicalResult>>(op)
      .Case<MatmulOp, BatchMatmulOp>(
          [&](Operation *op) { return evaluateMatmul(op, env); })
      .Case<AddmmOp>([&](AddmmOp op) { return evaluateAddmm(op, env); })
      .Case<LayerNormOp>(
          [&](LayerNormOp op) { return evaluateLayerNorm(op, env); })
      .Case<LayerNormBackwardOp>([&](LayerNormBackwardOp op) {
        return evaluateLayerNormBackward(op, env);
      })
      .Case<RmsNormOp>([&](RmsNormOp op) { return evaluateRmsNorm(op, env); })
      .Case<RmsNormBackwardOp>([&](RmsNormBackwardOp op) {
        return evaluateRmsNormBackward(op, env);
      })
      .Default([](Operation *) { return std::nullopt; });
}
