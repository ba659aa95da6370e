//===- RandomDraw.cpp - The random tensors a step draws ------------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The one implementation of docs/randomness.md's values; the Python
// reference (python/mantissa/random_reference.py) mirrors it line by line.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Format/RandomDraw.h"

#include <cmath>
#include <cstring>

using namespace mlir::mantissa::rt;

namespace {

const struct {
  const char *text;
  RandomDraw::Distribution distribution;
} kDistributions[] = {{"uniform", RandomDraw::Distribution::Uniform},
                      {"normal", RandomDraw::Distribution::Normal},
                      {"integer", RandomDraw::Distribution::Integer},
                      {"bernoulli", RandomDraw::Distribution::Bernoulli}};

/// The significand bits of a floating-point dtype: a uniform draw takes
/// this many random bits, so that every value is exact in the dtype and
/// below 1.
int significandBits(DType dtype) {
  switch (dtype) {
  case DType::F64:
    return 53;
  case DType::F32:
    return 24;
  case DType::F16:
    return 11;
  case DType::BF16:
    return 8;
  default:
    return 0;
  }
}

PhiloxCounter wordsOf(uint32_t stream, uint64_t seed, uint64_t index,
                      uint64_t element) {
  return philox4x32_10(
      {uint32_t(element), stream, uint32_t(index), uint32_t(index >> 32)},
      {uint32_t(seed), uint32_t(seed >> 32)});
}

uint64_t wide(const PhiloxCounter &words) {
  return (uint64_t(words[1]) << 32) | words[0];
}

/// Integers of [low, high): the 64-bit word modulo the range. The bias is
/// below range / 2^64, under 2^-32 for any range below 2^32.
int64_t integerOf(const RandomDraw &draw, const PhiloxCounter &words) {
  auto low = int64_t(draw.low), high = int64_t(draw.high);
  uint64_t range = uint64_t(high) - uint64_t(low);
  return int64_t(uint64_t(low) + wide(words) % range);
}

double valueOf(const RandomDraw &draw, DType dtype,
               const PhiloxCounter &words) {
  switch (draw.distribution) {
  case RandomDraw::Distribution::Uniform: {
    int bits = significandBits(dtype);
    double u = bits == 53 ? std::ldexp(double(wide(words) >> 11), -53)
                          : std::ldexp(double(words[0] >> (32 - bits)), -bits);
    return draw.low + (draw.high - draw.low) * u;
  }
  case RandomDraw::Distribution::Normal: {
    // Box-Muller, the cosine branch: u1 in (0, 1] keeps the logarithm
    // finite.
    double u1 = std::ldexp(double(words[0]) + 1.0, -32);
    double u2 = std::ldexp(double(words[1]), -32);
    double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    return draw.low + draw.high * z;
  }
  case RandomDraw::Distribution::Integer:
    return double(integerOf(draw, words));
  case RandomDraw::Distribution::Bernoulli:
    return std::ldexp(double(words[0]), -32) < draw.low ? 1.0 : 0.0;
  }
  return 0;
}

template <typename T> void store(uint8_t *out, int64_t index, T value) {
  std::memcpy(out + index * int64_t(sizeof(T)), &value, sizeof(T));
}

} // namespace

const char *
mlir::mantissa::rt::randomDistributionName(RandomDraw::Distribution value) {
  for (const auto &entry : kDistributions)
    if (entry.distribution == value)
      return entry.text;
  return "?";
}

std::optional<RandomDraw::Distribution>
mlir::mantissa::rt::parseRandomDistribution(std::string_view name) {
  for (const auto &entry : kDistributions)
    if (name == entry.text)
      return entry.distribution;
  return std::nullopt;
}

uint32_t mlir::mantissa::rt::randomStream(std::string_view node) {
  uint32_t hash = 2166136261u;
  for (char c : node) {
    hash ^= uint8_t(c);
    hash *= 16777619u;
  }
  return hash;
}

double mlir::mantissa::rt::randomValue(const RandomDraw &draw, DType dtype,
                                       uint32_t stream, uint64_t seed,
                                       uint64_t index, uint64_t element) {
  return valueOf(draw, dtype, wordsOf(stream, seed, index, element));
}

std::string
mlir::mantissa::rt::checkRandomDraw(const RandomDraw &draw, DType dtype,
                                    const std::vector<int64_t> &shape) {
  std::string what = std::string(randomDistributionName(draw.distribution)) +
                     " draw of node '" + draw.node + "'";
  bool floating = significandBits(dtype) > 0;
  bool integer = dtype == DType::I64 || dtype == DType::I32;
  switch (draw.distribution) {
  case RandomDraw::Distribution::Uniform:
  case RandomDraw::Distribution::Normal:
    if (!floating)
      return what + ": dtype " + std::string(safeTensorsDTypeName(dtype)) +
             " is not supported (float32, bfloat16, float16, float64 are)";
    if (!std::isfinite(draw.low) || !std::isfinite(draw.high))
      return what + ": its parameters are not finite";
    if (draw.distribution == RandomDraw::Distribution::Uniform
            ? !(draw.low <= draw.high)
            : !(draw.high >= 0))
      return what + (draw.distribution == RandomDraw::Distribution::Uniform
                         ? ": 'from' is above 'to'"
                         : ": its standard deviation is negative");
    break;
  case RandomDraw::Distribution::Integer:
    if (!floating && !integer)
      return what + ": dtype " + std::string(safeTensorsDTypeName(dtype)) +
             " is not supported (int64, int32 and the floating-point dtypes "
             "are)";
    if (!(draw.low < draw.high) || draw.low != std::floor(draw.low) ||
        draw.high != std::floor(draw.high) || std::fabs(draw.low) > 0x1p62 ||
        std::fabs(draw.high) > 0x1p62)
      return what + ": the range [low, high) is empty or not of integers";
    break;
  case RandomDraw::Distribution::Bernoulli:
    if (!floating && !integer && dtype != DType::Bool)
      return what + ": dtype " + std::string(safeTensorsDTypeName(dtype)) +
             " is not supported";
    if (!(draw.low >= 0 && draw.low <= 1))
      return what + ": its probability is outside [0, 1]";
    break;
  }
  int64_t elements = 1;
  for (size_t d = draw.perSample ? 1 : 0; d < shape.size(); ++d)
    elements *= shape[d];
  if (draw.perSample && shape.empty())
    return what + ": a per-sample draw has a sample dimension";
  if (elements > int64_t(UINT32_MAX))
    return what + ": " + std::to_string(elements) +
           " elements per sample, the counter takes at most 2^32 - 1";
  return "";
}

void mlir::mantissa::rt::fillRandomDraw(const RandomDraw &draw, DType dtype,
                                        const std::vector<int64_t> &shape,
                                        const RandomPosition &position,
                                        uint8_t *out) {
  int64_t samples = 1, perSample = 1;
  for (size_t d = 0; d < shape.size(); ++d)
    (draw.perSample && d == 0 ? samples : perSample) *= shape[d];
  uint32_t stream = randomStream(draw.node);
  for (int64_t sample = 0; sample < samples; ++sample) {
    uint64_t index = draw.perSample
                         ? uint64_t(position.firstSample + sample)
                         : (uint64_t(1) << 63) + uint64_t(position.step);
    for (int64_t element = 0; element < perSample; ++element) {
      int64_t at = sample * perSample + element;
      PhiloxCounter words =
          wordsOf(stream, position.seed, index, uint64_t(element));
      if (draw.distribution == RandomDraw::Distribution::Integer &&
          (dtype == DType::I64 || dtype == DType::I32)) {
        int64_t value = integerOf(draw, words);
        if (dtype == DType::I64)
          store<int64_t>(out, at, value);
        else
          store<int32_t>(out, at, int32_t(value));
        continue;
      }
      double value = valueOf(draw, dtype, words);
      switch (dtype) {
      case DType::F64:
        store<double>(out, at, value);
        break;
      case DType::F32:
        store<float>(out, at, float(value));
        break;
      case DType::BF16:
        store<uint16_t>(out, at, floatToBF16Bits(float(value)));
        break;
      case DType::F16:
        store<uint16_t>(out, at, floatToF16Bits(float(value)));
        break;
      case DType::I64:
        store<int64_t>(out, at, int64_t(value));
        break;
      case DType::I32:
        store<int32_t>(out, at, int32_t(value));
        break;
      case DType::Bool:
        store<uint8_t>(out, at, value != 0 ? 1 : 0);
        break;
      default:
        break;
      }
    }
  }
}
