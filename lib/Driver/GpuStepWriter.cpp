//===- GpuStepWriter.cpp - Writing a step's GPU program -------------------===//

#include "mantissa/Driver/GpuStepWriter.h"
#include "mantissa/Conversion/AdamWKernels.h"
#include "mantissa/Conversion/TrainToGPU.h"
#include "mantissa/Driver/DiagnosticCollector.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::mantissa;

static llvm::Error writeBytes(llvm::StringRef path, llvm::StringRef bytes) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (!ec) {
    os << bytes;
    os.close();
    ec = os.error();
  }
  if (ec)
    return llvm::createStringError(path + ": " + ec.message());
  return llvm::Error::success();
}

/// The update kernels of `groups` (group i's PTX entry is
/// mantissa_adamw_<i>_kernel, as ArtifactWriter names them) emulated into
/// `hostModule`.
static LogicalResult emulateUpdateKernels(ArrayRef<AdamWGroup> groups,
                                          ModuleOp hostModule) {
  MLIRContext *context = hostModule.getContext();
  for (auto [index, group] : llvm::enumerate(groups)) {
    std::string symbol = llvm::formatv("mantissa_adamw_{0}", index);
    OwningOpRef<ModuleOp> module =
        buildAdamWKernelModule(context, group, symbol, /*forGpu=*/true);
    if (failed(lowerAdamWForGpu(*module)))
      return failure();
    for (auto gpuModule : module->getOps<gpu::GPUModuleOp>())
      if (failed(emulateGpuKernels(gpuModule, hostModule)))
        return failure();
  }
  return success();
}

llvm::Expected<GpuStepFiles>
mlir::mantissa::writeGpuStep(train::StepOp step, llvm::StringRef directory,
                             ArrayRef<AdamWGroup> updateGroups) {
  const char *hostKernels = std::getenv(kGpuHostKernelsVariable);
  DiagnosticCollector diagnostics(step.getContext());
  FailureOr<GpuStepProgram> program =
      compileTrainStepForGpu(step, hostKernels && *hostKernels);
  if (failed(program))
    return llvm::createStringError("compiling the step for the GPU failed: " +
                                   diagnostics.str());
  GpuStepFiles result;
  auto pathOf = [&](llvm::StringRef file) {
    llvm::SmallString<256> path(directory);
    llvm::sys::path::append(path, file);
    return std::string(path);
  };
  constexpr llvm::StringLiteral kPtx = "step.ptx",
                                kConstants = "step.constants.bin",
                                kProgram = "step.gpu.json";
  if (llvm::Error error = writeBytes(pathOf(kPtx), program->ptx))
    return std::move(error);
  result.files.push_back(kPtx.str());
  if (!program->constants.empty()) {
    if (llvm::Error error = writeBytes(
            pathOf(kConstants), llvm::StringRef(reinterpret_cast<const char *>(
                                                    program->constants.data()),
                                                program->constants.size())))
      return std::move(error);
    result.files.push_back(kConstants.str());
  }
  if (llvm::Error error = writeBytes(pathOf(kProgram),
                                     program->toJSON(kPtx, kConstants) + "\n"))
    return std::move(error);
  result.files.push_back(kProgram.str());
  result.kernels = program->countOps(GpuStepOp::Kind::Kernel);
  result.gemms = program->countOps(GpuStepOp::Kind::Gemm);
  result.arenaBytes = program->arenaBytes;

  if (hostKernels && *hostKernels) {
    DialectRegistry registry;
    registerAdamWKernelDialects(registry);
    step.getContext()->appendDialectRegistry(registry);
    if (failed(emulateUpdateKernels(updateGroups, *program->hostKernels)) ||
        failed(lowerEmulatedKernelsToLLVM(*program->hostKernels)))
      return llvm::createStringError(
          "lowering the GPU kernels for the host failed: " + diagnostics.str());
    FailureOr<std::string> llvmIR =
        translateToLLVMIRText(*program->hostKernels);
    if (failed(llvmIR))
      return llvm::createStringError(
          "translating the GPU step's host kernels failed: " +
          diagnostics.str());
    std::string error;
    if (failed(compileLLVMIRToSharedLibrary(*llvmIR, hostKernels, error,
                                            /*optLevel=*/1)))
      return llvm::createStringError(
          std::string("compiling the GPU step's host kernels into ") +
          hostKernels + " failed: " + error);
  }
  return result;
}
