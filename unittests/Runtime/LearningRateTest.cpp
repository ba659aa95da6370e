//===- LearningRateTest.cpp - The learning-rate schedules -----------------===//
//
// Each schedule against its formula evaluated independently here, at the
// points where the formulas change branch.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/LearningRate.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace mlir::mantissa::rt;

namespace {

LrSchedule schedule(LrScheduleKind kind, int64_t warmup, int64_t decay = 0) {
  LrSchedule s;
  s.kind = kind;
  s.lr = 3e-3;
  s.warmupSteps = warmup;
  s.minLrRatio = 0.1;
  s.decaySteps = decay;
  s.totalSteps = 30;
  return s;
}

TEST(LearningRateTest, WarmupIsLinearFromLrOverW) {
  for (LrScheduleKind kind : {LrScheduleKind::Constant, LrScheduleKind::Cosine,
                              LrScheduleKind::Linear}) {
    LrSchedule s = schedule(kind, 5);
    EXPECT_DOUBLE_EQ(learningRate(s, 0), 3e-3 / 5);
    EXPECT_DOUBLE_EQ(learningRate(s, 4), 3e-3);
  }
}

TEST(LearningRateTest, CosineDecaysToMinAtTheEnd) {
  LrSchedule s = schedule(LrScheduleKind::Cosine, 5);
  double lrMin = 3e-4;
  EXPECT_DOUBLE_EQ(learningRate(s, 5), 3e-3);
  for (int64_t step = 5; step < 30; ++step)
    EXPECT_NEAR(learningRate(s, step),
                lrMin + 0.5 * (1 + std::cos(M_PI * (step - 5) / 25.0)) *
                            (3e-3 - lrMin),
                1e-18);
  // Halfway through the decay the rate is the mean of the two ends.
  LrSchedule even = schedule(LrScheduleKind::Cosine, 0);
  even.totalSteps = 20;
  EXPECT_NEAR(learningRate(even, 10), (3e-3 + lrMin) / 2, 1e-15);
}

TEST(LearningRateTest, LinearAndConstant) {
  LrSchedule linear = schedule(LrScheduleKind::Linear, 5);
  EXPECT_DOUBLE_EQ(learningRate(linear, 5), 3e-3);
  EXPECT_NEAR(learningRate(linear, 29), 3e-3 - 24.0 / 25 * (3e-3 - 3e-4),
              1e-18);
  LrSchedule constant = schedule(LrScheduleKind::Constant, 0);
  EXPECT_EQ(learningRate(constant, 0), 3e-3);
  EXPECT_EQ(learningRate(constant, 29), 3e-3);
}

TEST(LearningRateTest, WsdHoldsThenDecays) {
  LrSchedule s = schedule(LrScheduleKind::Wsd, 0, 10);
  EXPECT_EQ(learningRate(s, 19), 3e-3);
  EXPECT_EQ(learningRate(s, 20), 3e-3);
  EXPECT_NEAR(learningRate(s, 25), 3e-3 - 0.5 * (3e-3 - 3e-4), 1e-18);
  EXPECT_NEAR(learningRate(s, 29), 3e-3 - 0.9 * (3e-3 - 3e-4), 1e-18);
}

TEST(LearningRateTest, RefusesValuesOutOfRange) {
  std::string error;
  LrSchedule s = schedule(LrScheduleKind::Cosine, 5);
  EXPECT_TRUE(validateLrSchedule(s, error)) << error;
  s.lr = std::nan("");
  EXPECT_FALSE(validateLrSchedule(s, error));
  EXPECT_NE(error.find("--lr"), std::string::npos) << error;
  s = schedule(LrScheduleKind::Cosine, 31);
  EXPECT_FALSE(validateLrSchedule(s, error));
  EXPECT_NE(error.find("--warmup-steps"), std::string::npos) << error;
  s = schedule(LrScheduleKind::Cosine, 0);
  s.minLrRatio = 1.5;
  EXPECT_FALSE(validateLrSchedule(s, error));
  EXPECT_NE(error.find("--min-lr-ratio"), std::string::npos) << error;
  s = schedule(LrScheduleKind::Wsd, 0, 0);
  EXPECT_FALSE(validateLrSchedule(s, error));
  EXPECT_NE(error.find("--decay-steps"), std::string::npos) << error;
  s = schedule(LrScheduleKind::Cosine, 0, 4);
  EXPECT_FALSE(validateLrSchedule(s, error));
  LrScheduleKind kind;
  EXPECT_FALSE(parseLrScheduleKind("step", kind, error));
  EXPECT_NE(error.find("constant, cosine, linear or wsd"), std::string::npos);
  EXPECT_TRUE(parseLrScheduleKind("wsd", kind, error));
  EXPECT_EQ(kind, LrScheduleKind::Wsd);
}

} // namespace
