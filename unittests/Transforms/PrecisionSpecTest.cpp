//===- PrecisionSpecTest.cpp - Tests of spec parsing and resolution -------===//

#include "mantissa/Transforms/PrecisionSpec.h"
#include "llvm/ADT/StringExtras.h"
#include "gtest/gtest.h"

#include <cmath>

using namespace mlir::mantissa::precision;
using mlir::mantissa::train::DType;

namespace {

/// All messages, one per line, for failure output.
std::string joinMessages(const std::vector<Problem> &problems) {
  std::string text;
  for (const Problem &problem : problems)
    text += problem.message + " [note: " + problem.note + "]\n";
  return text;
}

TensorDesc parameter(std::string fqn, std::vector<int64_t> shape,
                     DType exported = DType::fp32,
                     std::optional<double> rms = std::nullopt) {
  TensorDesc tensor;
  tensor.fqn = fqn;
  size_t dot = fqn.rfind('.');
  tensor.module = dot == std::string::npos ? "" : fqn.substr(0, dot);
  tensor.shape = std::move(shape);
  tensor.exported = exported;
  tensor.exportedTypeName = "f32";
  tensor.initRms = rms;
  return tensor;
}

TensorDesc buffer(std::string fqn, std::vector<int64_t> shape,
                  bool isFloat = true) {
  TensorDesc tensor = parameter(std::move(fqn), std::move(shape));
  tensor.isParameter = false;
  tensor.isFloat = isFloat;
  if (!isFloat) {
    tensor.exported = std::nullopt;
    tensor.exportedTypeName = "i1";
  }
  return tensor;
}

/// A two-layer model: embedding, per layer a norm and a projection, a final
/// norm and a head, and a RoPE table.
std::vector<TensorDesc> smallModel() {
  return {parameter("embed.weight", {8, 4}, DType::fp32, 1.0),
          parameter("layers.0.norm.weight", {4}, DType::fp32, 1.0),
          parameter("layers.0.proj.weight", {4, 4}, DType::fp32, 0.05),
          parameter("layers.1.norm.weight", {4}, DType::fp32, 1.0),
          parameter("layers.1.proj.weight", {4, 4}, DType::fp32, 0.05),
          parameter("norm.weight", {4}, DType::fp32, 1.0),
          parameter("head.weight", {8, 4}, DType::fp32, 0.05),
          buffer("layers.0.rope.cos", {4, 4}),
          buffer("layers.0.rope.mask", {4, 4}, /*isFloat=*/false)};
}

Spec parseOrDie(llvm::StringRef yaml) {
  Spec spec;
  std::vector<Problem> problems;
  EXPECT_TRUE(parseSpecYaml(yaml, "spec.yaml", spec, problems))
      << joinMessages(problems);
  return spec;
}

StepPlan resolveOrDie(const Spec &spec, const std::vector<TensorDesc> &tensors,
                      double lr = 1e-3) {
  StepPlan plan;
  std::vector<Problem> errors;
  ResolveOptions options;
  options.learningRate = lr;
  EXPECT_TRUE(resolvePlan(spec, tensors, "s", options, plan, errors))
      << joinMessages(errors);
  return plan;
}

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

TEST(PrecisionSpecYaml, ParsesRulesWithTheirLines) {
  Spec spec = parseOrDie("default_dtype: bf16\n"
                         "shard_units: [\"layers.*\"]\n"
                         "rules:\n"
                         "  - match: \"*norm*\"\n"
                         "    master: fp32\n"
                         "    gather: float32\n"
                         "  - {match: \"head.*\", reduce: fp32}\n");
  EXPECT_EQ(spec.defaultDtype, DType::bf16);
  EXPECT_EQ(spec.defaultDtypeOrigin, "spec.yaml:1");
  ASSERT_EQ(spec.shardUnits.size(), 1u);
  EXPECT_EQ(spec.shardUnits[0].glob, "layers.*");
  EXPECT_EQ(spec.shardUnits[0].origin, "spec.yaml:2");
  ASSERT_EQ(spec.rules.size(), 2u);
  EXPECT_EQ(spec.rules[0].match, "*norm*");
  EXPECT_EQ(spec.rules[0].origin, "spec.yaml:4");
  EXPECT_EQ(spec.rules[0].get(Axis::Master), DType::fp32);
  EXPECT_EQ(spec.rules[0].get(Axis::Gather), DType::fp32);
  EXPECT_EQ(spec.rules[0].get(Axis::Reduce), std::nullopt);
  EXPECT_EQ(spec.rules[0].text,
            "{match: \"*norm*\", master: fp32, gather: float32}");
  EXPECT_EQ(spec.rules[1].origin, "spec.yaml:7");
  EXPECT_EQ(spec.rules[1].get(Axis::Reduce), DType::fp32);
}

TEST(PrecisionSpecYaml, EmptyFileIsAnEmptySpec) {
  Spec spec = parseOrDie("");
  EXPECT_FALSE(spec.defaultDtype);
  EXPECT_TRUE(spec.rules.empty());
}

TEST(PrecisionSpecYaml, UnknownAxisAndDtypeNameTheRuleAndLine) {
  Spec spec;
  std::vector<Problem> problems;
  EXPECT_FALSE(parseSpecYaml("rules:\n"
                             "  - match: \"*\"\n"
                             "    mastr: fp32\n"
                             "  - match: \"*norm*\"\n"
                             "    gather: fp33\n",
                             "spec.yaml", spec, problems));
  ASSERT_EQ(problems.size(), 2u) << joinMessages(problems);
  EXPECT_EQ(problems[0].message,
            "unknown precision axis 'mastr' in rule {match: \"*\", mastr: "
            "fp32} at spec.yaml:3");
  EXPECT_EQ(problems[0].note, "expected master, gather, reduce or moments");
  EXPECT_EQ(problems[1].message,
            "unknown dtype 'fp33' for gather in rule {match: \"*norm*\", "
            "gather: fp33} at spec.yaml:5");
}

TEST(PrecisionSpecYaml, RejectsBadShapesAndKeys) {
  for (llvm::StringRef yaml :
       {"rulez: []\n", "rules:\n  - master: fp32\n", "rules:\n  - match: x\n",
        "rules: [\n", "default_dtype: fp8\n",
        "rules:\n  - match: \"[\"\n"
        "    master: fp32\n",
        "shard_units: [\"layers.[\"]\n"}) {
    Spec spec;
    std::vector<Problem> problems;
    EXPECT_FALSE(parseSpecYaml(yaml, "spec.yaml", spec, problems))
        << yaml.str();
    ASSERT_FALSE(problems.empty()) << yaml.str();
    EXPECT_NE(problems[0].message.find("spec.yaml:"), std::string::npos)
        << problems[0].message;
  }
}

/// LLVM's YAML parser recurses once per nesting level, and 50,000 levels
/// overflowed the stack (a segfault of both tools): deep specs are refused
/// before parsing, naming the line, however the nesting is written.
TEST(PrecisionSpecYaml, RefusesNestingDeeperThanAnySpecBeforeParsing) {
  std::string flow = "default_dtype: bf16\nrules: " + std::string(50000, '[') +
                     std::string(50000, ']') + "\n";
  std::string mappings = "rules:\n  - match: x\n    m: ";
  for (int level = 0; level < 50000; ++level)
    mappings += "{a: ";
  mappings += "b" + std::string(50000, '}') + "\n";
  std::string dashes = "\n\nrules:\n";
  for (int level = 0; level < 50000; ++level)
    dashes += "- ";
  dashes += "x\n";
  std::string indents = "rules:\n";
  for (int level = 0; level < 40; ++level)
    indents += std::string(level, ' ') + "a" + std::to_string(level) + ":\n";
  indents += std::string(40, ' ') + "x\n";
  for (auto [yaml, line] : {std::pair<std::string, unsigned>{flow, 2},
                            {mappings, 3},
                            {dashes, 4},
                            {indents, 34}}) {
    Spec spec;
    std::vector<Problem> problems;
    EXPECT_FALSE(parseSpecYaml(yaml, "deep.yaml", spec, problems));
    ASSERT_EQ(problems.size(), 1u) << joinMessages(problems);
    EXPECT_EQ(problems[0].message,
              "deep.yaml:" + std::to_string(line) +
                  ": the spec nests deeper than 32 levels");
  }
}

/// The depth count ignores brackets in quoted scalars and comments, so real
/// specs (globs are full of brackets) parse as before.
TEST(PrecisionSpecYaml, BracketsInQuotesAndCommentsAreNotNesting) {
  std::string yaml = "# " + std::string(100, '[') + "\n" +
                     "rules:\n"
                     "  - match: \"" +
                     std::string(100, '[') +
                     "*\"\n"
                     "    master: fp32\n"
                     "  - {match: '*.it''s" +
                     std::string(100, '{') + "', gather: bf16}\n";
  Spec spec;
  std::vector<Problem> problems;
  parseSpecYaml(yaml, "spec.yaml", spec, problems);
  for (const Problem &problem : problems)
    EXPECT_EQ(problem.message.find("nests deeper"), std::string::npos)
        << problem.message;
}

TEST(PrecisionSpecFlags, ParsesRulesAfterTheFile) {
  SpecOptions options;
  options.flagRules = {"*norm*:master=fp32,gather=bf16",
                       "'{q,k}_proj.*:reduce=fp32;moments=bf16'"};
  Spec spec;
  std::vector<Problem> problems;
  ASSERT_TRUE(buildSpec(options, spec, problems)) << joinMessages(problems);
  ASSERT_EQ(spec.rules.size(), 2u);
  EXPECT_EQ(spec.rules[0].origin, "--precision-rule[0]");
  EXPECT_EQ(spec.rules[0].match, "*norm*");
  EXPECT_EQ(spec.rules[0].get(Axis::Gather), DType::bf16);
  EXPECT_EQ(spec.rules[1].origin, "--precision-rule[1]");
  EXPECT_EQ(spec.rules[1].match, "{q,k}_proj.*");
  EXPECT_EQ(spec.rules[1].get(Axis::Moments), DType::bf16);
}

TEST(PrecisionSpecFlags, RejectsMalformedRules) {
  for (llvm::StringRef text : {"*norm*", "*norm*:", ":master=fp32",
                               "*:mastr=fp32", "*:master=f8", "*:master"}) {
    Spec spec;
    std::vector<Problem> problems;
    EXPECT_FALSE(parseFlagRule(text, 3, spec, problems)) << text.str();
    ASSERT_EQ(problems.size(), 1u);
    EXPECT_NE(problems[0].message.find("--precision-rule[3]"),
              std::string::npos)
        << problems[0].message;
  }
}

TEST(PrecisionSpecFlags, DefaultDtypeMustAgreeWithTheFile) {
  Spec spec = parseOrDie("default_dtype: bf16\n");
  // buildSpec reads files; emulate the file with a parsed spec.
  SpecOptions options;
  options.defaultDtype = "fp16";
  std::vector<Problem> problems;
  EXPECT_FALSE(buildSpec(options, spec, problems));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].message, "--precision-default-dtype=fp16 conflicts "
                                 "with default_dtype: bf16 at spec.yaml:1");

  Spec agreeing = parseOrDie("default_dtype: bf16\n");
  options.defaultDtype = "bfloat16";
  problems.clear();
  EXPECT_TRUE(buildSpec(options, agreeing, problems));
  EXPECT_EQ(agreeing.defaultDtype, DType::bf16);
}

TEST(PrecisionSpecYaml, ComputeDtypeWithItsLine) {
  Spec spec = parseOrDie("default_dtype: bf16\n"
                         "compute: bfloat16\n");
  EXPECT_EQ(spec.compute, DType::bf16);
  EXPECT_EQ(spec.computeOrigin, "spec.yaml:2");
  EXPECT_FALSE(parseOrDie("default_dtype: bf16\n").compute);

  Spec bad;
  std::vector<Problem> problems;
  EXPECT_FALSE(parseSpecYaml("compute: int8\n", "spec.yaml", bad, problems));
  ASSERT_EQ(problems.size(), 1u) << joinMessages(problems);
  EXPECT_EQ(problems[0].message,
            "unknown dtype 'int8' for compute at spec.yaml:1");
}

TEST(PrecisionSpecFlags, ComputeMustAgreeWithTheFile) {
  Spec spec = parseOrDie("compute: bf16\n");
  SpecOptions options;
  options.compute = "fp16";
  std::vector<Problem> problems;
  EXPECT_FALSE(buildSpec(options, spec, problems));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].message,
            "--precision-compute=fp16 conflicts with compute: bf16 at "
            "spec.yaml:1");
  EXPECT_EQ(problems[0].note, "spec.yaml:1 sets compute: bf16; give the "
                              "compute dtype once, or the same value in both "
                              "places");

  Spec fromFlag;
  options.compute = "bf16";
  problems.clear();
  EXPECT_TRUE(buildSpec(options, fromFlag, problems));
  EXPECT_EQ(fromFlag.compute, DType::bf16);
  EXPECT_EQ(fromFlag.computeOrigin, "--precision-compute");

  options.compute = "fp8";
  problems.clear();
  EXPECT_FALSE(buildSpec(options, fromFlag, problems));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].message, "unknown dtype 'fp8' in --precision-compute");
}

TEST(PrecisionSpecFlags, MissingFileIsAnError) {
  SpecOptions options;
  options.specPath = "/nonexistent/spec.yaml";
  Spec spec;
  std::vector<Problem> problems;
  EXPECT_FALSE(buildSpec(options, spec, problems));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].message.find("cannot read precision spec"),
            std::string::npos);
}

//===----------------------------------------------------------------------===//
// Resolution
//===----------------------------------------------------------------------===//

TEST(PrecisionResolve, DefaultsPerAxis) {
  StepPlan plan = resolveOrDie(Spec(), smallModel());
  const TensorPlan *proj = plan.lookup("layers.0.proj.weight");
  ASSERT_TRUE(proj);
  EXPECT_EQ(proj->get(Axis::Master), DType::fp32);
  EXPECT_EQ(proj->getDecidedBy(Axis::Master), "exported");
  EXPECT_EQ(proj->get(Axis::Gather), DType::fp32);
  EXPECT_EQ(proj->getDecidedBy(Axis::Gather), "exported");
  EXPECT_EQ(proj->get(Axis::Reduce), DType::fp32);
  EXPECT_EQ(proj->get(Axis::Moments), DType::fp32);
  EXPECT_EQ(proj->getDecidedBy(Axis::Moments), "default");
  // The integer mask takes no plan; the float RoPE table does.
  EXPECT_FALSE(plan.lookup("layers.0.rope.mask"));
  ASSERT_TRUE(plan.lookup("layers.0.rope.cos"));
}

TEST(PrecisionResolve, DefaultDtypeSetsGatherAndReduceFollows) {
  Spec spec = parseOrDie("default_dtype: bf16\n");
  StepPlan plan = resolveOrDie(spec, smallModel());
  const TensorPlan *proj = plan.lookup("layers.0.proj.weight");
  EXPECT_EQ(proj->get(Axis::Master), DType::fp32);
  EXPECT_EQ(proj->get(Axis::Gather), DType::bf16);
  EXPECT_EQ(proj->getDecidedBy(Axis::Gather), "default");
  EXPECT_EQ(proj->get(Axis::Reduce), DType::bf16);
  EXPECT_EQ(proj->getDecidedBy(Axis::Reduce), "default");
  // Buffers are not gathered: the default dtype leaves RoPE tables alone.
  const TensorPlan *cos = plan.lookup("layers.0.rope.cos");
  EXPECT_EQ(cos->get(Axis::Gather), DType::fp32);
  EXPECT_EQ(cos->getDecidedBy(Axis::Gather), "exported");
}

TEST(PrecisionResolve, LastMatchWinsPerAxis) {
  Spec spec = parseOrDie("rules:\n"
                         "  - {match: \"*\", master: bf16, gather: bf16}\n"
                         "  - {match: \"*norm*\", master: fp32}\n");
  std::vector<Problem> problems;
  ASSERT_TRUE(parseFlagRule("layers.1.*:gather=fp16", 0, spec, problems));
  StepPlan plan = resolveOrDie(spec, smallModel());
  const TensorPlan *norm0 = plan.lookup("layers.0.norm.weight");
  EXPECT_EQ(norm0->get(Axis::Master), DType::fp32);
  EXPECT_EQ(norm0->getDecidedBy(Axis::Master), "spec.yaml:3");
  EXPECT_EQ(norm0->get(Axis::Gather), DType::bf16);
  EXPECT_EQ(norm0->getDecidedBy(Axis::Gather), "spec.yaml:2");
  const TensorPlan *norm1 = plan.lookup("layers.1.norm.weight");
  EXPECT_EQ(norm1->get(Axis::Gather), DType::fp16);
  EXPECT_EQ(norm1->getDecidedBy(Axis::Gather), "--precision-rule[0]");
  EXPECT_EQ(norm1->getDecidedBy(Axis::Reduce), "--precision-rule[0]");
}

TEST(PrecisionResolve, RuleMatchingNothingIsAnError) {
  Spec spec = parseOrDie("rules:\n"
                         "  - {match: \"*nrom*\", master: fp32}\n"
                         "  - {match: \"*.mask\", master: fp32}\n");
  StepPlan plan;
  std::vector<Problem> errors;
  EXPECT_FALSE(resolvePlan(spec, smallModel(), "s", {}, plan, errors));
  ASSERT_EQ(errors.size(), 2u) << joinMessages(errors);
  EXPECT_EQ(errors[0].message, "rule {match: \"*nrom*\", master: fp32} at "
                               "spec.yaml:2 matches no parameter or buffer "
                               "of step @s");
  EXPECT_NE(errors[1].note.find("'layers.0.rope.mask', which takes no "
                                "precision plan"),
            std::string::npos)
      << errors[1].note;
}

TEST(PrecisionResolve, CoverageOfUnplannableDtypes) {
  std::vector<TensorDesc> tensors = {parameter("w", {2})};
  tensors[0].exported = std::nullopt;
  tensors[0].exportedTypeName = "f64";
  StepPlan plan;
  std::vector<Problem> errors;
  EXPECT_FALSE(resolvePlan(Spec(), tensors, "s", {}, plan, errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].fqn, "w");
  EXPECT_NE(errors[0].message.find("left without a precision plan"),
            std::string::npos);
  // A rule that sets the master covers it.
  Spec spec = parseOrDie("rules: [{match: w, master: fp32}]\n");
  resolveOrDie(spec, tensors);
}

//===----------------------------------------------------------------------===//
// Shard groups
//===----------------------------------------------------------------------===//

TEST(PrecisionGroups, UnitGlobsMatchOneSegmentPerStar) {
  ShardUnitPattern layers{"layers.*", "spec.yaml:1"};
  EXPECT_TRUE(layers.matches("layers.0"));
  EXPECT_FALSE(layers.matches("layers.0.mlp"));
  EXPECT_FALSE(layers.matches("layers"));
  ShardUnitPattern deep{"**.mlp", "spec.yaml:1"};
  EXPECT_TRUE(deep.matches("mlp"));
  EXPECT_TRUE(deep.matches("layers.0.mlp"));
  EXPECT_FALSE(deep.matches("layers.0.mlp.up"));
  ShardUnitPattern root{"", "spec.yaml:1"};
  EXPECT_TRUE(root.matches(""));
  EXPECT_FALSE(root.matches("layers"));
}

TEST(PrecisionGroups, NestedGroupsPerGatherDtype) {
  Spec spec =
      parseOrDie("default_dtype: bf16\n"
                 "shard_units: [\"layers.*\"]\n"
                 "rules:\n"
                 "  - {match: \"*norm*\", master: fp32, gather: fp32}\n");
  StepPlan plan = resolveOrDie(spec, smallModel());
  ASSERT_EQ(plan.groups.size(), 6u);
  EXPECT_EQ(plan.groups[0].name, "root");
  EXPECT_EQ(plan.groups[0].unit, "");
  EXPECT_EQ(plan.groups[0].gather, DType::bf16);
  EXPECT_FALSE(plan.groups[0].reshardAfterForward);
  EXPECT_EQ(plan.groups[0].members,
            (std::vector<std::string>{"embed.weight", "head.weight"}));
  EXPECT_EQ(plan.groups[1].name, "root/fp32");
  EXPECT_EQ(plan.groups[1].nestedIn, "root");
  EXPECT_EQ(plan.groups[1].members, (std::vector<std::string>{"norm.weight"}));
  EXPECT_EQ(plan.groups[2].name, "layers.0");
  EXPECT_TRUE(plan.groups[2].reshardAfterForward);
  EXPECT_EQ(plan.groups[2].members,
            (std::vector<std::string>{"layers.0.proj.weight"}));
  EXPECT_EQ(plan.groups[3].name, "layers.0/fp32");
  EXPECT_EQ(plan.groups[3].nestedIn, "layers.0");
  EXPECT_FALSE(plan.groups[3].reshardAfterForward);
  EXPECT_EQ(plan.lookup("layers.1.norm.weight")->group, "layers.1/fp32");
}

TEST(PrecisionGroups, MainGroupHoldsMostElements) {
  // The norm comes first but the projection is bigger.
  Spec spec = parseOrDie("rules:\n"
                         "  - {match: \"*proj*\", gather: bf16}\n");
  std::vector<TensorDesc> tensors = {parameter("l.norm.weight", {4}),
                                     parameter("l.proj.weight", {4, 4})};
  StepPlan plan = resolveOrDie(spec, tensors);
  ASSERT_EQ(plan.groups.size(), 2u);
  EXPECT_EQ(plan.groups[0].gather, DType::bf16);
  EXPECT_EQ(plan.groups[1].name, "root/fp32");
}

TEST(PrecisionGroups, UnitMatchingNothingIsAnError) {
  Spec spec = parseOrDie("shard_units: [\"blocks.*\"]\n");
  StepPlan plan;
  std::vector<Problem> errors;
  EXPECT_FALSE(resolvePlan(spec, smallModel(), "s", {}, plan, errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(
      errors[0].message,
      "shard unit 'blocks.*' at spec.yaml:1 matches no module of step @s");
}

//===----------------------------------------------------------------------===//
// Lints and totals
//===----------------------------------------------------------------------===//

TEST(PrecisionNumerics, SpacingIsTheUlpAtTheMagnitude) {
  EXPECT_EQ(getSpacing(DType::bf16, 1.0), std::ldexp(1.0, -7));
  EXPECT_EQ(getSpacing(DType::bf16, 0.99), std::ldexp(1.0, -8));
  EXPECT_EQ(getSpacing(DType::bf16, 0.05), std::ldexp(1.0, -12));
  EXPECT_EQ(getSpacing(DType::fp16, 1.0), std::ldexp(1.0, -10));
  EXPECT_EQ(getSpacing(DType::fp32, 1.0), std::ldexp(1.0, -23));
  // Zero and tiny magnitudes: the subnormal spacing.
  EXPECT_EQ(getSpacing(DType::fp16, 0.0), std::ldexp(1.0, -24));
  EXPECT_EQ(getSpacing(DType::bf16, 1e-45), std::ldexp(1.0, -133));
}

TEST(PrecisionLints, StallLintWarnsOnNormGainsOnly) {
  Spec spec = parseOrDie("rules:\n"
                         "  - {match: \"*\", master: bf16, moments: bf16}\n");
  StepPlan plan = resolveOrDie(spec, smallModel());
  std::vector<std::string> stalled;
  unsigned momentsWarnings = 0;
  for (const Problem &warning : plan.warnings) {
    if (!warning.fqn.empty())
      stalled.push_back(warning.fqn);
    else
      ++momentsWarnings;
  }
  // RMS 1.0 (norm gains, the N(0,1) embedding) stalls; RMS 0.05 does not.
  EXPECT_EQ(stalled,
            (std::vector<std::string>{"embed.weight", "layers.0.norm.weight",
                                      "layers.1.norm.weight", "norm.weight"}));
  EXPECT_EQ(momentsWarnings, 1u);
  // A larger learning rate moves them.
  StepPlan fast = resolveOrDie(spec, smallModel(), /*lr=*/1e-2);
  for (const Problem &warning : fast.warnings)
    EXPECT_TRUE(warning.fqn.empty()) << warning.message;
}

TEST(PrecisionTotals, CountsBytesAndCollectives) {
  Spec spec =
      parseOrDie("default_dtype: bf16\n"
                 "shard_units: [\"layers.*\"]\n"
                 "rules:\n"
                 "  - {match: \"*norm*\", master: fp32, gather: fp32}\n");
  StepPlan plan = resolveOrDie(spec, smallModel());
  Totals totals = computeTotals(plan);
  // 3 norms of 4 (fp32 everything: 4 + 2*4 bytes each element), 4 others:
  // embed 32, 2 proj 16, head 32 = 96 elements (2 + 4 + 8 bytes each).
  EXPECT_EQ(totals.parameters, 7);
  EXPECT_EQ(totals.parameterElements, 108);
  EXPECT_EQ(totals.parameterBytes, 96 * 2);
  EXPECT_EQ(totals.masterBytes, 108 * 4);
  EXPECT_EQ(totals.momentsBytes, 108 * 8);
  EXPECT_EQ(totals.residentBytes, 96 * 14 + 12 * 12);
  EXPECT_EQ(totals.bufferBytes, 16 * 4);
  // root bf16 once (64 elements), root/fp32 once (4), each layer's bf16
  // group twice (16), each layer's fp32 group once (4).
  EXPECT_EQ(totals.gatheredBytes, 64 * 2 + 4 * 4 + 2 * (2 * 16 * 2 + 4 * 4));
  EXPECT_EQ(totals.allGathers, 1 + 1 + 2 * (2 + 1));
  EXPECT_EQ(totals.reduceScatters, 6);
  EXPECT_EQ(totals.reducedBytes, 96 * 2 + 12 * 4);
}

} // namespace
