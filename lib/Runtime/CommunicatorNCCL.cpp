//===- CommunicatorNCCL.cpp - Collectives on GPUs over NCCL ---------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/CommunicatorNCCL.h"

#include "CudaApi.h"

#include <algorithm>
#include <cstring>

using namespace mlir::mantissa::rt;
using namespace mlir::mantissa::rt::cudaapi;

namespace {

struct NcclApi {
  ncclGetVersion_t getVersion = nullptr;
  ncclGetUniqueId_t getUniqueId = nullptr;
  ncclCommInitRank_t commInitRank = nullptr;
  ncclCommDestroy_t commDestroy = nullptr;
  ncclAllGather_t allGather = nullptr;
  ncclReduceScatter_t reduceScatter = nullptr;
  ncclGetErrorString_t getErrorString = nullptr;
};

/// Loads libnccl.so.2 once per process.
bool loadNccl(NcclApi &api, std::string &error) {
  void *library = openLibrary("libnccl.so.2", "no NCCL", error);
  if (!library)
    return false;
  std::string missing;
  auto resolve = [&](const char *symbol, auto &out) {
    resolveSymbol(library, symbol, out, missing);
  };
  resolve("ncclGetVersion", api.getVersion);
  resolve("ncclGetUniqueId", api.getUniqueId);
  resolve("ncclCommInitRank", api.commInitRank);
  resolve("ncclCommDestroy", api.commDestroy);
  resolve("ncclAllGather", api.allGather);
  resolve("ncclReduceScatter", api.reduceScatter);
  resolve("ncclGetErrorString", api.getErrorString);
  if (!missing.empty()) {
    error = "no usable NCCL: libnccl.so.2 lacks " + missing;
    return false;
  }
  return true;
}

class NCCLCommunicator final : public Communicator {
public:
  NCCLCommunicator(Communicator &host, CudaDevice &device, NcclApi api)
      : host(host), device(device), api(api) {}
  ~NCCLCommunicator() override {
    std::string ignored;
    device.synchronize(ignored);
    if (comm)
      api.commDestroy(comm);
    for (DevicePtr pointer : {sendScratch, recvScratch})
      if (pointer)
        device.release(pointer);
  }

  bool initialise(std::string &error) {
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    bool ok = true;
    if (host.rank() == 0)
      ok = check(api.getUniqueId(&id), "ncclGetUniqueId", error);
    if (!host.allAgree(ok)) {
      if (ok)
        error = "NCCL: rank 0 could not create the unique id";
      return false;
    }
    if (!host.broadcast(&id, sizeof(id), 0, error))
      return false;
    ok = check(api.commInitRank(&comm, host.worldSize(), id, host.rank()),
               "ncclCommInitRank", error);
    if (!host.allAgree(ok)) {
      if (ok)
        error = "NCCL: another rank could not join the communicator";
      return false;
    }
    return true;
  }

  int rank() const override { return host.rank(); }
  int worldSize() const override { return host.worldSize(); }
  std::string name() const override { return "nccl"; }

  /// NCCL gathers equal parts; unequal ones go through a padded scratch
  /// buffer (one part per rank, each the largest part's size).
  bool allGather(uint8_t *buffer, const std::vector<int64_t> &displacements,
                 const std::vector<int64_t> &counts,
                 std::string &error) override {
    int world = worldSize(), me = rank();
    DevicePtr base = reinterpret_cast<DevicePtr>(buffer);
    int64_t largest = *std::max_element(counts.begin(), counts.end());
    if (largest == 0)
      return true;
    bool regular = true;
    for (int r = 0; r < world; ++r)
      regular &= counts[r] == largest && displacements[r] == r * largest;
    if (regular)
      return check(api.allGather(reinterpret_cast<void *>(base + me * largest),
                                 reinterpret_cast<void *>(base),
                                 size_t(largest), ncclUint8, comm, nullptr),
                   "ncclAllGather", error);
    if (!reserve(sendScratch, sendBytes, world * largest, error) ||
        !device.copy(sendScratch + me * largest, base + displacements[me],
                     counts[me], error) ||
        !check(
            api.allGather(reinterpret_cast<void *>(sendScratch + me * largest),
                          reinterpret_cast<void *>(sendScratch),
                          size_t(largest), ncclUint8, comm, nullptr),
            "ncclAllGather", error))
      return false;
    for (int r = 0; r < world; ++r)
      if (r != me && !device.copy(base + displacements[r],
                                  sendScratch + r * largest, counts[r], error))
        return false;
    return true;
  }

  /// NCCL's sum of bf16/fp16 rounds to the dtype after each addition, as the
  /// interface asks. Unequal parts are padded like allGather's.
  bool reduceScatterSum(const void *send, void *recv,
                        const std::vector<int64_t> &counts, DType dtype,
                        std::string &error) override {
    ncclDataType_t type = dtype == DType::F32    ? ncclFloat32
                          : dtype == DType::BF16 ? ncclBfloat16
                                                 : ncclFloat16;
    int64_t width = int64_t(elementSize(dtype));
    int world = worldSize(), me = rank();
    int64_t largest = *std::max_element(counts.begin(), counts.end());
    if (largest == 0)
      return true;
    bool regular = std::all_of(counts.begin(), counts.end(),
                               [&](int64_t c) { return c == largest; });
    if (regular)
      return check(api.reduceScatter(send, recv, size_t(largest), type, ncclSum,
                                     comm, nullptr),
                   "ncclReduceScatter", error);
    DevicePtr from = reinterpret_cast<DevicePtr>(send);
    int64_t part = largest * width;
    if (!reserve(sendScratch, sendBytes, world * part, error) ||
        !reserve(recvScratch, recvBytes, part, error))
      return false;
    int64_t offset = 0;
    for (int r = 0; r < world; ++r) {
      if (!device.copy(sendScratch + r * part, from + offset, counts[r] * width,
                       error))
        return false;
      offset += counts[r] * width;
    }
    return check(api.reduceScatter(reinterpret_cast<void *>(sendScratch),
                                   reinterpret_cast<void *>(recvScratch),
                                   size_t(largest), type, ncclSum, comm,
                                   nullptr),
                 "ncclReduceScatter", error) &&
           device.copy(reinterpret_cast<DevicePtr>(recv), recvScratch,
                       counts[me] * width, error);
  }

  /// Host bytes, over the host communicator (the exact gradient combination
  /// runs on the host; the GPU update path reduce-scatters on the device).
  bool allToAll(const uint8_t *send, const std::vector<int64_t> &sendCounts,
                const std::vector<int64_t> &sendDispls, uint8_t *recv,
                const std::vector<int64_t> &recvCounts,
                const std::vector<int64_t> &recvDispls,
                std::string &error) override {
    return host.allToAll(send, sendCounts, sendDispls, recv, recvCounts,
                         recvDispls, error);
  }
  bool allAgree(bool ok) override { return host.allAgree(ok); }
  int64_t allMax(int64_t value) override { return host.allMax(value); }
  bool shareMachine(const std::vector<uint64_t> &cpus,
                    std::vector<uint64_t> &machineCpus, int &ranksHere,
                    std::string &error) override {
    return host.shareMachine(cpus, machineCpus, ranksHere, error);
  }
  bool broadcast(void *data, int64_t bytes, int root,
                 std::string &error) override {
    return host.broadcast(data, bytes, root, error);
  }

private:
  bool check(ncclResult_t result, const char *call, std::string &error) {
    if (result == ncclSuccess)
      return true;
    const char *text = api.getErrorString ? api.getErrorString(result) : "";
    error = std::string(call) + " failed: " + (text ? text : "") + " (" +
            std::to_string(result) + ")";
    return false;
  }
  bool reserve(DevicePtr &pointer, int64_t &size, int64_t bytes,
               std::string &error) {
    if (pointer && size >= bytes)
      return true;
    if (pointer)
      device.release(pointer);
    pointer = 0;
    size = 0;
    if (!device.allocate(bytes, pointer, error))
      return false;
    size = bytes;
    return true;
  }

  Communicator &host;
  CudaDevice &device;
  NcclApi api;
  ncclComm_t comm = nullptr;
  DevicePtr sendScratch = 0, recvScratch = 0;
  int64_t sendBytes = 0, recvBytes = 0;
};

} // namespace

std::unique_ptr<Communicator> mlir::mantissa::rt::createNCCLCommunicator(
    Communicator &host, CudaDevice &device, std::string &error) {
  NcclApi api;
  bool loaded = loadNccl(api, error);
  if (!host.allAgree(loaded)) {
    if (loaded)
      error = "NCCL: another rank could not load libnccl.so.2";
    return nullptr;
  }
  auto communicator = std::make_unique<NCCLCommunicator>(host, device, api);
  if (!communicator->initialise(error))
    return nullptr;
  return communicator;
}
