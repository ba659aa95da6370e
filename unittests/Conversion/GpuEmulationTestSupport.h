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
#include "mantissa/Conversion/TrainToGPU/GpuHostEmulation.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
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
    if (failed(emulateGpuKernels(gpuModule, *host))) {
      ADD_FAILURE() << diagnostics;
      return nullptr;
    }
    expectEmulationGrowsWithTheKernel(gpuModule, *host);
    if (failed(lowerEmulatedKernelsToLLVM(*host))) {
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

  /// Each kernel's host function has at most kMaxEmulationGrowth times the
  /// kernel's ops: the emulation runs the threads (or a warp's lanes) in
  /// loops, it does not write out each thread's copy of the kernel, which
  /// made functions that clang took minutes to optimise.
  static constexpr int64_t kMaxEmulationGrowth = 8;
  void expectEmulationGrowsWithTheKernel(gpu::GPUModuleOp gpuModule,
                                         ModuleOp host) {
    auto countOps = [](Operation *op) {
      int64_t count = 0;
      op->walk([&](Operation *) { ++count; });
      return count;
    };
    for (auto kernel : gpuModule.getOps<gpu::GPUFuncOp>()) {
      if (!kernel.isKernel())
        continue;
      Operation *emulation = host.lookupSymbol(kernel.getName());
      ASSERT_NE(emulation, nullptr) << kernel.getName().str();
      EXPECT_LE(countOps(emulation), kMaxEmulationGrowth * countOps(kernel))
          << kernel.getName().str() << ": " << countOps(kernel)
          << " ops emulated in " << countOps(emulation);
    }
  }

  MLIRContext context;
  std::string diagnostics;
  ScopedDiagnosticHandler handler;
};

} // namespace mlir::mantissa

#endif // MANTISSA_UNITTESTS_CONVERSION_GPUEMULATIONTESTSUPPORT_H
