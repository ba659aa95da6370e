//===- FuzzScratch.h - A fuzzer process's scratch directory -----*- C++ -*-===//
//
// The runtime's readers take paths, not buffers, so their fuzzers write each
// input into a file first. Each fuzzer process gets a directory of its own
// (libFuzzer's -jobs/-fork run several at once), created on first use and
// removed when the process exits normally.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_FUZZ_FUZZSCRATCH_H
#define MANTISSA_FUZZ_FUZZSCRATCH_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <unistd.h>

namespace mantissa_fuzz {

/// Writes `size` bytes to `path`, replacing it; aborts when it cannot, since
/// a fuzzer that silently reads a stale file would report nothing useful.
inline void writeFileOrDie(const std::string &path, const void *data,
                           size_t size) {
  std::FILE *file = std::fopen(path.c_str(), "wb");
  if (!file || (size && std::fwrite(data, 1, size, file) != size) ||
      std::fclose(file) != 0) {
    std::fprintf(stderr, "fuzzer: cannot write %s\n", path.c_str());
    std::abort();
  }
}

inline void writeFileOrDie(const std::string &path, const std::string &text) {
  writeFileOrDie(path, text.data(), text.size());
}

/// Prints a reader's error when MANTISSA_FUZZ_VERBOSE is set, to see how
/// far a seed or a reproducer gets (the fuzzer itself prints nothing).
inline void noteError(const std::string &error) {
  static const bool verbose = std::getenv("MANTISSA_FUZZ_VERBOSE") != nullptr;
  if (verbose)
    std::fprintf(stderr, "reader: %s\n", error.c_str());
}

/// The process's scratch directory under $TMPDIR (or /tmp), made once.
inline const std::string &scratchDirectory() {
  static const std::string path = [] {
    const char *base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base && *base ? base : "/tmp") + "/mantissa-fuzz-XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (!::mkdtemp(buffer.data())) {
      std::perror("fuzzer: mkdtemp");
      std::abort();
    }
    std::string made = buffer.data();
    // Removed on a normal exit (-max_total_time, -runs); a crash leaves it
    // behind with the input that caused it.
    static std::string toRemove;
    toRemove = made;
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(toRemove, ignored);
    });
    return made;
  }();
  return path;
}

} // namespace mantissa_fuzz

#endif // MANTISSA_FUZZ_FUZZSCRATCH_H
