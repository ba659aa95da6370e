//===- CpuGemmWidenedTest.cpp - bf16 products where oneDNN has none -------===//
//
// Part of the Mantissa project.
//
// Run with ONEDNN_MAX_CPU_ISA=AVX2 (unittests/Runtime/CMakeLists.txt), where
// oneDNN has no bf16 matmul, as on an AVX2 machine: bf16 products must run
// as fp32 GEMMs on their widened operands (CpuGemm.cpp), with the bits of
// the fp32 library product of those operands. CpuGemmTest.cpp's tests run in
// the same process too, so the widened products are also checked against
// the exact sum and for the same bits at every thread count.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/CpuGemm.h"

#include "gtest/gtest.h"

#include <omp.h>

#include <cstring>
#include <random>
#include <vector>

using namespace mlir::mantissa::rt;

namespace {

struct Shape {
  int64_t batch, m, n, k;
  bool transposedA, transposedB; // A stored [K][M], B stored [N][K]
};

std::vector<int64_t> descriptorOf(const Shape &s, int64_t type) {
  std::vector<int64_t> d(kGemmFieldCount, 0);
  d[kGemmAbi] = kCpuGemmAbi;
  d[kGemmTypeA] = d[kGemmTypeB] = type;
  d[kGemmTypeC] = kGemmF32;
  d[kGemmBatch] = s.batch;
  d[kGemmM] = s.m;
  d[kGemmN] = s.n;
  d[kGemmK] = s.k;
  d[kGemmStrideABatch] = s.m * s.k;
  d[kGemmStrideAM] = s.transposedA ? 1 : s.k;
  d[kGemmStrideAK] = s.transposedA ? s.m : 1;
  d[kGemmStrideBBatch] = s.k * s.n;
  d[kGemmStrideBK] = s.transposedB ? 1 : s.n;
  d[kGemmStrideBN] = s.transposedB ? s.k : 1;
  d[kGemmStrideCBatch] = s.m * s.n;
  d[kGemmStrideCM] = s.n;
  d[kGemmStrideCN] = 1;
  d[kGemmAccumulate] = 1;
  return d;
}

float fromBF16(uint16_t value) {
  uint32_t bits = uint32_t(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

std::vector<float> gemm(const std::vector<int64_t> &d, const void *a,
                        const void *b, std::vector<float> c) {
  mantissa_rt_cpu_gemm(
      reinterpret_cast<uintptr_t>(d.data()), reinterpret_cast<uintptr_t>(a),
      reinterpret_cast<uintptr_t>(b), reinterpret_cast<uintptr_t>(c.data()));
  return c;
}

/// The environment took: oneDNN dispatches to AVX2 and refuses bf16.
TEST(CpuGemmWidenedTest, OneDnnRunsAtAvx2) {
  std::string description = describeCpuGemmLibrary();
  EXPECT_NE(description.find("ISA avx2"), std::string::npos) << description;
}

class CpuGemmWidenedShapes : public ::testing::TestWithParam<Shape> {};

/// bf16 products are widened and fp32 ones run as they are.
TEST_P(CpuGemmWidenedShapes, ChoosesTheWidenedPathForBf16Only) {
  EXPECT_EQ(cpuGemmPath(descriptorOf(GetParam(), kGemmBF16).data()),
            CpuGemmPath::Widened);
  EXPECT_EQ(cpuGemmPath(descriptorOf(GetParam(), kGemmF32).data()),
            CpuGemmPath::Library);
}

/// The widened product is the fp32 library product of the widened operands,
/// bit for bit: the products are exact in fp32, and both run the same fp32
/// kernel over the same tiles. C starts non-zero (the step accumulates).
TEST_P(CpuGemmWidenedShapes, EqualsTheFp32ProductOfTheWidenedOperandsBits) {
  const Shape &s = GetParam();
  std::mt19937 random(5);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffff);
  auto operand = [&](int64_t size, std::vector<uint16_t> &narrow,
                     std::vector<float> &wide) {
    narrow.resize(size);
    wide.resize(size);
    for (int64_t i = 0; i < size; ++i) {
      // Finite values of every exponent in [-8, 7], and both signs.
      uint16_t exponent = uint16_t(119 + bits(random) % 16) << 7;
      narrow[i] = uint16_t((bits(random) & 0x807f) | exponent);
      wide[i] = fromBF16(narrow[i]);
    }
  };
  std::vector<uint16_t> a16, b16;
  std::vector<float> a32, b32;
  operand(s.batch * s.m * s.k, a16, a32);
  operand(s.batch * s.k * s.n, b16, b32);
  std::vector<float> c(s.batch * s.m * s.n);
  for (size_t i = 0; i < c.size(); ++i)
    c[i] = 0.125f * float(int(i % 7) - 3);
  for (int threads : {1, 3}) {
    int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> widened =
        gemm(descriptorOf(s, kGemmBF16), a16.data(), b16.data(), c);
    std::vector<float> fp32 =
        gemm(descriptorOf(s, kGemmF32), a32.data(), b32.data(), c);
    omp_set_num_threads(saved);
    EXPECT_EQ(0, std::memcmp(widened.data(), fp32.data(),
                             fp32.size() * sizeof(float)))
        << threads << " threads";
  }
}

// llama_medium's products (the 1x64x384x128 tile among them), a
// batched attention product, and shapes with a last partial row tile and
// batch group.
INSTANTIATE_TEST_SUITE_P(Shapes, CpuGemmWidenedShapes,
                         ::testing::Values(Shape{1, 128, 384, 128, false, true},
                                           Shape{1, 128, 128, 344, false, true},
                                           Shape{1, 344, 128, 128, true, false},
                                           Shape{16, 32, 32, 32, false, false},
                                           Shape{16, 32, 32, 32, false, true},
                                           Shape{1, 200, 72, 40, false, false},
                                           Shape{7, 5, 9, 3, true, true}));

} // namespace
