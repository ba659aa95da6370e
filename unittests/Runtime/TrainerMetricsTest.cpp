//===- TrainerMetricsTest.cpp - The loss plot's axes ----------------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// losses.svg (lossPlotSvg) ticks its axes at round values and titles them,
// rather than labelling only the extreme losses and the first and last step.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/TrainerMetrics.h"

#include "gtest/gtest.h"

#include <cmath>

using namespace mlir::mantissa::rt;

namespace {

void expectTicks(const std::vector<double> &ticks,
                 const std::vector<double> &expected) {
  ASSERT_EQ(ticks.size(), expected.size());
  for (size_t i = 0; i < ticks.size(); ++i)
    EXPECT_NEAR(ticks[i], expected[i], 1e-9) << "tick " << i;
}

TEST(LossPlot, TicksAreRoundValuesAroundTheRange) {
  expectTicks(niceTicks(3.27, 4.35, 6), {3.2, 3.4, 3.6, 3.8, 4.0, 4.2, 4.4});
  expectTicks(niceTicks(0.0123, 0.0571, 6),
              {0.01, 0.02, 0.03, 0.04, 0.05, 0.06});
  expectTicks(niceTicks(2, 10, 5), {2, 4, 6, 8, 10});
  // Step numbers: whole steps, never below 1 apart.
  expectTicks(niceTicks(1, 30, 7, true), {0, 5, 10, 15, 20, 25, 30});
  expectTicks(niceTicks(1, 3, 7, true), {1, 2, 3});
  // One value (a flat loss) still gives an axis.
  EXPECT_GE(niceTicks(2.5, 2.5, 6).size(), 2u);
}

TEST(LossPlot, AxesHaveTicksAndTitles) {
  std::vector<double> losses;
  for (int step = 0; step < 30; ++step)
    losses.push_back(3.27 + 1.08 * std::exp(-0.2 * step));
  std::string svg = lossPlotSvg(losses, {{10, 3.9}, {20, 3.5}, {30, 3.4}});
  for (const char *label : {">3.4<", ">3.6<", ">4.0<", ">4.4<", ">5<", ">10<",
                            ">25<", ">30<", ">step<", ">loss<"})
    EXPECT_NE(svg.find(label), std::string::npos) << label << " in\n" << svg;
  // Not the extremes' own digits, as the plot used to label them.
  EXPECT_EQ(svg.find(">4.3500<"), std::string::npos);
  EXPECT_EQ(svg.find(">3.2"), svg.find(">3.2<")) << svg;
}

} // namespace
