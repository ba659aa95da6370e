//===- mantissa-artifact-gen.cpp - Test tool: write artifacts -------------===//
//
// Writes a compiled artifact for tests until `mantissa-compile -o DIR` calls
// writeArtifact itself:
//
//   mantissa-artifact-gen MODEL.pt2 -o DIR        the imported step (no plans:
//                                                 one root group per dtype)
//   mantissa-artifact-gen --weights W.safetensors --plan master=fp32,
//       gather=bf16,reduce=bf16,moments=fp32 -o DIR
//                                                 every tensor of W a
//                                                 parameter, one root group
//       [--plan-rule 'GLOB:reduce=fp32,...']...   then, per matching FQN
//                                                 (llvm::GlobPattern), these
//                                                 axes; later rules win
//
//===----------------------------------------------------------------------===//

#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Driver/ArtifactWriter.h"
#include "mantissa/Import/TorchImporter.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/GlobPattern.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/WithColor.h"

using namespace mlir;
using namespace mlir::mantissa;
namespace cl = llvm::cl;

static int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "mantissa-artifact-gen")
      << message << "\n";
  return 1;
}

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::opt<std::string> modelPath(cl::Positional, cl::desc("[model.pt2]"));
  cl::opt<std::string> output("o", cl::desc("Artifact directory"),
                              cl::Required);
  cl::opt<std::string> weightsPath("weights",
                                   cl::desc("Parameters (safetensors)"));
  cl::opt<std::string> planText(
      "plan", cl::desc("master=..,gather=..,reduce=..,moments=.. for all"),
      cl::init(""));
  cl::list<std::string> planRules(
      "plan-rule",
      cl::desc("GLOB:axis=dtype,... for the tensors GLOB matches"));
  cl::opt<bool> amsgrad("amsgrad", cl::desc("AMSGrad kernels"));
  cl::opt<bool> noPtx("no-ptx", cl::desc("Skip PTX generation"));
  cl::opt<int64_t> tileSize("tile-size", cl::init(4096),
                            cl::desc("Elements per tile"));
  cl::ParseCommandLineOptions(argc, argv, "Mantissa artifact test writer\n");

  ArtifactOptions options;
  options.emitPtx = !noPtx;
  options.amsgrad = amsgrad;
  options.tileSize = tileSize;
  if (!modelPath.empty()) {
    llvm::Expected<pt2::Program> program = pt2::readPt2Archive(modelPath);
    if (!program)
      return fail(llvm::toString(program.takeError()));
    MLIRContext context;
    context.loadDialect<train::TrainDialect>();
    auto module = importTrainingStep(context, *program, modelPath);
    if (!module)
      return fail(llvm::toString(module.takeError()));
    if (llvm::Error error = writeArtifact(**module, *program, output, options))
      return fail(llvm::toString(std::move(error)));
    return 0;
  }
  if (weightsPath.empty())
    return fail("give a model or --weights");
  rt::SafeTensorsFile weights;
  std::string error;
  if (!rt::SafeTensorsFile::read(weightsPath, weights, error))
    return fail(error);
  ArtifactSpec spec;
  spec.stepName = "synthetic";
  spec.programText = "// synthetic artifact: no step program\n";
  ArtifactGroupSpec group;
  group.name = group.unit = "root";
  for (const rt::HostTensor &tensor : weights.tensors()) {
    ArtifactTensorSpec spec1;
    spec1.fqn = tensor.name;
    spec1.shape = tensor.shape;
    auto exported = train::parseDTypeName(rt::projectDTypeName(tensor.dtype));
    if (!exported)
      return fail("tensor '" + tensor.name + "' is not fp32/bf16/fp16");
    spec1.exported = spec1.master = spec1.gather = spec1.reduce = *exported;
    spec1.moments = train::DType::fp32;
    llvm::SmallVector<llvm::StringRef> fields;
    llvm::StringRef(planText).split(fields, ',', -1, false);
    for (const std::string &rule : planRules) {
      auto [glob, axes] = llvm::StringRef(rule).rsplit(':');
      llvm::Expected<llvm::GlobPattern> pattern =
          llvm::GlobPattern::create(glob);
      if (!pattern)
        return fail("bad --plan-rule '" + rule +
                    "': " + llvm::toString(pattern.takeError()));
      if (axes.empty())
        return fail("bad --plan-rule '" + rule + "': expected GLOB:AXES");
      if (pattern->match(tensor.name))
        axes.split(fields, ',', -1, false);
    }
    for (llvm::StringRef field : fields) {
      auto [axis, value] = field.split('=');
      bool split = axis == "master" && value == "fp32_split";
      auto dtype = split ? train::DType::fp32 : train::parseDTypeName(value);
      if (!dtype)
        return fail("bad --plan field '" + field + "'");
      if (axis == "master") {
        spec1.master = *dtype;
        spec1.masterSplit = split;
      } else if (axis == "gather")
        spec1.gather = *dtype;
      else if (axis == "reduce")
        spec1.reduce = *dtype;
      else if (axis == "moments")
        spec1.moments = *dtype;
      else
        return fail("bad --plan axis '" + axis + "'");
    }
    group.gather = spec1.gather;
    spec1.initial = tensor;
    group.members.push_back(tensor.name);
    spec.tensors.push_back(std::move(spec1));
  }
  spec.groups.push_back(group);
  if (llvm::Error error = writeArtifactSpec(spec, output, options))
    return fail(llvm::toString(std::move(error)));
  return 0;
}
