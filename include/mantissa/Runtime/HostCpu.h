//===- HostCpu.h - Whether this CPU runs code compiled elsewhere -*- C++
//-*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// Compiled CPU code in an artifact (kernels.so, step.cpu.so) is built with
// -march=native for the compiling machine. Run on a CPU without one of the
// instruction sets it uses, it would die of SIGILL in the middle of a step;
// the compiler records the instruction-set extensions it compiled for (as
// Linux's /proc/cpuinfo names them), and the runtime checks them before it
// loads the code.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_HOSTCPU_H
#define MANTISSA_RUNTIME_HOSTCPU_H

#include <string>
#include <vector>

namespace mlir::mantissa::rt {

/// The instruction-set extensions the compiler records and the runtime
/// checks, by their /proc/cpuinfo names (x86-64; empty elsewhere).
const std::vector<std::string> &checkedCpuFeatures();

/// Of `required` (/proc/cpuinfo names), those this CPU lacks; empty when it
/// has them all or when /proc/cpuinfo cannot be read (nothing to check
/// against).
std::vector<std::string>
missingCpuFeatures(const std::vector<std::string> &required);

/// Empty when this CPU has every extension in `required`; else the message
/// that refuses code `what` (e.g. "the CPU step") compiled for
/// `targetCpu` (empty: unknown), naming what this CPU lacks.
std::string checkCompiledFor(const std::vector<std::string> &required,
                             const std::string &targetCpu,
                             const std::string &what);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_HOSTCPU_H
