//===- DeviceUpdate.cpp - The trainer's update on a GPU -------------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// `--device cuda`: the runner's state resident on the GPU, its collectives
// over NCCL, the PTX update kernels, and the step on the device (Trainer.h).
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#include "Trainer.h"
#include "mantissa/Format/AdamWScalars.h"
#include "mantissa/Runtime/CommunicatorNCCL.h"
#include "mantissa/Runtime/Tripwire.h"

#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace mlir::mantissa::rt;
using namespace mlir::mantissa::rt::detail;
using mlir::mantissa::AdamWGpuKernelTail;
using mlir::mantissa::AdamWStepScalars;
using mlir::mantissa::computeAdamWStepScalars;

bool Runner::fetchDeviceGradients() {
  if (!gradientsOnDevice())
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

bool Runner::updateOnDevice(double lr, float gradScale) {
  std::string collectiveError;
  for (size_t index = 0; index < groups.size(); ++index) {
    GroupState &state = groups[index];
    const ArtifactGroup &group = *state.group;
    DeviceGroup &device = deviceGroups[index];
    // This rank's mean gradient, as the host combined it.
    if (!cuda->upload(device.shardGrad, state.shardGrad.data(),
                      state.shardGrad.size(), collectiveError))
      return fail("group '" + group.name + "': " + collectiveError);
    {
      // Timed on its own (between synchronisations) so that the report
      // separates the kernels from the gradient copies and collectives.
      if (!cuda->synchronize(collectiveError))
        return fail("group '" + group.name + "': " + collectiveError);
      auto begin = std::chrono::steady_clock::now();
      if (!launchOnDevice(state, device, lr, gradScale))
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

//===----------------------------------------------------------------------===//
// The GPU path
//===----------------------------------------------------------------------===//

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

/// Opens this rank's GPU and NCCL. Called before the artifact is read, so a
/// machine without a GPU fails before anything is loaded or written.
bool Runner::openDevice() {
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
bool Runner::prepareDevice() {
  std::string deviceError;
  if (!artifact.hasPtx())
    return fail(artifact.directory() +
                ": the artifact has no GPU kernels (kernels.<group>.ptx); "
                "compile it with PTX for --device cuda");
  for (size_t index = 0; index < groups.size(); ++index) {
    GroupState &state = groups[index];
    const ArtifactGroup &group = *state.group;
    DeviceGroup device;
    std::string path =
        artifact.directory() + "/kernels." + std::to_string(index) + ".ptx";
    std::ifstream in(path);
    if (!in)
      return fail(path + ": missing GPU kernel of group '" + group.name + "'");
    std::stringstream text;
    text << in.rdbuf();
    std::string ptx = text.str();
    device.block = ptxBlockSize(ptx);
    if (device.block == 0 || device.block > 1024)
      return fail(path + ": no block size (.reqntid) in the PTX");
    std::string entry = group.gpuKernelSymbol.empty()
                            ? group.kernelSymbol + "_kernel"
                            : group.gpuKernelSymbol;
    if (!cuda->loadKernel(ptx, entry, path, device.kernel, deviceError))
      return fail(deviceError);
    if (!cuda->allocate(state.fullGrad.size(), device.fullGrad, deviceError) ||
        !cuda->allocate(state.shardGrad.size(), device.shardGrad,
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
bool Runner::attachSource() {
  if (!options.gradientSource)
    return true;
  std::string sourceError;
  // Detached again whatever happens: a failed attach may have left some of
  // its resources on the device.
  sourceAttached = true;
  if (!options.gradientSource->attachDevice(*cuda, sourceError))
    return fail(sourceError);
  return true;
}

bool Runner::uploadState() {
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

bool Runner::downloadState() {
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
bool Runner::launchOnDevice(GroupState &state, DeviceGroup &device, double lr,
                            float gradScale) {
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
      lr, options.optimizer.beta1, options.optimizer.beta2,
      options.optimizer.eps, options.optimizer.weightDecay, optimizerStep);
  scalars.gradScale = gradScale;
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
