//===- CpuGemmTest.cpp - The compiled CPU step's matrix products ----------===//
//
// Part of the Mantissa project.
//
// mantissa_rt_cpu_gemm against a double-precision reference, on the
// products of llama_medium's step (the shapes and strides the compiler's
// mantissa-call-gemm-library gives them) and on bf16 operands; the
// determinism the trainer relies on: the same bits at every thread count;
// and products that write their output instead of adding to it.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/CpuGemm.h"

#include "gtest/gtest.h"

#include <omp.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace mlir::mantissa::rt;

namespace {

struct Product {
  int64_t batch, m, n, k;
  bool transposedB; // B read as w^T: unit stride along K
  int64_t type;     // kGemmF32 or kGemmBF16 operands
};

uint16_t toBF16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return uint16_t(bits >> 16); // truncation: any bf16 value will do
}

float fromBF16(uint16_t value) {
  uint32_t bits = uint32_t(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

/// `value` rounded to bf16 to nearest, ties to even, for finite values:
/// the nearer of the two bf16 values around it, compared in double.
float roundedToBF16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  float below = fromBF16(uint16_t(bits >> 16)); // toward zero
  float above = fromBF16(uint16_t((bits >> 16) + 1));
  double gapBelow = std::fabs(double(value) - double(below));
  double gapAbove = std::fabs(double(above) - double(value));
  if (gapBelow != gapAbove)
    return gapBelow < gapAbove ? below : above;
  return (bits >> 16) & 1 ? above : below;
}

/// Operands, a descriptor and the result of one product, C starting from
/// `initial` (the op accumulates into its output).
struct Problem {
  std::vector<int64_t> descriptor;
  std::vector<float> a, b; // values (exactly representable in the type)
  std::vector<uint8_t> aBytes, bBytes;
  std::vector<float> c;
  Product shape;

  Problem(const Product &p, unsigned seed, float initial) : shape(p) {
    std::mt19937 random(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    int64_t bytes = p.type == kGemmBF16 ? 2 : 4;
    a.resize(p.batch * p.m * p.k);
    b.resize(p.batch * p.k * p.n);
    for (float &x : a)
      x = p.type == kGemmBF16 ? fromBF16(toBF16(uniform(random)))
                              : uniform(random);
    for (float &x : b)
      x = p.type == kGemmBF16 ? fromBF16(toBF16(uniform(random)))
                              : uniform(random);
    auto pack = [&](const std::vector<float> &values) {
      std::vector<uint8_t> out(values.size() * bytes);
      for (size_t i = 0; i < values.size(); ++i) {
        if (p.type == kGemmBF16) {
          uint16_t v = toBF16(values[i]);
          std::memcpy(&out[i * 2], &v, 2);
        } else {
          std::memcpy(&out[i * 4], &values[i], 4);
        }
      }
      return out;
    };
    aBytes = pack(a);
    bBytes = pack(b);
    c.assign(p.batch * p.m * p.n, initial);
    descriptor.assign(kGemmFieldCount, 0);
    descriptor[kGemmAbi] = kCpuGemmAbi;
    descriptor[kGemmTypeA] = descriptor[kGemmTypeB] = p.type;
    descriptor[kGemmTypeC] = kGemmF32;
    descriptor[kGemmBatch] = p.batch;
    descriptor[kGemmM] = p.m;
    descriptor[kGemmN] = p.n;
    descriptor[kGemmK] = p.k;
    descriptor[kGemmStrideABatch] = p.m * p.k;
    descriptor[kGemmStrideAM] = p.k;
    descriptor[kGemmStrideAK] = 1;
    descriptor[kGemmStrideBBatch] = p.k * p.n;
    // B[k][n] at k + n * K when transposed (w stored [N][K]).
    descriptor[kGemmStrideBK] = p.transposedB ? 1 : p.n;
    descriptor[kGemmStrideBN] = p.transposedB ? p.k : 1;
    descriptor[kGemmStrideCBatch] = p.m * p.n;
    descriptor[kGemmStrideCM] = p.n;
    descriptor[kGemmStrideCN] = 1;
    descriptor[kGemmAccumulate] = 1;
  }

  float bAt(int64_t batch, int64_t k, int64_t n) const {
    return b[batch * shape.k * shape.n + k * descriptor[kGemmStrideBK] +
             n * descriptor[kGemmStrideBN]];
  }

  std::vector<float> run() const {
    std::vector<float> out = c;
    mantissa_rt_cpu_gemm(reinterpret_cast<uintptr_t>(descriptor.data()),
                         reinterpret_cast<uintptr_t>(aBytes.data()),
                         reinterpret_cast<uintptr_t>(bBytes.data()),
                         reinterpret_cast<uintptr_t>(out.data()));
    return out;
  }
};

class CpuGemmTest : public ::testing::TestWithParam<Product> {};

/// Within fp32's accumulation error of the exact sum: K products summed in
/// any order are off by at most about K * 2^-24 times the sum of their
/// magnitudes (the library blocks and fuses differently from the loops).
TEST_P(CpuGemmTest, MatchesTheExactSumWithinFp32AccumulationError) {
  const Product &p = GetParam();
  Problem problem(p, 7, 0.25f);
  std::vector<float> result = problem.run();
  int64_t checked = 0;
  for (int64_t batch = 0; batch < p.batch; ++batch)
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        double exact = 0.25, magnitude = 0.25;
        for (int64_t k = 0; k < p.k; ++k) {
          double term = double(problem.a[(batch * p.m + i) * p.k + k]) *
                        problem.bAt(batch, k, j);
          exact += term;
          magnitude += std::fabs(term);
        }
        double bound = (p.k + 2) * std::ldexp(1.0, -24) * magnitude;
        float got = result[(batch * p.m + i) * p.n + j];
        ASSERT_LE(std::fabs(got - exact), bound)
            << "at [" << batch << "][" << i << "][" << j << "]";
        ++checked;
      }
  EXPECT_EQ(checked, p.batch * p.m * p.n);
}

/// The trainer's promise: any split into ranks (and so any thread count per
/// rank) gives the same bits.
TEST_P(CpuGemmTest, SameBitsAtEveryThreadCount) {
  Problem problem(GetParam(), 11, 0.0f);
  int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<float> one = problem.run();
  for (int threads : {2, 3, 4}) {
    omp_set_num_threads(threads);
    std::vector<float> many = problem.run();
    EXPECT_EQ(0,
              std::memcmp(one.data(), many.data(), one.size() * sizeof(float)))
        << threads << " threads";
  }
  omp_set_num_threads(saved);
}

/// A product that writes its output (kGemmAccumulate 0: the compiler's
/// products whose fill of +0.0 it dropped) ignores what C held: the bits of
/// the product added to +0.0, at any thread count. (Under
/// ONEDNN_MAX_CPU_ISA=AVX2, MantissaCpuGemmAvx2Tests, the bf16 products
/// here run widened.)
TEST_P(CpuGemmTest, OverwriteIgnoresWhatWasInC) {
  Problem added(GetParam(), 13, 0.0f);
  std::vector<float> expected = added.run();
  int saved = omp_get_max_threads();
  for (float garbage : {std::numeric_limits<float>::quiet_NaN(), -1e30f})
    for (int threads : {1, 3}) {
      Problem written(GetParam(), 13, garbage);
      written.descriptor[kGemmAccumulate] = 0;
      omp_set_num_threads(threads);
      std::vector<float> result = written.run();
      EXPECT_EQ(0, std::memcmp(expected.data(), result.data(),
                               expected.size() * sizeof(float)))
          << "C held " << garbage << ", " << threads << " threads";
    }
  omp_set_num_threads(saved);
}

/// A product that rounds its output (kGemmRoundC: the compiler's products
/// whose only reader rounded them to bf16 into another buffer) writes each
/// sum rounded to bf16 to nearest even, kept in fp32, at any thread count.
TEST_P(CpuGemmTest, RoundedOutputIsTheSumRoundedToBf16) {
  Problem written(GetParam(), 17, 0.0f);
  written.descriptor[kGemmAccumulate] = 0;
  std::vector<float> sums = written.run();
  Problem rounded(GetParam(), 17, std::numeric_limits<float>::quiet_NaN());
  rounded.descriptor[kGemmAccumulate] = 0;
  rounded.descriptor[kGemmRoundC] = 1;
  int saved = omp_get_max_threads();
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> result = rounded.run();
    for (size_t i = 0; i < sums.size(); ++i) {
      float expected = roundedToBF16(sums[i]);
      ASSERT_EQ(0, std::memcmp(&expected, &result[i], sizeof(float)))
          << i << ": " << sums[i] << " gave " << result[i] << ", " << threads
          << " threads";
    }
  }
  omp_set_num_threads(saved);
}

/// A product with a bf16 C (kGemmRoundC, written: the compiler's products
/// whose only reader rounded them into a bf16 buffer) stores each fp32 sum
/// rounded to bf16 to nearest even, and writes nothing past C, at any
/// thread count.
TEST_P(CpuGemmTest, Bf16OutputIsTheSumRoundedToBf16) {
  Problem written(GetParam(), 23, 0.0f);
  written.descriptor[kGemmAccumulate] = 0;
  std::vector<float> sums = written.run();
  std::vector<int64_t> narrowed = written.descriptor;
  narrowed[kGemmTypeC] = kGemmBF16;
  narrowed[kGemmRoundC] = 1;
  int saved = omp_get_max_threads();
  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    // One guard element past C, which must stay as it was.
    std::vector<uint16_t> c(sums.size() + 1, 0x7fc1);
    mantissa_rt_cpu_gemm(reinterpret_cast<uintptr_t>(narrowed.data()),
                         reinterpret_cast<uintptr_t>(written.aBytes.data()),
                         reinterpret_cast<uintptr_t>(written.bBytes.data()),
                         reinterpret_cast<uintptr_t>(c.data()));
    for (size_t i = 0; i < sums.size(); ++i) {
      float expected = roundedToBF16(sums[i]);
      ASSERT_EQ(fromBF16(c[i]), expected)
          << i << ": " << sums[i] << " gave " << fromBF16(c[i]) << ", "
          << threads << " threads";
    }
    EXPECT_EQ(c.back(), 0x7fc1) << threads << " threads";
  }
  omp_set_num_threads(saved);
}

// llama_medium's products (4 x 32 tokens, d = 128, f = 344, 512 tokens of
// vocabulary, 4 heads of 32), and bf16 operands.
INSTANTIATE_TEST_SUITE_P(
    Shapes, CpuGemmTest,
    ::testing::Values(Product{1, 128, 128, 128, true, kGemmF32},
                      Product{1, 128, 344, 128, true, kGemmF32},
                      Product{1, 128, 128, 344, true, kGemmF32},
                      Product{1, 344, 128, 128, false, kGemmF32},
                      Product{1, 128, 512, 128, true, kGemmF32},
                      Product{16, 32, 32, 32, true, kGemmF32},
                      Product{16, 32, 32, 32, false, kGemmF32},
                      Product{3, 5, 7, 9, false, kGemmF32},
                      Product{1, 128, 344, 128, true, kGemmBF16},
                      Product{16, 32, 32, 32, false, kGemmBF16},
                      Product{1, 200, 72, 40, false, kGemmBF16}));

/// A dense row-major product of f32 A and bf16 B (operand types oneDNN has
/// no matmul for, which the compiler never emits): the runtime's plain
/// loops. Values are small integers, so every sum is exact.
struct MixedProduct {
  static constexpr int64_t m = 3, n = 5, k = 4;
  std::array<int64_t, kGemmFieldCount> descriptor =
      denseGemmDescriptor(kGemmF32, 1, m, n, k);
  std::vector<float> a = std::vector<float>(m * k);
  std::vector<uint16_t> b = std::vector<uint16_t>(k * n);

  MixedProduct(int64_t accumulate, int64_t depth = k) {
    descriptor[kGemmTypeB] = kGemmBF16;
    descriptor[kGemmK] = depth;
    descriptor[kGemmAccumulate] = accumulate;
    for (int64_t i = 0; i < m * k; ++i)
      a[i] = float(i % 5) - 2.0f;
    for (int64_t i = 0; i < k * n; ++i)
      b[i] = toBF16(float(i % 3) - 1.0f);
  }

  float sum(int64_t i, int64_t j) const {
    float total = 0;
    for (int64_t l = 0; l < descriptor[kGemmK]; ++l)
      total += a[i * k + l] * fromBF16(b[l * n + j]);
    return total;
  }

  std::vector<float> run(std::vector<float> c) const {
    mantissa_rt_cpu_gemm(reinterpret_cast<uintptr_t>(descriptor.data()),
                         reinterpret_cast<uintptr_t>(a.data()),
                         reinterpret_cast<uintptr_t>(b.data()),
                         reinterpret_cast<uintptr_t>(c.data()));
    return c;
  }
};

TEST(CpuGemmPlainLoopsTest, WriteOrAddAsTheDescriptorSays) {
  MixedProduct added(1), written(0);
  ASSERT_EQ(cpuGemmPath(added.descriptor.data()), CpuGemmPath::Loops);
  std::vector<float> ones(MixedProduct::m * MixedProduct::n, 1.0f);
  std::vector<float> garbage(ones.size(),
                             std::numeric_limits<float>::quiet_NaN());
  std::vector<float> sums = added.run(ones);
  std::vector<float> products = written.run(garbage);
  for (int64_t i = 0; i < MixedProduct::m; ++i)
    for (int64_t j = 0; j < MixedProduct::n; ++j) {
      EXPECT_EQ(sums[i * MixedProduct::n + j], 1.0f + added.sum(i, j));
      EXPECT_EQ(products[i * MixedProduct::n + j], written.sum(i, j));
    }
}

/// K = 0: an empty sum adds nothing, and is written as +0.0.
TEST(CpuGemmPlainLoopsTest, EmptySumLeavesOrZeroesC) {
  std::vector<float> garbage(MixedProduct::m * MixedProduct::n, -3.0f);
  EXPECT_EQ(MixedProduct(1, 0).run(garbage), garbage);
  std::vector<float> zeros = MixedProduct(0, 0).run(garbage);
  for (float value : zeros) {
    EXPECT_EQ(value, 0.0f);
    EXPECT_FALSE(std::signbit(value));
  }
}

/// The rounding of kGemmRoundC on the values where roundings differ: ties
/// go to the even neighbour, a NaN of any sign and payload becomes the
/// quiet NaN 0x7fc0 (as the step's arith.truncf and torch round), the
/// largest floats round to infinity, infinities stay.
TEST(CpuGemmRoundingTest, TiesNaNsAndOverflowAsTheStepRounds) {
  const std::vector<uint32_t> given = {
      0x3f808000u, // 1 + 2^-8: a tie, to 1
      0x3f818000u, // 1 + 3 * 2^-8: a tie, to 1 + 2^-6
      0x3f80c000u, // above the tie: up
      0xffc12345u, // a negative NaN with a payload
      0x7f7fffffu, // the largest float: to infinity
      0xff800000u, // -infinity
      0xbf808000u, // -(1 + 2^-8): a tie, to -1
      0x00000001u, // the smallest subnormal: to +0.0
  };
  const std::vector<uint32_t> expected = {0x3f800000u, 0x3f820000u, 0x3f810000u,
                                          0x7fc00000u, 0x7f800000u, 0xff800000u,
                                          0xbf800000u, 0x00000000u};
  int64_t n = int64_t(given.size());
  std::array<int64_t, kGemmFieldCount> descriptor =
      denseGemmDescriptor(kGemmF32, 1, 1, n, 1);
  descriptor[kGemmRoundC] = 1;
  float one = 1.0f;
  std::vector<float> b(n), c(n, 5.0f);
  std::memcpy(b.data(), given.data(), n * sizeof(float));
  mantissa_rt_cpu_gemm(reinterpret_cast<uintptr_t>(descriptor.data()),
                       reinterpret_cast<uintptr_t>(&one),
                       reinterpret_cast<uintptr_t>(b.data()),
                       reinterpret_cast<uintptr_t>(c.data()));
  for (int64_t j = 0; j < n; ++j) {
    uint32_t bits;
    std::memcpy(&bits, &c[j], sizeof(bits));
    EXPECT_EQ(bits, expected[j]) << std::hex << given[j];
  }
  // The same roundings stored in a bf16 C.
  descriptor[kGemmTypeC] = kGemmBF16;
  std::vector<uint16_t> narrow(n, 5);
  mantissa_rt_cpu_gemm(reinterpret_cast<uintptr_t>(descriptor.data()),
                       reinterpret_cast<uintptr_t>(&one),
                       reinterpret_cast<uintptr_t>(b.data()),
                       reinterpret_cast<uintptr_t>(narrow.data()));
  for (int64_t j = 0; j < n; ++j)
    EXPECT_EQ(uint32_t(narrow[j]) << 16, expected[j]) << std::hex << given[j];
}

/// The runtime remembers a product by its descriptor's address (a constant
/// of the step library); a library loaded later may hold another
/// descriptor at that address, which must be read afresh.
TEST(CpuGemmPlanTest, ADescriptorChangedInPlaceIsReadAfresh) {
  Problem problem(Product{1, 64, 32, 16, false, kGemmF32}, 3, 1.0f);
  std::vector<float> added = problem.run();
  problem.descriptor[kGemmAccumulate] = 0;
  std::vector<float> written = problem.run();
  for (size_t i = 0; i < added.size(); ++i)
    ASSERT_NE(added[i], written[i]) << i; // 1 + sum, then the sum alone
  problem.descriptor[kGemmN] = 16;        // the first 16 columns of each row
  problem.descriptor[kGemmStrideCM] = 32;
  std::vector<float> narrow = problem.run();
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = 0; j < 32; ++j) {
      float got = narrow[i * 32 + j], sum = written[i * 32 + j];
      if (j < 16) // the same sums, perhaps by another kernel
        ASSERT_NEAR(got, sum, 1e-5f * (1.0f + std::fabs(sum)))
            << i << ", " << j;
      else
        ASSERT_EQ(got, 1.0f) << i << ", " << j;
    }
}

/// oneDNN must run on LLVM's OpenMP runtime (the step's), not on GNU's: the
/// tiles' one-thread primitives rely on it (CpuGemm.cpp).
TEST(CpuGemmLibraryTest, RunsOnOneOpenMPRuntime) {
  std::string description = describeCpuGemmLibrary();
  EXPECT_NE(description.find("oneDNN"), std::string::npos) << description;
  EXPECT_NE(description.find("libomp"), std::string::npos) << description;
}

} // namespace
