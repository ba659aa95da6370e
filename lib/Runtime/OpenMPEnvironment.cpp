//===- OpenMPEnvironment.cpp - OpenMP settings checked at start-up --------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// OpenMPEnvironment.h says why. Part of libmantissa_rt: no LLVM or MLIR
// headers here.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/OpenMPEnvironment.h"

#include <cstdlib>

using namespace mlir::mantissa::rt;

bool mlir::mantissa::rt::checkOpenMPThreadCount(const std::string &value,
                                                std::string &error) {
  auto blank = [](char c) { return c == ' ' || c == '\t'; };
  size_t at = 0, levels = 0;
  while (true) {
    while (at < value.size() && blank(value[at]))
      ++at;
    size_t digits = at;
    long count = 0;
    while (at < value.size() && value[at] >= '0' && value[at] <= '9') {
      count = count * 10 + (value[at] - '0');
      if (count > kMaxOpenMPThreads) {
        error = "level " + std::to_string(levels + 1) + " asks for more than " +
                std::to_string(kMaxOpenMPThreads) + " threads";
        return false;
      }
      ++at;
    }
    if (at == digits) {
      error = value.empty() ? "it is empty"
                            : "expected a positive integer or a "
                              "comma-separated list of them (one per "
                              "nesting level), as OpenMP defines it";
      return false;
    }
    if (count == 0) {
      error = "level " + std::to_string(levels + 1) +
              " asks for 0 threads; each level needs at least 1";
      return false;
    }
    ++levels;
    while (at < value.size() && blank(value[at]))
      ++at;
    if (at == value.size())
      return true;
    if (value[at] != ',') {
      error = "expected a positive integer or a comma-separated list of them "
              "(one per nesting level), as OpenMP defines it";
      return false;
    }
    ++at;
  }
}

bool mlir::mantissa::rt::checkOpenMPEnvironment(std::string &error) {
  const char *value = std::getenv("OMP_NUM_THREADS");
  if (!value || checkOpenMPThreadCount(value, error))
    return true;
  error = "OMP_NUM_THREADS='" + std::string(value) + "': " + error +
          "; the OpenMP runtime (libomp) would misparse it. Set it to the "
          "number of threads, e.g. OMP_NUM_THREADS=8, or unset it";
  return false;
}
