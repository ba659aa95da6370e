//===- CpuStepMemoryTest.cpp - Tests for the step's malloc settings -------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/CpuStep.h"

#include "gtest/gtest.h"

#include <cstdlib>
#include <cstring>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

using namespace mlir::mantissa::rt;

namespace {

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MANTISSA_UNDER_ASAN 1
#endif
#endif

TEST(CpuStepMemoryTest, SeesMallocTuningInTheEnvironment) {
  const char *none[] = {"PATH=/usr/bin", "OMP_NUM_THREADS=1", "MALLOC=1",
                        "GLIBC_TUNABLES=glibc.rtld.nns=2", nullptr};
  EXPECT_FALSE(environmentTunesMalloc(none));
  EXPECT_FALSE(environmentTunesMalloc(nullptr));
  const char *trim[] = {"PATH=/usr/bin", "MALLOC_TRIM_THRESHOLD_=0", nullptr};
  EXPECT_TRUE(environmentTunesMalloc(trim));
  const char *mmap[] = {"MALLOC_MMAP_THRESHOLD_=4096", nullptr};
  EXPECT_TRUE(environmentTunesMalloc(mmap));
  const char *empty[] = {"MALLOC_TOP_PAD_=", nullptr};
  EXPECT_TRUE(environmentTunesMalloc(empty));
  const char *tunables[] = {
      "GLIBC_TUNABLES=glibc.rtld.nns=2:glibc.malloc.trim_threshold=0", nullptr};
  EXPECT_TRUE(environmentTunesMalloc(tunables));
}

TEST(CpuStepMemoryTest, KeepsFreedTemporariesInTheProcess) {
#if !defined(__GLIBC__) || defined(MANTISSA_UNDER_ASAN)
  GTEST_SKIP() << "glibc's malloc only (ASan's ignores mallopt)";
#else
  if (environmentTunesMalloc(::environ))
    GTEST_SKIP() << "the environment tunes malloc";
  ASSERT_TRUE(keepFreedStepMemory());
  // A 24 MiB temporary, as a step allocates and frees: from the heap (not a
  // fresh mapping), and still there once freed (not trimmed).
  constexpr size_t kBytes = size_t(24) << 20;
  struct mallinfo2 before = mallinfo2();
  auto *temporary = static_cast<char *>(std::malloc(kBytes));
  ASSERT_NE(temporary, nullptr);
  std::memset(temporary, 1, kBytes);
  static char *volatile escaped; // kept, so that the compiler keeps the malloc
  escaped = temporary;
  struct mallinfo2 during = mallinfo2();
  EXPECT_EQ(during.hblks, before.hblks);
  EXPECT_GE(during.arena, before.arena + kBytes);
  std::free(temporary);
  struct mallinfo2 after = mallinfo2();
  EXPECT_EQ(after.arena, during.arena);
#endif
}

} // namespace
