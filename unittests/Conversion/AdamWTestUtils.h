//===- AdamWTestUtils.h - Shared helpers of the AdamW kernel tests -*- C++ -*-//
//
// Group buffers, torch's golden vectors and bit comparisons.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_UNITTESTS_CONVERSION_ADAMWTESTUTILS_H
#define MANTISSA_UNITTESTS_CONVERSION_ADAMWTESTUTILS_H

#include "mantissa/Conversion/AdamWKernels.h"
#include "mantissa/Format/DType.h"
#include "mantissa/Runtime/SafeTensors.h"

#include "gtest/gtest.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace mlir::mantissa::testing {

/// A hyperparameter set of adamw_golden.json.
struct AdamWConfig {
  const char *name;
  double lr, beta1, beta2, eps, weightDecay;
  bool amsgrad, maximize;
};

inline const std::vector<AdamWConfig> &goldenConfigs() {
  static const std::vector<AdamWConfig> configs = {
      {"default", 1e-3, 0.9, 0.999, 1e-8, 0.01, false, false},
      {"nowd", 1e-3, 0.9, 0.999, 1e-8, 0.0, false, false},
      {"amsgrad", 1e-3, 0.9, 0.999, 1e-8, 0.01, true, false},
      {"maximize", 1e-3, 0.9, 0.999, 1e-8, 0.01, false, true},
      {"hot", 1e-2, 0.8, 0.99, 1e-6, 0.1, false, false},
  };
  return configs;
}

constexpr int64_t kGoldenSize = 4099;
constexpr int kGoldenSteps = 5;

/// adamw_golden.safetensors, read once.
class Golden {
public:
  static const Golden &get() {
    static Golden golden;
    return golden;
  }
  bool isLoaded() const { return loaded; }
  const std::string &getError() const { return error; }

  /// The raw bytes of a tensor (fp32 or bf16 as stored).
  const std::vector<uint8_t> &bytes(const std::string &name) const {
    const rt::HostTensor *tensor = file.find(name);
    if (!tensor) {
      ADD_FAILURE() << "golden tensor '" << name << "' is missing";
      static const std::vector<uint8_t> empty;
      return empty;
    }
    return tensor->bytes;
  }
  std::vector<float> f32(const std::string &name) const {
    const std::vector<uint8_t> &raw = bytes(name);
    std::vector<float> values(raw.size() / 4);
    std::memcpy(values.data(), raw.data(), values.size() * 4);
    return values;
  }
  std::vector<uint16_t> bf16(const std::string &name) const {
    const std::vector<uint8_t> &raw = bytes(name);
    std::vector<uint16_t> values(raw.size() / 2);
    std::memcpy(values.data(), raw.data(), values.size() * 2);
    return values;
  }

private:
  Golden() {
    loaded = rt::SafeTensorsFile::read(std::string(MANTISSA_CORPUS_DIR) +
                                           "/adamw_golden.safetensors",
                                       file, error);
  }
  rt::SafeTensorsFile file;
  std::string error;
  bool loaded = false;
};

/// The six byte buffers of a group, zero-initialised and 64-byte aligned.
class GroupBuffers {
public:
  explicit GroupBuffers(const AdamWGroup &group) {
    for (unsigned buffer = 0; buffer < kNumAdamWBuffers; ++buffer)
      storage[buffer].assign(group.getBufferBytes(AdamWBuffer(buffer)) + 64, 0);
  }
  uint8_t *data(AdamWBuffer buffer) {
    auto &bytes = storage[unsigned(buffer)];
    uintptr_t address = reinterpret_cast<uintptr_t>(bytes.data());
    return bytes.data() + ((64 - address % 64) % 64);
  }
  template <typename T> T *at(AdamWBuffer buffer, int64_t byteOffset) {
    return reinterpret_cast<T *>(data(buffer) + byteOffset);
  }
  /// Runs one step, optionally as `parts` slices one after the other, with
  /// the gradients scaled by `gradScale`.
  void step(const AdamWCpuKernel &kernel, const AdamWConfig &config,
            int64_t step, int64_t parts = 1, float gradScale = 1.0f) {
    for (int64_t part = 0; part < parts; ++part)
      kernel.getFunction()(data(AdamWBuffer::Grad), data(AdamWBuffer::Param),
                           data(AdamWBuffer::Master), data(AdamWBuffer::ExpAvg),
                           data(AdamWBuffer::ExpAvgSq),
                           data(AdamWBuffer::MaxExpAvgSq), config.lr,
                           config.beta1, config.beta2, config.eps,
                           config.weightDecay, step, gradScale, part, parts);
  }

private:
  std::array<std::vector<uint8_t>, kNumAdamWBuffers> storage;
};

inline uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}
inline float floatFromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

/// Distance in units in the last place between two finite floats of the
/// same sign (bit patterns are monotonic then); large for mixed signs.
inline int64_t ulpDistance(uint32_t a, uint32_t b) {
  auto ordered = [](uint32_t bits) -> int64_t {
    return (bits & 0x80000000u) ? -int64_t(bits & 0x7FFFFFFFu) : int64_t(bits);
  };
  int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

/// How far `actual` is from `expected`, element by element.
struct Comparison {
  int64_t mismatches = 0;
  int64_t maxUlp = 0;
  std::vector<int64_t> indices; ///< the first few mismatching elements
};

inline Comparison compareBits(const uint32_t *actual,
                              const std::vector<float> &expected) {
  Comparison result;
  for (size_t i = 0; i < expected.size(); ++i) {
    uint32_t want = floatBits(expected[i]);
    if (actual[i] == want)
      continue;
    ++result.mismatches;
    result.maxUlp = std::max(result.maxUlp, ulpDistance(actual[i], want));
    if (result.indices.size() < 8)
      result.indices.push_back(i);
  }
  return result;
}

inline Comparison compareBits(const uint16_t *actual,
                              const std::vector<uint16_t> &expected) {
  Comparison result;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (actual[i] == expected[i])
      continue;
    ++result.mismatches;
    result.maxUlp =
        std::max(result.maxUlp, ulpDistance(uint32_t(actual[i]) << 16,
                                            uint32_t(expected[i]) << 16) >>
                                    16);
    if (result.indices.size() < 8)
      result.indices.push_back(i);
  }
  return result;
}

inline std::string describe(const Comparison &comparison) {
  std::string text = std::to_string(comparison.mismatches) +
                     " mismatches, max " + std::to_string(comparison.maxUlp) +
                     " ulp, at";
  for (int64_t index : comparison.indices)
    text += " " + std::to_string(index);
  return text;
}

/// The remainder master's split of an fp32 master (the runtime's, DType.h):
/// the nearest-even bf16 value, the 16-bit remainder and the upper-tie mark
/// that the kernels keep in the sign bit of exp_avg_sq.
inline void splitMaster(float master, uint16_t &high, uint16_t &remainder,
                        bool &upperTie) {
  rt::splitFp32Master(master, high, remainder, upperTie);
}

inline float joinMaster(uint16_t high, uint16_t remainder, bool upperTie) {
  return rt::joinFp32Master(high, remainder, upperTie);
}

/// The upper-tie mark of element `i` of an fp32 exp_avg_sq: its sign bit.
inline bool tieMark(const uint32_t *expAvgSq, int64_t i) {
  return (expAvgSq[i] >> 31) != 0;
}

/// An fp32 exp_avg_sq without the marks: Adam's second moment.
inline std::vector<uint32_t> withoutTieMarks(const uint32_t *expAvgSq,
                                             int64_t count) {
  std::vector<uint32_t> clean(expAvgSq, expAvgSq + count);
  for (uint32_t &bits : clean)
    bits &= 0x7FFFFFFFu;
  return clean;
}

} // namespace mlir::mantissa::testing

#endif // MANTISSA_UNITTESTS_CONVERSION_ADAMWTESTUTILS_H
