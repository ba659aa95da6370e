//===- StopSignalsTest.cpp - SIGINT and SIGTERM during a run --------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/StopSignals.h"

#include <gtest/gtest.h>

#include <unistd.h>

using namespace mlir::mantissa::rt;

namespace {

TEST(StopSignalsTest, FirstSignalIsRecordedNotFatal) {
  StopSignals signals;
  EXPECT_EQ(StopSignals::pending(), 0);
  std::raise(SIGTERM);
  EXPECT_EQ(StopSignals::pending(), SIGTERM);
}

TEST(StopSignalsTest, SecondSignalEndsTheProcessAtOnce) {
  // In a child: the first SIGINT is recorded, the second kills it with
  // SIGINT's default action (never reaching the _exit below).
  EXPECT_EXIT(
      {
        StopSignals signals;
        std::raise(SIGINT);
        if (StopSignals::pending() != SIGINT)
          _exit(3);
        std::raise(SIGINT);
        _exit(4);
      },
      ::testing::KilledBySignal(SIGINT), "");
}

TEST(StopSignalsTest, PreviousHandlersComeBack) {
  struct sigaction before {};
  sigaction(SIGINT, nullptr, &before);
  { StopSignals signals; }
  struct sigaction after {};
  sigaction(SIGINT, nullptr, &after);
  EXPECT_EQ(before.sa_handler, after.sa_handler);
  // A new run starts with nothing pending.
  StopSignals again;
  EXPECT_EQ(StopSignals::pending(), 0);
}

} // namespace
