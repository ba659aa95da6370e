//===- DeviceUpdate.cpp - The trainer's update on a GPU -------------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// `--device cuda` (UpdateBackend.h): the trainer's state resident on the GPU,
// its collectives over NCCL, the PTX update kernels, and the hand-over of
// the device to a step that runs on it (GpuStep.h).
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#include "UpdateBackend.h"
#include "mantissa/Format/AdamWScalars.h"
#include "mantissa/Format/InputFile.h"
#include "mantissa/Runtime/CommunicatorNCCL.h"
#include "mantissa/Runtime/CudaDriver.h"

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

using namespace mlir::mantissa::rt;
using namespace mlir::mantissa::rt::detail;
using mlir::mantissa::AdamWGpuKernelTail;
using mlir::mantissa::AdamWStepScalars;
using mlir::mantissa::computeAdamWStepScalars;

namespace {

/// This rank's GPU: the local rank (mpirun's or torchrun's) modulo the
/// visible devices.
static int localRank() {
  for (const char *name :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK"})
    if (const char *value = std::getenv(name))
      return std::atoi(value);
  return 0;
}

/// Threads per block the PTX kernel was compiled for (.reqntid / .maxntid);
/// 0 when the PTX does not say.
static unsigned ptxBlockSize(const std::string &ptx) {
  for (const char *directive : {".reqntid", ".maxntid"}) {
    size_t at = ptx.find(directive);
    if (at != std::string::npos)
      return unsigned(
          std::strtoul(ptx.c_str() + at + std::strlen(directive), nullptr, 10));
  }
  return 0;
}

class DeviceUpdate : public UpdateBackend {
public:
  DeviceUpdate(ShardedState &state, const OptimizerOptions &options,
               Communicator &comm, RunError &errors)
      : sharded(state), options(options), comm(comm), errors(errors),
        groups(state.groups) {}
  ~DeviceUpdate() override {
    // What the source put on the device goes before the device does.
    if (attached)
      attached->detachDevice();
  }

  bool openDevice();
  bool prepare(GradientSource *source) override {
    return prepareDevice() && uploadState() && attachSource(source);
  }
  bool sourceMembers(const GradientSource *source,
                     std::vector<GradientSource::Member> &members) override;
  bool fetchGradients(const GradientSource *source) override;
  bool update(const UpdateStep &step) override;
  bool copyStateToHost() override { return downloadState(); }
  int64_t residentBytes(size_t group, Role role) const override {
    return deviceGroups[group].stateBytes[unsigned(role)];
  }
  const char *processor() const override { return "GPU"; }
  void reportDevice() const override;
  void reportKernels(int64_t steps) const override;

private:
  // Per group, the device buffers that mirror GroupState's host ones.
  struct DeviceGroup {
    DevicePtr fullGrad = 0, shardGrad = 0, fullParam = 0;
    std::array<DevicePtr, kNumRoles> shardState{};
    std::array<int64_t, kNumRoles> stateBytes{};
    void *kernel = nullptr;
    unsigned block = 0;
  };
  bool fail(const std::string &message) { return errors.fail(message); }
  bool prepareDevice();
  bool uploadState();
  bool downloadState();
  bool attachSource(GradientSource *source);
  bool launchOnDevice(GroupState &state, DeviceGroup &device,
                      const UpdateStep &step);
  static uint8_t *pointer(DevicePtr base, int64_t offset = 0) {
    return reinterpret_cast<uint8_t *>(uintptr_t(base + uint64_t(offset)));
  }

  ShardedState &sharded;
  const OptimizerOptions &options;
  Communicator &comm;
  RunError &errors;
  std::vector<GroupState> &groups;
  std::unique_ptr<CudaDevice> cuda;
  std::unique_ptr<Communicator> deviceComm;
  std::vector<DeviceGroup> deviceGroups;
  /// The source the device was handed to (detached before it closes).
  GradientSource *attached = nullptr;
  double kernelSeconds = 0;
};

} // namespace

bool DeviceUpdate::sourceMembers(const GradientSource *source,
                                 std::vector<GradientSource::Member> &members) {
  bool onDevice = source && source->runsOnDevice();
  std::string deviceError;
  for (size_t index = 0; index < groups.size(); ++index) {
    GroupState &state = groups[index];
    const uint8_t *fullParam = state.fullParam.data();
    uint8_t *fullGrad = state.fullGrad.data();
    if (onDevice) {
      // The source reads and writes the device's resident buffers.
      fullParam = pointer(deviceGroups[index].fullParam);
      fullGrad = pointer(deviceGroups[index].fullGrad);
    } else {
      // The current parameters live on the device; the host copy is only
      // refreshed for checkpoints, so a host source needs them fetched.
      if (!cuda->download(state.fullParam.data(), deviceGroups[index].fullParam,
                          state.fullParam.size(), deviceError))
        return fail("group '" + state.group->name + "': " + deviceError);
    }
    for (const ArtifactMember &member : state.group->members)
      members.push_back({&member.fqn, &member.shape, member.param,
                         fullParam + member.paramOffset, member.grad,
                         fullGrad + member.gradOffset});
  }
  return true;
}

bool DeviceUpdate::fetchGradients(const GradientSource *source) {
  if (!source || !source->runsOnDevice())
    return true;
  // The exact combination (a fixed tree over the micro-batch index) runs on
  // the host: the gradients come back once per micro-batch.
  std::string deviceError;
  for (size_t index = 0; index < groups.size(); ++index) {
    GroupState &state = groups[index];
    if (!cuda->download(state.fullGrad.data(), deviceGroups[index].fullGrad,
                        state.fullGrad.size(), deviceError))
      return fail("group '" + state.group->name + "': " + deviceError);
  }
  return true;
}

bool DeviceUpdate::update(const UpdateStep &step) {
  std::string collectiveError;
  for (size_t index = 0; index < groups.size(); ++index) {
    GroupState &state = groups[index];
    const ArtifactGroup &group = *state.group;
    DeviceGroup &device = deviceGroups[index];
    // This rank's mean gradient, as the host combined it.
    if (!cuda->upload(device.shardGrad, state.shardGrad(),
                      state.shardGradBytes(), collectiveError))
      return fail("group '" + group.name + "': " + collectiveError);
    {
      // Timed on its own (between synchronisations) so that the report
      // separates the kernels from the gradient copies and collectives.
      if (!cuda->synchronize(collectiveError))
        return fail("group '" + group.name + "': " + collectiveError);
      auto begin = std::chrono::steady_clock::now();
      if (!launchOnDevice(state, device, step))
        return false;
      if (!cuda->synchronize(collectiveError))
        return fail("group '" + group.name + "': " + collectiveError);
      kernelSeconds += std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - begin)
                           .count();
    }
    std::vector<int64_t> displacements, byteCounts;
    for (const ByteRange &range : state.paramRanges) {
      displacements.push_back(range.begin);
      byteCounts.push_back(range.size());
    }
    if (!deviceComm->allGather(pointer(device.fullParam), displacements,
                               byteCounts, collectiveError))
      return fail("group '" + group.name + "': " + collectiveError);
  }
  // Device faults surface at the next synchronisation: make it this step's.
  if (!cuda->synchronize(collectiveError))
    return fail("step update: " + collectiveError);
  return true;
}

/// Opens this rank's GPU and NCCL. Called before the artifact is read, so a
/// machine without a GPU fails before anything is loaded or written.
bool DeviceUpdate::openDevice() {
  std::string deviceError;
  int ordinal = localRank();
  // Probe first so that the message for "no driver" is the driver's, not the
  // device index's.
  cuda = CudaDevice::open(0, deviceError);
  if (cuda && ordinal != 0) {
    int count = cuda->deviceCount();
    cuda.reset();
    cuda = CudaDevice::open(ordinal % count, deviceError);
  }
  if (!comm.allAgree(cuda != nullptr)) {
    cuda.reset();
    return fail("--device cuda: " + (deviceError.empty()
                                         ? "another rank has no GPU"
                                         : deviceError));
  }
  // One rank holds every shard: the only collective, the all-gather of the
  // updated parameters, is in place and moves nothing, so no NCCL is
  // loaded or initialised (a machine without it still trains on its GPU).
  if (comm.worldSize() == 1) {
    deviceComm = createSingleRankCommunicator();
    return true;
  }
  deviceComm = createNCCLCommunicator(comm, *cuda, deviceError);
  if (!deviceComm) {
    cuda.reset();
    return fail("--device cuda: " + deviceError);
  }
  return true;
}

/// Loads each group's PTX and allocates its device buffers (zero-filled).
bool DeviceUpdate::prepareDevice() {
  std::string deviceError;
  if (!sharded.artifact.hasPtx())
    return fail(sharded.artifact.directory() +
                ": the artifact has no GPU kernels (kernels.<group>.ptx); "
                "compile it with PTX for --device cuda");
  for (size_t index = 0; index < groups.size(); ++index) {
    GroupState &state = groups[index];
    const ArtifactGroup &group = *state.group;
    DeviceGroup device;
    std::string path = sharded.artifact.directory() + "/kernels." +
                       std::to_string(index) + ".ptx";
    std::vector<uint8_t> text;
    std::string readError;
    if (!readRegularFile(path, text, readError))
      return fail(path + ": missing GPU kernel of group '" + group.name +
                  "' (" + readError + ")");
    std::string ptx(text.begin(), text.end());
    device.block = ptxBlockSize(ptx);
    if (device.block == 0 || device.block > 1024)
      return fail(path + ": no block size (.reqntid) in the PTX");
    std::string entry = group.gpuKernelSymbol.empty()
                            ? group.kernelSymbol + "_kernel"
                            : group.gpuKernelSymbol;
    if (!cuda->loadKernel(ptx, entry, path, device.kernel, deviceError))
      return fail(deviceError);
    if (!cuda->allocate(state.fullGrad.size(), device.fullGrad, deviceError) ||
        !cuda->allocate(state.shardGradBytes(), device.shardGrad,
                        deviceError) ||
        !cuda->allocate(state.fullParam.size(), device.fullParam, deviceError))
      return fail(deviceError);
    for (Role role :
         {Role::Master, Role::ExpAvg, Role::ExpAvgSq, Role::MaxExpAvgSq}) {
      int64_t bytes = state.shardState[unsigned(role)].size();
      if (!cuda->allocate(bytes, device.shardState[unsigned(role)],
                          deviceError))
        return fail(deviceError);
      device.stateBytes[unsigned(role)] = bytes;
    }
    deviceGroups.push_back(device);
  }
  return true;
}

/// Hands each rank's device to its gradient source (every rank computes
/// its micro-batches), once the resident state is in place.
bool DeviceUpdate::attachSource(GradientSource *source) {
  if (!source)
    return true;
  std::string sourceError;
  // Detached again whatever happens: a failed attach may have left some of
  // its resources on the device.
  attached = source;
  if (!source->attachDevice(*cuda, sourceError))
    return fail(sourceError);
  return true;
}

bool DeviceUpdate::uploadState() {
  std::string deviceError;
  for (size_t index = 0; index < groups.size(); ++index) {
    GroupState &state = groups[index];
    DeviceGroup &device = deviceGroups[index];
    if (!cuda->upload(device.fullParam, state.fullParam.data(),
                      state.fullParam.size(), deviceError))
      return fail(deviceError);
    for (Role role :
         {Role::Master, Role::ExpAvg, Role::ExpAvgSq, Role::MaxExpAvgSq})
      if (!cuda->upload(device.shardState[unsigned(role)],
                        state.shardState[unsigned(role)].data(),
                        state.shardState[unsigned(role)].size(), deviceError))
        return fail(deviceError);
  }
  return true;
}

bool DeviceUpdate::downloadState() {
  std::string deviceError;
  for (size_t index = 0; index < groups.size(); ++index) {
    GroupState &state = groups[index];
    DeviceGroup &device = deviceGroups[index];
    if (!cuda->download(state.fullParam.data(), device.fullParam,
                        state.fullParam.size(), deviceError))
      return fail(deviceError);
    for (Role role :
         {Role::Master, Role::ExpAvg, Role::ExpAvgSq, Role::MaxExpAvgSq})
      if (!cuda->download(state.shardState[unsigned(role)].data(),
                          device.shardState[unsigned(role)],
                          state.shardState[unsigned(role)].size(), deviceError))
        return fail(deviceError);
  }
  return true;
}

/// The PTX kernel's ABI (AdamWToLoops, bare pointers): the group's present
/// buffers in role order (grad, param, master if any member keeps one,
/// exp_avg, exp_avg_sq, max_exp_avg_sq with AMSGrad), then the step's fp32
/// scalars and the tiles it updates (AdamWGpuKernelTail): this rank's
/// shard, the same tiles as the CPU kernel's slice. Each pointer is biased
/// like the CPU kernel's so that the group's byte offsets address the
/// rank's bytes.
bool DeviceUpdate::launchOnDevice(GroupState &state, DeviceGroup &device,
                                  const UpdateStep &step) {
  const ArtifactGroup &group = *state.group;
  bool hasMaster = false;
  for (const ArtifactMember &member : group.members)
    hasMaster |= member.master != MasterKind::None;
  auto biased = [&](DevicePtr base, int64_t first) -> DevicePtr {
    return base - uint64_t(first);
  };
  std::vector<DevicePtr> buffers = {
      biased(device.shardGrad, state.gradCutBegin), device.fullParam};
  if (hasMaster)
    buffers.push_back(biased(device.shardState[unsigned(Role::Master)],
                             state.shard[unsigned(Role::Master)].begin));
  for (Role role : {Role::ExpAvg, Role::ExpAvgSq})
    buffers.push_back(biased(device.shardState[unsigned(role)],
                             state.shard[unsigned(role)].begin));
  if (group.amsgrad)
    buffers.push_back(biased(device.shardState[unsigned(Role::MaxExpAvgSq)],
                             state.shard[unsigned(Role::MaxExpAvgSq)].begin));
  AdamWStepScalars scalars = computeAdamWStepScalars(
      step.lr, options.beta1, options.beta2, options.eps, options.weightDecay,
      step.optimizerStep);
  scalars.gradScale = step.gradScale;
  AdamWGpuKernelTail tail(scalars, state.firstTile, state.endTile);
  std::vector<void *> arguments;
  for (DevicePtr &buffer : buffers)
    arguments.push_back(&buffer);
  tail.pointers([&](void *value) { arguments.push_back(value); });
  std::string deviceError;
  if (tail.blocks() > INT32_MAX)
    return fail("group '" + group.name + "': " + std::to_string(tail.blocks()) +
                " tiles need more than 2^31 - 1 blocks");
  if (!cuda->launch(device.kernel, unsigned(tail.blocks()), device.block,
                    arguments.data(), deviceError))
    return fail("group '" + group.name + "': " + deviceError);
  return true;
}

void DeviceUpdate::reportDevice() const {
  std::printf("device: rank %d/%d cuda:%d %s, peak device memory %lld "
              "bytes, %s\n",
              sharded.rank, sharded.world, cuda->ordinal(),
              cuda->name().c_str(), (long long)cuda->peakBytes(),
              sharded.world == 1
                  ? "no collectives (one rank)"
                  : ("collectives over " + deviceComm->name()).c_str());
}

void DeviceUpdate::reportKernels(int64_t steps) const {
  if (!steps)
    return;
  // Bytes the kernels must move per step: every member's gradient read,
  // parameter written, master and moments read and written.
  int64_t bytes = 0;
  for (const GroupState &group : groups)
    for (const ArtifactMember &member : group.group->members) {
      bool amsgrad = group.group->amsgrad;
      bytes += member.count *
               (member.elementBytes(Role::Grad, amsgrad) +
                member.elementBytes(Role::Param, amsgrad) +
                2 * (member.elementBytes(Role::Master, amsgrad) +
                     member.elementBytes(Role::ExpAvg, amsgrad) +
                     member.elementBytes(Role::ExpAvgSq, amsgrad) +
                     member.elementBytes(Role::MaxExpAvgSq, amsgrad)));
      if (member.master == MasterKind::None)
        bytes += member.count * member.elementBytes(Role::Param, amsgrad);
    }
  double perStep = kernelSeconds / double(steps);
  std::printf("kernels: rank %d/%d %.3f ms per step, %lld bytes moved per "
              "step, %.1f GB/s\n",
              sharded.rank, sharded.world, perStep * 1e3, (long long)bytes,
              perStep > 0 ? double(bytes) / perStep / 1e9 : 0.0);
}

std::unique_ptr<UpdateBackend> mlir::mantissa::rt::detail::openDeviceUpdate(
    ShardedState &state, const OptimizerOptions &options, Communicator &comm,
    RunError &errors) {
  auto device = std::make_unique<DeviceUpdate>(state, options, comm, errors);
  if (!device->openDevice())
    return nullptr;
  return device;
}
