//===- UpdateBackend.h - Where the AdamW update runs ------------*- C++ -*-===//
//
// Part of the Mantissa project. Internal to libmantissa_rt.
//
//===----------------------------------------------------------------------===//
//
// The trainer's update backends, one interface with two implementations (as
// IREE's HAL drivers implement one interface per backend):
//
// - HostUpdate (HostUpdate.cpp, `--device cpu`): the state stays in the
//   host buffers of ShardedState; each group's compiled CPU kernel
//   (kernels.so) updates this rank's tiles and the parameters are
//   all-gathered over the run's communicator.
// - DeviceUpdate (DeviceUpdate.cpp, `--device cuda`): parameters, masters
//   and moments stay resident on the GPU (CudaDriver.h) between steps; the
//   combined gradient shard is copied in (a step that runs on the GPU writes
//   each micro-batch's gradients in place: GpuStep.h), the PTX kernels run
//   over this rank's tiles and the parameters are all-gathered over NCCL
//   (CommunicatorNCCL.h). The host copies are refreshed only for
//   checkpoints and the final parameters, which are the same files either
//   way.
//
// Either way the micro-batch gradients are combined on the host, exactly
// (Trainer.cpp), so both backends see the same gradient bits.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_UPDATEBACKEND_H
#define MANTISSA_RUNTIME_UPDATEBACKEND_H

#include "ShardedState.h"
#include "mantissa/Runtime/GradientSource.h"
#include "mantissa/Runtime/TrainerOptions.h"

#include <memory>
#include <vector>

namespace mlir::mantissa::rt::detail {

/// One step's update: its learning rate, AdamW's step count (updates
/// applied, this one included) and the clipping coefficient the kernels
/// multiply each gradient by.
struct UpdateStep {
  double lr = 0;
  int64_t optimizerStep = 0;
  float gradScale = 1.0f;
};

class UpdateBackend {
public:
  virtual ~UpdateBackend() = default;

  /// Once the state is initialised (or resumed) in the host buffers: moves
  /// it where the update runs and hands `source` (if any) the device.
  virtual bool prepare(GradientSource *source) = 0;
  /// Every member's current parameter and gradient slot, as `source` sees
  /// them (device addresses for a source that runs on the device).
  virtual bool sourceMembers(const GradientSource *source,
                             std::vector<GradientSource::Member> &members) = 0;
  /// After a micro-batch's gradients are computed: makes them readable in
  /// the host gradient buffers, where the exact combination reads them.
  virtual bool fetchGradients(const GradientSource *source) = 0;
  /// Updates this rank's shard with its combined gradient (the host's
  /// shardGrad) and all-gathers the parameters.
  virtual bool update(const UpdateStep &step) = 0;
  /// Copies the resident state into the host buffers (for checkpoints and
  /// the final parameters).
  virtual bool copyStateToHost() = 0;
  /// Bytes of state role `role` of group `group` resident on this rank.
  virtual int64_t residentBytes(size_t group, Role role) const = 0;
  /// "CPU" or "GPU", for the report.
  virtual const char *processor() const = 0;
  /// The report's lines about the device (none on the host).
  virtual void reportDevice() const {}
  /// The report's line about the update kernels after `steps` steps (none
  /// on the host).
  virtual void reportKernels(int64_t steps) const { (void)steps; }
};

/// The update on the host: the CPU kernels of the artifact.
std::unique_ptr<UpdateBackend> createHostUpdate(ShardedState &state,
                                                const OptimizerOptions &options,
                                                Communicator &comm,
                                                RunError &errors);

/// The update on this rank's GPU: opens the device and NCCL (before the
/// artifact is read, so that a machine without a GPU fails before anything
/// is loaded or written); null after reporting into `errors`.
std::unique_ptr<UpdateBackend> openDeviceUpdate(ShardedState &state,
                                                const OptimizerOptions &options,
                                                Communicator &comm,
                                                RunError &errors);

} // namespace mlir::mantissa::rt::detail

#endif // MANTISSA_RUNTIME_UPDATEBACKEND_H
