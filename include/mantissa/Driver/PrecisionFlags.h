//===- PrecisionFlags.h - The precision flags, defined once -----*- C++ -*-===//
//
// --precision, --precision-rule, --precision-default-dtype and
// --precision-compute: the flags with which mantissa-compile and
// mantissa-run both ask for a precision spec (applied by
// PrecisionDriver.h). Each tool registers them in a help category of its
// own.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DRIVER_PRECISIONFLAGS_H
#define MANTISSA_DRIVER_PRECISIONFLAGS_H

#include "mantissa/Transforms/PrecisionSpec.h"
#include "llvm/Support/CommandLine.h"

#include <string>

namespace mlir::mantissa {

/// How much a tool's --help says of the flags: mantissa-compile, whose job
/// is the plan, spells out the spec's keys and the rule syntax;
/// mantissa-run, which trains with a plan, keeps to a line each.
enum class PrecisionFlagsHelp { Detailed, Brief };

/// The precision flags, registered with llvm::cl while the object lives: a
/// tool's main constructs it before it parses the command line.
struct PrecisionFlags {
  PrecisionFlags(llvm::cl::OptionCategory &category, PrecisionFlagsHelp help);

  /// Whether any of the flags has a value (mantissa-run's test for a spec).
  bool hasValues() const;
  /// The flags as the spec loader takes them.
  precision::SpecOptions getSpecOptions() const;

  llvm::cl::opt<std::string> specPath;
  llvm::cl::list<std::string> rules;
  llvm::cl::opt<std::string> defaultDtype;
  llvm::cl::opt<std::string> computeDtype;
};

} // namespace mlir::mantissa

#endif // MANTISSA_DRIVER_PRECISIONFLAGS_H
