//===- GradientSource.h - What computes each step's gradients ---*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The interface between the trainer and the training step in front of it:
// a source computes a micro-batch's loss and gradients from the current
// parameters (the compiled CPU step, CpuStep.h; the GPU step, GpuStep.h; the
// reference interpreter, lib/Driver/TrainLoop.cpp), reading its inputs from
// a batch source (BatchSource.h). Which micro-batches a rank evaluates, and
// their global position, is the micro-batch schedule's (MicroBatchSchedule.h).
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_GRADIENTSOURCE_H
#define MANTISSA_RUNTIME_GRADIENTSOURCE_H

#include "mantissa/Format/DType.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

class CudaDevice;

/// Computes each step's gradients from the current parameters: the whole
/// training step (forward and backward) in front of the update path. A
/// source over token data (splitsSteps) splits each step into M = W * K
/// micro-batches and every rank evaluates its K; a source with one fixed
/// batch is evaluated on rank 0 only (M = 1), since every rank would
/// evaluate it alike. Either way the runner sums the micro-batch gradients in
/// a fixed tree (GradientCombination.h) and updates with their mean.
class GradientSource {
public:
  /// One parameter: its current value (all-gathered, in its gather dtype)
  /// and where its gradient goes (in its reduce dtype). Host addresses, or
  /// device addresses (DevicePtr values cast to pointers) for a source that
  /// runsOnDevice.
  struct Member {
    const std::string *fqn;
    const std::vector<int64_t> *shape;
    DType paramDtype;
    const uint8_t *param;
    DType gradDtype;
    uint8_t *grad;
  };
  /// Micro-batch `index` (0-based) of the `count` of step `step` (1-based);
  /// `global` counts micro-batches from the start of training (the data
  /// position: step i of a run whose steps all have M micro-batches starts
  /// at i * M).
  struct MicroBatch {
    int64_t step = 1, index = 0, count = 1, global = 0;
  };
  virtual ~GradientSource() = default;
  /// True when every rank evaluates micro-batches of its own (token data);
  /// false for one fixed batch, evaluated on rank 0.
  virtual bool splitsSteps() const { return false; }
  /// Chooses the micro-batch the next computeGradients evaluates.
  virtual bool selectMicroBatch(const MicroBatch &microBatch,
                                std::string &error) {
    (void)microBatch;
    (void)error;
    return true;
  }
  /// The loss of the last computeGradients (NaN when the source has none).
  virtual double lastLoss() const { return std::nan(""); }
  /// Tokens one micro-batch holds (0 when its inputs are not token ids).
  virtual int64_t tokensPerMicroBatch() const { return 0; }
  /// The number of validation micro-batches the source can evaluate (0: no
  /// validation data).
  virtual int64_t validationMicroBatches() const { return 0; }
  /// The loss of validation micro-batch `index` at the current parameters
  /// (`members` as for computeGradients; no gradient is written).
  virtual bool evaluateValidation(int64_t index,
                                  const std::vector<Member> &members,
                                  double &loss, std::string &error) {
    (void)index;
    (void)members;
    (void)loss;
    error = "this training step cannot evaluate validation data";
    return false;
  }
  /// Fills every member's gradient for step `stepNumber` (1-based), or
  /// explains in `error` why it cannot.
  virtual bool computeGradients(int64_t stepNumber,
                                const std::vector<Member> &members,
                                std::string &error) = 0;
  /// True when the source computes on the runner's GPU (--device cuda
  /// only): its members then address the runner's device parameters and
  /// gradients, and no gradient is copied from the host. A host source on a
  /// GPU run gets host copies of the current parameters instead.
  virtual bool runsOnDevice() const { return false; }
  /// With --device cuda: called on rank 0 once the device is open and its
  /// state uploaded, before step 1 (e.g. to load kernels and upload inputs).
  virtual bool attachDevice(CudaDevice &device, std::string &error) {
    (void)device;
    (void)error;
    return true;
  }
  /// Called before the device attached to closes: release what is on it.
  virtual void detachDevice() {}
  /// The run's --seed, which the step's random arguments derive from
  /// (RandomDraw.h); the trainer sets it before step 1.
  void setRandomSeed(uint64_t seed) { randomSeed = seed; }

protected:
  uint64_t randomSeed = 0;
};

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_GRADIENTSOURCE_H
