//===- PrecisionFlags.cpp - The precision flags, defined once -------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Driver/PrecisionFlags.h"

using namespace mlir::mantissa;
namespace cl = llvm::cl;

PrecisionFlags::PrecisionFlags(cl::OptionCategory &category,
                               PrecisionFlagsHelp help)
    : specPath(
          "precision",
          cl::desc(help == PrecisionFlagsHelp::Detailed
                       ? "YAML precision spec (default_dtype, shard_units, "
                         "rules)"
                       : "YAML precision spec to train with"),
          cl::value_desc("spec.yaml"), cl::cat(category)),
      rules("precision-rule",
            cl::desc(help == PrecisionFlagsHelp::Detailed
                         ? "A rule applied after the spec's: "
                           "GLOB:AXIS=DTYPE[,AXIS=DTYPE] (repeatable; axes "
                           "master, gather, reduce, moments)"
                         : "A rule applied after the spec's"),
            cl::value_desc("rule"), cl::cat(category)),
      defaultDtype("precision-default-dtype",
                   cl::desc(help == PrecisionFlagsHelp::Detailed
                                ? "Gather dtype of parameters no rule sets "
                                  "(fp32, bf16, fp16)"
                                : "Gather dtype of parameters no rule sets"),
                   cl::value_desc("dtype"), cl::cat(category)),
      computeDtype(
          "precision-compute",
          cl::desc("Compute matrix products in this dtype as torch.autocast "
                   "does (bf16, fp16; the spec's compute)"),
          cl::value_desc("dtype"), cl::cat(category)) {}

bool PrecisionFlags::hasValues() const {
  return !specPath.empty() || !rules.empty() || !defaultDtype.empty() ||
         !computeDtype.empty();
}

mlir::mantissa::precision::SpecOptions PrecisionFlags::getSpecOptions() const {
  precision::SpecOptions options;
  options.specPath = specPath;
  options.flagRules.assign(rules.begin(), rules.end());
  options.defaultDtype = defaultDtype;
  options.compute = computeDtype;
  return options;
}
