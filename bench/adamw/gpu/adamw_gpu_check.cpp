//===- adamw_gpu_check.cpp - The fused AdamW kernel on a GPU --------------===//
//
// Host program for a machine with a GPU and no LLVM: loads the PTX that
// mantissa-adamw-gen produced (with its .meta launch description) through
// the CUDA driver API, then
//
//   check <dir>   runs torch's golden AdamW vectors (adamw_golden.safetensors
//                 in <dir>) through the kernels: a mixed group (fp32, bf16 +
//                 fp32 master, bf16 + remainder, pure bf16) for the configs
//                 default/nowd/hot, and fp32 groups for amsgrad and maximize;
//   bench <dir>   times bench_<mode>_<members>.ptx for every mode and member
//                 count found, next to a device-to-device copy of the same
//                 bytes (cuMemcpyDtoD), and prints one JSON object per run
//                 in mantissa-bench-adamw's format.
//
// Build: nvcc -O2 -std=c++17 -I<repo>/include adamw_gpu_check.cpp -lcuda
// (the driver library is only needed at run time; link against
// /usr/local/cuda/lib64/stubs where there is no driver).
//
//===----------------------------------------------------------------------===//

#include "mantissa/Format/AdamWScalars.h"
#include "mantissa/Format/DType.h"

#include <cuda.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using mlir::mantissa::AdamWGpuKernelTail;
using mlir::mantissa::AdamWStepScalars;
using mlir::mantissa::computeAdamWStepScalars;

namespace {

#define CHECK_CU(call)                                                         \
  do {                                                                         \
    CUresult status_ = (call);                                                 \
    if (status_ != CUDA_SUCCESS) {                                             \
      const char *text_ = nullptr;                                             \
      cuGetErrorString(status_, &text_);                                       \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__,       \
                   #call, text_ ? text_ : "?");                                \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

std::string readFile(const std::string &path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(1);
  }
  std::stringstream buffer;
  buffer << stream.rdbuf();
  return buffer.str();
}

bool fileExists(const std::string &path) {
  return static_cast<bool>(std::ifstream(path));
}

//===----------------------------------------------------------------------===//
// Kernel description (.meta, written by mantissa-adamw-gen --emit=gpu)
//===----------------------------------------------------------------------===//

struct Member {
  std::string name, kind;
  int64_t count = 0, grad = 0, param = 0, master = 0, moments = 0;
};

struct Kernel {
  std::string name;
  int64_t tiles = 0, block = 0;
  bool amsgrad = false, maximize = false;
  std::vector<std::pair<std::string, int64_t>> buffers; ///< role, bytes
  std::vector<Member> members;
  CUmodule module = nullptr;
  CUfunction function = nullptr;

  int64_t bytesOf(const std::string &role) const {
    for (const auto &[name, bytes] : buffers)
      if (name == role)
        return bytes;
    return 0;
  }
};

Kernel loadKernel(const std::string &prefix) {
  Kernel kernel;
  std::istringstream meta(readFile(prefix + ".meta"));
  std::string key;
  while (meta >> key) {
    if (key == "kernel")
      meta >> kernel.name;
    else if (key == "tiles")
      meta >> kernel.tiles;
    else if (key == "block")
      meta >> kernel.block;
    else if (key == "amsgrad")
      meta >> kernel.amsgrad;
    else if (key == "maximize")
      meta >> kernel.maximize;
    else if (key == "buffer") {
      std::string role;
      int64_t bytes;
      meta >> role >> bytes;
      kernel.buffers.push_back({role, bytes});
    } else if (key == "member") {
      Member m;
      meta >> m.name >> m.kind >> m.count >> m.grad >> m.param >> m.master >>
          m.moments;
      kernel.members.push_back(m);
    } else {
      std::fprintf(stderr, "%s.meta: unknown key '%s'\n", prefix.c_str(),
                   key.c_str());
      std::exit(1);
    }
  }
  std::string ptx = readFile(prefix + ".ptx");
  CHECK_CU(
      cuModuleLoadDataEx(&kernel.module, ptx.c_str(), 0, nullptr, nullptr));
  CHECK_CU(cuModuleGetFunction(&kernel.function, kernel.module,
                               kernel.name.c_str()));
  return kernel;
}

/// The group's buffers on the device, by role.
struct DeviceGroup {
  std::map<std::string, CUdeviceptr> buffers;

  explicit DeviceGroup(const Kernel &kernel) {
    for (const auto &[role, bytes] : kernel.buffers) {
      CUdeviceptr pointer;
      CHECK_CU(cuMemAlloc(&pointer, bytes));
      CHECK_CU(cuMemsetD8(pointer, 0, bytes));
      buffers[role] = pointer;
    }
  }
  ~DeviceGroup() {
    for (auto &[role, pointer] : buffers)
      cuMemFree(pointer);
  }
  void upload(const std::string &role, int64_t offset, const void *data,
              size_t bytes) {
    CHECK_CU(cuMemcpyHtoD(buffers.at(role) + offset, data, bytes));
  }
  void download(const std::string &role, int64_t offset, void *data,
                size_t bytes) {
    CHECK_CU(cuMemcpyDtoH(data, buffers.at(role) + offset, bytes));
  }
};

/// Launches one step over the whole group: the buffers in the .meta order,
/// then the scalars and the tile range.
void launch(const Kernel &kernel, DeviceGroup &group,
            const AdamWStepScalars &scalars, CUstream stream = nullptr) {
  std::vector<CUdeviceptr> pointers;
  for (const auto &[role, bytes] : kernel.buffers)
    pointers.push_back(group.buffers.at(role));
  AdamWGpuKernelTail tail(scalars, 0, kernel.tiles);
  std::vector<void *> args;
  for (CUdeviceptr &pointer : pointers)
    args.push_back(&pointer);
  tail.pointers([&](void *pointer) { args.push_back(pointer); });
  CHECK_CU(cuLaunchKernel(kernel.function, unsigned(tail.blocks()), 1, 1,
                          kernel.block, 1, 1, 0, stream, args.data(), nullptr));
}

//===----------------------------------------------------------------------===//
// Golden vectors (a minimal safetensors reader: the header's data_offsets)
//===----------------------------------------------------------------------===//

class Golden {
public:
  explicit Golden(const std::string &path) : file(readFile(path)) {
    uint64_t headerBytes;
    std::memcpy(&headerBytes, file.data(), 8);
    header = file.substr(8, headerBytes);
    dataStart = 8 + headerBytes;
  }
  /// The raw bytes of tensor `name`.
  std::string bytes(const std::string &name) const {
    size_t at = header.find("\"" + name + "\"");
    if (at == std::string::npos) {
      std::fprintf(stderr, "golden tensor %s is missing\n", name.c_str());
      std::exit(1);
    }
    size_t offsets = header.find("\"data_offsets\"", at);
    size_t open = header.find('[', offsets);
    uint64_t begin = std::strtoull(header.c_str() + open + 1, nullptr, 10);
    size_t comma = header.find(',', open);
    uint64_t end = std::strtoull(header.c_str() + comma + 1, nullptr, 10);
    return file.substr(dataStart + begin, end - begin);
  }

private:
  std::string file, header;
  size_t dataStart = 0;
};

struct Config {
  const char *name;
  double lr, beta1, beta2, eps, weightDecay;
};
const Config kConfigs[] = {{"default", 1e-3, 0.9, 0.999, 1e-8, 0.01},
                           {"nowd", 1e-3, 0.9, 0.999, 1e-8, 0.0},
                           {"amsgrad", 1e-3, 0.9, 0.999, 1e-8, 0.01},
                           {"maximize", 1e-3, 0.9, 0.999, 1e-8, 0.01},
                           {"hot", 1e-2, 0.8, 0.99, 1e-6, 0.1}};
const Config &configNamed(const std::string &name) {
  for (const Config &config : kConfigs)
    if (name == config.name)
      return config;
  std::exit(1);
}

/// Elements where torch's own fp32 result is 1 ulp from its op sequence
/// evaluated in IEEE fp32 (see unittests/Conversion/AdamWGoldenTest.cpp).
int64_t knownParamUlps(const std::string &config) {
  return config == "maximize" ? 1 : config == "hot" ? 3 : 0;
}

struct Tally {
  int64_t mismatches = 0, worstUlp = 0;
};

int64_t ulps(uint32_t a, uint32_t b) {
  auto ordered = [](uint32_t bits) -> int64_t {
    return (bits & 0x80000000u) ? -int64_t(bits & 0x7FFFFFFFu) : int64_t(bits);
  };
  return std::llabs(ordered(a) - ordered(b));
}

Tally compare32(const std::string &actual, const std::string &expected) {
  Tally tally;
  size_t n = expected.size() / 4;
  for (size_t i = 0; i < n; ++i) {
    uint32_t a, e;
    std::memcpy(&a, actual.data() + 4 * i, 4);
    std::memcpy(&e, expected.data() + 4 * i, 4);
    if (a != e) {
      ++tally.mismatches;
      tally.worstUlp = std::max(tally.worstUlp, ulps(a, e));
    }
  }
  return tally;
}

Tally compare16(const std::string &actual, const std::string &expected) {
  Tally tally;
  size_t n = expected.size() / 2;
  for (size_t i = 0; i < n; ++i) {
    uint16_t a, e;
    std::memcpy(&a, actual.data() + 2 * i, 2);
    std::memcpy(&e, expected.data() + 2 * i, 2);
    if (a != e) {
      ++tally.mismatches;
      tally.worstUlp = std::max(
          tally.worstUlp, ulps(uint32_t(a) << 16, uint32_t(e) << 16) >> 16);
    }
  }
  return tally;
}

int failures = 0;

void expectExact(const Tally &tally, const std::string &what) {
  if (tally.mismatches) {
    ++failures;
    std::printf("FAIL %s: %lld mismatches (max %lld ulp)\n", what.c_str(),
                (long long)tally.mismatches, (long long)tally.worstUlp);
  }
}

std::string download(DeviceGroup &group, const std::string &role,
                     int64_t offset, size_t bytes) {
  std::string data(bytes, '\0');
  group.download(role, offset, data.data(), bytes);
  return data;
}

/// Runs the 5 golden steps of `config` through `kernel`; every member is
/// checked against its arm where golden vectors exist for it.
void checkGroup(const Kernel &kernel, const Golden &golden,
                const std::string &configName) {
  const Config &config = configNamed(configName);
  DeviceGroup group(kernel);
  std::string start16 = golden.bytes("master.p0_bf16");
  for (const Member &m : kernel.members) {
    if (m.kind == "fp32") {
      std::string p0 = golden.bytes("p0");
      group.upload("param", m.param, p0.data(), p0.size());
    } else {
      group.upload("param", m.param, start16.data(), start16.size());
      if (m.kind == "master") {
        std::vector<float> master(m.count);
        for (int64_t i = 0; i < m.count; ++i) {
          uint32_t bits = uint32_t(uint8_t(start16[2 * i])) |
                          uint32_t(uint8_t(start16[2 * i + 1])) << 8;
          bits <<= 16;
          std::memcpy(&master[i], &bits, 4);
        }
        group.upload("master", m.master, master.data(), master.size() * 4);
      }
    }
  }
  int64_t paramUlps = 0;
  bool checkedFp32 = false;
  for (int step = 0; step < 5; ++step) {
    std::string s = std::to_string(step);
    for (const Member &m : kernel.members) {
      std::string grad =
          golden.bytes((m.kind == "fp32" ? "grad." : "grad_bf16.") + s);
      group.upload("grad", m.grad, grad.data(), grad.size());
    }
    launch(kernel, group,
           computeAdamWStepScalars(config.lr, config.beta1, config.beta2,
                                   config.eps, config.weightDecay, step + 1));
    CHECK_CU(cuCtxSynchronize());
    for (const Member &m : kernel.members) {
      std::string where = std::string(configName) + " step " + s + " " + m.name;
      if (m.kind == "fp32") {
        checkedFp32 = true;
        std::string prefix = configName + "." + s + ".";
        std::string want = golden.bytes(prefix + "param");
        Tally param =
            compare32(download(group, "param", m.param, want.size()), want);
        paramUlps += param.mismatches;
        if (param.worstUlp > 1) {
          ++failures;
          std::printf("FAIL %s param: %lld ulp\n", where.c_str(),
                      (long long)param.worstUlp);
        }
        for (const char *what : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
          if (std::string(what) == "max_exp_avg_sq" && !kernel.amsgrad)
            continue;
          std::string expected = golden.bytes(prefix + what);
          expectExact(
              compare32(download(group, what, m.moments, expected.size()),
                        expected),
              where + " " + what);
        }
        // Continue from torch's parameter, as the CPU test does.
        group.upload("param", m.param, want.data(), want.size());
        continue;
      }
      if (configName != "default")
        continue; // golden bf16 arms exist for `default` only
      if (m.kind == "bf16") {
        for (const char *what : {"param", "exp_avg", "exp_avg_sq"}) {
          std::string expected = golden.bytes("bf16." + s + "." + what);
          std::string role = std::string(what);
          int64_t offset = role == "param" ? m.param : m.moments;
          expectExact(compare16(download(group, role, offset, expected.size()),
                                expected),
                      where + " " + what);
        }
        continue;
      }
      std::string masterWant = golden.bytes("master." + s + ".master");
      std::string paramWant = golden.bytes("master." + s + ".param_bf16");
      std::string param = download(group, "param", m.param, paramWant.size());
      std::string master;
      if (m.kind == "master") {
        master = download(group, "master", m.master, masterWant.size());
      } else { // remainder: join the bf16 bits, remainders and tie marks
        std::string low = download(group, "master", m.master, paramWant.size());
        std::string marks =
            download(group, "exp_avg_sq", m.moments, masterWant.size());
        master.resize(masterWant.size());
        for (int64_t i = 0; i < m.count; ++i) {
          uint16_t high, rem;
          uint32_t mark;
          std::memcpy(&high, param.data() + 2 * i, 2);
          std::memcpy(&rem, low.data() + 2 * i, 2);
          std::memcpy(&mark, marks.data() + 4 * i, 4);
          uint32_t bits = mlir::mantissa::rt::detail::floatBits(
              mlir::mantissa::rt::joinFp32Master(high, rem, mark >> 31));
          std::memcpy(&master[4 * i], &bits, 4);
        }
      }
      expectExact(compare32(master, masterWant), where + " master");
      expectExact(compare16(param, paramWant), where + " param_bf16");
      for (const char *what : {"exp_avg", "exp_avg_sq"}) {
        std::string expected = golden.bytes("master." + s + "." + what);
        std::string held = download(group, what, m.moments, expected.size());
        if (m.kind == "remainder" && std::string(what) == "exp_avg_sq")
          for (size_t i = 3; i < held.size(); i += 4)
            held[i] = char(uint8_t(held[i]) & 0x7Fu); // the tie marks
        expectExact(compare32(held, expected), where + " " + what);
      }
    }
  }
  if (checkedFp32 && paramUlps != knownParamUlps(configName)) {
    ++failures;
    std::printf("FAIL %s: %lld fp32 parameters 1 ulp off torch (CPU: %lld)\n",
                configName.c_str(), (long long)paramUlps,
                (long long)knownParamUlps(configName));
  }
  std::printf(
      "checked %s on %zu member(s): fp32 params 1 ulp off torch: %lld\n",
      configName.c_str(), kernel.members.size(), (long long)paramUlps);
}

//===----------------------------------------------------------------------===//
// Benchmark
//===----------------------------------------------------------------------===//

int64_t idealBytes(const std::string &mode) {
  return mode == "remainder" ? 26 : 28;
}

/// Median milliseconds of `iterations` runs of `body` timed with events.
template <typename Body>
double medianMs(int iterations, CUstream stream, Body body) {
  CUevent start, stop;
  CHECK_CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CHECK_CU(cuEventCreate(&stop, CU_EVENT_DEFAULT));
  body();
  body();
  CHECK_CU(cuStreamSynchronize(stream));
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    CHECK_CU(cuEventRecord(start, stream));
    body();
    CHECK_CU(cuEventRecord(stop, stream));
    CHECK_CU(cuEventSynchronize(stop));
    float ms;
    CHECK_CU(cuEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  cuEventDestroy(start);
  cuEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void bench(const std::string &dir, const std::string &membersLabel) {
  CUstream stream;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  std::string json;
  int64_t n = 0;
  double copyGbps = 0;
  for (const char *mode : {"fp32", "master", "remainder"}) {
    std::string prefix = dir + "/bench_" + mode + "_" + membersLabel;
    if (!fileExists(prefix + ".ptx"))
      return;
    Kernel kernel = loadKernel(prefix);
    n = 0;
    for (const Member &m : kernel.members)
      n += m.count;
    DeviceGroup group(kernel);
    // Plausible, normal values: 0.5 parameters, small moments and grads.
    for (const Member &m : kernel.members) {
      bool wide = m.kind == "fp32";
      auto fill = [&](const std::string &role, int64_t offset, bool fp32,
                      float value) {
        uint32_t bits;
        std::memcpy(&bits, &value, 4);
        if (fp32)
          CHECK_CU(cuMemsetD32(group.buffers.at(role) + offset, bits, m.count));
        else
          CHECK_CU(cuMemsetD16(group.buffers.at(role) + offset,
                               uint16_t((bits + 0x8000u) >> 16), m.count));
      };
      fill("grad", m.grad, wide, 1e-2f);
      fill("param", m.param, wide, 0.5f);
      if (m.kind == "master")
        fill("master", m.master, true, 0.5f);
      fill("exp_avg", m.moments, true, 1e-3f);
      fill("exp_avg_sq", m.moments, true, 1e-4f);
    }
    AdamWStepScalars scalars =
        computeAdamWStepScalars(1e-3, 0.9, 0.999, 1e-8, 0.01, 10);
    double ms =
        medianMs(20, stream, [&] { launch(kernel, group, scalars, stream); });
    if (copyGbps == 0) {
      // A device-to-device copy of half the ideal bytes: it reads and
      // writes 28 B per parameter, like the fp32 and master modes.
      size_t copyBytes = size_t(n) * 14;
      CUdeviceptr source, destination;
      CHECK_CU(cuMemAlloc(&source, copyBytes));
      CHECK_CU(cuMemAlloc(&destination, copyBytes));
      double copyMs = medianMs(20, stream, [&] {
        CHECK_CU(cuMemcpyDtoDAsync(destination, source, copyBytes, stream));
      });
      copyGbps = 2.0 * copyBytes / (copyMs * 1e-3) / 1e9;
      cuMemFree(source);
      cuMemFree(destination);
    }
    double gbps = double(idealBytes(mode)) * n / (ms * 1e-3) / 1e9;
    char entry[160];
    std::snprintf(entry, sizeof(entry),
                  "%s\"%s\": {\"ms\": %.4f, \"gbps\": %.3f}",
                  json.empty() ? "" : ", ", mode, ms, gbps);
    json += entry;
    std::fprintf(stderr,
                 "%-9s members %-4s %8.4f ms %9.2f Gparam/s %8.1f GB/s\n", mode,
                 membersLabel.c_str(), ms, n / (ms * 1e-3) / 1e9, gbps);
    cuModuleUnload(kernel.module);
  }
  std::printf(
      "{\"n\": %lld, \"members\": %s, \"copy_gbps\": %.3f, \"modes\": {%s}}\n",
      (long long)n, membersLabel.c_str(), copyGbps, json.c_str());
  cuStreamDestroy(stream);
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 3 ||
      (std::string(argv[1]) != "check" && std::string(argv[1]) != "bench")) {
    std::fprintf(stderr, "usage: %s check|bench <artifact dir>\n", argv[0]);
    return 2;
  }
  std::string command = argv[1], dir = argv[2];
  CHECK_CU(cuInit(0));
  CUdevice device;
  CHECK_CU(cuDeviceGet(&device, 0));
  char deviceName[256];
  CHECK_CU(cuDeviceGetName(deviceName, sizeof(deviceName), device));
  std::fprintf(stderr, "device: %s\n", deviceName);
  CUcontext context;
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, device));
  CHECK_CU(cuCtxSetCurrent(context));

  if (command == "check") {
    Golden golden(dir + "/adamw_golden.safetensors");
    Kernel mixed = loadKernel(dir + "/check_mixed");
    for (const char *config : {"default", "nowd", "hot"})
      checkGroup(mixed, golden, config);
    checkGroup(loadKernel(dir + "/check_amsgrad"), golden, "amsgrad");
    checkGroup(loadKernel(dir + "/check_maximize"), golden, "maximize");
    std::printf(failures ? "GPU CHECK FAILED (%d)\n" : "GPU CHECK PASSED\n",
                failures);
    return failures ? 1 : 0;
  }
  for (const char *members : {"1", "256"})
    bench(dir, members);
  return 0;
}
