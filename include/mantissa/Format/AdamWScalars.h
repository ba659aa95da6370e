//===- AdamWScalars.h - The per-step scalars of AdamW -----------*- C++ -*-===//
//
// The fp32 scalars of one AdamW step, derived from the hyperparameters as
// torch's Python code derives them: in double, then converted to float where
// the tensor operation takes them, and the GPU update kernel's parameter
// tail. The compiler generates the kernels that take them (AdamWToLoops.cpp,
// whose CPU code computes the same values) and the runtime computes and
// passes them, so the two share this one definition from the floor below
// both (docs/architecture.md).
//
// Part of mantissa_format (header-only): no LLVM, MLIR or runtime headers
// here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_FORMAT_ADAMWSCALARS_H
#define MANTISSA_FORMAT_ADAMWSCALARS_H

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
  /// The gradients' multiplier: clip_grad_norm_'s coefficient, 1 when the
  /// step does not clip.
  float gradScale = 1.0f;
};

/// The GPU kernel's parameters after its buffers: the scalars in order,
/// then the tiles [firstTile, endTile) it updates (a launch has one block
/// per tile of the range). `pointers()` lists their addresses, as
/// cuLaunchKernel's kernelParams take them.
struct AdamWGpuKernelTail {
  float scalars[8];
  int64_t firstTile = 0, endTile = 0;

  AdamWGpuKernelTail(const AdamWStepScalars &step, int64_t firstTile,
                     int64_t endTile)
      : scalars{step.decay,
                step.lerpWeight,
                step.beta2,
                step.oneMinusBeta2,
                step.biasCorrection2Sqrt,
                step.eps,
                step.negStepSize,
                step.gradScale},
        firstTile(firstTile), endTile(endTile) {}
  template <typename Push> void pointers(Push push) {
    for (float &value : scalars)
      push(static_cast<void *>(&value));
    push(static_cast<void *>(&firstTile));
    push(static_cast<void *>(&endTile));
  }
  int64_t blocks() const {
    return endTile > firstTile ? endTile - firstTile : 1;
  }
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

#endif // MANTISSA_FORMAT_ADAMWSCALARS_H
