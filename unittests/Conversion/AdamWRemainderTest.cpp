//===- AdamWRemainderTest.cpp - The bf16 + remainder master encoding ------===//
//
// A step with lr = 0 and zero gradients leaves every master unchanged, so it
// shows what the kernel's remainder encoding does to arbitrary masters: each
// is reconstructed exactly, and the bf16 copy is the master rounded to
// nearest-even, exact ties included (where Transformer Engine's encoding
// rounds away from zero): the one bit 16 remainder bits lack is the sign of
// exp_avg_sq (runtime DType.h, splitFp32Master).
//
//===----------------------------------------------------------------------===//

#include "AdamWTestUtils.h"

#include <random>

using namespace mlir::mantissa;
using namespace mlir::mantissa::testing;
using mlir::mantissa::train::DType;

namespace {

TEST(AdamWRemainderTest, IdentityStepKeepsEveryMasterExactly) {
  std::vector<uint32_t> masters = {
      0x3F800000u, // 1.0
      0x3F808000u, // tie, even truncation: stays (marked)
      0x3F818000u, // tie, odd truncation: rounds up
      0xBF808000u, // negative tie
      0x3F807FFFu,
      0x3F808001u,
      0x7F7FFFFFu /* largest float: bf16 inf */,
      0xFF7FFFFFu,
      0x00000001u /* denormal */,
      0x80000000u /* -0 */,
      0x7F800000u /* inf */,
      0x00008000u /* denormal tie */};
  std::mt19937 random(5);
  while (masters.size() < 4099) {
    uint32_t bits = random();
    if ((bits & 0x7F800000u) == 0x7F800000u)
      continue; // no NaN/inf from the generator
    if (masters.size() % 7 == 0)
      bits = (bits & 0xFFFF0000u) | 0x8000u; // many exact ties
    masters.push_back(bits);
  }
  int64_t count = masters.size();

  AdamWGroup group;
  AdamWMember member =
      appendAdamWMember(group, "w", count, DType::bf16, DType::bf16,
                        AdamWMasterKind::Remainder, DType::fp32);
  std::string error;
  std::unique_ptr<AdamWCpuKernel> kernel =
      AdamWCpuKernel::compile(group, error);
  ASSERT_TRUE(kernel) << error;

  GroupBuffers buffers(group);
  uint16_t *high = buffers.at<uint16_t>(AdamWBuffer::Param, member.paramOffset);
  uint16_t *low =
      buffers.at<uint16_t>(AdamWBuffer::Master, member.masterOffset);
  uint32_t *expAvgSq =
      buffers.at<uint32_t>(AdamWBuffer::ExpAvgSq, member.momentsOffset);
  int64_t marked = 0;
  for (int64_t i = 0; i < count; ++i) {
    bool upperTie;
    splitMaster(floatFromBits(masters[i]), high[i], low[i], upperTie);
    expAvgSq[i] = upperTie ? 0x80000000u : 0u; // -0 marks, +0 does not
    marked += upperTie;
  }

  AdamWConfig identity = {"identity", 0.0,  0.9,   0.999,
                          1e-8,       0.01, false, false};
  buffers.step(*kernel, identity, 1);

  int64_t evenTies = 0;
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(floatBits(joinMaster(high[i], low[i], tieMark(expAvgSq, i))),
              masters[i])
        << "master " << i << " was not reconstructed";
    // torch's .to(torch.bfloat16), for ties too.
    EXPECT_EQ(high[i], rt::floatToBF16Bits(floatFromBits(masters[i])))
        << "element " << i;
    // The moment itself stays +-0 (zero gradients).
    EXPECT_EQ(expAvgSq[i] & 0x7FFFFFFFu, 0u) << "element " << i;
    // Exact ties whose truncation is even: the ones the mark tells apart.
    bool evenTie = (masters[i] & 0x1FFFFu) == 0x8000u;
    evenTies += evenTie;
    EXPECT_EQ(tieMark(expAvgSq, i), evenTie) << "element " << i;
  }
  EXPECT_GT(evenTies, 100);
  EXPECT_EQ(marked, evenTies);
}

TEST(AdamWRemainderTest, NaNMasterGivesNaNParameter) {
  AdamWGroup group;
  AdamWMember member =
      appendAdamWMember(group, "w", 9, DType::bf16, DType::bf16,
                        AdamWMasterKind::Remainder, DType::fp32);
  std::string error;
  std::unique_ptr<AdamWCpuKernel> kernel =
      AdamWCpuKernel::compile(group, error);
  ASSERT_TRUE(kernel) << error;
  GroupBuffers buffers(group);
  uint16_t *high = buffers.at<uint16_t>(AdamWBuffer::Param, member.paramOffset);
  uint16_t *low =
      buffers.at<uint16_t>(AdamWBuffer::Master, member.masterOffset);
  bool upperTie;
  for (int i = 0; i < 9; ++i)
    splitMaster(1.0f, high[i], low[i], upperTie);
  float *grad = buffers.at<float>(AdamWBuffer::Grad, member.gradOffset);
  uint16_t nan = 0x7FC0;
  std::memcpy(reinterpret_cast<uint16_t *>(grad) + 4, &nan, 2);
  AdamWConfig config = goldenConfigs().front();
  buffers.step(*kernel, config, 1);
  const uint32_t *expAvgSq =
      buffers.at<uint32_t>(AdamWBuffer::ExpAvgSq, member.momentsOffset);
  EXPECT_EQ(high[4], 0x7FC0);
  EXPECT_TRUE(std::isnan(joinMaster(high[4], low[4], tieMark(expAvgSq, 4))));
  for (int i : {0, 1, 2, 3, 5, 6, 7, 8})
    EXPECT_FALSE(std::isnan(joinMaster(high[i], low[i], tieMark(expAvgSq, i))))
        << i;
}

} // namespace
