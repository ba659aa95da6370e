//===- GradientCombinationTest.cpp - The fixed summation tree -------------===//
//
// The tree's nodes, its streaming sum against a recursive definition, and
// the property the trainer relies on: every split of M micro-batches over
// ranks gives the same bits.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/GradientCombination.h"
#include "ThreadCommunicator.h"
#include "mantissa/Format/DType.h"
#include "mantissa/Runtime/Communicator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

using namespace mlir::mantissa::rt;

namespace {

/// The tree's sum by its definition: split at the largest power of two
/// below the size.
float treeSum(const std::vector<float> &values, int64_t lo, int64_t hi) {
  if (hi - lo == 1)
    return values[lo];
  int64_t p = 1;
  while (p * 2 < hi - lo)
    p *= 2;
  return treeSum(values, lo, lo + p) + treeSum(values, lo + p, hi);
}

TreeSum::Add addFloats(int64_t count) {
  return [count](uint8_t *acc, const uint8_t *value) {
    for (int64_t i = 0; i < count; ++i) {
      float a, b;
      std::memcpy(&a, acc + 4 * i, 4);
      std::memcpy(&b, value + 4 * i, 4);
      a += b;
      std::memcpy(acc + 4 * i, &a, 4);
    }
  };
}

TEST(GradientCombinationTest, MaximalNodes) {
  using Nodes = std::vector<SumNode>;
  EXPECT_EQ(maximalNodes({0, 4}, 4), (Nodes{{0, 4}}));
  EXPECT_EQ(maximalNodes({2, 4}, 4), (Nodes{{2, 4}}));
  EXPECT_EQ(maximalNodes({1, 3}, 4), (Nodes{{1, 2}, {2, 3}}));
  // 6 = [0,4) + [4,6); a rank with [3, 6) holds [3,4) and [4,6).
  EXPECT_EQ(maximalNodes({3, 6}, 6), (Nodes{{3, 4}, {4, 6}}));
  EXPECT_EQ(maximalNodes({0, 3}, 3), (Nodes{{0, 3}}));
  EXPECT_EQ(maximalNodes({5, 5}, 8), Nodes{});
  EXPECT_EQ(microBatchesOfRank(2, 3, 7), (SumNode{6, 7}));
  EXPECT_EQ(microBatchesOfRank(3, 3, 7), (SumNode{7, 7}));
}

TEST(GradientCombinationTest, StreamingMatchesTheDefinitionBitForBit) {
  std::mt19937 random(7);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (int64_t total = 1; total <= 33; ++total) {
    std::vector<float> values(total);
    for (float &value : values)
      value = uniform(random) * std::pow(10.0f, float(random() % 7) - 3);
    TreeSum sum(total, 4, addFloats(1));
    for (int64_t m = 0; m < total; ++m)
      sum.push({m, m + 1}, reinterpret_cast<const uint8_t *>(&values[m]));
    ASSERT_EQ(sum.size(), 1u) << total;
    EXPECT_EQ(sum.node(0), (SumNode{0, total}));
    float got;
    std::memcpy(&got, sum.value(0), 4);
    float want = treeSum(values, 0, total);
    EXPECT_EQ(std::memcmp(&got, &want, 4), 0) << total;
  }
}

TEST(GradientCombinationTest, EverySplitOverRanksGivesTheSameBits) {
  std::mt19937 random(11);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (int64_t total : {4, 6, 8, 12}) {
    std::vector<float> values(total);
    for (float &value : values)
      value = uniform(random) * 1e3f;
    float want = treeSum(values, 0, total);
    for (int64_t world = 1; world <= total; ++world) {
      if (total % world)
        continue;
      int64_t perRank = total / world;
      // Each rank's partial sums, then the owner's pass over all of them.
      TreeSum owner(total, 4, addFloats(1));
      for (int rank = 0; rank < world; ++rank) {
        SumNode range = microBatchesOfRank(rank, perRank, total);
        TreeSum local(total, 4, addFloats(1));
        for (int64_t m = range.begin; m < range.end; ++m)
          local.push({m, m + 1}, reinterpret_cast<const uint8_t *>(&values[m]));
        ASSERT_EQ(maximalNodes(range, total).size(), local.size());
        for (size_t n = 0; n < local.size(); ++n) {
          EXPECT_EQ(local.node(n), maximalNodes(range, total)[n]);
          owner.push(local.node(n), local.value(n));
        }
      }
      ASSERT_EQ(owner.size(), 1u);
      float got;
      std::memcpy(&got, owner.value(0), 4);
      EXPECT_EQ(std::memcmp(&got, &want, 4), 0)
          << "M=" << total << " W=" << world;
    }
  }
}

/// W = 2 ranks on threads, each summing its K micro-batches in the tree and
/// finishing its slice of the root across ranks: the same bits as the
/// tree's definition, element by element, on values whose sum depends on
/// the order. K = 2 gives each rank one node, a child of the root (the
/// owner adds the other rank's child to its own in `out`); K = 3 gives rank
/// 0 two nodes (sent packed) and rank 1 one.
TEST(GradientCombinationTest, TwoRanksOnThreadsGiveTheTreesBits) {
  constexpr int64_t kElements = 1001; // the slices: 500 and 501 floats
  for (int64_t perRank : {1, 2, 3, 4}) {
    int64_t total = 2 * perRank;
    std::mt19937 random(unsigned(7 + perRank));
    std::uniform_real_distribution<float> uniform(-1, 1);
    std::vector<std::vector<float>> batches(static_cast<size_t>(total),
                                            std::vector<float>(kElements));
    for (std::vector<float> &batch : batches)
      for (float &value : batch)
        value = uniform(random) * std::pow(10.0f, float(random() % 9) - 4);
    std::vector<int64_t> cuts = {0, 500 * 4, kElements * 4};
    std::vector<SumNode> ranges = {microBatchesOfRank(0, perRank, total),
                                   microBatchesOfRank(1, perRank, total)};
    std::vector<float> out(kElements);
    std::string errors[2];
    ThreadCommunicator::World world(2);
    auto runRank = [&](int rank) {
      ThreadCommunicator comm(world, rank);
      TreeSum local(total, kElements * 4, addFloats(kElements));
      for (int64_t m = ranges[size_t(rank)].begin; m < ranges[size_t(rank)].end;
           ++m)
        local.push({m, m + 1}, reinterpret_cast<const uint8_t *>(
                                   batches[size_t(m)].data()));
      auto add = [](uint8_t *acc, const uint8_t *value, int64_t,
                    int64_t bytes) { addFloats(bytes / 4)(acc, value); };
      if (!combineAcrossRanks(comm, local, ranges, total, cuts, add,
                              reinterpret_cast<uint8_t *>(out.data()) +
                                  cuts[size_t(rank)],
                              errors[rank]) &&
          errors[rank].empty())
        errors[rank] = "failed";
    };
    std::thread other(runRank, 1);
    runRank(0);
    other.join();
    ASSERT_EQ(errors[0], "") << "K=" << perRank;
    ASSERT_EQ(errors[1], "") << "K=" << perRank;
    for (int64_t i = 0; i < kElements; ++i) {
      std::vector<float> column;
      for (const std::vector<float> &batch : batches)
        column.push_back(batch[size_t(i)]);
      float want = treeSum(column, 0, total);
      EXPECT_EQ(std::memcmp(&out[size_t(i)], &want, 4), 0)
          << "K=" << perRank << ", element " << i;
    }
  }
}

TEST(GradientCombinationTest, OneRankCombinesItsOwnSlices) {
  std::unique_ptr<Communicator> comm = createSingleRankCommunicator();
  std::vector<float> a = {1, 2, 3}, b = {10, 20, 30}, c = {100, 200, 300};
  TreeSum local(3, 12, addFloats(3));
  local.push({0, 1}, reinterpret_cast<const uint8_t *>(a.data()));
  local.push({1, 2}, reinterpret_cast<const uint8_t *>(b.data()));
  local.push({2, 3}, reinterpret_cast<const uint8_t *>(c.data()));
  std::vector<float> out(3);
  std::string error;
  auto add = [](uint8_t *acc, const uint8_t *value, int64_t, int64_t bytes) {
    addFloats(bytes / 4)(acc, value);
  };
  ASSERT_TRUE(combineAcrossRanks(*comm, local, {{0, 3}}, 3, {0, 12}, add,
                                 reinterpret_cast<uint8_t *>(out.data()),
                                 error))
      << error;
  EXPECT_EQ(out, (std::vector<float>{111, 222, 333}));
}

/// The tree's sum of doubles by its definition.
double treeSumDoubles(const std::vector<double> &values, int64_t lo,
                      int64_t hi) {
  if (hi - lo == 1)
    return values[lo];
  int64_t p = 1;
  while (p * 2 < hi - lo)
    p *= 2;
  return treeSumDoubles(values, lo, lo + p) +
         treeSumDoubles(values, lo + p, hi);
}

TEST(GradientCombinationTest, LossesSumInTheTreeInLogarithmicMemory) {
  std::unique_ptr<Communicator> comm = createSingleRankCommunicator();
  std::mt19937 random(5);
  std::uniform_real_distribution<double> uniform(0, 10);
  ValueTreeSum sum;
  // The same object over steps of different sizes, as the trainer uses it.
  for (int64_t total : {int64_t(1), int64_t(7), int64_t(1000), int64_t(4099)}) {
    std::vector<double> values(static_cast<size_t>(total));
    for (double &value : values)
      value = uniform(random);
    sum.reset(total);
    for (int64_t m = 0; m < total; ++m)
      sum.push(m, values[size_t(m)]);
    double got = 0, want = treeSumDoubles(values, 0, total);
    std::string error;
    ASSERT_TRUE(sum.finish(*comm, {{0, total}}, got, error)) << error;
    EXPECT_EQ(std::memcmp(&got, &want, sizeof(double)), 0) << "M=" << total;
  }
}

/// accumulateSum (vectorised, and compiled for AVX2 as well as the
/// baseline) adds as one rounded addition per element does: every bf16 and
/// fp16 pattern, NaNs and infinities included, against a shifted copy of
/// them, and every tail length of the vector loops.
TEST(GradientCombinationTest, AccumulateSumRoundsEachAddition) {
  const int64_t count = 1 << 16;
  std::vector<uint16_t> half(count), halfShifted(count);
  std::vector<float> single(count), singleShifted(count);
  for (int64_t i = 0; i < count; ++i) {
    half[size_t(i)] = uint16_t(i);
    halfShifted[size_t(i)] = uint16_t(i * 40503 + 17);
    single[size_t(i)] = bf16BitsToFloat(uint16_t(i)) * 1.0009765625f;
    singleShifted[size_t(i)] = bf16BitsToFloat(uint16_t(i * 40503 + 17));
  }
  for (int64_t length : {int64_t(0), int64_t(1), int64_t(7), int64_t(9),
                         int64_t(17), int64_t(31), int64_t(33), count}) {
    for (DType dtype : {DType::BF16, DType::F16}) {
      std::vector<uint16_t> actual(half.begin(), half.begin() + length);
      accumulateSum(actual.data(), halfShifted.data(), length, dtype);
      for (int64_t i = 0; i < length; ++i) {
        uint16_t a = half[size_t(i)], b = halfShifted[size_t(i)];
        uint16_t expected =
            dtype == DType::BF16
                ? floatToBF16Bits(bf16BitsToFloat(a) + bf16BitsToFloat(b))
                : floatToF16Bits(f16BitsToFloat(a) + f16BitsToFloat(b));
        ASSERT_EQ(actual[size_t(i)], expected)
            << projectDTypeName(dtype) << " element " << i << " of " << length;
      }
    }
    std::vector<float> actual(single.begin(), single.begin() + length);
    accumulateSum(actual.data(), singleShifted.data(), length, DType::F32);
    for (int64_t i = 0; i < length; ++i) {
      float expected = single[size_t(i)] + singleShifted[size_t(i)];
      ASSERT_EQ(std::memcmp(&actual[size_t(i)], &expected, sizeof(float)), 0)
          << "fp32 element " << i << " of " << length;
    }
  }
}

} // namespace
