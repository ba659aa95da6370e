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
// handlers come back when the object goes.
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

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_STOPSIGNALS_H
