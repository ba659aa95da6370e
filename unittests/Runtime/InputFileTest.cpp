//===- InputFileTest.cpp - openRegularFile refuses what would block
//--------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Format/InputFile.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

using namespace mlir::mantissa::rt;

namespace {

/// A fresh directory under $TMPDIR, removed with what the test made in it.
class InputFileTest : public ::testing::Test {
protected:
  void SetUp() override {
    const char *base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base && *base ? base : "/tmp") + "/input-file-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    directory = pattern;
  }
  void TearDown() override {
    for (const char *name : {"/fifo", "/file"})
      ::unlink((directory + name).c_str());
    ::rmdir(directory.c_str());
  }
  std::string directory;
};

TEST_F(InputFileTest, ReadsARegularFile) {
  std::string path = directory + "/file";
  std::FILE *file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  std::fputs("pt2", file);
  std::fclose(file);
  std::vector<uint8_t> bytes;
  std::string error;
  ASSERT_TRUE(readRegularFile(path, bytes, error)) << error;
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "pt2");
}

/// open(2) of a FIFO without a writer blocks forever; it is refused at once.
TEST_F(InputFileTest, RefusesAFifoWithoutBlocking) {
  std::string path = directory + "/fifo";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  std::string error;
  EXPECT_EQ(openRegularFile(path, error), -1);
  EXPECT_EQ(error, "is a FIFO, not a regular file");
}

TEST_F(InputFileTest, RefusesADirectoryAndADevice) {
  std::string error;
  EXPECT_EQ(openRegularFile(directory, error), -1);
  EXPECT_EQ(error, "is a directory, not a regular file");
  std::vector<uint8_t> bytes;
  EXPECT_FALSE(readRegularFile("/dev/zero", bytes, error));
  EXPECT_EQ(error, "is a character device, not a regular file");
  EXPECT_TRUE(bytes.empty());
}

TEST_F(InputFileTest, NamesWhyAPathCannotBeOpened) {
  std::string error;
  EXPECT_EQ(openRegularFile(directory + "/missing", error), -1);
  EXPECT_EQ(error, "cannot open: No such file or directory");
}

} // namespace
