//===- OpenMPEnvironmentTest.cpp - OMP_NUM_THREADS checks -----------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// What OpenMP defines passes; what libomp 19 misparses (OpenMPEnvironment.h:
// each refused value below asserts or exhausts memory inside it) is refused.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/OpenMPEnvironment.h"

#include "mantissa/Runtime/Communicator.h"

#include "gtest/gtest.h"

#include <omp.h>
#include <sched.h>

using namespace mlir::mantissa::rt;

namespace {

TEST(OpenMPEnvironment, AcceptsWhatOpenMPDefines) {
  for (const char *value : {"1", "8", " 2 ", "2,3", "2, 3", "4,2,1", "65536"}) {
    std::string error;
    EXPECT_TRUE(checkOpenMPThreadCount(value, error)) << value << ": " << error;
  }
}

TEST(OpenMPEnvironment, RefusesWhatLibompMisparses) {
  for (const char *value :
       {"", "abc", "2,abc", "2x", "0x10", "1e3", "+2", "-1", "0", "2,0", "2,",
        ",2", "2;3", "65537", "99999999999999999999", "2,2147483648"}) {
    std::string error;
    EXPECT_FALSE(checkOpenMPThreadCount(value, error)) << "'" << value << "'";
    EXPECT_FALSE(error.empty()) << "'" << value << "'";
  }
}

TEST(OpenMPEnvironment, NamesTheVariable) {
  ASSERT_EQ(setenv("OMP_NUM_THREADS", "2,abc", 1), 0);
  std::string error;
  EXPECT_FALSE(checkOpenMPEnvironment(error));
  EXPECT_NE(error.find("OMP_NUM_THREADS='2,abc'"), std::string::npos) << error;
  ASSERT_EQ(unsetenv("OMP_NUM_THREADS"), 0);
  error.clear();
  EXPECT_TRUE(checkOpenMPEnvironment(error)) << error;
}

// Ranks bound to a core each (OpenMPI's -np 2) run one thread; unbound
// ranks share the machine's CPUs; a rank never runs more threads than its
// own mask has CPUs, nor fewer than one.
TEST(ThreadSplit, SharesTheCpusOfTheMachine) {
  struct Case {
    int ranks, rankCpus, machineCpus, threads;
  } cases[] = {{1, 2, 2, 2},   {2, 1, 2, 1},  {2, 2, 2, 1},
               {2, 16, 16, 8}, {3, 2, 2, 1},  {3, 16, 16, 5},
               {4, 8, 16, 4},  {2, 4, 16, 4}, {8, 1, 2, 1}};
  for (const Case &c : cases) {
    ThreadSplit split = splitThreads(c.ranks, c.rankCpus, c.machineCpus, 0);
    EXPECT_EQ(split.threads, c.threads)
        << c.ranks << " ranks, " << c.rankCpus << " of " << c.machineCpus;
    EXPECT_FALSE(split.oversubscribed);
    EXPECT_EQ(threadSplitWarning(split), "");
  }
}

TEST(ThreadSplit, KeepsOMPNumThreadsAndSaysWhenItOversubscribes) {
  ThreadSplit split = splitThreads(2, 2, 2, 2);
  EXPECT_EQ(split.threads, 2);
  EXPECT_TRUE(split.oversubscribed);
  EXPECT_EQ(threadSplitWarning(split),
            "OMP_NUM_THREADS=2 with 2 ranks on this machine runs 4 OpenMP "
            "threads on 2 CPUs (this rank may use 2): threads wait on each "
            "other's descheduled threads. Unset it to run 1 per rank");
  // More threads than this rank's own CPUs.
  EXPECT_TRUE(splitThreads(2, 1, 16, 2).oversubscribed);
  EXPECT_TRUE(splitThreads(1, 4, 4, 8).oversubscribed);
  EXPECT_FALSE(splitThreads(2, 8, 16, 4).oversubscribed);
  EXPECT_FALSE(splitThreads(2, 1, 2, 1).oversubscribed);
  EXPECT_EQ(splitThreads(2, 8, 16, 4).threads, 4);
}

TEST(ThreadSplit, Describes) {
  EXPECT_EQ(describeThreadSplit(splitThreads(2, 1, 2, 0)),
            "2 ranks on this machine, 1 OpenMP thread each (2 CPUs)");
  EXPECT_EQ(describeThreadSplit(splitThreads(1, 4, 4, 0)),
            "1 rank on this machine, 4 OpenMP threads (4 CPUs)");
  EXPECT_EQ(describeThreadSplit(splitThreads(2, 2, 2, 3)),
            "2 ranks on this machine, 3 OpenMP threads each (OMP_NUM_THREADS)");
}

TEST(ThreadSplit, ReadsTheAffinityMask) {
  std::vector<uint64_t> mask = affinityMask();
  int cpu = sched_getcpu();
  ASSERT_GE(cpu, 0);
  ASSERT_LT(size_t(cpu) / 64, mask.size());
  EXPECT_TRUE(mask[size_t(cpu) / 64] >> (cpu % 64) & 1);
}

// One rank alone: as many threads as its mask has CPUs, set for OpenMP
// through OMP_NUM_THREADS; a set OMP_NUM_THREADS is left as it is.
TEST(ThreadSplit, AppliesToThisProcess) {
  ASSERT_EQ(unsetenv("OMP_NUM_THREADS"), 0);
  int cpus = 0;
  for (uint64_t word : affinityMask())
    cpus += __builtin_popcountll(word);
  std::unique_ptr<Communicator> comm = createSingleRankCommunicator();
  ThreadSplit split;
  std::string error;
  ASSERT_TRUE(applyThreadSplit(*comm, split, error)) << error;
  EXPECT_EQ(split.threads, cpus);
  ASSERT_NE(std::getenv("OMP_NUM_THREADS"), nullptr);
  EXPECT_EQ(std::string(std::getenv("OMP_NUM_THREADS")), std::to_string(cpus));
  // libomp (and oneDNN, which asks it) runs that many.
  EXPECT_EQ(omp_get_max_threads(), cpus);

  ASSERT_EQ(setenv("OMP_NUM_THREADS", "3,1", 1), 0);
  ASSERT_TRUE(applyThreadSplit(*comm, split, error)) << error;
  EXPECT_EQ(split.threads, 3);
  EXPECT_EQ(split.requested, 3);
  EXPECT_EQ(std::string(std::getenv("OMP_NUM_THREADS")), "3,1");
  ASSERT_EQ(unsetenv("OMP_NUM_THREADS"), 0);
}

// Teams shrink under load (OMP_DYNAMIC) unless the user chose otherwise.
TEST(ThreadSplit, AdjustsTeamsUnlessTheUserChose) {
  std::unique_ptr<Communicator> comm = createSingleRankCommunicator();
  ThreadSplit split;
  std::string error;
  ASSERT_EQ(setenv("OMP_DYNAMIC", "false", 1), 0);
  omp_set_dynamic(0);
  ASSERT_TRUE(applyThreadSplit(*comm, split, error)) << error;
  EXPECT_FALSE(split.dynamic);
  EXPECT_EQ(omp_get_dynamic(), 0);
  EXPECT_EQ(std::string(std::getenv("OMP_DYNAMIC")), "false");
  EXPECT_EQ(describeThreadSplit(split).find("fewer"), std::string::npos);

  ASSERT_EQ(unsetenv("OMP_DYNAMIC"), 0);
  ASSERT_TRUE(applyThreadSplit(*comm, split, error)) << error;
  EXPECT_TRUE(split.dynamic);
  EXPECT_NE(omp_get_dynamic(), 0);
  ASSERT_NE(std::getenv("OMP_DYNAMIC"), nullptr);
  EXPECT_EQ(std::string(std::getenv("OMP_DYNAMIC")), "true");
  split.threads = 2;
  EXPECT_NE(describeThreadSplit(split).find(
                ", fewer while other processes keep the CPUs busy"),
            std::string::npos);
  split.threads = 1;
  EXPECT_EQ(describeThreadSplit(split).find("fewer"), std::string::npos);

  ASSERT_EQ(unsetenv("OMP_DYNAMIC"), 0);
  omp_set_dynamic(0);
  ASSERT_EQ(unsetenv("OMP_NUM_THREADS"), 0);
}

} // namespace
