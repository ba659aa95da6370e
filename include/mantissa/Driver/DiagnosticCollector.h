//===- DiagnosticCollector.h - Diagnostics as one line ----------*- C++ -*-===//

#ifndef MANTISSA_DRIVER_DIAGNOSTICCOLLECTOR_H
#define MANTISSA_DRIVER_DIAGNOSTICCOLLECTOR_H

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace mlir::mantissa {

/// Collects the diagnostics emitted while it lives, as one line (for error
/// messages that name the op and location a lowering failed at).
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(MLIRContext *context)
      : handler(context, [this](Diagnostic &diagnostic) {
          llvm::raw_string_ostream os(text);
          os << (text.empty() ? "" : "; ") << diagnostic.getLocation() << ": "
             << diagnostic.str();
          return success();
        }) {}
  const std::string &str() const { return text; }

private:
  std::string text;
  ScopedDiagnosticHandler handler;
};

} // namespace mlir::mantissa

#endif // MANTISSA_DRIVER_DIAGNOSTICCOLLECTOR_H
