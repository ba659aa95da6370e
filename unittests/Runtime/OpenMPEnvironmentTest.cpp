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

#include "gtest/gtest.h"

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

} // namespace
