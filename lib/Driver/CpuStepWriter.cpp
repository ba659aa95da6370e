//===- CpuStepWriter.cpp - Writing a step's CPU program -------------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Driver/CpuStepWriter.h"
#include "mantissa/Conversion/AdamWKernels.h"
#include "mantissa/Conversion/StepSignature.h"
#include "mantissa/Driver/ArtifactWriter.h"
#include "mantissa/Driver/StepEvaluator.h"
#include "mantissa/Format/CpuGemmAbi.h"
#include "mantissa/Format/CpuProgram.h"
#include "mantissa/Reference/Tensor.h"
#include "mantissa/Runtime/UpdateRunner.h"
#include "mantissa/Transforms/Passes.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

using namespace mlir;
using namespace mlir::mantissa;

rt::IndexBound mlir::mantissa::getIndexBound(train::StepOp step,
                                             unsigned index) {
  int64_t bound = 0;
  std::string what;
  std::optional<int64_t> ignored;
  auto tighten = [&](int64_t value, std::string description) {
    if (value > 0 && (bound == 0 || value < bound)) {
      bound = value;
      what = std::move(description);
    }
  };
  auto nameOf = [&](Value table) -> std::string {
    if (auto argument = dyn_cast<BlockArgument>(table))
      if (argument.getOwner()->getParentOp() == step.getOperation())
        return "'" +
               step.getTensorInfo(argument.getArgNumber()).getFqn().str() + "'";
    return "of the step";
  };
  SmallVector<Value> work = {step.getArgument(index)};
  llvm::SmallPtrSet<Operation *, 16> seen;
  while (!work.empty()) {
    Value value = work.pop_back_val();
    for (OpOperand &use : value.getUses()) {
      Operation *user = use.getOwner();
      if (!seen.insert(user).second)
        continue;
      if (auto embedding = dyn_cast<train::EmbeddingOp>(user)) {
        if (use.getOperandNumber() == 1)
          tighten(cast<RankedTensorType>(embedding.getWeight().getType())
                      .getDimSize(0),
                  "the rows of embedding " + nameOf(embedding.getWeight()));
        continue;
      }
      if (auto gather = dyn_cast<train::GatherOp>(user)) {
        auto type = cast<RankedTensorType>(gather.getInput().getType());
        int64_t dim = gather.getDim();
        if (dim < 0)
          dim += type.getRank();
        if (use.getOperandNumber() == 1 && dim >= 0 && dim < type.getRank())
          tighten(type.getDimSize(dim),
                  llvm::formatv("the {0} classes the loss gathers from",
                                type.getDimSize(dim)));
        continue;
      }
      // where(ids != s, ids, c): a loss's ignore_index s is masked out
      // before the ids index anything, so s is allowed besides the bound.
      if (auto where = dyn_cast<train::WhereOp>(user)) {
        auto compare = where.getCondition().getDefiningOp<train::NeScalarOp>();
        auto scalar =
            compare ? dyn_cast<IntegerAttr>(compare.getScalar()) : nullptr;
        if (use.getOperandNumber() == 1 && scalar &&
            compare.getInput() == value) {
          ignored = scalar.getInt();
          work.push_back(where.getResult());
        }
        continue;
      }
      // Views, reshapes and copies pass the ids on unchanged.
      if (user->getNumResults() == 1 && user->getNumOperands() == 1)
        if (auto type =
                dyn_cast<RankedTensorType>(user->getResult(0).getType()))
          if (type.getElementType().isInteger(64) ||
              type.getElementType().isInteger(32))
            work.push_back(user->getResult(0));
    }
  }
  return {bound, what, ignored};
}

llvm::Expected<OwningOpRef<ModuleOp>>
mlir::mantissa::deriveForwardStep(train::StepOp step) {
  return deriveStep(step, createForwardOnlyPass(), "forward-only step");
}

namespace {

/// The results of `step`, as step.cpu.json lists them.
std::vector<rt::StepTensor> resultTensors(train::StepOp step) {
  std::vector<rt::StepTensor> results;
  for (unsigned index = 0, e = step.getNumResults(); index < e; ++index)
    results.push_back(getStepResultTensor(step, index));
  return results;
}

/// Puts the compiled library of `step` at `path`: a copy of the compile
/// cache's entry, compiled into it first if need be.
llvm::Error placeLibrary(train::StepOp step, StringRef path) {
  CompileCacheReport report;
  llvm::Expected<std::unique_ptr<StepEvaluator>> compiled =
      createCompiledEvaluator(step, &report);
  if (!compiled)
    return compiled.takeError();
  if (report.libraryPath.empty())
    return compileStepLibrary(step, path);
  if (std::error_code ec = llvm::sys::fs::copy_file(report.libraryPath, path))
    return llvm::createStringError("cannot copy " + report.libraryPath +
                                   " to " + path + ": " + ec.message());
  return llvm::Error::success();
}

} // namespace

llvm::Expected<std::vector<std::string>>
mlir::mantissa::writeCpuStep(train::StepOp plannedStep, StringRef directory,
                             bool withForward) {
  // The libraries and step.cpu.json take the parameters as the runtime
  // holds them; the forward-only step is derived from the same step, so
  // that the runtime binds the same arguments to either.
  llvm::Expected<OwningOpRef<ModuleOp>> cpuModule = deriveCpuStep(plannedStep);
  if (!cpuModule)
    return cpuModule.takeError();
  train::StepOp step = *(*cpuModule)->getOps<train::StepOp>().begin();
  OwningOpRef<ModuleOp> forwardModule;
  train::StepOp forward;
  if (withForward) {
    llvm::Expected<OwningOpRef<ModuleOp>> derived = deriveForwardStep(step);
    if (!derived)
      return derived.takeError();
    forwardModule = std::move(*derived);
    forward = *forwardModule->getOps<train::StepOp>().begin();
  }
  auto pathOf = [&](StringRef file) {
    SmallString<256> path(directory);
    llvm::sys::path::append(path, file);
    return std::string(path);
  };
  if (llvm::Error error = placeLibrary(step, pathOf("step.cpu.so")))
    return std::move(error);
  if (forward)
    if (llvm::Error error =
            placeLibrary(forward, pathOf("step.cpu.forward.so")))
      return std::move(error);

  rt::CpuProgram program;
  program.cpuGemmAbi = rt::kCpuGemmAbi;
  program.targetCpu = getCpuTargetName();
  program.targetFeatures = getTargetCpuFeatureFlags();
  program.widenedBf16Products = getWidenedBf16ProductsWarning(step);
  for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index) {
    program.arguments.push_back(getStepArgumentTensor(step, index));
    if (program.arguments.back().role == rt::StepTensor::Role::UserInput)
      program.arguments.back().indexBound = getIndexBound(step, index);
  }
  program.step = {"step.cpu.so", getStepLibraryEntry(step),
                  resultTensors(step)};
  std::vector<std::string> files = {"step.cpu.json", "step.cpu.so"};
  if (forward) {
    program.forward = {"step.cpu.forward.so", getStepLibraryEntry(forward),
                       resultTensors(forward)};
    files.push_back("step.cpu.forward.so");
  }
  std::string text = rt::writeCpuProgram(program);
  // A write error is returned with the path (llvm::writeToOutput would end
  // the process on one).
  std::string writeError;
  if (!rt::writeFileAtomically(pathOf("step.cpu.json"), text, writeError))
    return llvm::createStringError(writeError);
  return files;
}
