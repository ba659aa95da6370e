//===- GpuStepWriter.cpp - Writing a step's GPU program -------------------===//

#include "mantissa/Driver/GpuStepWriter.h"
#include "mantissa/Conversion/AdamWKernels.h"
#include "mantissa/Conversion/TrainToGPU.h"
#include "mantissa/Conversion/TrainToGPU/GpuHostEmulation.h"
#include "mantissa/Driver/CpuStepWriter.h"
#include "mantissa/Driver/DiagnosticCollector.h"
#include "mantissa/Driver/StepEvaluator.h"
#include "mantissa/Runtime/UpdateRunner.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::mantissa;

GpuHostKernelsFlag::GpuHostKernelsFlag(llvm::cl::OptionCategory &category,
                                       const GpuHostEmulator *emulator)
    : emulator(emulator) {
  if (emulator)
    path.emplace("gpu-host-kernels",
                 llvm::cl::desc("Test support: also compile the GPU "
                                "program's kernels for the host into this "
                                "shared library, which the tests' stand-in "
                                "CUDA driver runs in place of the PTX "
                                "(docs/gpu-step.md)"),
                 llvm::cl::value_desc("path"), llvm::cl::cat(category));
}

GpuHostKernels GpuHostKernelsFlag::get() const {
  if (!path)
    return {};
  return {path->getValue(), emulator};
}

/// Writes `bytes` to `path` (atomically; a write error, such as a full disk
/// or a file-size limit, is returned with the path and nothing half-written
/// stays; llvm::writeToOutput ends the process on one).
static llvm::Error writeBytes(llvm::StringRef path, llvm::StringRef bytes) {
  std::string error;
  if (!rt::writeFileAtomically(path.str(), bytes.str(), error))
    return llvm::createStringError(error);
  return llvm::Error::success();
}

/// The update kernels of `groups` (group i's PTX entry is
/// mantissa_adamw_<i>_kernel, as ArtifactWriter names them) emulated into
/// `hostModule`.
static LogicalResult emulateUpdateKernels(const GpuHostEmulator &emulator,
                                          ArrayRef<AdamWGroup> groups,
                                          int64_t tileSize,
                                          ModuleOp hostModule) {
  MLIRContext *context = hostModule.getContext();
  for (auto [index, group] : llvm::enumerate(groups)) {
    std::string symbol = llvm::formatv("mantissa_adamw_{0}", index);
    OwningOpRef<ModuleOp> module =
        buildAdamWKernelModule(context, group, symbol);
    if (failed(lowerAdamWForGpu(*module, tileSize)))
      return failure();
    for (auto gpuModule : module->getOps<gpu::GPUModuleOp>())
      if (failed(emulator.emulateKernels(gpuModule, hostModule)))
        return failure();
  }
  return success();
}

static constexpr llvm::StringLiteral kPtx = "step.ptx",
                                     kConstants = "step.constants.bin",
                                     kProgram = "step.gpu.json",
                                     kSummary = "summary.json";

/// Copies the program's files from a cache entry into `directory` when the
/// entry is complete, filling `result`; false otherwise.
static bool copyFromCache(llvm::StringRef entry, llvm::StringRef directory,
                          GpuStepFiles &result) {
  auto pathIn = [](llvm::StringRef dir, llvm::StringRef file) {
    llvm::SmallString<256> path(dir);
    llvm::sys::path::append(path, file);
    return std::string(path);
  };
  auto summaryText = llvm::MemoryBuffer::getFile(pathIn(entry, kSummary));
  if (!summaryText)
    return false;
  llvm::Expected<llvm::json::Value> summary =
      llvm::json::parse((*summaryText)->getBuffer());
  if (!summary) {
    llvm::consumeError(summary.takeError());
    return false;
  }
  const llvm::json::Object *object = summary->getAsObject();
  const llvm::json::Array *files = object ? object->getArray("files") : nullptr;
  if (!files)
    return false;
  GpuStepFiles copied;
  for (const llvm::json::Value &file : *files) {
    std::optional<llvm::StringRef> name = file.getAsString();
    // A damaged or truncated file makes the entry a miss (compiled again).
    if (!name || !isIntactCacheFile(pathIn(entry, *name)) ||
        llvm::sys::fs::copy_file(pathIn(entry, *name),
                                 pathIn(directory, *name)))
      return false;
    copied.files.push_back(name->str());
  }
  copied.kernels = object->getInteger("kernels").value_or(0);
  copied.gemms = object->getInteger("gemms").value_or(0);
  copied.arenaBytes = object->getInteger("arena_bytes").value_or(0);
  copied.cached = true;
  copied.cachePath = entry.str();
  result = std::move(copied);
  return true;
}

/// Stores the program's files from `directory` as the cache entry `entry`
/// (built beside it and renamed into place, so that concurrent runs never
/// see half an entry). Failures only cost the next run a compilation.
static void storeInCache(llvm::StringRef entry, llvm::StringRef directory,
                         GpuStepFiles &result) {
  llvm::SmallString<256> temporary(entry);
  temporary +=
      llvm::formatv(".tmp.{0}", llvm::sys::Process::getProcessId()).str();
  llvm::sys::fs::remove_directories(temporary);
  if (llvm::sys::fs::create_directories(temporary))
    return;
  llvm::json::Array files;
  for (const std::string &file : result.files) {
    llvm::SmallString<256> from(directory), to(temporary);
    llvm::sys::path::append(from, file);
    llvm::sys::path::append(to, file);
    if (llvm::sys::fs::copy_file(from, to)) {
      llvm::sys::fs::remove_directories(temporary);
      return;
    }
    sealCacheFile(to);
    files.push_back(file);
  }
  llvm::SmallString<256> summaryPath(temporary);
  llvm::sys::path::append(summaryPath, kSummary);
  std::string summary =
      llvm::formatv("{0}", llvm::json::Value(llvm::json::Object{
                               {"files", std::move(files)},
                               {"kernels", result.kernels},
                               {"gemms", result.gemms},
                               {"arena_bytes", result.arenaBytes}}));
  if (llvm::Error error = writeBytes(summaryPath, summary)) {
    llvm::consumeError(std::move(error));
    llvm::sys::fs::remove_directories(temporary);
    return;
  }
  llvm::sys::fs::remove_directories(entry);
  if (llvm::sys::fs::rename(temporary, entry))
    llvm::sys::fs::remove_directories(temporary);
  else
    result.cachePath = entry.str();
}

namespace {
/// The file names of one program in the artifact.
struct ProgramFiles {
  llvm::StringRef ptx, constants, program;
};
constexpr ProgramFiles kJointFiles{kPtx, kConstants, kProgram};
constexpr ProgramFiles kForwardFiles{
    "step.forward.ptx", "step.forward.constants.bin", "step.gpu.forward.json"};
} // namespace

/// Compiles `step` for the GPU and writes its program as `files` into
/// `directory`, adding the names to `written`; `forwardFile` names the
/// forward-only program beside it (empty: none). With `hostKernels`, the
/// program's kernels are emulated into it by `emulator`.
static llvm::Error writeProgram(train::StepOp step, llvm::StringRef directory,
                                const ProgramFiles &files, ModuleOp hostKernels,
                                const GpuHostEmulator *emulator,
                                llvm::StringRef forwardFile,
                                FailureOr<GpuStepProgram> &program,
                                std::vector<std::string> &written) {
  DiagnosticCollector diagnostics(step.getContext());
  auto emulate = [&](gpu::GPUModuleOp gpuModule) {
    return emulator->emulateKernels(gpuModule, hostKernels);
  };
  program = compileTrainStepForGpu(
      step, hostKernels ? GpuKernelsObserver(emulate) : nullptr);
  if (failed(program))
    return llvm::createStringError("compiling the step for the GPU failed: " +
                                   diagnostics.str());
  // The bounds of token ids, as the CPU step records them.
  for (size_t index = 0; index < program->arguments.size(); ++index) {
    StepTensor &argument = program->arguments[index];
    if (argument.role == StepTensor::Role::UserInput)
      argument.indexBound = getIndexBound(step, unsigned(index));
  }
  auto pathOf = [&](llvm::StringRef file) {
    llvm::SmallString<256> path(directory);
    llvm::sys::path::append(path, file);
    return std::string(path);
  };
  if (llvm::Error error = writeBytes(pathOf(files.ptx), program->ptx))
    return error;
  written.push_back(files.ptx.str());
  if (!program->constants.empty()) {
    if (llvm::Error error =
            writeBytes(pathOf(files.constants),
                       llvm::StringRef(reinterpret_cast<const char *>(
                                           program->constants.data()),
                                       program->constants.size())))
      return error;
    written.push_back(files.constants.str());
  }
  program->ptxFile = files.ptx.str();
  program->constantsFile =
      program->constants.empty() ? std::string() : files.constants.str();
  program->forwardFile = forwardFile.str();
  if (llvm::Error error = writeBytes(pathOf(files.program),
                                     rt::writeGpuProgram(*program) + "\n"))
    return error;
  written.push_back(files.program.str());
  return llvm::Error::success();
}

/// Moves the host kernels of `from` into `into`, skipping symbols `into`
/// already defines (the conversion kernels both programs have).
static void mergeHostKernels(ModuleOp from, ModuleOp into) {
  SymbolTable symbols(into);
  for (Operation &op : llvm::make_early_inc_range(*from.getBody())) {
    auto symbol = dyn_cast<SymbolOpInterface>(&op);
    if (symbol && symbols.lookup(symbol.getName()))
      continue;
    op.moveBefore(into.getBody(), into.getBody()->end());
  }
}

llvm::Expected<GpuStepFiles>
mlir::mantissa::writeGpuStep(train::StepOp step, llvm::StringRef directory,
                             ArrayRef<AdamWGroup> updateGroups,
                             const GpuStepWriterOptions &options) {
  const std::string &hostKernels = options.hostKernels.path;
  const GpuHostEmulator *emulator = options.hostKernels.emulator;
  bool withHostKernels = bool(options.hostKernels);
  if (withHostKernels && !emulator)
    return llvm::createStringError(
        "host kernels for " + hostKernels +
        " were asked for without an emulator (GpuHostKernels::emulator)");
  bool withForward = options.withForward;
  // Programs are cached like the CPU step's libraries, by a hash of the
  // planned step, the compiler build and the GPU target (libdevice
  // included); runs that also want host kernels (tests) compile afresh.
  std::string cacheEntry;
  std::optional<CompileCacheLock> lock;
  if (std::string cache =
          withHostKernels ? std::string() : getUsableCompileCacheDirectory();
      !cache.empty()) {
    const char *libdevice = std::getenv("MANTISSA_LIBDEVICE");
    llvm::SmallString<256> entry(cache);
    llvm::sys::path::append(
        entry,
        "gpu-" + hashPlannedStep(step, std::string("sm_90 ptx80 ") +
                                           (withForward ? "forward " : "") +
                                           (libdevice ? libdevice : "")));
    cacheEntry = std::string(entry);
    // One run compiles a step at a time; the others then copy its entry.
    lock.emplace(cacheEntry);
    GpuStepFiles cached;
    if (copyFromCache(cacheEntry, directory, cached))
      return cached;
  }
  GpuStepFiles result;
  // The forward-only step for evaluation: its own program, named apart so
  // that its kernels and the joint step's can share one host library.
  OwningOpRef<ModuleOp> forwardModule, forwardHostKernels;
  FailureOr<GpuStepProgram> forward = failure();
  llvm::StringRef forwardFile;
  if (withForward) {
    llvm::Expected<OwningOpRef<ModuleOp>> derived = deriveForwardStep(step);
    if (!derived)
      return derived.takeError();
    forwardModule = std::move(*derived);
    train::StepOp forwardStep = *forwardModule->getOps<train::StepOp>().begin();
    forwardStep.setSymName((step.getSymName() + "_forward").str());
    if (withHostKernels)
      forwardHostKernels = ModuleOp::create(forwardStep.getLoc());
    if (llvm::Error error =
            writeProgram(forwardStep, directory, kForwardFiles,
                         forwardHostKernels ? *forwardHostKernels : ModuleOp(),
                         emulator, /*forwardFile=*/"", forward, result.files))
      return std::move(error);
    forwardFile = kForwardFiles.program;
  }
  FailureOr<GpuStepProgram> program = failure();
  OwningOpRef<ModuleOp> hostModule;
  if (withHostKernels)
    hostModule = ModuleOp::create(step.getLoc());
  if (llvm::Error error = writeProgram(
          step, directory, kJointFiles, hostModule ? *hostModule : ModuleOp(),
          emulator, forwardFile, program, result.files))
    return std::move(error);
  result.kernels = program->countOps(GpuStepOp::Kind::Kernel);
  result.gemms = program->countOps(GpuStepOp::Kind::Gemm);
  result.arenaBytes = program->arenaBytes;
  if (withHostKernels && withForward)
    mergeHostKernels(*forwardHostKernels, *hostModule);
  DiagnosticCollector diagnostics(step.getContext());

  if (withHostKernels) {
    DialectRegistry registry;
    registerAdamWKernelDialects(registry);
    step.getContext()->appendDialectRegistry(registry);
    if (failed(emulateUpdateKernels(*emulator, updateGroups, options.tileSize,
                                    *hostModule)) ||
        failed(emulator->lowerToLLVM(*hostModule)))
      return llvm::createStringError(
          "lowering the GPU kernels for the host failed: " + diagnostics.str());
    FailureOr<std::string> llvmIR = translateToLLVMIRText(*hostModule);
    if (failed(llvmIR))
      return llvm::createStringError(
          "translating the GPU step's host kernels failed: " +
          diagnostics.str());
    std::string error;
    if (failed(compileLLVMIRToSharedLibrary(*llvmIR, hostKernels, error,
                                            /*optLevel=*/1)))
      return llvm::createStringError(
          "compiling the GPU step's host kernels into " + hostKernels +
          " failed: " + error);
  }
  if (!cacheEntry.empty()) {
    if (std::error_code ec = llvm::sys::fs::create_directories(
            llvm::sys::path::parent_path(cacheEntry));
        !ec)
      storeInCache(cacheEntry, directory, result);
  }
  return result;
}
