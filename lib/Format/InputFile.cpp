//===- InputFile.cpp - Opening a file that a reader was given -------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Format/InputFile.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mlir::mantissa::rt {

/// What a non-regular file is, for the refusal.
static const char *describeFileType(mode_t mode) {
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "something else";
}

int openRegularFile(const std::string &path, std::string &error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    error = std::string("cannot open: ") + std::strerror(errno);
    return -1;
  }
  struct stat status;
  if (::fstat(fd, &status) != 0) {
    error = std::string("cannot stat: ") + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  if (!S_ISREG(status.st_mode)) {
    error = std::string("is ") + describeFileType(status.st_mode) +
            ", not a regular file";
    ::close(fd);
    return -1;
  }
  // Reads of a regular file never return EAGAIN, but the descriptor may be
  // handed on (to a stream, to LLVM's MemoryBuffer) that expects blocking.
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    error = std::string("cannot open: ") + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

bool readRegularFile(const std::string &path, std::vector<uint8_t> &bytes,
                     std::string &error) {
  bytes.clear();
  int fd = openRegularFile(path, error);
  if (fd < 0)
    return false;
  struct stat status;
  if (::fstat(fd, &status) == 0 && status.st_size > 0)
    bytes.reserve(static_cast<size_t>(status.st_size));
  uint8_t chunk[1 << 16];
  while (true) {
    ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      error = std::string("cannot read: ") + std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (got == 0)
      break;
    bytes.insert(bytes.end(), chunk, chunk + got);
  }
  ::close(fd);
  return true;
}

} // namespace mlir::mantissa::rt
