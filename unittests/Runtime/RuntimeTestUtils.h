//===- RuntimeTestUtils.h - Helpers of the runtime's unit tests -*- C++ -*-===//
//
// A scratch directory and a substring expectation, shared by the runtime's
// file-format tests.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_UNITTESTS_RUNTIME_RUNTIMETESTUTILS_H
#define MANTISSA_UNITTESTS_RUNTIME_RUNTIMETESTUTILS_H

#include "gtest/gtest.h"

#include <algorithm>
#include <cstdlib>
#include <dirent.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#define EXPECT_CONTAINS(haystack, needle)                                      \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos)             \
      << "'" << (haystack) << "' does not contain '" << (needle) << "'"

/// A scratch directory removed with its contents at the end of the test.
class ScratchDir {
public:
  ScratchDir() {
    std::string pattern = ::testing::TempDir() + "mantissa_rt_XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    char *created = ::mkdtemp(buffer.data());
    EXPECT_NE(created, nullptr);
    path = created ? created : "";
  }
  ~ScratchDir() {
    ::chmod(path.c_str(), 0755);
    std::string command = "rm -rf '" + path + "'";
    (void)std::system(command.c_str());
  }
  std::string file(const std::string &name) const { return path + "/" + name; }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    if (DIR *dir = ::opendir(path.c_str())) {
      while (dirent *entry = ::readdir(dir)) {
        std::string name = entry->d_name;
        if (name != "." && name != "..")
          names.push_back(name);
      }
      ::closedir(dir);
    }
    std::sort(names.begin(), names.end());
    return names;
  }
  bool hasTemporaryFile() const {
    for (const std::string &name : entries())
      if (name.find(".tmp.") != std::string::npos)
        return true;
    return false;
  }
  std::string path;
};

#endif // MANTISSA_UNITTESTS_RUNTIME_RUNTIMETESTUTILS_H
