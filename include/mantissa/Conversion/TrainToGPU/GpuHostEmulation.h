//===- GpuHostEmulation.h - The GPU step's kernels on the host --*- C++ -*-===//
//
// Test support: every kernel of a GPU program's gpu.module as a host
// function, from the very gpu.func that becomes the PTX, so that the
// stand-in CUDA driver of the tests (unittests/Runtime/FakeCuda.cpp) runs
// GPU programs on the CPU (docs/gpu-step.md, "Host kernels"). Its own
// library, MantissaGpuHostEmulation, which neither the code generator nor
// the driver links: the unit tests call it directly, and the tools hand it
// to the driver as a GpuHostEmulator only in builds with tests
// (MANTISSA_INCLUDE_TESTS, as mlir-opt carries its test passes), where they
// have --gpu-host-kernels.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_TRAINTOGPU_GPUHOSTEMULATION_H
#define MANTISSA_CONVERSION_TRAINTOGPU_GPUHOSTEMULATION_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

namespace mlir {
namespace gpu {
class GPUModuleOp;
} // namespace gpu
} // namespace mlir

namespace mlir::mantissa {

/// Adds to `hostModule`, for every kernel of `gpuModule` (1-D; xor shuffles
/// only at the kernel's top level; no barriers or shared memory), a
/// func.func of the same name and arguments plus the grid and block size
/// (index) that runs every thread of each block in turn, up to a shuffle,
/// then every thread from there to the next (each reading the shuffled
/// value that its partner lane kept): the very code of the PTX, for testing
/// GPU programs on the CPU. Kernels marked kWarpLockstepAttr
/// (GpuKernelMarks.h) run a warp at a time.
LogicalResult emulateGpuKernels(gpu::GPUModuleOp gpuModule,
                                ModuleOp hostModule);

/// Lowers a module of emulated kernels for the CPU and gives each kernel
/// `E` the entry `void E_host(void **kernelParams, int64_t grid, int64_t
/// block)`: kernelParams[i] points at the value of the i-th parameter, as
/// cuLaunchKernel takes them.
LogicalResult lowerEmulatedKernelsToLLVM(ModuleOp hostModule);

/// The emulation as a value: the driver (GpuStepWriterOptions::emulator)
/// calls it through these pointers, so that only what is handed one links
/// this library.
struct GpuHostEmulator {
  LogicalResult (*emulateKernels)(gpu::GPUModuleOp gpuModule,
                                  ModuleOp hostModule);
  LogicalResult (*lowerToLLVM)(ModuleOp hostModule);
};

/// This library's emulation (emulateGpuKernels, lowerEmulatedKernelsToLLVM).
const GpuHostEmulator &getGpuHostEmulator();

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_TRAINTOGPU_GPUHOSTEMULATION_H
