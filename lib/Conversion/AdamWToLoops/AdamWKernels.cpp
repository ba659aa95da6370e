//===- AdamWKernels.cpp - Building and compiling AdamW kernels ------------===//
//
// From a shard group's layout to code: the kernel module, the CPU pipeline
// down to LLVM IR and a shared library, and the GPU pipeline down to PTX.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/AdamWKernels.h"
#include "mantissa/Conversion/AdamWToLoops/Passes.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVMPass.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/X86TargetParser.h"

#include <cstdlib>
#include <dlfcn.h>

using namespace mlir;
using namespace mlir::mantissa;
using train::DType;

//===----------------------------------------------------------------------===//
// Group layout
//===----------------------------------------------------------------------===//

static int64_t alignTo16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

/// Bytes one element of `member` takes in `buffer` (0 if it has none there).
static int64_t getElementBytes(const AdamWMember &member, AdamWBuffer buffer) {
  switch (buffer) {
  case AdamWBuffer::Grad:
    return train::getByteWidth(member.grad);
  case AdamWBuffer::Param:
    return train::getByteWidth(member.param);
  case AdamWBuffer::Master:
    return member.master == AdamWMasterKind::None ? 0
                                                  : member.getMasterByteWidth();
  case AdamWBuffer::ExpAvg:
  case AdamWBuffer::ExpAvgSq:
  case AdamWBuffer::MaxExpAvgSq:
    return train::getByteWidth(member.moments);
  }
  llvm_unreachable("unknown buffer");
}

static int64_t getOffset(const AdamWMember &member, AdamWBuffer buffer) {
  switch (buffer) {
  case AdamWBuffer::Grad:
    return member.gradOffset;
  case AdamWBuffer::Param:
    return member.paramOffset;
  case AdamWBuffer::Master:
    return member.masterOffset;
  default:
    return member.momentsOffset;
  }
}

int64_t AdamWGroup::getBufferBytes(AdamWBuffer buffer) const {
  int64_t end = 16;
  for (const AdamWMember &member : members)
    if (int64_t bytes = getElementBytes(member, buffer))
      end = std::max(end, getOffset(member, buffer) + member.count * bytes);
  return alignTo16(end);
}

bool AdamWGroup::hasMaster() const {
  return llvm::any_of(members, [](const AdamWMember &member) {
    return member.master != AdamWMasterKind::None;
  });
}

AdamWMember &mlir::mantissa::appendAdamWMember(AdamWGroup &group,
                                               std::string name, int64_t count,
                                               DType grad, DType param,
                                               AdamWMasterKind master,
                                               DType moments) {
  AdamWMember member;
  member.name = std::move(name);
  member.count = count;
  member.grad = grad;
  member.param = param;
  member.master = master;
  member.moments = moments;
  // The first free, aligned byte of each buffer.
  auto nextOffset = [&](AdamWBuffer buffer) {
    int64_t end = 0;
    for (const AdamWMember &other : group.members)
      if (int64_t bytes = getElementBytes(other, buffer))
        end = std::max(end, getOffset(other, buffer) + other.count * bytes);
    return alignTo16(end);
  };
  member.gradOffset = nextOffset(AdamWBuffer::Grad);
  member.paramOffset = nextOffset(AdamWBuffer::Param);
  member.masterOffset =
      master == AdamWMasterKind::None ? 0 : nextOffset(AdamWBuffer::Master);
  member.momentsOffset = nextOffset(AdamWBuffer::ExpAvg);
  group.members.push_back(std::move(member));
  return group.members.back();
}

int64_t mlir::mantissa::getAdamWNumTiles(const AdamWGroup &group,
                                         int64_t tileSize) {
  int64_t tiles = 0;
  for (const AdamWMember &member : group.members)
    tiles += (member.count + tileSize - 1) / tileSize;
  return tiles;
}

//===----------------------------------------------------------------------===//
// Registration and the kernel module
//===----------------------------------------------------------------------===//

void mlir::mantissa::registerAdamWKernelDialects(DialectRegistry &registry) {
  registry.insert<train::TrainDialect, arith::ArithDialect,
                  cf::ControlFlowDialect, func::FuncDialect, gpu::GPUDialect,
                  LLVM::LLVMDialect, math::MathDialect, memref::MemRefDialect,
                  NVVM::NVVMDialect, scf::SCFDialect, vector::VectorDialect>();
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerGPUDialectTranslation(registry);
  registerNVVMDialectTranslation(registry);
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
}

OwningOpRef<ModuleOp> mlir::mantissa::buildAdamWKernelModule(
    MLIRContext *context, const AdamWGroup &group, StringRef name) {
  context->loadDialect<train::TrainDialect, func::FuncDialect>();
  OpBuilder b(context);
  Location loc = b.getUnknownLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToStart(module->getBody());

  SmallVector<Type> argTypes;
  for (unsigned buffer = 0; buffer < kNumAdamWBuffers; ++buffer)
    argTypes.push_back(MemRefType::get(
        {group.getBufferBytes(AdamWBuffer(buffer))}, b.getI8Type()));
  argTypes.append(5, b.getF64Type());
  argTypes.push_back(b.getI64Type());
  argTypes.push_back(b.getF32Type());
  argTypes.append(2, b.getIndexType());
  auto func =
      b.create<func::FuncOp>(loc, name, b.getFunctionType(argTypes, {}));
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToStart(entry);
  ValueRange args = entry->getArguments();
  auto op = b.create<train::AdamWUpdateOp>(
      loc,
      /*grad=*/args[0], /*param=*/args[1],
      /*master=*/group.hasMaster() ? args[2] : Value(),
      /*exp_avg=*/args[3], /*exp_avg_sq=*/args[4],
      /*max_exp_avg_sq=*/group.amsgrad ? args[5] : Value(),
      /*lr=*/args[6], /*beta1=*/args[7], /*beta2=*/args[8], /*eps=*/args[9],
      /*weight_decay=*/args[10], /*step=*/args[11], /*grad_scale=*/args[12],
      /*part=*/args[13], /*parts=*/args[14],
      train::AdamWUpdateOp::buildMembersAttr(context, group.members),
      group.amsgrad, group.maximize);
  (void)op;
  b.create<func::ReturnOp>(loc);
  return module;
}

//===----------------------------------------------------------------------===//
// CPU: LLVM dialect, LLVM IR, shared library
//===----------------------------------------------------------------------===//

/// Whether getCpuTarget()'s CPU has AVX-512 (LLVM's feature name avx512f).
static bool cpuTargetHasAvx512() {
  std::string target = getCpuTarget();
  if (target == "native") {
    llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
    return features.lookup("avx512f");
  }
  SmallVector<StringRef> features;
  llvm::X86::getFeaturesForCPU(target, features);
  return llvm::is_contained(features, "avx512f");
}

/// Lanes per vector operation of the CPU loop. Without AVX-512, 16: two
/// 256-bit registers per operation, which gives the out-of-order core two
/// independent chains between the divides and packs 16-bit results with one
/// vpackusdw per 16 lanes (AVX2, remainder master: 12% more parameters per
/// second in cache, bench/adamw/README.md). With AVX-512, 8: 16 lanes
/// become a 512-bit register whose divides and square roots run at half the
/// rate (10% fewer). A tile size that is no multiple of 16 keeps 8.
static unsigned getCpuVectorWidth(int64_t tileSize) {
  return tileSize % 16 == 0 && !cpuTargetHasAvx512() ? 16 : 8;
}

LogicalResult mlir::mantissa::lowerAdamWToLLVMDialect(ModuleOp module,
                                                      int64_t tileSize,
                                                      bool gpuElementCode) {
  PassManager pm(module.getContext());
  LowerAdamWPassOptions lowerOptions;
  lowerOptions.target = "cpu";
  lowerOptions.tileSize = tileSize;
  lowerOptions.testGpuElementCode = gpuElementCode;
  // The GPU element code is written for chunks of 8.
  if (!gpuElementCode)
    lowerOptions.vectorWidth = getCpuVectorWidth(tileSize);
  pm.addPass(createLowerAdamWPass(lowerOptions));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  // bf16 conversions become integer code (round to nearest-even), so the
  // library needs no runtime support (TOOLCHAIN.md).
  arith::ArithExpandOpsPassOptions expandOptions;
  expandOptions.includeBf16 = true;
  pm.addPass(arith::createArithExpandOpsPass(expandOptions));
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createConvertVectorToLLVMPass());
  pm.addPass(createConvertSCFToCFPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertIndexToLLVMPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  ConvertFuncToLLVMPassOptions funcOptions;
  funcOptions.useBarePtrCallConv = true;
  pm.addPass(createConvertFuncToLLVMPass(funcOptions));
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  return pm.run(module);
}

FailureOr<std::string> mlir::mantissa::translateToLLVMIRText(ModuleOp module) {
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, llvmContext, "mantissa_adamw");
  if (!llvmModule)
    return failure();
  std::string text;
  llvm::raw_string_ostream os(text);
  llvmModule->print(os, nullptr);
  return text;
}

std::string mlir::mantissa::getCpuTarget() {
  const char *text = std::getenv("MANTISSA_CPU_TARGET");
  if (!text || !*text)
    return "native";
  StringRef name(text);
  if (name == "native" ||
      llvm::X86::parseArchX86(name, /*Only64Bit=*/true) != llvm::X86::CK_None)
    return name.str();
  llvm::errs() << "mantissa: error: MANTISSA_CPU_TARGET is '" << name
               << "'; expected 'native' (the default) or an x86-64 CPU that "
                  "clang's -march takes, such as znver3, x86-64-v3 or "
                  "sapphirerapids\n";
  std::exit(1);
}

std::string mlir::mantissa::getCpuTargetName() {
  std::string target = getCpuTarget();
  return target == "native" ? llvm::sys::getHostCPUName().str() : target;
}

/// clang-19 from PATH, else Debian's LLVM 19 installation.
static std::string findClang() {
  for (StringRef name : {"clang-19", "clang"})
    if (llvm::ErrorOr<std::string> path = llvm::sys::findProgramByName(name))
      return *path;
  return "/usr/lib/llvm-19/bin/clang";
}

LogicalResult mlir::mantissa::compileLLVMIRToSharedLibrary(
    StringRef llvmIR, StringRef libraryPath, std::string &error,
    unsigned optLevel, ArrayRef<StringRef> extraArguments) {
  SmallString<128> irPath, logPath;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("mantissa-adamw", "ll", irPath)) {
    error = "cannot create a temporary file: " + ec.message();
    return failure();
  }
  llvm::sys::fs::createTemporaryFile("mantissa-adamw", "log", logPath);
  auto cleanup = llvm::make_scope_exit([&] {
    llvm::sys::fs::remove(irPath);
    llvm::sys::fs::remove(logPath);
  });
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(irPath, ec);
    if (ec) {
      error = "cannot write " + irPath.str().str() + ": " + ec.message();
      return failure();
    }
    os << llvmIR;
    // A write error (a full disk, a file-size limit) is reported here: left
    // in the stream, it would end the process in its destructor.
    os.close();
    if (os.has_error()) {
      error =
          "cannot write " + irPath.str().str() + ": " + os.error().message();
      os.clear_error();
      return failure();
    }
  }
  std::string clang = findClang();
  std::string optFlag = "-O" + std::to_string(optLevel);
  // compiler-rt's builtins, linked in statically: on a CPU without
  // AVX512-BF16 LLVM lowers f32 -> bf16 rounding to a call of
  // __truncsfbf2, which libgcc does not define. -Bsymbolic binds the
  // library's calls to its own functions: a step is named after the model,
  // and without it a step named `index` (or `exp`, `time`, ...) called from
  // its packed entry resolves to libc's function of that name first, and
  // trains on zeros without an error.
  std::string marchFlag = "-march=" + getCpuTarget();
  SmallVector<StringRef> args = {clang,
                                 optFlag,
                                 marchFlag,
                                 "-fPIC",
                                 "-shared",
                                 "-Wl,-Bsymbolic",
                                 "-x",
                                 "ir",
                                 irPath,
                                 "-o",
                                 libraryPath,
                                 "-lm",
                                 "-Wno-override-module",
                                 "-rtlib=compiler-rt"};
  args.append(extraArguments.begin(), extraArguments.end());
  std::optional<StringRef> redirects[] = {std::nullopt, StringRef(logPath),
                                          StringRef(logPath)};
  std::string message;
  int status = llvm::sys::ExecuteAndWait(clang, args, std::nullopt, redirects,
                                         0, 0, &message);
  if (status != 0) {
    error = clang + " failed";
    if (!message.empty())
      error += ": " + message;
    if (auto log = llvm::MemoryBuffer::getFile(logPath))
      error += "\n" + (*log)->getBuffer().str();
    return failure();
  }
  return success();
}

std::unique_ptr<AdamWCpuKernel> AdamWCpuKernel::compile(const AdamWGroup &group,
                                                        std::string &error,
                                                        int64_t tileSize,
                                                        bool gpuElementCode) {
  DialectRegistry registry;
  registerAdamWKernelDialects(registry);
  MLIRContext context(registry);
  // Diagnostics go to `error` rather than stderr.
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diagnostic) {
    diagnostics += diagnostic.str() + "\n";
    return success();
  });
  static constexpr char kName[] = "mantissa_adamw_update";
  OwningOpRef<ModuleOp> module = buildAdamWKernelModule(&context, group, kName);
  if (failed(module->verify()) ||
      failed(lowerAdamWToLLVMDialect(*module, tileSize, gpuElementCode))) {
    error = "lowering failed: " + diagnostics;
    return nullptr;
  }
  FailureOr<std::string> llvmIR = translateToLLVMIRText(*module);
  if (failed(llvmIR)) {
    error = "translation to LLVM IR failed: " + diagnostics;
    return nullptr;
  }
  std::unique_ptr<AdamWCpuKernel> kernel(new AdamWCpuKernel());
  kernel->llvmIR = std::move(*llvmIR);
  SmallString<128> path;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("mantissa-adamw", "so", path)) {
    error = "cannot create a temporary file: " + ec.message();
    return nullptr;
  }
  kernel->libraryPath = path.str().str();
  if (failed(compileLLVMIRToSharedLibrary(kernel->llvmIR, path, error)))
    return nullptr;
  kernel->library = dlopen(kernel->libraryPath.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!kernel->library) {
    error = std::string("dlopen failed: ") + dlerror();
    return nullptr;
  }
  kernel->function = reinterpret_cast<Function>(dlsym(kernel->library, kName));
  if (!kernel->function) {
    error = std::string("the library has no ") + kName;
    return nullptr;
  }
  return kernel;
}

AdamWCpuKernel::~AdamWCpuKernel() {
  if (library)
    dlclose(library);
  if (!libraryPath.empty())
    llvm::sys::fs::remove(libraryPath);
}

//===----------------------------------------------------------------------===//
// GPU: PTX for sm_90
//===----------------------------------------------------------------------===//

LogicalResult mlir::mantissa::lowerAdamWForGpu(ModuleOp module,
                                               int64_t tileSize,
                                               unsigned blockSize) {
  PassManager pm(module.getContext());
  LowerAdamWPassOptions lowerOptions;
  lowerOptions.target = "gpu";
  lowerOptions.tileSize = tileSize;
  lowerOptions.gpuBlockSize = blockSize;
  pm.addPass(createLowerAdamWPass(lowerOptions));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  return pm.run(module);
}

FailureOr<std::string> mlir::mantissa::compileAdamWToPTX(ModuleOp module,
                                                         int64_t tileSize,
                                                         unsigned blockSize) {
  if (failed(lowerAdamWForGpu(module, tileSize, blockSize)))
    return failure();
  PassManager pm(module.getContext());
  pm.addPass(createConvertSCFToCFPass());
  GpuNVVMAttachTargetOptions targetOptions;
  targetOptions.chip = "sm_90";
  // LLVM 19 silently raises the default PTX version to 7.8 (TOOLCHAIN.md).
  targetOptions.features = "+ptx80";
  targetOptions.optLevel = 3;
  pm.addPass(createGpuNVVMAttachTarget(targetOptions));
  OpPassManager &kernels = pm.nest<gpu::GPUModuleOp>();
  // IEEE sqrt and FMA as LLVM intrinsics (sqrt.rn.f32, fma.rn.f32) rather
  // than libdevice calls whose precision depends on reflection flags.
  kernels.addPass(createConvertMathToLLVMPass());
  kernels.addPass(createConvertVectorToLLVMPass());
  ConvertGpuOpsToNVVMOpsOptions nvvmOptions;
  nvvmOptions.useBarePtrCallConv = true;
  kernels.addPass(createConvertGpuOpsToNVVMOps(nvvmOptions));
  kernels.addPass(createCanonicalizerPass());
  kernels.addPass(createCSEPass());
  kernels.addPass(createReconcileUnrealizedCastsPass());
  GpuModuleToBinaryPassOptions binaryOptions;
  binaryOptions.compilationTarget = "isa";
  pm.addPass(createGpuModuleToBinaryPass(binaryOptions));
  if (failed(pm.run(module)))
    return failure();

  std::string ptx;
  module.walk([&](gpu::BinaryOp binary) {
    for (Attribute object : binary.getObjects())
      if (auto objectAttr = dyn_cast<gpu::ObjectAttr>(object))
        ptx += objectAttr.getObject().getValue().str();
  });
  if (ptx.empty()) {
    module.emitError() << "the GPU pipeline produced no PTX";
    return failure();
  }
  // The object carries a C string; ptxas rejects the NUL.
  while (!ptx.empty() && ptx.back() == '\0')
    ptx.pop_back();
  return ptx;
}
