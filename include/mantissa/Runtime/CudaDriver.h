//===- CudaDriver.h - One GPU through the CUDA driver API -------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The runtime reaches the CUDA driver (libcuda.so.1) only through dlopen, as
// Triton's driver does, so it builds without CUDA headers and runs on
// machines without a GPU; asking for one there fails with a message that
// says which piece is missing. The update path uses the device for resident
// optimizer state and the generated PTX kernels (kernels.<group>.ptx).
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_CUDADRIVER_H
#define MANTISSA_RUNTIME_CUDADRIVER_H

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

/// A device address (CUdeviceptr).
using DevicePtr = uint64_t;

/// One CUDA device with its primary context current on the calling thread,
/// and every allocation and module made through it (released with it).
class CudaDevice {
public:
  /// Loads libcuda.so.1, initialises the driver and makes device `ordinal`'s
  /// primary context current. On failure returns null with `error`: "no
  /// CUDA driver: libcuda.so.1 could not be loaded (...)", "no CUDA device",
  /// or the failing call and the driver's message.
  static std::unique_ptr<CudaDevice> open(int ordinal, std::string &error);
  ~CudaDevice();
  CudaDevice(const CudaDevice &) = delete;
  CudaDevice &operator=(const CudaDevice &) = delete;

  int ordinal() const { return deviceOrdinal; }
  int deviceCount() const { return count; }
  const std::string &name() const { return deviceName; }

  /// Device memory, zero-filled. A size of 0 still returns a valid address.
  bool allocate(int64_t bytes, DevicePtr &out, std::string &error);
  void release(DevicePtr pointer);
  bool upload(DevicePtr to, const void *from, int64_t bytes,
              std::string &error);
  bool download(void *to, DevicePtr from, int64_t bytes, std::string &error);
  bool copy(DevicePtr to, DevicePtr from, int64_t bytes, std::string &error);

  /// Loads PTX text (JIT-compiled by the driver for this device) and
  /// resolves the kernel `entry` in it. `source` names the PTX in errors.
  bool loadKernel(const std::string &ptx, const std::string &entry,
                  const std::string &source, void *&function,
                  std::string &error);
  /// Launches `function` with a 1-D grid on the default stream.
  bool launch(void *function, unsigned grid, unsigned block, void **arguments,
              std::string &error);
  /// Waits for everything queued on the device.
  bool synchronize(std::string &error);

  int64_t bytesInUse() const { return inUse; }
  int64_t peakBytes() const { return peak; }

  /// The driver call behind a failure, with the driver's text, for the NCCL
  /// layer's messages.
  std::string describe(const char *call, int result) const;

private:
  CudaDevice() = default;
  struct Api;
  std::unique_ptr<Api> api;
  void *library = nullptr;
  void *context = nullptr;
  int deviceOrdinal = 0, deviceHandle = 0, count = 0;
  std::string deviceName;
  std::map<DevicePtr, int64_t> allocations;
  std::vector<void *> modules;
  int64_t inUse = 0, peak = 0;
};

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_CUDADRIVER_H
