//===- StopSignals.cpp - SIGINT and SIGTERM during a run ------------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/StopSignals.h"

using namespace mlir::mantissa::rt;

namespace {

volatile std::sig_atomic_t stopSignal = 0;

/// Records the first signal; the second restores the default action and
/// raises it again, ending the process.
extern "C" void onStopSignal(int signal) {
  if (stopSignal) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  stopSignal = signal;
}

} // namespace

StopSignals::StopSignals() {
  stopSignal = 0;
  struct sigaction action {};
  action.sa_handler = onStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &previousInt);
  sigaction(SIGTERM, &action, &previousTerm);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &previousInt, nullptr);
  sigaction(SIGTERM, &previousTerm, nullptr);
}

int StopSignals::pending() { return stopSignal; }

void mlir::mantissa::rt::ignoreFileSizeSignal() {
  struct sigaction action {};
  action.sa_handler = SIG_IGN;
  sigemptyset(&action.sa_mask);
  sigaction(SIGXFSZ, &action, nullptr);
}
