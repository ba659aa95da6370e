//===- ArtifactWriter.cpp - Writing a compiled artifact -------------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Driver/ArtifactWriter.h"
#include "mantissa/Conversion/AdamWKernels.h"
#include "mantissa/Dialect/Train/IR/StoredDTypes.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Driver/CpuStepWriter.h"
#include "mantissa/Driver/GpuStepWriter.h"
#include "mantissa/Driver/StepEvaluator.h"
#include "mantissa/Format/ArtifactManifest.h"
#include "mantissa/Runtime/HostCpu.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/X86TargetParser.h"

#include <map>

using namespace mlir;
using namespace mlir::mantissa;
using train::DType;

static llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

static std::string name(DType dtype) {
  return std::string(rt::projectDTypeName(train::getStoredDType(dtype)));
}

llvm::Expected<ArtifactSpec>
mlir::mantissa::collectArtifactSpec(ModuleOp plannedModule,
                                    const pt2::Program &program) {
  auto steps = plannedModule.getOps<train::StepOp>();
  if (steps.empty())
    return makeError("the module has no train.step");
  train::StepOp step = *steps.begin();
  ArtifactSpec spec;
  spec.stepName = step.getSymName().str();
  {
    llvm::raw_string_ostream os(spec.programText);
    plannedModule->print(os);
  }
  bool planned = false;
  for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index) {
    train::TensorInfoAttr info = step.getTensorInfo(index);
    if (!info || (info.getKind() != train::TensorKind::parameter &&
                  info.getKind() != train::TensorKind::buffer &&
                  info.getKind() != train::TensorKind::constant))
      continue;
    ArtifactTensorSpec tensor;
    tensor.fqn = info.getFqn().str();
    tensor.isParameter = info.getKind() == train::TensorKind::parameter;
    tensor.shape = std::vector<int64_t>(info.getShape().asArrayRef());
    std::optional<DType> exported = train::getDTypeOf(info.getDtype());
    bool constant = info.getKind() == train::TensorKind::constant;
    if (constant || (!exported && !tensor.isParameter)) {
      // A non-float buffer (a mask, an index) or a constant: stored as it
      // is, no plan.
      std::optional<rt::DType> stored = train::getStoredDType(info.getDtype());
      const pt2::StoredTensor *data = program.findWeight(tensor.fqn);
      if (!data)
        data = program.findConstant(tensor.fqn);
      if (!stored || !data || data->isFake)
        return makeError("no initial value for buffer '" + tensor.fqn +
                         "' in the archive");
      tensor.initial = {tensor.fqn, *stored, tensor.shape,
                        data->contiguousBytes};
      spec.opaqueBuffers.push_back(std::move(tensor.initial));
      continue;
    }
    if (!exported)
      return makeError("tensor '" + tensor.fqn +
                       "' has an exported dtype the optimizer cannot hold");
    tensor.exported = *exported;
    if (train::PrecisionPlanAttr plan = step.getPlan(index)) {
      planned = true;
      tensor.master = plan.getMaster();
      tensor.masterSplit = plan.getMasterSplit();
      tensor.gather = plan.getGather();
      tensor.reduce = plan.getReduce().value_or(plan.getGather());
      tensor.moments = plan.getMoments().value_or(DType::fp32);
    } else {
      tensor.master = tensor.gather = tensor.reduce = *exported;
      tensor.moments = DType::fp32;
    }
    const pt2::StoredTensor *stored = program.findWeight(tensor.fqn);
    if (!stored)
      stored = program.findConstant(tensor.fqn);
    if (!stored || stored->isFake)
      return makeError("no initial value for '" + tensor.fqn +
                       "' in the archive");
    tensor.initial.name = tensor.fqn;
    tensor.initial.dtype = train::getStoredDType(*exported);
    tensor.initial.shape = tensor.shape;
    tensor.initial.bytes = stored->contiguousBytes;
    spec.tensors.push_back(std::move(tensor));
  }

  if (planned) {
    step.walk([&](train::ShardGroupOp group) {
      ArtifactGroupSpec out;
      out.name = group.getGroupName().str();
      out.unit = group.getUnit().str();
      out.gather = group.getGather();
      if (train::ShardGroupOp parent = group.getParentGroup())
        out.nestedIn = parent.getGroupName().str();
      out.reshardAfterForward = group.getReshardAfterForward();
      for (Attribute member : group.getMembers())
        out.members.push_back(cast<StringAttr>(member).str());
      spec.groups.push_back(std::move(out));
    });
  } else {
    std::map<DType, size_t> byDType;
    for (const ArtifactTensorSpec &tensor : spec.tensors) {
      if (!tensor.isParameter)
        continue;
      auto [it, inserted] =
          byDType.try_emplace(tensor.gather, spec.groups.size());
      if (inserted) {
        ArtifactGroupSpec group;
        group.name =
            byDType.size() == 1 ? "root" : "root/" + name(tensor.gather);
        group.gather = tensor.gather;
        spec.groups.push_back(group);
      }
      spec.groups[it->second].members.push_back(tensor.fqn);
    }
  }
  return spec;
}

namespace {
struct FileRecord {
  std::string name;
  uint64_t bytes, checksum;
};
} // namespace

static llvm::Error writeFile(llvm::StringRef path, llvm::StringRef contents) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return makeError(path + ": " + ec.message());
  os << contents;
  os.close();
  if (os.has_error()) {
    // Cleared, or the stream's destructor would end the process.
    std::string reason = os.error().message();
    os.clear_error();
    return makeError(path + ": write failed: " + reason);
  }
  return llvm::Error::success();
}

static llvm::Expected<FileRecord> recordFile(llvm::StringRef dir,
                                             llvm::StringRef fileName) {
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, fileName);
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return makeError(path + ": " + buffer.getError().message());
  const auto *data =
      reinterpret_cast<const uint8_t *>((*buffer)->getBufferStart());
  return FileRecord{fileName.str(), (*buffer)->getBufferSize(),
                    rt::fnv1a64(data, (*buffer)->getBufferSize())};
}

std::vector<std::string> mlir::mantissa::getTargetCpuFeatureFlags() {
  std::string target = getCpuTarget();
  llvm::StringMap<bool> features;
  if (target == "native") {
    features = llvm::sys::getHostCPUFeatures();
  } else {
    SmallVector<StringRef> enabled;
    llvm::X86::getFeaturesForCPU(target, enabled);
    for (StringRef feature : enabled)
      features[feature] = true;
  }
  std::vector<std::string> flags;
  for (const std::string &flag : rt::checkedCpuFeatures()) {
    // LLVM's names: the cpuinfo name without '_' (avx512_bf16 ->
    // avx512bf16), '_' as '-' for AMX, '.' for SSE 4.x, bmi1 as bmi.
    std::string name = flag == "bmi1" ? "bmi" : flag;
    if (name.rfind("amx_", 0) == 0)
      name[3] = '-';
    else if (name.rfind("sse4_", 0) == 0)
      name[4] = '.';
    else
      llvm::erase(name, '_');
    auto found = features.find(name);
    if (found != features.end() && found->second)
      flags.push_back(flag);
  }
  return flags;
}

llvm::Error mlir::mantissa::checkArtifactTarget(llvm::StringRef directory) {
  llvm::sys::fs::file_status status;
  if (llvm::sys::fs::status(directory, status) ||
      status.type() == llvm::sys::fs::file_type::file_not_found)
    return llvm::Error::success();
  if (status.type() != llvm::sys::fs::file_type::directory_file)
    return llvm::createStringError(
        directory + ": exists and is not a directory; the artifact would "
                    "replace it (remove it or choose another -o)");
  std::error_code ec;
  llvm::sys::fs::directory_iterator entry(directory, ec), end;
  if (ec)
    return llvm::createStringError(directory + ": " + ec.message());
  if (entry == end)
    return llvm::Error::success();
  llvm::SmallString<256> manifest(directory);
  llvm::sys::path::append(manifest, "manifest.json");
  if (auto text = llvm::MemoryBuffer::getFile(manifest))
    if (rt::isArtifactManifestText((*text)->getBuffer().str()))
      return llvm::Error::success();
  return llvm::createStringError(
      directory + ": the folder is not empty and holds no Mantissa artifact "
                  "(no manifest.json of format \"mantissa-artifact\"); "
                  "refusing to replace its contents (empty it or choose "
                  "another -o)");
}

llvm::Error mlir::mantissa::writeArtifactSpec(const ArtifactSpec &spec,
                                              llvm::StringRef directory,
                                              const ArtifactOptions &options) {
  if (llvm::Error error = checkArtifactTarget(directory))
    return error;
  // An unknown MANTISSA_CPU_TARGET is reported (and exits) here, before any
  // file is written.
  (void)getCpuTarget();
  std::map<std::string, const ArtifactTensorSpec *> byFqn;
  for (const ArtifactTensorSpec &tensor : spec.tensors)
    byFqn[tensor.fqn] = &tensor;

  // Layouts and kernels.
  DialectRegistry registry;
  registerAdamWKernelDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diagnostic) {
    diagnostics += (diagnostics.empty() ? "" : "; ") + diagnostic.str();
    return success();
  });
  OwningOpRef<ModuleOp> cpuModule = ModuleOp::create(UnknownLoc::get(&context));
  std::vector<AdamWGroup> layouts;
  std::vector<std::string> ptxTexts;
  std::string ptxNote;
  rt::ArtifactManifest manifest;
  manifest.step = spec.stepName;
  manifest.tileSize = options.tileSize;
  std::map<std::string, std::string> groupOf;
  for (auto [index, groupSpec] : llvm::enumerate(spec.groups)) {
    AdamWGroup group;
    group.amsgrad = options.amsgrad;
    group.maximize = options.maximize;
    for (const std::string &fqn : groupSpec.members) {
      auto it = byFqn.find(fqn);
      if (it == byFqn.end() || !it->second->isParameter)
        return makeError("group '" + groupSpec.name + "': member '" + fqn +
                         "' is not a parameter of the step");
      if (!groupOf.emplace(fqn, groupSpec.name).second)
        return makeError("parameter '" + fqn + "' is in groups '" +
                         groupOf[fqn] + "' and '" + groupSpec.name + "'");
      const ArtifactTensorSpec &tensor = *it->second;
      AdamWMasterKind master;
      if (tensor.masterSplit)
        master = AdamWMasterKind::Remainder;
      else if (tensor.master == tensor.gather)
        master = AdamWMasterKind::None;
      else if (tensor.master == DType::fp32)
        master = AdamWMasterKind::FP32;
      else
        return makeError("parameter '" + fqn + "': a " + name(tensor.master) +
                         " master with a " + name(tensor.gather) +
                         " gather dtype has no optimizer kernel");
      int64_t count = 1;
      for (int64_t dim : tensor.shape)
        count *= dim;
      appendAdamWMember(group, fqn, count, tensor.reduce, tensor.gather, master,
                        tensor.moments);
    }
    std::string symbol = llvm::formatv("mantissa_adamw_{0}", index);
    OwningOpRef<ModuleOp> kernel =
        buildAdamWKernelModule(&context, group, symbol);
    for (Operation &op : llvm::make_early_inc_range(*kernel->getBody()))
      op.moveBefore(cpuModule->getBody(), cpuModule->getBody()->end());
    if (options.emitPtx && ptxNote.empty()) {
      OwningOpRef<ModuleOp> gpu =
          buildAdamWKernelModule(&context, group, symbol);
      FailureOr<std::string> ptx = compileAdamWToPTX(*gpu, options.tileSize);
      if (failed(ptx))
        ptxNote = "PTX generation failed: " + diagnostics;
      else
        ptxTexts.push_back(*ptx);
    }

    rt::ManifestGroup entry;
    entry.name = groupSpec.name;
    entry.unit = groupSpec.unit;
    entry.gather = train::getStoredDType(groupSpec.gather);
    entry.nestedIn = groupSpec.nestedIn;
    entry.reshardAfterForward = groupSpec.reshardAfterForward;
    entry.amsgrad = options.amsgrad;
    entry.maximize = options.maximize;
    entry.kernelSymbol = symbol;
    entry.gpuKernelSymbol = symbol + "_kernel";
    int64_t element = 0;
    for (const AdamWMember &member : group.members) {
      rt::ArtifactMember &out = entry.members.emplace_back();
      out.fqn = member.name;
      out.shape = byFqn[member.name]->shape;
      out.count = member.count;
      out.firstElement = element;
      out.firstTile = entry.numTiles;
      out.numTiles = (member.count + options.tileSize - 1) / options.tileSize;
      out.grad = train::getStoredDType(member.grad);
      out.param = train::getStoredDType(member.param);
      out.moments = train::getStoredDType(member.moments);
      out.master = member.master == AdamWMasterKind::None ? rt::MasterKind::None
                   : member.master == AdamWMasterKind::FP32
                       ? rt::MasterKind::FP32
                       : rt::MasterKind::Remainder;
      out.gradOffset = member.gradOffset;
      out.paramOffset = member.paramOffset;
      out.masterOffset = member.masterOffset;
      out.momentsOffset = member.momentsOffset;
      entry.numTiles += out.numTiles;
      element += out.count;
    }
    for (unsigned role = 0; role < kNumAdamWBuffers; ++role)
      entry.bufferBytes[role] = group.getBufferBytes(AdamWBuffer(role));
    manifest.groups.push_back(std::move(entry));
    layouts.push_back(std::move(group));
  }
  for (const ArtifactTensorSpec &tensor : spec.tensors)
    if (tensor.isParameter && !groupOf.count(tensor.fqn))
      return makeError("parameter '" + tensor.fqn + "' is in no shard group");

  if (failed(lowerAdamWToLLVMDialect(*cpuModule, options.tileSize)))
    return makeError("lowering the AdamW kernels failed: " + diagnostics);
  FailureOr<std::string> llvmIR = translateToLLVMIRText(*cpuModule);
  if (failed(llvmIR))
    return makeError("translating the AdamW kernels to LLVM IR failed: " +
                     diagnostics);

  // Write into a temporary sibling directory, then rename it into place.
  llvm::SmallString<256> target(directory);
  llvm::sys::fs::make_absolute(target);
  llvm::SmallString<256> temporary(target);
  temporary += std::string(
      llvm::formatv(".tmp.{0}", llvm::sys::Process::getProcessId()));
  // What a killed writer of this artifact left (DIR.tmp.PID, its process
  // gone and its folder unlocked) goes first.
  removeAbandonedTemporaries(llvm::sys::path::parent_path(target),
                             llvm::sys::path::filename(target));
  llvm::sys::fs::remove_directories(temporary);
  if (std::error_code ec = llvm::sys::fs::create_directories(temporary))
    return makeError(temporary + ": " + ec.message());
  TemporaryFolderLock writing(temporary);
  auto cleanup = [&](llvm::Error error) {
    llvm::sys::fs::remove_directories(temporary);
    return error;
  };
  auto pathOf = [&](llvm::StringRef file) {
    llvm::SmallString<256> path(temporary);
    llvm::sys::path::append(path, file);
    return std::string(path);
  };

  std::string compileError;
  if (failed(compileLLVMIRToSharedLibrary(*llvmIR, pathOf("kernels.so"),
                                          compileError)))
    return cleanup(
        makeError("compiling the CPU kernels failed: " + compileError));
  std::vector<std::string> fileNames = {"kernels.so", "weights.safetensors",
                                        "step.mlir"};
  if (ptxNote.empty() && options.emitPtx) {
    for (auto [index, ptx] : llvm::enumerate(ptxTexts)) {
      std::string file = llvm::formatv("kernels.{0}.ptx", index);
      if (llvm::Error error = writeFile(pathOf(file), ptx))
        return cleanup(std::move(error));
      fileNames.push_back(file);
    }
  }
  if (llvm::Error error = writeFile(pathOf("step.mlir"), spec.programText))
    return cleanup(std::move(error));
  std::optional<GpuStepFiles> gpuStep;
  std::string gpuStepNote;
  if (options.gpuStep) {
    llvm::Expected<GpuStepFiles> written = writeGpuStep(
        options.gpuStep, temporary, layouts,
        {options.tileSize, options.gpuForward, options.gpuHostKernels});
    if (!written && !options.gpuStepOptional)
      return cleanup(written.takeError());
    if (written) {
      llvm::append_range(fileNames, written->files);
      gpuStep = std::move(*written);
      if (options.gpuStepFiles)
        *options.gpuStepFiles = *gpuStep;
    } else {
      gpuStepNote = llvm::toString(written.takeError());
    }
  }

  if (options.cpuStep) {
    llvm::Expected<std::vector<std::string>> written =
        writeCpuStep(options.cpuStep, temporary, options.cpuForward);
    if (!written)
      return cleanup(written.takeError());
    llvm::append_range(fileNames, *written);
  }

  std::vector<const rt::HostTensor *> initial;
  for (const ArtifactTensorSpec &tensor : spec.tensors)
    initial.push_back(&tensor.initial);
  for (const rt::HostTensor &buffer : spec.opaqueBuffers)
    initial.push_back(&buffer);
  std::string writeError;
  if (!rt::writeSafeTensors(pathOf("weights.safetensors"), initial,
                            {{"format", "pt"}}, writeError))
    return cleanup(makeError(writeError));

  std::sort(fileNames.begin(), fileNames.end());
  for (const std::string &file : fileNames) {
    llvm::Expected<FileRecord> record = recordFile(temporary, file);
    if (!record)
      return cleanup(record.takeError());
    manifest.files.push_back({file, int64_t(record->bytes),
                              rt::manifestChecksumText(record->checksum)});
  }
  for (const ArtifactTensorSpec &tensor : spec.tensors) {
    rt::ArtifactTensor &entry = manifest.tensors.emplace_back();
    entry.fqn = tensor.fqn;
    entry.isParameter = tensor.isParameter;
    entry.shape = tensor.shape;
    entry.exported = train::getStoredDType(tensor.exported);
    entry.masterSplit = tensor.masterSplit;
    entry.master = train::getStoredDType(tensor.master);
    entry.gather = train::getStoredDType(tensor.gather);
    if (tensor.isParameter) {
      entry.reduce = train::getStoredDType(tensor.reduce);
      entry.moments = train::getStoredDType(tensor.moments);
      entry.group = groupOf[tensor.fqn];
    } else {
      manifest.buffers.push_back(tensor.fqn);
    }
  }
  for (const rt::HostTensor &buffer : spec.opaqueBuffers)
    manifest.buffers.push_back(buffer.name);
  rt::ManifestKernels &kernels = manifest.kernels.emplace();
  kernels.cpuLibrary = "kernels.so";
  kernels.tileSize = options.tileSize;
  kernels.targetCpu = getCpuTargetName();
  kernels.targetFeatures = getTargetCpuFeatureFlags();
  if (!ptxNote.empty() || !options.emitPtx)
    kernels.gpuNote = options.emitPtx ? ptxNote : "PTX not requested";
  else
    kernels.gpu = "kernels.<group index>.ptx (sm_90)";
  kernels.gpuStepNote = gpuStepNote;
  if (options.cpuStep)
    kernels.cpuStep = {"step.cpu.json", kernels.targetCpu};
  if (gpuStep)
    kernels.gpuStep = {"step.gpu.json", gpuStep->kernels, gpuStep->gemms,
                       gpuStep->arenaBytes};
  if (llvm::Error error = writeFile(pathOf("manifest.json"),
                                    rt::writeArtifactManifest(manifest)))
    return cleanup(std::move(error));

  // Replace an existing artifact only once the new one is complete.
  llvm::SmallString<256> old(target);
  old += std::string(
      llvm::formatv(".old.{0}", llvm::sys::Process::getProcessId()));
  bool hadOld = llvm::sys::fs::exists(target);
  if (hadOld)
    if (std::error_code ec = llvm::sys::fs::rename(target, old))
      return cleanup(makeError(target + ": cannot replace: " + ec.message()));
  if (std::error_code ec = llvm::sys::fs::rename(temporary, target)) {
    if (hadOld)
      llvm::sys::fs::rename(old, target);
    return cleanup(makeError(target + ": " + ec.message()));
  }
  if (hadOld)
    llvm::sys::fs::remove_directories(old);
  return llvm::Error::success();
}

llvm::Error mlir::mantissa::writeArtifact(ModuleOp plannedModule,
                                          const pt2::Program &program,
                                          llvm::StringRef directory,
                                          const ArtifactOptions &options) {
  llvm::Expected<ArtifactSpec> spec =
      collectArtifactSpec(plannedModule, program);
  if (!spec)
    return spec.takeError();
  return writeArtifactSpec(*spec, directory, options);
}
