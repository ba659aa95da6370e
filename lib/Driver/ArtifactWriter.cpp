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
#include "mantissa/Runtime/Artifact.h"
#include "mantissa/Runtime/HostCpu.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Host.h"

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
  if (os.has_error())
    return makeError(path + ": write failed");
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

std::vector<std::string> mlir::mantissa::getHostCpuFeatureFlags() {
  llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
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
  if (auto text = llvm::MemoryBuffer::getFile(manifest)) {
    llvm::Expected<llvm::json::Value> parsed =
        llvm::json::parse((*text)->getBuffer());
    if (parsed) {
      const llvm::json::Object *object = parsed->getAsObject();
      if (object && object->getString("format") == "mantissa-artifact")
        return llvm::Error::success();
    } else {
      llvm::consumeError(parsed.takeError());
    }
  }
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
  llvm::json::Array groupsJson;
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

    llvm::json::Array members;
    int64_t tile = 0, element = 0;
    for (const AdamWMember &member : group.members) {
      const ArtifactTensorSpec &tensor = *byFqn[member.name];
      int64_t tiles = (member.count + options.tileSize - 1) / options.tileSize;
      members.push_back(llvm::json::Object{
          {"fqn", member.name},
          {"shape", llvm::json::Array(tensor.shape)},
          {"count", member.count},
          {"first_element", element},
          {"first_tile", tile},
          {"num_tiles", tiles},
          {"grad", name(member.grad)},
          {"param", name(member.param)},
          {"master", member.master == AdamWMasterKind::None   ? "none"
                     : member.master == AdamWMasterKind::FP32 ? "fp32"
                                                              : "remainder"},
          {"moments", name(member.moments)},
          {"offsets", llvm::json::Object{{"grad", member.gradOffset},
                                         {"param", member.paramOffset},
                                         {"master", member.masterOffset},
                                         {"moments", member.momentsOffset}}}});
      tile += tiles;
      element += member.count;
    }
    llvm::json::Object bufferBytes;
    for (unsigned role = 0; role < kNumAdamWBuffers; ++role)
      bufferBytes[rt::roleName(rt::Role(role))] =
          group.getBufferBytes(AdamWBuffer(role));
    groupsJson.push_back(llvm::json::Object{
        {"name", groupSpec.name},
        {"unit", groupSpec.unit},
        {"gather", name(groupSpec.gather)},
        {"nested_in", groupSpec.nestedIn.empty()
                          ? llvm::json::Value(nullptr)
                          : llvm::json::Value(groupSpec.nestedIn)},
        {"reshard_after_forward", groupSpec.reshardAfterForward},
        {"amsgrad", options.amsgrad},
        {"maximize", options.maximize},
        {"kernel", symbol},
        {"gpu_kernel", symbol + "_kernel"},
        {"num_tiles", tile},
        {"buffer_bytes", std::move(bufferBytes)},
        {"members", std::move(members)}});
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
  llvm::sys::fs::remove_directories(temporary);
  if (std::error_code ec = llvm::sys::fs::create_directories(temporary))
    return makeError(temporary + ": " + ec.message());
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

  llvm::json::Object files;
  for (const std::string &file : fileNames) {
    llvm::Expected<FileRecord> record = recordFile(temporary, file);
    if (!record)
      return cleanup(record.takeError());
    files[file] = llvm::json::Object{
        {"bytes", int64_t(record->bytes)},
        {"fnv1a64", rt::manifestChecksumText(record->checksum)}};
  }
  llvm::json::Array tensorsJson, buffersJson;
  for (const ArtifactTensorSpec &tensor : spec.tensors) {
    llvm::json::Object entry{
        {"fqn", tensor.fqn},
        {"kind", tensor.isParameter ? "parameter" : "buffer"},
        {"shape", llvm::json::Array(tensor.shape)},
        {"exported", name(tensor.exported)},
        {"master", tensor.masterSplit ? "fp32_split" : name(tensor.master)},
        {"gather", name(tensor.gather)}};
    if (tensor.isParameter) {
      entry["reduce"] = name(tensor.reduce);
      entry["moments"] = name(tensor.moments);
      entry["group"] = groupOf[tensor.fqn];
    } else {
      buffersJson.push_back(tensor.fqn);
    }
    tensorsJson.push_back(std::move(entry));
  }
  for (const rt::HostTensor &buffer : spec.opaqueBuffers)
    buffersJson.push_back(buffer.name);
  llvm::json::Object kernels{
      {"cpu", "kernels.so"},
      {"tile_size", options.tileSize},
      {"target_cpu", llvm::sys::getHostCPUName()},
      {"target_features", llvm::json::Array(getHostCpuFeatureFlags())}};
  if (!ptxNote.empty() || !options.emitPtx)
    kernels["gpu_note"] = options.emitPtx ? ptxNote : "PTX not requested";
  else
    kernels["gpu"] = "kernels.<group index>.ptx (sm_90)";
  if (!gpuStepNote.empty())
    kernels["gpu_step_note"] = gpuStepNote;
  if (options.cpuStep)
    kernels["cpu_step"] =
        llvm::json::Object{{"program", "step.cpu.json"},
                           {"target_cpu", llvm::sys::getHostCPUName()}};
  if (gpuStep)
    kernels["gpu_step"] =
        llvm::json::Object{{"program", "step.gpu.json"},
                           {"kernels", gpuStep->kernels},
                           {"gemms", gpuStep->gemms},
                           {"arena_bytes", gpuStep->arenaBytes}};
  llvm::json::Object manifest{{"format", "mantissa-artifact"},
                              {"version", rt::kArtifactVersion},
                              {"step", spec.stepName},
                              {"tile_size", options.tileSize},
                              {"kernel_abi",
                               "void f(void *grad, void *param, void *master, "
                               "void *exp_avg, void *exp_avg_sq, void "
                               "*max_exp_avg_sq, double lr, double beta1, "
                               "double beta2, double eps, double "
                               "weight_decay, int64_t step, float "
                               "grad_scale, int64_t part, int64_t parts)"},
                              {"kernels", std::move(kernels)},
                              {"files", std::move(files)},
                              {"tensors", std::move(tensorsJson)},
                              {"buffers", std::move(buffersJson)},
                              {"groups", std::move(groupsJson)}};
  std::string manifestText;
  llvm::raw_string_ostream(manifestText)
      << llvm::formatv("{0:2}", llvm::json::Value(std::move(manifest)));
  if (llvm::Error error =
          writeFile(pathOf("manifest.json"), manifestText + "\n"))
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
