//===- CompileMain.cpp - The mantissa-compile driver ----------------------===//
//
// `mantissa-compile MODEL.pt2 --emit=train-mlir -o OUT.mlir` imports an
// exported training program and writes its `train` IR, with the weights
// beside it as OUT.weights.safetensors. Every failure is one line on stderr
// and a non-zero exit, and no output file is left half-written.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Driver/CompileMain.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mantissa/Driver/WeightsFile.h"
#include "mantissa/Import/TorchImporter.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::mantissa;
namespace cl = llvm::cl;

namespace {
enum class EmitKind { TrainMlir };
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

int mlir::mantissa::compileMain(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::OptionCategory category("mantissa-compile options");
  cl::opt<std::string> inputPath(cl::Positional, cl::desc("<model.pt2>"),
                                 cl::Required, cl::cat(category));
  cl::opt<std::string> outputPath(
      "o", cl::desc("Output file ('-' for stdout; then no weights file)"),
      cl::value_desc("path"), cl::init("-"), cl::cat(category));
  cl::opt<EmitKind> emit(
      "emit", cl::desc("What to write"), cl::init(EmitKind::TrainMlir),
      cl::values(clEnumValN(EmitKind::TrainMlir, "train-mlir",
                            "the imported step in the train dialect, and "
                            "its weights as OUT.weights.safetensors")),
      cl::cat(category));
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "Mantissa compiler: imports a torch.export training program (.pt2)\n");

  llvm::Expected<pt2::Program> program = pt2::readPt2Archive(inputPath);
  if (!program)
    return reportError(llvm::toString(program.takeError()));

  MLIRContext context;
  context.loadDialect<train::TrainDialect>();
  llvm::Expected<OwningOpRef<ModuleOp>> module =
      importTrainingStep(context, *program, inputPath);
  if (!module)
    return reportError(llvm::toString(module.takeError()));

  std::string text;
  {
    llvm::raw_string_ostream os(text);
    (*module)->print(os, OpPrintingFlags().elideLargeElementsAttrs());
  }

  if (outputPath == "-") {
    llvm::outs() << text;
    return 0;
  }
  // Weights first: if they cannot be written, no IR refers to them.
  std::string weightsPath = weightsPathFor(outputPath);
  if (llvm::Error error = writeWeightsFile(*program, weightsPath))
    return reportError(llvm::toString(std::move(error)));
  // writeToOutput writes a temporary file and renames it into place.
  if (llvm::Error error = llvm::writeToOutput(
          outputPath, [&](llvm::raw_ostream &os) -> llvm::Error {
            os << text;
            return llvm::Error::success();
          })) {
    llvm::sys::fs::remove(weightsPath);
    return reportError(outputPath + ": " + llvm::toString(std::move(error)));
  }
  return 0;
}
