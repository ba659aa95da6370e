//===- StepEvaluator.cpp - Running a training step's forward/backward -----===//

#include "mantissa/Driver/StepEvaluator.h"
#include "mantissa/Conversion/AdamWKernels.h"
#include "mantissa/Conversion/TrainToLLVM.h"
#include "mantissa/Driver/DiagnosticCollector.h"
#include "mantissa/Reference/Interpreter.h"
#include "mantissa/Runtime/Artifact.h"
#include "mantissa/Runtime/CpuGemm.h"
#include "mantissa/Runtime/UpdateRunner.h"
#include "mantissa/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <optional>
#include <sys/file.h>
#include <unistd.h>

using namespace mlir;
using namespace mlir::mantissa;

namespace {

class ReferenceEvaluator : public StepEvaluator {
public:
  explicit ReferenceEvaluator(train::StepOp step) : step(step) {}

  llvm::Expected<SmallVector<reference::Tensor>>
  evaluate(ArrayRef<reference::Tensor> arguments) override {
    DiagnosticCollector diagnostics(step.getContext());
    FailureOr<SmallVector<reference::Tensor>> results =
        reference::interpretStep(step, arguments);
    if (failed(results))
      return llvm::createStringError("evaluation failed: " + diagnostics.str());
    return std::move(*results);
  }
  llvm::StringRef describe() const override { return "reference"; }

private:
  train::StepOp step;
};

/// The step compiled to a shared library whose entry point takes an array
/// of pointers: one per argument, then one per result, each a dense
/// row-major buffer.
class CompiledEvaluator : public StepEvaluator {
public:
  using Entry = void (*)(void **);
  CompiledEvaluator(void *library, Entry entry,
                    SmallVector<Type> libraryArgumentTypes,
                    SmallVector<RankedTensorType> resultTypes)
      : library(library), entry(entry),
        libraryArgumentTypes(std::move(libraryArgumentTypes)),
        resultTypes(std::move(resultTypes)) {}
  ~CompiledEvaluator() override { dlclose(library); }

  llvm::Expected<SmallVector<reference::Tensor>>
  evaluate(ArrayRef<reference::Tensor> arguments) override {
    std::vector<std::vector<uint8_t>> buffers;
    for (auto [argument, type] :
         llvm::zip_equal(arguments, libraryArgumentTypes)) {
      Type element = getElementTypeOrSelf(type);
      // A parameter the library takes gathered (deriveCpuStep): rounded to
      // nearest even, as the step's cast would (exact from fp32, bf16 and
      // fp16, the plans' dtypes).
      buffers.push_back(argument.getElementType() == element
                            ? argument.toBytes()
                            : reference::Tensor::fromFloats(element,
                                                            argument.getShape(),
                                                            argument.toFloats())
                                  .toBytes());
    }
    for (RankedTensorType type : resultTypes)
      buffers.emplace_back(std::max<int64_t>(
          1, type.getNumElements() * reference::Tensor::getStorageByteWidth(
                                         type.getElementType())));
    SmallVector<void *> pointers;
    for (std::vector<uint8_t> &buffer : buffers)
      pointers.push_back(buffer.data());
    entry(pointers.data());

    SmallVector<reference::Tensor> results;
    for (auto [index, type] : llvm::enumerate(resultTypes)) {
      std::vector<uint8_t> &bytes = buffers[arguments.size() + index];
      bytes.resize(
          type.getNumElements() *
          reference::Tensor::getStorageByteWidth(type.getElementType()));
      llvm::Expected<reference::Tensor> result = reference::Tensor::fromBytes(
          type.getElementType(), type.getShape(), bytes);
      if (!result)
        return result.takeError();
      results.push_back(std::move(*result));
    }
    return results;
  }
  llvm::StringRef describe() const override { return "compiled (CPU)"; }
  bool hasRawEntry() const override { return true; }
  void evaluateRaw(void **pointers) override { entry(pointers); }

private:
  void *library;
  Entry entry;
  SmallVector<Type> libraryArgumentTypes;
  SmallVector<RankedTensorType> resultTypes;
};

} // namespace

std::unique_ptr<StepEvaluator>
mlir::mantissa::createReferenceEvaluator(train::StepOp step) {
  return std::make_unique<ReferenceEvaluator>(step);
}

/// Names the build of the compiler doing the lowering (its executable's
/// path, size and modification time), so that a rebuilt compiler never
/// reuses a library an earlier build lowered differently.
static std::string describeCompilerBuild() {
  static int anchor;
  std::string executable = llvm::sys::fs::getMainExecutable(
      "mantissa", reinterpret_cast<void *>(&anchor));
  llvm::sys::fs::file_status status;
  if (executable.empty() || llvm::sys::fs::status(executable, status))
    return "unknown build";
  return llvm::formatv(
      "{0} {1} {2}", executable, status.getSize(),
      status.getLastModificationTime().time_since_epoch().count());
}

std::string mlir::mantissa::getCompileCacheDirectory() {
  if (const char *dir = std::getenv("MANTISSA_CACHE_DIR"))
    return dir;
  SmallString<256> path;
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    path = xdg;
  else if (!llvm::sys::path::cache_directory(path))
    return "";
  llvm::sys::path::append(path, "mantissa");
  return std::string(path);
}

void mlir::mantissa::warnCacheUnusable(StringRef directory, StringRef reason) {
  static bool warned = false;
  if (!warned)
    llvm::errs() << "mantissa: warning: the compile cache " << directory
                 << " cannot be written (" << reason
                 << "); compiling into a temporary folder (set "
                    "MANTISSA_CACHE_DIR to cache elsewhere)\n";
  warned = true;
}

std::string mlir::mantissa::getUsableCompileCacheDirectory() {
  std::string directory = getCompileCacheDirectory();
  if (directory.empty())
    return directory;
  std::error_code ec = llvm::sys::fs::create_directories(directory);
  // create_directories accepts a path that exists as a file.
  if (!ec && !llvm::sys::fs::is_directory(directory))
    ec = std::make_error_code(std::errc::not_a_directory);
  if (!ec && access(directory.c_str(), W_OK) != 0)
    ec = std::error_code(errno, std::generic_category());
  if (ec) {
    warnCacheUnusable(directory, ec.message());
    return "";
  }
  static bool cleaned = false;
  if (!cleaned)
    removeAbandonedTemporaries(directory);
  cleaned = true;
  return directory;
}

/// Whether an exclusive flock on `path` could be taken now: no live writer
/// holds it. A path that cannot be opened has no holder.
static bool lockIsFree(const std::string &path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return true;
  bool free = flock(fd, LOCK_EX | LOCK_NB) == 0;
  close(fd);
  return free;
}

void mlir::mantissa::removeAbandonedTemporaries(StringRef folder,
                                                StringRef stem) {
  std::error_code ec;
  std::vector<std::string> doomed;
  for (llvm::sys::fs::directory_iterator it(folder, ec), end; !ec && it != end;
       it.increment(ec)) {
    StringRef name = llvm::sys::path::filename(it->path());
    size_t marker = name.rfind(".tmp.");
    if (marker == StringRef::npos ||
        (!stem.empty() && name.take_front(marker) != stem))
      continue;
    unsigned long long pid = 0;
    if (name.drop_front(marker + 5).getAsInteger(10, pid) || pid == 0 ||
        pid == unsigned(getpid()))
      continue;
    // A process of that number is alive (its writer, or another that took
    // the number): its files are left alone.
    if (kill(pid_t(pid), 0) == 0 || errno != ESRCH)
      continue;
    SmallString<256> lock(folder);
    llvm::sys::path::append(lock, name.take_front(marker) + ".lock");
    if (!lockIsFree(llvm::sys::fs::exists(lock) ? std::string(lock)
                                                : it->path()))
      continue;
    doomed.push_back(it->path());
  }
  for (const std::string &path : doomed)
    if (llvm::sys::fs::is_directory(path))
      llvm::sys::fs::remove_directories(path);
    else
      llvm::sys::fs::remove(path);
}

mlir::mantissa::TemporaryFolderLock::TemporaryFolderLock(StringRef path) {
  descriptor = open(path.str().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (descriptor >= 0 && flock(descriptor, LOCK_EX | LOCK_NB) != 0) {
    close(descriptor);
    descriptor = -1;
  }
}

mlir::mantissa::TemporaryFolderLock::~TemporaryFolderLock() {
  if (descriptor >= 0)
    close(descriptor);
}

/// The text of `<path>.sum`: size and FNV-1a 64 of the file, or empty when
/// it cannot be read.
static std::string cacheFileSum(llvm::StringRef path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> file =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                  /*RequiresNullTerminator=*/false);
  if (!file)
    return "";
  llvm::StringRef bytes = (*file)->getBuffer();
  return llvm::formatv(
      "{0} {1:x16}\n", bytes.size(),
      rt::fnv1a64(reinterpret_cast<const uint8_t *>(bytes.data()),
                  bytes.size()));
}

void mlir::mantissa::sealCacheFile(llvm::StringRef path) {
  std::string sum = cacheFileSum(path);
  if (sum.empty())
    return;
  // Failing to seal (a full disk) only costs the next run a compilation.
  std::string error;
  rt::writeFileAtomically((path + ".sum").str(), sum, error);
}

bool mlir::mantissa::isIntactCacheFile(llvm::StringRef path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> recorded =
      llvm::MemoryBuffer::getFile((path + ".sum").str());
  if (!recorded)
    return false;
  std::string sum = cacheFileSum(path);
  return !sum.empty() && (*recorded)->getBuffer() == sum;
}

mlir::mantissa::CompileCacheLock::CompileCacheLock(llvm::StringRef entry) {
  std::string path = (entry + ".lock").str();
  descriptor = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (descriptor >= 0 && flock(descriptor, LOCK_EX) != 0) {
    close(descriptor);
    descriptor = -1;
  }
}

mlir::mantissa::CompileCacheLock::~CompileCacheLock() {
  if (descriptor >= 0) {
    flock(descriptor, LOCK_UN);
    close(descriptor);
  }
}

std::string mlir::mantissa::hashPlannedStep(train::StepOp step,
                                            StringRef target) {
  std::string text;
  llvm::raw_string_ostream os(text);
  OpPrintingFlags flags;
  flags.printGenericOpForm();
  step->print(os, flags);
  llvm::SHA256 hasher;
  hasher.update(text);
  hasher.update(describeCompilerBuild());
  hasher.update(target);
  hasher.update(LLVM_VERSION_STRING);
  return llvm::toHex(hasher.final(), /*LowerCase=*/true).substr(0, 32);
}

const CpuBf16Products &mlir::mantissa::getCpuBf16Products() {
  static const CpuBf16Products products = [] {
    CpuBf16Products products;
    if (getCpuGemmMode() == CpuGemmMode::Loops)
      return products;
    products.cpu = getCpuTarget();
    // oneDNN's answer for a plain 64x64x64 product: whether it has a bf16
    // matmul depends on the ISA, not on the shape.
    std::array<int64_t, kGemmFieldCount> d =
        rt::denseGemmDescriptor(kGemmBF16, 1, 64, 64, 64);
    products.libraryBf16 =
        rt::cpuGemmAvailable() &&
        rt::cpuGemmPath(d.data()) == rt::CpuGemmPath::Library;
    products.widen = widensBf16Products(products.cpu, products.libraryBf16);
    // The reason given is the CPU named by MANTISSA_CPU_TARGET where it has
    // no bf16 matmul (the user's choice decides, whatever this machine
    // has), else the running oneDNN's answer on this machine.
    bool targetDecides =
        products.cpu != "native" && !cpuHasBf16Matmul(products.cpu);
    if (products.widen)
      products.warning = rt::describeWidenedProducts(
          targetDecides || products.libraryBf16 ? getCpuTargetName() : "");
    return products;
  }();
  return products;
}

std::string mlir::mantissa::getWidenedBf16ProductsWarning(train::StepOp step) {
  const CpuBf16Products &bf16 = getCpuBf16Products();
  if (!bf16.widen || llvm::none_of(collectMatrixProducts(step),
                                   [](const precision::MatrixProduct &product) {
                                     return product.operandType == "bf16";
                                   }))
    return "";
  return bf16.warning;
}

std::string mlir::mantissa::CpuBf16Products::key() const {
  return widen ? " bf16-products=widened" : " bf16-products=bf16";
}

/// The step's function in its library. Not the model's bare name: the
/// library calls libm (sin, cos) and links with -Bsymbolic, so a model
/// exported as `sin` or `exp` would call itself where it means libm's.
static std::string getStepLibrarySymbol(train::StepOp step) {
  return ("mantissa_step_" + step.getSymName()).str();
}

std::string mlir::mantissa::getStepLibraryEntry(train::StepOp step) {
  return getStepLibrarySymbol(step) + "_packed";
}

/// Lowers a copy of `step` and compiles it into a shared library at
/// `libraryPath` (written under a temporary name and renamed, so that
/// concurrent ranks and interrupted runs never see half a library).
llvm::Error mlir::mantissa::compileStepLibrary(train::StepOp step,
                                               StringRef libraryPath,
                                               std::string *fellBackTo) {
  MLIRContext *context = step.getContext();
  DialectRegistry registry;
  registerTrainToLLVMDialects(registry);
  context->appendDialectRegistry(registry);

  // Lower a copy: the caller keeps the step's metadata (roles, plans).
  OwningOpRef<ModuleOp> module = ModuleOp::create(step.getLoc());
  Operation *copy = step->clone();
  module->push_back(copy);
  std::string symbol = getStepLibrarySymbol(step);
  SymbolTable::setSymbolName(copy, symbol);
  DiagnosticCollector diagnostics(context);
  const CpuBf16Products &bf16 = getCpuBf16Products();
  if (failed(lowerTrainStepsToLLVM(*module, getCpuGemmMode(), bf16.cpu,
                                   bf16.libraryBf16)))
    return llvm::createStringError(
        "compiling the step failed: " + diagnostics.str() +
        " (--reference runs the step in the interpreter instead)");
  addPackedEntry(*module, symbol, getStepLibraryEntry(step));
  FailureOr<std::string> llvmIR = translateToLLVMIRText(*module);
  if (failed(llvmIR))
    return llvm::createStringError("translating the step to LLVM IR failed: " +
                                   diagnostics.str());
  auto compileTo = [&](StringRef path) -> llvm::Error {
    SmallString<256> temporary(path);
    temporary +=
        llvm::formatv(".tmp.{0}", llvm::sys::Process::getProcessId()).str();
    std::string error;
    // -O2 vectorises as well as -O3 here, and -O3's unrolling makes blocks
    // that LLVM's instruction scheduler takes minutes over (llama: 68 s at
    // -O3, 6 s at -O2, for the same step time).
    // -fopenmp links LLVM's OpenMP runtime, which runs the ops' parallel
    // outer loops.
    if (failed(compileLLVMIRToSharedLibrary(*llvmIR, temporary, error,
                                            /*optLevel=*/2, {"-fopenmp"}))) {
      llvm::sys::fs::remove(temporary);
      return llvm::createStringError("compiling the step failed: " + error);
    }
    if (std::error_code ec = llvm::sys::fs::rename(temporary, path)) {
      llvm::sys::fs::remove(temporary);
      return llvm::createStringError("cannot move the compiled step to " +
                                     path + ": " + ec.message());
    }
    return llvm::Error::success();
  };
  llvm::Error error = compileTo(libraryPath);
  if (!error || !fellBackTo)
    return error;
  // The cache could not take the library (a full disk): compiled again into
  // a temporary file, as when the cache cannot be written at all. A step
  // that does not compile fails there too, with that error.
  std::string reason = llvm::toString(std::move(error));
  SmallString<256> temporary;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("mantissa-step", "so", temporary))
    return llvm::createStringError(reason);
  if (llvm::Error retry = compileTo(temporary)) {
    llvm::sys::fs::remove(temporary);
    return retry;
  }
  // The line of the compiler's output that says why (a full disk, a quota,
  // a file-size limit), else its first.
  StringRef why = StringRef(reason).split('\n').first;
  SmallVector<StringRef> lines;
  StringRef(reason).split(lines, '\n');
  for (int code : {ENOSPC, EDQUOT, EFBIG})
    for (StringRef line : lines)
      if (line.contains(std::strerror(code)) && why == lines.front())
        why = line.trim();
  warnCacheUnusable(llvm::sys::path::parent_path(libraryPath),
                    why.take_front(300));
  *fellBackTo = std::string(temporary);
  return llvm::Error::success();
}

llvm::Expected<OwningOpRef<ModuleOp>>
mlir::mantissa::deriveStep(train::StepOp step, std::unique_ptr<Pass> pass,
                           StringRef what) {
  OwningOpRef<ModuleOp> module = ModuleOp::create(step.getLoc());
  module->push_back(step->clone());
  PassManager passes(step.getContext());
  passes.addPass(std::move(pass));
  DiagnosticCollector diagnostics(step.getContext());
  if (failed(passes.run(*module)))
    return llvm::createStringError("cannot derive the " + what.str() + " of '" +
                                   step.getSymName().str() +
                                   "': " + diagnostics.str());
  return module;
}

llvm::Expected<OwningOpRef<ModuleOp>>
mlir::mantissa::deriveCpuStep(train::StepOp step) {
  return deriveStep(step, createReadGatheredParametersPass(), "CPU step");
}

llvm::Expected<std::unique_ptr<StepEvaluator>>
mlir::mantissa::createCompiledEvaluator(train::StepOp plannedStep,
                                        CompileCacheReport *report) {
  llvm::Expected<OwningOpRef<ModuleOp>> derived = deriveCpuStep(plannedStep);
  if (!derived)
    return derived.takeError();
  train::StepOp step = *(*derived)->getOps<train::StepOp>().begin();
  // The CPU the code is compiled for (MANTISSA_CPU_TARGET, this machine's
  // by default) is part of the key. So is how its matrix products are
  // computed (MANTISSA_CPU_GEMM), and whether its bf16 products are
  // (oneDNN's answer, which ONEDNN_MAX_CPU_ISA changes).
  const CpuBf16Products &bf16 = getCpuBf16Products();
  std::string hash = hashPlannedStep(
      step, getCpuTarget() + " " + getCpuTargetName() + " gemm=" +
                stringifyCpuGemmMode(getCpuGemmMode()).str() + bf16.key());
  std::string cacheDirectory = getUsableCompileCacheDirectory();
  SmallString<256> libraryPath;
  bool cached = false;
  std::optional<CompileCacheLock> lock;
  if (!cacheDirectory.empty()) {
    libraryPath = cacheDirectory;
    llvm::sys::path::append(libraryPath, "step-" + hash + ".so");
    // Another run compiling this step finishes first; then its entry is
    // used. A truncated or damaged entry is compiled again (dlopen of a
    // short file would fault).
    lock.emplace(libraryPath);
    cached =
        llvm::sys::fs::exists(libraryPath) && isIntactCacheFile(libraryPath);
  } else {
    // No usable cache: compile into a temporary file, removed once loaded.
    if (std::error_code ec = llvm::sys::fs::createTemporaryFile(
            "mantissa-step", "so", libraryPath))
      return llvm::createStringError("cannot create a temporary file: " +
                                     ec.message());
  }
  auto started = std::chrono::steady_clock::now();
  if (!cached) {
    std::string fellBackTo;
    if (llvm::Error error = compileStepLibrary(
            step, libraryPath, cacheDirectory.empty() ? nullptr : &fellBackTo))
      return std::move(error);
    if (!fellBackTo.empty()) {
      // The cache could not take it: a temporary library, as without one.
      cacheDirectory.clear();
      libraryPath = fellBackTo;
    }
    if (!cacheDirectory.empty())
      sealCacheFile(libraryPath);
  }
  // Never unmapped: the OpenMP runtime it pulls in keeps worker threads
  // that must not outlive their code.
  constexpr int kFlags = RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE;
  void *library = dlopen(libraryPath.c_str(), kFlags);
  if (!library && cached) {
    // A damaged cache entry is compiled again rather than trusted.
    cached = false;
    if (llvm::Error error = compileStepLibrary(step, libraryPath))
      return std::move(error);
    sealCacheFile(libraryPath);
    library = dlopen(libraryPath.c_str(), kFlags);
  }
  if (cacheDirectory.empty())
    llvm::sys::fs::remove(libraryPath);
  if (!library)
    return llvm::createStringError("cannot load the compiled step " +
                                   libraryPath + ": " + dlerror());
  // Its matrix products call the runtime's (CpuGemm.h).
  rt::bindCpuGemm(library);
  std::string entryName = getStepLibraryEntry(step);
  auto entry = reinterpret_cast<CompiledEvaluator::Entry>(
      dlsym(library, entryName.c_str()));
  if (!entry) {
    dlclose(library);
    return llvm::createStringError("the compiled step " + libraryPath +
                                   " has no " + entryName);
  }
  if (report) {
    report->hash = hash;
    report->libraryPath = cacheDirectory.empty() ? "" : libraryPath.str().str();
    report->cached = cached;
    report->seconds = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - started)
                          .count();
  }
  SmallVector<RankedTensorType> resultTypes;
  for (Type type : step.getResultTypes())
    resultTypes.push_back(cast<RankedTensorType>(type));
  return std::make_unique<CompiledEvaluator>(
      library, entry, SmallVector<Type>(step.getArgumentTypes()),
      std::move(resultTypes));
}
