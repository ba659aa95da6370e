//===- InputFile.h - Opening a file that a reader was given -----*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The one way every reader of a path it was given (a .pt2, a precision spec,
// --weights, --inputs, --data, an artifact's or a checkpoint's files) opens
// it. open(2) of a FIFO blocks until a writer appears, and reading a
// character device such as /dev/zero never ends: a path that names anything
// but a regular file is refused instead, before a byte is read.
//
// Part of mantissa_format: no LLVM, MLIR or runtime headers here, since the
// compiler and the runtime both read their inputs through it.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_FORMAT_INPUTFILE_H
#define MANTISSA_FORMAT_INPUTFILE_H

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

/// Opens `path` read-only (close-on-exec) and returns the descriptor, or -1
/// with `error` saying why: "cannot open: <reason>", or "is a FIFO, not a
/// regular file" (a directory, a device, a socket alike). The path itself is
/// not in `error`: the caller prefixes it, and the flag it came from. The open
/// itself does not block (O_NONBLOCK, cleared again for a regular file), so a
/// FIFO is refused at once rather than hanging the process.
int openRegularFile(const std::string &path, std::string &error);

/// Reads the whole regular file at `path` into `bytes` through
/// openRegularFile; false with `error` (without the path) on any failure.
bool readRegularFile(const std::string &path, std::vector<uint8_t> &bytes,
                     std::string &error);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_FORMAT_INPUTFILE_H
