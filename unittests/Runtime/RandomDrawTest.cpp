//===- RandomDrawTest.cpp - The random numbers of a step ------------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The generator of random step arguments (mantissa/Format/RandomDraw.h,
// docs/randomness.md): Philox4x32-10 against Random123's known answers; the
// bits against the Python reference's (test/Inputs/random-golden.json,
// which test/Python/random-reference.test regenerates from
// python/mantissa/random_reference.py); each distribution's moments and a
// Kolmogorov-Smirnov test against its exact CDF over 10^6 draws; and the
// keying that makes any split of a step give the same bits.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Format/RandomDraw.h"
#include "mantissa/Format/Philox.h"
#include "mantissa/Format/StepTensorJson.h"
#include "mantissa/Runtime/StepInputs.h"
#include "gtest/gtest.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

using namespace mlir::mantissa::rt;
using Distribution = RandomDraw::Distribution;

namespace {

RandomDraw makeDraw(Distribution distribution, double low, double high,
                    std::string node = "node", bool perSample = false) {
  RandomDraw draw;
  draw.distribution = distribution;
  draw.low = low;
  draw.high = high;
  draw.node = std::move(node);
  draw.perSample = perSample;
  return draw;
}

/// n draws of a per-step draw of `dtype`, as doubles.
std::vector<double> sample(const RandomDraw &draw, DType dtype, int64_t n,
                           uint64_t seed = 2024) {
  std::vector<uint8_t> bytes(size_t(n) * elementSize(dtype));
  fillRandomDraw(draw, dtype, {n}, {seed, 0, 1}, bytes.data());
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::I64) {
      int64_t v;
      std::memcpy(&v, bytes.data() + i * 8, 8);
      values[size_t(i)] = double(v);
    } else if (dtype == DType::F64) {
      std::memcpy(&values[size_t(i)], bytes.data() + i * 8, 8);
    } else {
      values[size_t(i)] = loadFloatElement(bytes.data(), i, dtype);
    }
  }
  return values;
}

void moments(const std::vector<double> &values, double &mean,
             double &variance) {
  double sum = 0, squares = 0;
  for (double v : values)
    sum += v;
  mean = sum / double(values.size());
  for (double v : values)
    squares += (v - mean) * (v - mean);
  variance = squares / double(values.size() - 1);
}

/// The Kolmogorov-Smirnov statistic of `values` against `cdf`.
template <typename Cdf>
double ksStatistic(std::vector<double> values, Cdf cdf) {
  std::sort(values.begin(), values.end());
  double n = double(values.size()), d = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    double f = cdf(values[i]);
    d = std::max({d, double(i + 1) / n - f, f - double(i) / n});
  }
  return d;
}

/// The KS critical value at significance 0.001 for n draws.
double ksCritical(int64_t n) { return 1.95 / std::sqrt(double(n)); }

constexpr int64_t kDraws = 1000000;

/// The reference's dtype names (DType's enumerators).
DType dtypeNamed(const std::string &name) {
  const std::pair<const char *, DType> names[] = {
      {"F32", DType::F32},  {"BF16", DType::BF16}, {"F16", DType::F16},
      {"F64", DType::F64},  {"I64", DType::I64},   {"I32", DType::I32},
      {"Bool", DType::Bool}};
  for (const auto &[text, dtype] : names)
    if (name == text)
      return dtype;
  ADD_FAILURE() << "unknown dtype " << name;
  return DType::F32;
}

} // namespace

TEST(Philox, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                          {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(RandomDraw, StreamIsFnv1aOfTheNodeName) {
  EXPECT_EQ(randomStream(""), 2166136261u);
  EXPECT_EQ(randomStream("a"), 0xe40c292cu);
  EXPECT_NE(randomStream("randn_like"), randomStream("randn_like_1"));
}

/// The bits the Python reference computes, for every distribution and
/// dtype family.
TEST(RandomDraw, MatchesThePythonReferenceBitForBit) {
  std::ifstream file(MANTISSA_RANDOM_GOLDEN);
  ASSERT_TRUE(file) << MANTISSA_RANDOM_GOLDEN;
  nlohmann::json golden = nlohmann::json::parse(file);
  ASSERT_EQ(golden["cases"].size(), 9u);
  for (const nlohmann::json &entry : golden["cases"]) {
    RandomDraw draw = makeDraw(
        *parseRandomDistribution(entry["distribution"].get<std::string>()),
        entry["low"].get<double>(), entry["high"].get<double>(),
        entry["node"].get<std::string>(), entry["per_sample"].get<bool>());
    DType dtype = dtypeNamed(entry["dtype"].get<std::string>());
    std::vector<int64_t> shape = entry["shape"].get<std::vector<int64_t>>();
    ASSERT_EQ(checkRandomDraw(draw, dtype, shape), "");
    RandomPosition position{std::stoull(entry["seed"].get<std::string>()),
                            entry["first_sample"].get<int64_t>(),
                            entry["step"].get<int64_t>()};
    int64_t count = 1;
    for (int64_t dim : shape)
      count *= dim;
    size_t width = elementSize(dtype);
    std::vector<uint8_t> bytes(size_t(count) * width);
    fillRandomDraw(draw, dtype, shape, position, bytes.data());
    const nlohmann::json &bits = entry["bits"];
    ASSERT_EQ(bits.size(), size_t(count));
    for (int64_t i = 0; i < count; ++i) {
      uint64_t value = 0;
      std::memcpy(&value, bytes.data() + size_t(i) * width, width);
      EXPECT_EQ(value, std::stoull(bits[size_t(i)].get<std::string>()))
          << entry["node"] << " " << entry["dtype"] << " element " << i;
    }
  }
}

TEST(RandomDraw, StandardNormalHasItsMomentsAndCdf) {
  std::vector<double> values =
      sample(makeDraw(Distribution::Normal, 0, 1), DType::F64, kDraws);
  double mean, variance;
  moments(values, mean, variance);
  // Five standard errors: sqrt(1 / n) and sqrt(2 / n).
  EXPECT_NEAR(mean, 0.0, 5 * std::sqrt(1.0 / kDraws));
  EXPECT_NEAR(variance, 1.0, 5 * std::sqrt(2.0 / kDraws));
  double d = ksStatistic(
      values, [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); });
  EXPECT_LT(d, ksCritical(kDraws));
}

TEST(RandomDraw, ShiftedNormalInFloat32) {
  std::vector<double> values =
      sample(makeDraw(Distribution::Normal, 3, 0.5), DType::F32, kDraws);
  double mean, variance;
  moments(values, mean, variance);
  EXPECT_NEAR(mean, 3.0, 5 * 0.5 / std::sqrt(double(kDraws)));
  EXPECT_NEAR(variance, 0.25, 5 * 0.25 * std::sqrt(2.0 / kDraws));
  double d = ksStatistic(values, [](double x) {
    return 0.5 * std::erfc(-(x - 3.0) / (0.5 * std::sqrt(2.0)));
  });
  EXPECT_LT(d, ksCritical(kDraws));
}

TEST(RandomDraw, UniformHasItsMomentsAndCdf) {
  for (DType dtype : {DType::F32, DType::F64}) {
    std::vector<double> values =
        sample(makeDraw(Distribution::Uniform, -1, 3), dtype, kDraws);
    double mean, variance;
    moments(values, mean, variance);
    EXPECT_NEAR(mean, 1.0, 5 * std::sqrt(16.0 / 12 / kDraws));
    EXPECT_NEAR(variance, 16.0 / 12, 0.01);
    EXPECT_GE(*std::min_element(values.begin(), values.end()), -1.0);
    EXPECT_LT(*std::max_element(values.begin(), values.end()), 3.0);
    double d = ksStatistic(
        values, [](double x) { return std::clamp((x + 1) / 4, 0.0, 1.0); });
    EXPECT_LT(d, ksCritical(kDraws));
  }
}

/// rand in bf16 takes 8 random bits: 256 values of [0, 1), each 1/256 of
/// the time, never 1.
TEST(RandomDraw, UniformBf16IsExactAndBelowOne) {
  std::vector<double> values =
      sample(makeDraw(Distribution::Uniform, 0, 1), DType::BF16, 256 * 4000);
  std::vector<int64_t> counts(256, 0);
  for (double v : values) {
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
    double scaled = v * 256;
    ASSERT_EQ(scaled, std::floor(scaled));
    ++counts[size_t(scaled)];
  }
  double chi2 = 0;
  for (int64_t c : counts)
    chi2 += (c - 4000.0) * (c - 4000.0) / 4000.0;
  // 255 degrees of freedom: the 0.999 quantile is about 330.
  EXPECT_LT(chi2, 330.0);
}

TEST(RandomDraw, IntegersAreUniformOnTheirRange) {
  std::vector<double> values =
      sample(makeDraw(Distribution::Integer, -3, 7), DType::I64, kDraws);
  std::vector<int64_t> counts(10, 0);
  for (double v : values) {
    ASSERT_GE(v, -3.0);
    ASSERT_LT(v, 7.0);
    ++counts[size_t(v + 3)];
  }
  double expected = kDraws / 10.0, chi2 = 0;
  for (int64_t c : counts)
    chi2 += (double(c) - expected) * (double(c) - expected) / expected;
  // 9 degrees of freedom: the 0.999 quantile is 27.9.
  EXPECT_LT(chi2, 27.9);
}

TEST(RandomDraw, BernoulliHasItsMean) {
  std::vector<double> values =
      sample(makeDraw(Distribution::Bernoulli, 0.3, 0), DType::F32, kDraws);
  double mean, variance;
  moments(values, mean, variance);
  EXPECT_NEAR(mean, 0.3, 5 * std::sqrt(0.21 / kDraws));
  for (double v : values)
    ASSERT_TRUE(v == 0.0 || v == 1.0);
  // p = 1 keeps everything, p = 0 nothing.
  for (double v :
       sample(makeDraw(Distribution::Bernoulli, 1, 0), DType::F32, 1000))
    ASSERT_EQ(v, 1.0);
  for (double v :
       sample(makeDraw(Distribution::Bernoulli, 0, 0), DType::F32, 1000))
    ASSERT_EQ(v, 0.0);
}

/// A per-sample draw over 8 samples is the same bits as two micro-batches
/// of 4 from global samples 0 and 4, or as micro-batch 1 of 4 filled by
/// storeRandomInput; a per-step draw is the same for every micro-batch of a
/// step and changes with the step, the seed and the node.
TEST(RandomDraw, AnySplitOfTheSamplesGivesTheSameBits) {
  RandomDraw draw = makeDraw(Distribution::Normal, 0, 1, "randn_like", true);
  std::vector<float> whole(8 * 5), first(4 * 5), second(4 * 5);
  fillRandomDraw(draw, DType::F32, {8, 5}, {7, 0, 1},
                 reinterpret_cast<uint8_t *>(whole.data()));
  fillRandomDraw(draw, DType::F32, {4, 5}, {7, 0, 3},
                 reinterpret_cast<uint8_t *>(first.data()));
  StepTensor argument;
  argument.name = "randn_like";
  argument.role = StepTensor::Role::Random;
  argument.dtype = DType::F32;
  argument.shape = {4, 5};
  argument.bytes = 80;
  argument.random = draw;
  storeRandomInput(argument, 7, /*globalMicroBatch=*/1, /*step=*/1,
                   reinterpret_cast<uint8_t *>(second.data()));
  first.insert(first.end(), second.begin(), second.end());
  EXPECT_EQ(std::memcmp(whole.data(), first.data(), whole.size() * 4), 0);

  RandomDraw perStep = makeDraw(Distribution::Uniform, 0, 1, "rand", false);
  auto fill = [&](const RandomDraw &d, uint64_t seed, int64_t firstSample,
                  int64_t step) {
    std::vector<float> out(6);
    fillRandomDraw(d, DType::F32, {6}, {seed, firstSample, step},
                   reinterpret_cast<uint8_t *>(out.data()));
    return out;
  };
  EXPECT_EQ(fill(perStep, 1, 0, 2), fill(perStep, 1, 12, 2));
  EXPECT_NE(fill(perStep, 1, 0, 2), fill(perStep, 1, 0, 3));
  EXPECT_NE(fill(perStep, 1, 0, 2), fill(perStep, 2, 0, 2));
  RandomDraw other = perStep;
  other.node = "rand_1";
  EXPECT_NE(fill(perStep, 1, 0, 2), fill(other, 1, 0, 2));
}

TEST(RandomDraw, RefusesWhatItCannotDraw) {
  EXPECT_NE(
      checkRandomDraw(makeDraw(Distribution::Normal, 0, 1), DType::I64, {4}),
      "");
  EXPECT_NE(
      checkRandomDraw(makeDraw(Distribution::Normal, 0, -1), DType::F32, {4}),
      "");
  EXPECT_NE(
      checkRandomDraw(makeDraw(Distribution::Integer, 5, 5), DType::I64, {4}),
      "");
  EXPECT_NE(checkRandomDraw(makeDraw(Distribution::Bernoulli, 1.5, 0),
                            DType::Bool, {4}),
            "");
  EXPECT_NE(checkRandomDraw(makeDraw(Distribution::Uniform, 0, 1, "n", true),
                            DType::F32, {}),
            "");
  EXPECT_EQ(
      checkRandomDraw(makeDraw(Distribution::Uniform, 0, 1), DType::BF16, {4}),
      "");
}

/// A random argument's entry in step.cpu.json / step.gpu.json round-trips,
/// and a malformed one is refused naming it.
TEST(RandomDraw, StepProgramEntryRoundTrips) {
  StepTensor argument;
  argument.name = "native_dropout";
  argument.role = StepTensor::Role::Random;
  argument.dtype = DType::Bool;
  argument.shape = {4, 8};
  argument.bytes = 32;
  argument.random =
      makeDraw(Distribution::Bernoulli, 0.9, 0, "native_dropout", true);
  nlohmann::json entry = detail::stepTensorJson(argument);
  StepTensor parsed = detail::parseStepTensor(entry, true, 3, "argument");
  ASSERT_TRUE(parsed.random);
  EXPECT_EQ(parsed.role, StepTensor::Role::Random);
  EXPECT_EQ(parsed.random->node, "native_dropout");
  EXPECT_EQ(parsed.random->low, 0.9);
  EXPECT_TRUE(parsed.random->perSample);
  entry["random"]["distribution"] = "cauchy";
  try {
    detail::parseStepTensor(entry, true, 3, "argument");
    FAIL() << "an unknown distribution was accepted";
  } catch (const detail::ProgramError &error) {
    EXPECT_NE(error.message.find("unknown distribution 'cauchy'"),
              std::string::npos)
        << error.message;
    EXPECT_NE(error.message.find("native_dropout"), std::string::npos);
  }
}
