//===- StepProfileTest.cpp - --profile's phases and collectives -----------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// StepProfile.h: the steps after the first two are counted, a collective is
// charged to the phase that runs it, and TimedCommunicator forwards every
// call unchanged. Durations are never compared (no timed assertions): only
// which figures appear and the step times given.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/StepProfile.h"

#include "gtest/gtest.h"

using namespace mlir::mantissa::rt;

namespace {

TEST(StepProfile, CountsTheStepsAfterTheFirstTwo) {
  StepProfile profile;
  profile.endStep(5.0);
  profile.endStep(5.0);
  EXPECT_EQ(profile.report(0, 1), "");
  profile.endStep(0.25);
  profile.endStep(0.75);
  std::string line = profile.report(1, 2);
  EXPECT_EQ(line.rfind("profile: rank 1/2, ms per step (mean of steps after "
                       "the first two): micro-batches ",
                       0),
            0u)
      << line;
  // Nothing timed: the whole step is "other".
  EXPECT_NE(line.find(", other 500.0; step 500.0"), std::string::npos) << line;
}

TEST(StepProfile, ChargesCollectivesToTheirPhase) {
  StepProfile profile;
  std::unique_ptr<Communicator> single = createSingleRankCommunicator();
  TimedCommunicator comm(*single, profile);
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.worldSize(), 1);
  EXPECT_EQ(comm.name(), "single");
  for (int step = 0; step < 3; ++step) {
    {
      StepProfile::Section section(&profile, StepPhase::Combination);
      uint8_t send[4] = {1, 2, 3, 4}, recv[4] = {};
      std::string error;
      ASSERT_TRUE(
          comm.allToAll(send, {4}, {0}, recv, {4}, {0}, error)); // forwarded
      EXPECT_EQ(recv[3], 4);
    }
    { StepProfile::Section section(&profile, StepPhase::Update); }
    // Outside a phase: "other", which shows no communication of its own.
    EXPECT_TRUE(comm.allAgree(true));
    EXPECT_EQ(comm.allMax(7), 7);
    profile.endStep(1.0);
  }
  std::string line = profile.report(0, 1);
  size_t combination = line.find(", combination ");
  size_t communication = line.find(" (communication ");
  size_t norm = line.find(", mean and norm ");
  size_t update = line.find(", update ");
  size_t other = line.find(", other ");
  ASSERT_NE(combination, std::string::npos) << line;
  ASSERT_NE(communication, std::string::npos) << line;
  EXPECT_LT(combination, communication) << line;
  EXPECT_LT(communication, norm) << line;
  EXPECT_LT(norm, update) << line;
  EXPECT_LT(update, other) << line;
  // Only the combination ran a collective inside a phase.
  EXPECT_EQ(line.find(" (communication ", communication + 1), std::string::npos)
      << line;
  EXPECT_NE(line.find("; step 1000.0"), std::string::npos) << line;
}

TEST(StepProfile, SectionWithoutProfileDoesNothing) {
  StepProfile::Section section(nullptr, StepPhase::MicroBatches);
}

} // namespace
