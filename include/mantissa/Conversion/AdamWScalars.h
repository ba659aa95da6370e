//===- AdamWScalars.h - The per-step scalars of AdamW -----------*- C++ -*-===//
//
// The fp32 scalars of one AdamW step, derived from the hyperparameters as
// torch's Python code derives them: in double, then converted to float where
// the tensor operation takes them. Header-only and free of LLVM/MLIR, so that
// a GPU host program computes exactly what the generated CPU code computes.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_ADAMWSCALARS_H
#define MANTISSA_CONVERSION_ADAMWSCALARS_H

#include <cmath>
#include <cstdint>

namespace mlir::mantissa {

/// The GPU kernel's scalar arguments, in its argument order.
struct AdamWStepScalars {
  float decay;               ///< 1 - lr * weight_decay (param.mul_)
  float lerpWeight;          ///< 1 - beta1 (exp_avg.lerp_)
  float beta2;               ///< exp_avg_sq.mul_(beta2)
  float oneMinusBeta2;       ///< addcmul_ value
  float biasCorrection2Sqrt; ///< (1 - beta2 ** step) ** 0.5
  float eps;                 ///< denom.add_(eps)
  float negStepSize;         ///< -lr / (1 - beta1 ** step) (addcdiv_ value)
};

/// `step` is the 1-based count of the update being made (torch's state
/// `step` after its increment).
inline AdamWStepScalars computeAdamWStepScalars(double lr, double beta1,
                                                double beta2, double eps,
                                                double weightDecay,
                                                int64_t step) {
  double stepValue = static_cast<double>(step);
  double biasCorrection1 = 1.0 - std::pow(beta1, stepValue);
  double biasCorrection2 = 1.0 - std::pow(beta2, stepValue);
  double stepSize = lr / biasCorrection1;
  // Python rounds lr * weight_decay before subtracting it: keep a compiler
  // that contracts expressions (GCC's default) from fusing the two.
  volatile double decayProduct = lr * weightDecay;
  AdamWStepScalars scalars;
  scalars.decay = static_cast<float>(1.0 - decayProduct);
  scalars.lerpWeight = static_cast<float>(1.0 - beta1);
  scalars.beta2 = static_cast<float>(beta2);
  scalars.oneMinusBeta2 = static_cast<float>(1.0 - beta2);
  scalars.biasCorrection2Sqrt =
      static_cast<float>(std::pow(biasCorrection2, 0.5));
  scalars.eps = static_cast<float>(eps);
  scalars.negStepSize = static_cast<float>(-stepSize);
  return scalars;
}

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_ADAMWSCALARS_H
