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
#include "mantissa/Conversion/AdamWScalars.h"
#include "mantissa/Runtime/CommunicatorNCCL.h"
#include "mantissa/Runtime/Tripwire.h"

#include <cerrno>
#include <chrono>
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
using mlir::mantissa::AdamWStepScalars;
using mlir::mantissa::computeAdamWStepScalars;

bool Runner::deviceStep(int64_t stepNumber, double lr) {
  std::string collectiveError;
  if (options.gradientSource && !comm.allAgree(computeGradients(stepNumber)))
    return error.empty() ? fail("another rank failed") : false;
  for (size_t index = 0; index < groups.size(); ++index) {
    GroupState &state = groups[index];
    const ArtifactGroup &group = *state.group;
    // The same collectives as on the host, on device memory over NCCL.
    DeviceGroup *device = &deviceGroups[index];
    Communicator &collectives = *deviceComm;
    uint8_t *fullGrad = pointer(device->fullGrad);
    uint8_t *shardGrad = pointer(device->shardGrad);
    uint8_t *fullParam = pointer(device->fullParam);
    // The step's gradients arrive in host memory, as a backward pass on
    // another device would deliver them, unless the step itself ran on this
    // device and wrote them in place.
    if (!gradientsOnDevice() &&
        !cuda->upload(device->fullGrad, state.fullGrad.data(),
                      state.fullGrad.size(), collectiveError))
      return fail("group '" + group.name + "': " + collectiveError);
    // Reduce-scatter each segment in its reduce dtype; the sums are exact
    // (see the header).
    for (const GroupState::GradSegment &segment : state.gradSegments) {
      auto clamp = [&](int64_t cut) {
        return std::min(std::max(cut, segment.begin), segment.end);
      };
      std::vector<int64_t> counts;
      int64_t width = int64_t(elementSize(segment.dtype));
      for (int r = 0; r < world; ++r)
        counts.push_back(
            (clamp(state.gradCuts[r + 1]) - clamp(state.gradCuts[r])) / width);
      int64_t into = clamp(state.gradCuts[rank]) - state.gradCuts[rank];
      if (!collectives.reduceScatterSum(fullGrad + segment.begin,
                                        shardGrad + into, counts, segment.dtype,
                                        collectiveError))
        return fail("group '" + group.name + "': " + collectiveError);
    }
    {
      // Timed on its own (between synchronisations) so that the report
      // separates the kernels from the gradient copies and collectives.
      if (!cuda->synchronize(collectiveError))
        return fail("group '" + group.name + "': " + collectiveError);
      auto begin = std::chrono::steady_clock::now();
      if (!launchOnDevice(state, *device, lr, stepNumber))
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
    if (!collectives.allGather(fullParam, displacements, byteCounts,
                               collectiveError))
      return fail("group '" + group.name + "': " + collectiveError);
  }
  // Device faults surface at the next synchronisation: make it this step's.
  if (cuda && !cuda->synchronize(collectiveError))
    return fail("step " + std::to_string(stepNumber) + ": " + collectiveError);
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
  if (world > 1) {
    cuda.reset();
    return fail("--device cuda: world size " + std::to_string(world) +
                " is not supported yet: the artifact's GPU kernels update "
                "whole groups, so sharded state cannot be updated on the GPU; "
                "run one rank per job or use --device cpu");
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
    // One block per tile of block * 8 elements of one member (the kernel
    // strides over the grid, so this is the natural size, not a limit).
    int64_t tile = int64_t(device.block) * 8, tiles = 0;
    for (const ArtifactMember &member : group.members)
      tiles += (member.count + tile - 1) / tile;
    device.grid = unsigned(std::max<int64_t>(1, tiles));
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

/// Hands the device to the gradient source (rank 0 computes the
/// gradients), once the resident state is in place.
bool Runner::attachSource() {
  if (!options.gradientSource || rank != 0)
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
/// scalars (AdamWStepScalars). It updates the whole group, which at world
/// size 1 is this rank's shard; each pointer is biased like the CPU
/// kernel's so that the group's byte offsets address the rank's bytes.
bool Runner::launchOnDevice(GroupState &state, DeviceGroup &device, double lr,
                            int64_t stepNumber) {
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
  AdamWStepScalars scalars =
      computeAdamWStepScalars(lr, options.beta1, options.beta2, options.eps,
                              options.weightDecay, stepNumber);
  float values[] = {
      scalars.decay,         scalars.lerpWeight,          scalars.beta2,
      scalars.oneMinusBeta2, scalars.biasCorrection2Sqrt, scalars.eps,
      scalars.negStepSize};
  std::vector<void *> arguments;
  for (DevicePtr &buffer : buffers)
    arguments.push_back(&buffer);
  for (float &value : values)
    arguments.push_back(&value);
  std::string deviceError;
  if (!cuda->launch(device.kernel, device.grid, device.block, arguments.data(),
                    deviceError))
    return fail("group '" + group.name + "': " + deviceError);
  return true;
}
