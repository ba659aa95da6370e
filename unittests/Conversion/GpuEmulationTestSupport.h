//===- GpuEmulationTestSupport.h - gpu.funcs run on the host ----*- C++ -*-===//
//
// What the tests of GPU kernels that run through their host emulation share:
// a context with the GPU pipeline's dialects that collects diagnostics, and
// the emulation of a gpu.module compiled and loaded as a shared library.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_UNITTESTS_CONVERSION_GPUEMULATIONTESTSUPPORT_H
#define MANTISSA_UNITTESTS_CONVERSION_GPUEMULATIONTESTSUPPORT_H

#include "mantissa/Conversion/AdamWKernels.h"
#include "mantissa/Conversion/TrainToGPU.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "gtest/gtest.h"

#include <dlfcn.h>
#include <string>

namespace mlir::mantissa {

/// A test whose context has the GPU pipeline's dialects loaded and keeps
/// every diagnostic in `diagnostics`.
class GpuEmulationTest : public ::testing::Test {
protected:
  GpuEmulationTest()
      : context(makeRegistry()),
        handler(&context, [this](Diagnostic &diagnostic) {
          diagnostics += diagnostic.str() + "\n";
          return success();
        }) {
    context.loadAllAvailableDialects();
  }
  static DialectRegistry makeRegistry() {
    DialectRegistry registry;
    registerTrainToGPUDialects(registry);
    return registry;
  }

  /// The host emulation of `gpuModule`'s kernels (`E_host` for each entry
  /// E), compiled and loaded: a dlopen handle, or null after reporting why.
  void *loadEmulatedKernels(gpu::GPUModuleOp gpuModule) {
    OwningOpRef<ModuleOp> host = ModuleOp::create(UnknownLoc::get(&context));
    if (failed(emulateGpuKernels(gpuModule, *host)) ||
        failed(lowerEmulatedKernelsToLLVM(*host))) {
      ADD_FAILURE() << diagnostics;
      return nullptr;
    }
    FailureOr<std::string> llvmIR = translateToLLVMIRText(*host);
    SmallString<256> library;
    std::string error;
    if (failed(llvmIR) ||
        llvm::sys::fs::createTemporaryFile("emulated", "so", library) ||
        failed(compileLLVMIRToSharedLibrary(*llvmIR, library, error,
                                            /*optLevel=*/1))) {
      ADD_FAILURE() << diagnostics << error;
      return nullptr;
    }
    void *handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    llvm::sys::fs::remove(library);
    if (!handle)
      ADD_FAILURE() << dlerror();
    return handle;
  }

  MLIRContext context;
  std::string diagnostics;
  ScopedDiagnosticHandler handler;
};

} // namespace mlir::mantissa

#endif // MANTISSA_UNITTESTS_CONVERSION_GPUEMULATIONTESTSUPPORT_H
