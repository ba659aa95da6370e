//===- MicroBatchScheduleTest.cpp - Micro-batches per step and rank -------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The one definition of K * W and the data position (MicroBatchSchedule.h):
// every split of a step's micro-batches over ranks covers them once, in
// order, and reads the same global micro-batches; evaluation is split by
// the same rule.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/MicroBatchSchedule.h"

#include <gtest/gtest.h>

#include <cstdint>

using namespace mlir::mantissa::rt;

namespace {

/// The global micro-batches each micro-batch index of `steps` steps reads,
/// over all ranks of a (world, gradAccum) split.
std::vector<int64_t> globalOrder(int world, int64_t gradAccum, int steps) {
  std::vector<int64_t> order;
  std::vector<MicroBatchSchedule> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back(r, world, gradAccum, /*splitsSteps=*/true);
  for (int step = 1; step <= steps; ++step) {
    for (int r = 0; r < world; ++r) {
      SumNode mine = ranks[size_t(r)].ownStepRange();
      for (int64_t m = mine.begin; m < mine.end; ++m) {
        GradientSource::MicroBatch batch = ranks[size_t(r)].microBatch(step, m);
        EXPECT_EQ(batch.step, step);
        EXPECT_EQ(batch.index, m);
        EXPECT_EQ(batch.count, world * gradAccum);
        order.push_back(batch.global);
      }
    }
    for (MicroBatchSchedule &schedule : ranks)
      schedule.finishStep();
  }
  return order;
}

TEST(MicroBatchScheduleTest, EverySplitReadsTheSameMicroBatches) {
  std::vector<int64_t> one = globalOrder(1, 4, 3);
  ASSERT_EQ(one.size(), 12u);
  for (size_t i = 0; i < one.size(); ++i)
    EXPECT_EQ(one[i], int64_t(i));
  EXPECT_EQ(globalOrder(2, 2, 3), one);
  EXPECT_EQ(globalOrder(4, 1, 3), one);
}

TEST(MicroBatchScheduleTest, AFixedBatchIsOneMicroBatchOnRankZero) {
  MicroBatchSchedule first(0, 3, 4, /*splitsSteps=*/false);
  MicroBatchSchedule last(2, 3, 4, /*splitsSteps=*/false);
  EXPECT_EQ(first.microBatchesPerStep(), 1);
  EXPECT_EQ(first.ownStepRange().begin, 0);
  EXPECT_EQ(first.ownStepRange().end, 1);
  EXPECT_EQ(last.ownStepRange().end - last.ownStepRange().begin, 0);
}

TEST(MicroBatchScheduleTest, EvaluationIsSplitByTheSameRule) {
  MicroBatchSchedule schedule(0, 3, 2, /*splitsSteps=*/true);
  // Seven micro-batches over three ranks: ceil(7 / 3) = 3 each, cut at 7.
  std::vector<SumNode> parts = schedule.partition(7);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].begin, 0);
  EXPECT_EQ(parts[0].end, 3);
  EXPECT_EQ(parts[1].begin, 3);
  EXPECT_EQ(parts[1].end, 6);
  EXPECT_EQ(parts[2].begin, 6);
  EXPECT_EQ(parts[2].end, 7);
  // A step's micro-batches are the partition of M = K * W.
  std::vector<SumNode> step = schedule.stepRanges();
  EXPECT_EQ(step[2].begin, 4);
  EXPECT_EQ(step[2].end, 6);
}

TEST(MicroBatchScheduleTest, ResumeRestoresTheDataPosition) {
  MicroBatchSchedule schedule(1, 2, 2, /*splitsSteps=*/true);
  schedule.restore(40);
  EXPECT_EQ(schedule.microBatch(11, 2).global, 42);
  schedule.finishStep();
  EXPECT_EQ(schedule.microBatchesDone(), 44);
}

TEST(MicroBatchSchedule, GradAccumMemoryGrowsWithLogK) {
  EXPECT_EQ(gradientPartialSums(1), 0);
  EXPECT_EQ(gradientPartialSums(2), 3);
  EXPECT_EQ(gradientPartialSums(4), 4);
  EXPECT_EQ(gradientPartialSums(1000000000), 31);
  EXPECT_EQ(gradientPartialSums(INT64_MAX), 64);
  std::string error;
  // A 1 GiB gradient: K = 4 fits in 16 GiB, K = 10^9 (31 partial sums) not.
  const int64_t gib = int64_t(1) << 30;
  EXPECT_TRUE(checkGradAccumMemory(4, gib, uint64_t(16) * gib, error));
  EXPECT_FALSE(
      checkGradAccumMemory(1000000000, gib, uint64_t(16) * gib, error));
  EXPECT_NE(error.find("--grad-accum 1000000000: summing this rank's "
                       "micro-batch gradients exactly holds up to 31 partial "
                       "sums of its 1073741824-byte gradient (33285996544 "
                       "bytes), more than the 17179869184 bytes"),
            std::string::npos)
      << error;
  // A gradient whose partial sums overflow 64 bits is refused too.
  EXPECT_FALSE(checkGradAccumMemory(INT64_MAX, INT64_MAX, UINT64_MAX, error));
  EXPECT_GT(availableMemoryBytes(), uint64_t(0));
}

} // namespace
