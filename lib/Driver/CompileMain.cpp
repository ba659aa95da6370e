//===- CompileMain.cpp - The mantissa-compile driver ----------------------===//
//
// `mantissa-compile MODEL.pt2 --emit=train-mlir -o OUT.mlir` imports an
// exported training program and writes its `train` IR, with the weights
// beside it as OUT.weights.safetensors. `--precision SPEC` (and the other
// --precision* flags) applies a precision spec: `--emit=plan-mlir` writes the
// IR after the precision pass, `--precision-report[=json]` prints the plan.
// Every failure is one line on stderr (with notes) and a non-zero exit, and
// no output file is left half-written.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Driver/CompileMain.h"
#include "mantissa/Analysis/GpuCostModel.h"
#include "mantissa/Conversion/TrainToLLVM.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Driver/ArtifactWriter.h"
#include "mantissa/Driver/GpuStepWriter.h"
#include "mantissa/Driver/MicroBatchFlag.h"
#include "mantissa/Driver/PrecisionDriver.h"
#include "mantissa/Driver/PrecisionFlags.h"
#include "mantissa/Driver/StepEvaluator.h"
#include "mantissa/Driver/WeightsFile.h"
#include "mantissa/Format/DType.h"
#include "mantissa/Format/InputFile.h"
#include "mantissa/Import/TorchImporter.h"
#include "mantissa/Runtime/CpuGemm.h"
#include "mantissa/Runtime/StopSignals.h"
#include "mantissa/Runtime/UpdateRunner.h"
#include "mantissa/Transforms/Passes.h"
#include "mantissa/Transforms/PrecisionReport.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <array>
#include <cmath>
#include <cstring>

using namespace mlir;
using namespace mlir::mantissa;
namespace cl = llvm::cl;

namespace {
enum class EmitKind { TrainMlir, PlanMlir, Artifact };
enum class ReportKind { None, Table, Json };
} // namespace

/// Prints `message` as the tool's one-line error and returns the exit code.
static int reportError(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "mantissa-compile") << message << "\n";
  return 1;
}

/// `OUT.mlir` -> `OUT.weights.safetensors`.
static std::string weightsPathFor(llvm::StringRef outputPath) {
  llvm::SmallString<256> path(outputPath);
  if (llvm::sys::path::extension(path) == ".mlir")
    llvm::sys::path::replace_extension(path, "");
  return (path + ".weights.safetensors").str();
}

/// Writes the IR (and the weights beside it, unless it goes to stdout).
static int writeOutputs(llvm::StringRef text, llvm::StringRef outputPath,
                        const pt2::Program &program) {
  if (outputPath == "-") {
    llvm::outs() << text;
    return 0;
  }
  // Weights first: if they cannot be written, no IR refers to them.
  std::string weightsPath = weightsPathFor(outputPath);
  if (llvm::Error error = writeWeightsFile(program, weightsPath))
    return reportError(llvm::toString(std::move(error)));
  // Written under a temporary name and renamed into place; a write error
  // is reported with the path (llvm::writeToOutput ends the process on one).
  std::string writeError;
  if (!rt::writeFileAtomically(outputPath.str(), text.str(), writeError)) {
    llvm::sys::fs::remove(weightsPath);
    return reportError(writeError);
  }
  return 0;
}

/// What the fused AdamW update moves per step for `step`'s parameters under
/// their plans (exported dtypes where there is none): the gradient read, the
/// master and both moments read and written, the parameter copy written
/// where it is not the master; one launch per shard group.
static UpdateTraffic getUpdateTraffic(train::StepOp step) {
  UpdateTraffic update;
  for (unsigned index = 0, e = step.getNumArguments(); index < e; ++index) {
    train::TensorInfoAttr info = step.getTensorInfo(index);
    if (!info || info.getKind() != train::TensorKind::parameter)
      continue;
    double elements = 1;
    for (int64_t size : info.getShape().asArrayRef())
      elements *= double(size);
    std::optional<train::DType> exported = train::getDTypeOf(info.getDtype());
    train::DType master = exported.value_or(train::DType::fp32);
    train::DType gather = master, reduce = master, moments = train::DType::fp32;
    bool split = false;
    if (train::PrecisionPlanAttr plan = step.getPlan(index)) {
      master = plan.getMaster(), gather = plan.getGather();
      reduce = plan.getReduce().value_or(gather);
      moments = plan.getMoments().value_or(train::DType::fp32);
      split = plan.getMasterSplit();
    }
    // A split master is the bf16 copy plus a 16-bit remainder.
    auto bytes = [](train::DType dtype) {
      return double(train::getByteWidth(dtype));
    };
    double masterBytes = split ? 4 : bytes(master);
    double copyBytes = (split || gather == master) ? 0 : bytes(gather);
    update.bytes += elements * (bytes(reduce) + 2 * masterBytes +
                                4 * bytes(moments) + copyBytes);
  }
  int64_t groups = 0;
  step.walk([&](train::ShardGroupOp) { ++groups; });
  update.kernels = std::max<int64_t>(groups, 1);
  return update;
}

/// Prints the cost model's prediction of the step.gpu.json at `path`
/// (`what` names it in messages).
static int printGpuCost(llvm::StringRef path, llvm::StringRef what,
                        const GpuDeviceModel &device,
                        const UpdateTraffic &update, ReportKind kind) {
  std::vector<uint8_t> bytes;
  std::string error;
  if (!rt::readRegularFile(path.str(), bytes, error))
    return reportError(what + ": " + error);
  rt::GpuProgram program;
  if (!rt::parseGpuProgram(std::string(bytes.begin(), bytes.end()), program,
                           error))
    return reportError(what + ": " + error);
  StepCost cost = predictGpuStep(program, device, update);
  if (kind == ReportKind::Json)
    printCostJson(cost, llvm::outs());
  else
    printCostTable(cost, llvm::outs());
  return 0;
}

/// Compiles `step` for the GPU into a scratch directory and prints the cost
/// model's prediction of the program and its update.
static int reportGpuCost(train::StepOp step, const GpuDeviceModel &device,
                         ReportKind kind, const GpuStepWriterOptions &options) {
  llvm::SmallString<256> scratch;
  if (std::error_code error =
          llvm::sys::fs::createUniqueDirectory("mantissa-cost", scratch))
    return reportError("cannot create a scratch directory: " + error.message());
  auto cleanup = llvm::make_scope_exit(
      [&] { llvm::sys::fs::remove_directories(scratch); });
  llvm::Expected<GpuStepFiles> files =
      writeGpuStep(step, scratch, /*updateGroups=*/{}, options);
  if (!files)
    return reportError("--cost-report: the step does not compile for the "
                       "GPU: " +
                       llvm::toString(files.takeError()));
  llvm::SmallString<256> path(scratch);
  llvm::sys::path::append(path, "step.gpu.json");
  return printGpuCost(path, "the step's GPU program", device,
                      getUpdateTraffic(step), kind);
}

namespace {
/// mantissa-compile's flags, registered while the object lives.
struct CompileFlags {
  explicit CompileFlags(const GpuHostEmulator *emulator)
      : gpuHostKernels(category, emulator) {
    cl::HideUnrelatedOptions({&category, &precisionCategory, &costCategory});
  }

  cl::OptionCategory category{"mantissa-compile options"};
  cl::OptionCategory precisionCategory{"precision options"};
  /// Required unless --list-ops (checked in compileMain).
  cl::opt<std::string> inputPath{cl::Positional, cl::desc("<model.pt2>"),
                                 cl::cat(category)};
  cl::opt<bool> listOps{
      "list-ops",
      cl::desc("Print the ATen operator overloads the importer supports, one "
               "per line as torch names them (torch.ops.aten.add.Tensor), "
               "and exit; the exporter (python -m mantissa.export) checks "
               "graphs against this list"),
      cl::init(false), cl::cat(category)};
  cl::opt<std::string> outputPath{
      "o", cl::desc("Output file ('-' for stdout; then no weights file)"),
      cl::value_desc("path"), cl::init("-"), cl::cat(category)};
  cl::opt<EmitKind> emit{
      "emit",
      cl::desc("What to write (default: an artifact when -o names a "
               "directory, else plan-mlir when a --precision option is given, "
               "else train-mlir)"),
      cl::init(EmitKind::TrainMlir),
      cl::values(clEnumValN(EmitKind::TrainMlir, "train-mlir",
                            "the imported step in the train dialect, and "
                            "its weights as OUT.weights.safetensors"),
                 clEnumValN(EmitKind::PlanMlir, "plan-mlir",
                            "the step after the precision pass (plans, "
                            "casts, shard groups), and its weights"),
                 clEnumValN(EmitKind::Artifact, "artifact",
                            "the compiled artifact directory the runtime "
                            "loads (the default when -o names no .mlir "
                            "file)")),
      cl::cat(category)};

  GpuHostKernelsFlag gpuHostKernels;
  PrecisionFlags precision{precisionCategory, PrecisionFlagsHelp::Detailed};
  MicroBatchFlag microBatch{category};
  cl::opt<double> learningRate{
      "lr", cl::desc("Learning rate the stall lint assumes (default 1e-3)"),
      cl::init(1e-3), cl::cat(precisionCategory)};
  cl::opt<bool> warningsAsErrors{
      "warnings-as-errors", cl::desc("Fail on the precision lints' warnings"),
      cl::init(false), cl::cat(precisionCategory)};
  cl::opt<ReportKind> report{
      "precision-report",
      cl::desc("Print the precision plan to stdout (the IR is then written "
               "only with -o FILE)"),
      cl::ValueOptional,
      cl::init(ReportKind::None),
      cl::values(clEnumValN(ReportKind::Table, "", "a table (the default)"),
                 clEnumValN(ReportKind::Table, "table", "a table"),
                 clEnumValN(ReportKind::Json, "json", "JSON for tools")),
      cl::cat(precisionCategory)};
  cl::OptionCategory costCategory{"cost model options"};
  cl::opt<ReportKind> costReport{
      "cost-report",
      cl::desc("Print the GPU cost model's prediction of the step (every "
               "kernel and GEMM, the update, the step) to stdout; the input "
               "may also be a step.gpu.json"),
      cl::ValueOptional,
      cl::init(ReportKind::None),
      cl::values(clEnumValN(ReportKind::Table, "", "a table (the default)"),
                 clEnumValN(ReportKind::Table, "table", "a table"),
                 clEnumValN(ReportKind::Json, "json", "JSON for tools")),
      cl::cat(costCategory)};
  /// Before --cost-device: its help refers to this text.
  std::string deviceHelp =
      "The device the cost model predicts (" + listGpuDevices() + ")";
  cl::opt<std::string> costDevice{"cost-device", cl::desc(deviceHelp),
                                  cl::init("h200"), cl::value_desc("name"),
                                  cl::cat(costCategory)};
  // A string, not a double, so that the message for a bad value is ours and
  // names the unit.
  cl::opt<std::string> costBandwidth{
      "cost-bandwidth-gbs",
      cl::desc("The device's device-to-device copy bandwidth as measured "
               "(GB/s, bytes read plus written), instead of the device's "
               "figure"),
      cl::value_desc("GB/s"), cl::cat(costCategory)};
};

/// What the command line asks for, its defaults resolved.
struct CompileRequest {
  EmitKind emit;
  /// Whether the precision pass runs (a --precision* flag, a report of the
  /// plan or --emit=plan-mlir).
  bool precision;
  /// Whether the IR is written (not when only reports are asked for).
  bool writeIR;
};
} // namespace

/// Prints `message` as the tool's error; for the steps of compileMain,
/// which return failure and leave the exit code to it.
static LogicalResult fail(const llvm::Twine &message) {
  reportError(message);
  return failure();
}

/// The device the cost model predicts: --cost-device, with its copy
/// bandwidth replaced by --cost-bandwidth-gbs when given.
static FailureOr<GpuDeviceModel> getCostDevice(const CompileFlags &flags) {
  std::optional<GpuDeviceModel> device = lookupGpuDevice(flags.costDevice);
  if (!device)
    return fail("--cost-device: unknown device '" + flags.costDevice +
                "'; the cost model knows " + listGpuDevices());
  if (flags.costBandwidth.getNumOccurrences()) {
    // Above 100 TB/s is no HBM of today: most likely bytes or MB/s.
    double gbs = 0;
    if (llvm::StringRef(flags.costBandwidth).getAsDouble(gbs) ||
        !std::isfinite(gbs) || gbs <= 0 || gbs > 1e5)
      return fail("--cost-bandwidth-gbs: '" + flags.costBandwidth +
                  "' is not a bandwidth in GB/s (a number above 0 "
                  "and at most 100000)");
    setCopyBandwidth(*device, gbs * 1e9);
  }
  return *device;
}

/// Resolves what to write (--emit's default follows -o and the precision
/// flags) and checks the outputs against each other, before any work.
static FailureOr<CompileRequest> validateOptions(const CompileFlags &flags) {
  const cl::opt<std::string> &outputPath = flags.outputPath;
  const PrecisionFlags &precision = flags.precision;
  CompileRequest request;
  // A dtype flag asks for the plan even with an empty value (mantissa-run's
  // hasValues ignores it).
  request.precision = !precision.specPath.empty() || !precision.rules.empty() ||
                      precision.defaultDtype.getNumOccurrences() ||
                      precision.computeDtype.getNumOccurrences() ||
                      flags.report != ReportKind::None ||
                      flags.emit == EmitKind::PlanMlir;
  bool outputIsDirectory = outputPath.getNumOccurrences() &&
                           outputPath != "-" &&
                           llvm::sys::path::extension(outputPath) != ".mlir";
  request.emit = flags.emit;
  if (!flags.emit.getNumOccurrences() && outputIsDirectory)
    request.emit = EmitKind::Artifact;
  else if (request.precision && !flags.emit.getNumOccurrences())
    request.emit = EmitKind::PlanMlir;
  if (request.emit == EmitKind::Artifact && !outputIsDirectory)
    return fail("--emit=artifact needs -o DIR (a directory path)");
  request.writeIR = (flags.report == ReportKind::None &&
                     flags.costReport == ReportKind::None) ||
                    outputPath.getNumOccurrences();
  if (flags.report != ReportKind::None && outputPath == "-" &&
      outputPath.getNumOccurrences())
    return fail("--precision-report prints to stdout; write the IR to "
                "a file with -o FILE");
  if (flags.costReport != ReportKind::None && outputPath == "-" &&
      outputPath.getNumOccurrences())
    return fail("--cost-report prints to stdout; write the IR to a "
                "file with -o FILE");
  return request;
}

/// `module` as text, large constants elided (the weights go beside it).
static std::string printModule(ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os, OpPrintingFlags().elideLargeElementsAttrs());
  return text;
}

/// Asks the runtime how the CPU step computes each product on this machine
/// (mantissa/Runtime/CpuGemm.h), for the report: a bf16 product of a step
/// compiled to widen them (getCpuBf16Products) is an fp32 product. The
/// runtime decides it
/// again when the step runs, on the CPU it runs on, for the layout the
/// compiler gives the product; here each product is asked about in the
/// row-major layout of its shapes (whether oneDNN has a bf16 matmul depends
/// on the ISA, not on the layout). An f16 product is compiled as an fp32
/// product on any CPU (mantissa-widen-bf16-products). Products of other
/// operand types and dot products (M = N = 1) stay in the generated loops
/// (CallGemmLibrary.cpp).
static void askCpuGemmPaths(precision::StepPlan &plan) {
  bool loops = getCpuGemmMode() == CpuGemmMode::Loops;
  plan.cpuGemmLibrary =
      loops ? "MANTISSA_CPU_GEMM=loops" : rt::describeCpuGemmLibrary();
  for (precision::MatrixProduct &product : plan.matrixProducts) {
    std::optional<int64_t> type;
    if (product.operandType == "f32" || product.operandType == "f16")
      type = kGemmF32;
    else if (product.operandType == "bf16")
      type = kGemmBF16;
    const std::vector<int64_t> &lhs = product.lhsShape, &rhs = product.rhsShape;
    if (loops || !type || !rt::cpuGemmAvailable() || lhs.size() < 2 ||
        rhs.size() < 2) {
      product.cpuPath = "loops";
      continue;
    }
    int64_t batch = 1;
    for (size_t i = 0; i + 2 < lhs.size(); ++i)
      batch *= lhs[i];
    int64_t m = lhs[lhs.size() - 2], k = lhs.back(), n = rhs.back();
    if (m == 1 && n == 1) {
      product.cpuPath = "loops";
      continue;
    }
    std::array<int64_t, kGemmFieldCount> d =
        rt::denseGemmDescriptor(*type, batch, m, n, k);
    bool widened = product.operandType == "f16" ||
                   (*type == kGemmBF16 && getCpuBf16Products().widen);
    if (widened) {
      // Compiled as the fp32 product of its widened operands.
      d[kGemmTypeA] = d[kGemmTypeB] = kGemmF32;
      product.cpuPath =
          rt::cpuGemmPath(d.data()) == rt::CpuGemmPath::Library
              ? "fp32 GEMM on " + product.operandType + " widened when compiled"
              : "loops";
      continue;
    }
    product.cpuPath = rt::describeCpuGemmPath(rt::cpuGemmPath(d.data()), *type);
  }
}

/// Applies the precision flags' plan to the imported step and prints the
/// plan when --precision-report asks for it.
static LogicalResult applyPrecision(ModuleOp module,
                                    const pt2::Program &program,
                                    const CompileFlags &flags) {
  auto steps = module.getOps<train::StepOp>();
  if (steps.empty())
    return fail(flags.inputPath + ": no train.step to apply a precision "
                                  "spec to");
  train::StepOp step = *steps.begin();
  FailureOr<precision::StepPlan> plan = applyPrecisionFromCommandLine(
      step, program, flags.precision.getSpecOptions(), flags.learningRate,
      flags.warningsAsErrors, "mantissa-compile");
  if (failed(plan))
    return failure();

  if (flags.report != ReportKind::None)
    askCpuGemmPaths(*plan);
  if (flags.report == ReportKind::Table)
    precision::printReportTable(*plan, llvm::outs());
  else if (flags.report == ReportKind::Json)
    precision::printReportJson(*plan, llvm::outs());
  return success();
}

/// Prints the cost model's prediction of the module's step on `device`;
/// returns the exit code.
static int reportCost(ModuleOp module, const CompileFlags &flags,
                      const GpuDeviceModel &device) {
  auto steps = module.getOps<train::StepOp>();
  if (steps.empty())
    return reportError(flags.inputPath + ": no train.step to predict");
  GpuStepWriterOptions options;
  options.hostKernels = flags.gpuHostKernels.get();
  return reportGpuCost(*steps.begin(), device, flags.costReport, options);
}

/// Writes the compiled artifact directory -o names; returns the exit code.
static int writeArtifactDirectory(ModuleOp module, const pt2::Program &program,
                                  llvm::StringRef outputPath,
                                  const GpuHostKernels &gpuHostKernels) {
  ArtifactOptions options;
  options.gpuHostKernels = gpuHostKernels;
  auto steps = module.getOps<train::StepOp>();
  if (!steps.empty()) {
    options.gpuStep = *steps.begin();
    // The runtime alone then trains on CPUs too (mantissa-run DIR).
    options.cpuStep = *steps.begin();
  }
  // The CPU runs the artifact whatever the GPU compilation says.
  options.gpuStepOptional = true;
  if (llvm::Error error = writeArtifact(module, program, outputPath, options))
    return reportError(outputPath + ": " + llvm::toString(std::move(error)));
  return 0;
}

int mlir::mantissa::compileMain(int argc, char **argv,
                                const GpuHostEmulator *emulator) {
  llvm::InitLLVM initLLVM(argc, argv);
  rt::ignoreFileSizeSignal();
  CompileFlags flags(emulator);
  cl::ParseCommandLineOptions(
      argc, argv,
      "Mantissa compiler: imports a torch.export training program (.pt2)\n");

  if (flags.listOps) {
    if (!flags.inputPath.empty())
      return reportError("--list-ops takes no input file (given " +
                         flags.inputPath + ")");
    for (const std::string &name : getSupportedOperators())
      llvm::outs() << name << "\n";
    return 0;
  }
  if (flags.inputPath.empty())
    return reportError("no input file: mantissa-compile <model.pt2> [options] "
                       "(or --list-ops)");
  FailureOr<GpuDeviceModel> device = getCostDevice(flags);
  if (failed(device))
    return 1;
  if (flags.costReport != ReportKind::None &&
      llvm::sys::path::extension(flags.inputPath) == ".json") {
    return printGpuCost(flags.inputPath, flags.inputPath, *device,
                        UpdateTraffic(), flags.costReport);
  }
  FailureOr<CompileRequest> request = validateOptions(flags);
  if (failed(request))
    return 1;

  // The output location is checked before any work is done.
  if (request->emit == EmitKind::Artifact)
    if (llvm::Error error = checkArtifactTarget(flags.outputPath))
      return reportError(llvm::toString(std::move(error)));
  llvm::Expected<pt2::ReadOptions> readOptions =
      flags.microBatch.getReadOptions();
  if (!readOptions)
    return reportError(llvm::toString(readOptions.takeError()));
  llvm::Expected<pt2::Program> program =
      pt2::readPt2Archive(flags.inputPath, *readOptions);
  if (!program)
    return reportError(llvm::toString(program.takeError()));

  MLIRContext context;
  context.loadDialect<train::TrainDialect>();
  llvm::Expected<OwningOpRef<ModuleOp>> module =
      importTrainingStep(context, *program, flags.inputPath);
  if (!module)
    return reportError(llvm::toString(module.takeError()));

  std::string text;
  if (request->emit == EmitKind::TrainMlir)
    text = printModule(**module);
  if (request->precision) {
    if (failed(applyPrecision(**module, *program, flags)))
      return 1;
    if (request->emit == EmitKind::PlanMlir)
      text = printModule(**module);
  }
  if (flags.costReport != ReportKind::None)
    if (int status = reportCost(**module, flags, *device))
      return status;

  if (request->emit == EmitKind::Artifact)
    return writeArtifactDirectory(**module, *program, flags.outputPath,
                                  flags.gpuHostKernels.get());
  if (!request->writeIR)
    return 0;
  return writeOutputs(text, flags.outputPath, *program);
}
