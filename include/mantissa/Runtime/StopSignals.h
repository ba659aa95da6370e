//===- StopSignals.h - SIGINT and SIGTERM during a run ----------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// While a StopSignals object lives, the first SIGINT or SIGTERM is only
// recorded (pending()), so that the trainer can finish the step in
// progress, write what it has and exit cleanly; a second one ends the
// process at once with the signal's default action (a checkpoint being
// written is a .tmp folder, so the previous one stays intact). The previous
// handlers come back when the object goes. SIGXFSZ is ignored for good
// (ignoreFileSizeSignal).
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_STOPSIGNALS_H
#define MANTISSA_RUNTIME_STOPSIGNALS_H

#include <csignal>

namespace mlir::mantissa::rt {

class StopSignals {
public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals &) = delete;
  StopSignals &operator=(const StopSignals &) = delete;

  /// The first signal received while installed (SIGINT or SIGTERM), or 0.
  static int pending();

private:
  struct sigaction previousInt {
  }, previousTerm{};
};

/// Ignores SIGXFSZ for the process, so that a write past the file-size
/// limit (`ulimit -f`) fails with EFBIG, which every writer reports with its
/// path and cleans up after, instead of killing the process and leaving its
/// temporary files. Called by the tools' mains (after llvm::InitLLVM, whose
/// crash handlers would otherwise take the signal).
void ignoreFileSizeSignal();

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_STOPSIGNALS_H
