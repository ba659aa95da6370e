//===- PrecisionSpec.cpp - Precision specs and resolved plans -------------===//
//
// Parses specs (YAML through LLVM YAML I/O, and flag rules), resolves them
// per tensor, forms shard groups and runs the lints. See PrecisionSpec.h.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Transforms/PrecisionSpec.h"
#include "mantissa/Format/InputFile.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/GlobPattern.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/YAMLTraits.h"

#include <algorithm>
#include <cmath>

using namespace mlir::mantissa;
using namespace mlir::mantissa::precision;
using llvm::StringRef;

/// Most alternatives a `{a,b,...}` brace expansion in a glob may produce.
static constexpr size_t kMaxGlobAlternatives = 1024;

static constexpr llvm::StringLiteral kExpectedDTypes =
    "expected fp32, bf16 or fp16 (or torch's float32, bfloat16, float16)";
static constexpr llvm::StringLiteral kExpectedAxes =
    "expected master, gather, reduce or moments";
/// The master value that keeps an fp32 master as the bf16 parameter plus
/// its low 16 bits.
static constexpr llvm::StringLiteral kSplitMasterName = "fp32_split";

/// What a value of `axis` may be: a dtype, and for the master also
/// fp32_split.
static std::string expectedDTypes(Axis axis) {
  if (axis != Axis::Master)
    return kExpectedDTypes.str();
  return "expected fp32, fp32_split, bf16 or fp16 (or torch's float32, "
         "bfloat16, float16)";
}

/// A rule's value for `axis`: a dtype, or for the master also fp32_split
/// (an fp32 master, `split`).
static std::optional<DType> parseAxisValue(Axis axis, StringRef value,
                                           bool &split) {
  split = axis == Axis::Master && value == kSplitMasterName;
  return split ? DType::fp32 : train::parseDTypeName(value);
}

llvm::StringRef TensorPlan::getName(Axis axis) const {
  if (axis == Axis::Master && splitMaster)
    return kSplitMasterName;
  return train::stringifyDType(get(axis));
}

StringRef precision::stringifyAxis(Axis axis) {
  switch (axis) {
  case Axis::Master:
    return "master";
  case Axis::Gather:
    return "gather";
  case Axis::Reduce:
    return "reduce";
  case Axis::Moments:
    return "moments";
  }
  llvm_unreachable("unknown axis");
}

std::optional<Axis> precision::parseAxisName(StringRef name) {
  for (Axis axis : kAllAxes)
    if (stringifyAxis(axis) == name)
      return axis;
  return std::nullopt;
}

/// `%g`, so that 0.0078125 and 0.001 print as written.
static std::string formatNumber(double value) {
  return llvm::formatv("{0}", llvm::format("%g", value)).str();
}

/// `'a', 'b', 'c' and 2 more`.
static std::string quoteSome(llvm::ArrayRef<std::string> names,
                             size_t limit = 3) {
  std::string text;
  for (auto [index, name] : llvm::enumerate(names)) {
    if (index == limit) {
      text += llvm::formatv(" and {0} more", names.size() - limit).str();
      break;
    }
    if (index)
      text += ", ";
    text += "'" + name + "'";
  }
  return text;
}

/// Checks a glob's syntax; returns the parser's complaint, empty if none.
static std::string checkGlob(StringRef glob) {
  llvm::Expected<llvm::GlobPattern> pattern =
      llvm::GlobPattern::create(glob, kMaxGlobAlternatives);
  if (pattern)
    return {};
  return llvm::toString(pattern.takeError());
}

std::string Rule::describe() const {
  if (fromFlag)
    return origin + " '" + text + "'";
  return "rule " + text + " at " + origin;
}

//===----------------------------------------------------------------------===//
// Shard unit globs
//===----------------------------------------------------------------------===//

static llvm::SmallVector<StringRef> splitSegments(StringRef path) {
  llvm::SmallVector<StringRef> segments;
  if (!path.empty())
    path.split(segments, '.');
  return segments;
}

/// Whether `path` matches `glob`, segment by segment; `**` matches any
/// number of segments.
static bool matchSegments(llvm::ArrayRef<llvm::GlobPattern> glob,
                          llvm::ArrayRef<bool> anySegments,
                          llvm::ArrayRef<StringRef> path) {
  if (glob.empty())
    return path.empty();
  if (anySegments.front()) {
    for (size_t skip = 0; skip <= path.size(); ++skip)
      if (matchSegments(glob.drop_front(), anySegments.drop_front(),
                        path.drop_front(skip)))
        return true;
    return false;
  }
  return !path.empty() && glob.front().match(path.front()) &&
         matchSegments(glob.drop_front(), anySegments.drop_front(),
                       path.drop_front());
}

bool ShardUnitPattern::matches(StringRef modulePath) const {
  llvm::SmallVector<StringRef> globSegments = splitSegments(glob);
  llvm::SmallVector<llvm::GlobPattern> compiled;
  llvm::SmallVector<bool> anySegments;
  for (StringRef segment : globSegments) {
    llvm::Expected<llvm::GlobPattern> pattern =
        llvm::GlobPattern::create(segment, kMaxGlobAlternatives);
    if (!pattern) {
      llvm::consumeError(pattern.takeError());
      return false;
    }
    compiled.push_back(std::move(*pattern));
    anySegments.push_back(segment == "**");
  }
  return matchSegments(compiled, anySegments, splitSegments(modulePath));
}

//===----------------------------------------------------------------------===//
// YAML
//===----------------------------------------------------------------------===//

namespace {
/// A scalar of the spec file and where it was written.
struct LocatedScalar {
  std::string value;
  unsigned line = 0;
  unsigned column = 0;
};

/// A rule as written: its key/value pairs in file order.
struct YamlRule {
  unsigned line = 0;
  std::vector<std::pair<std::string, LocatedScalar>> entries;
};

struct YamlSpec {
  std::optional<LocatedScalar> defaultDtype;
  std::optional<LocatedScalar> compute;
  std::vector<LocatedScalar> shardUnits;
  std::vector<YamlRule> rules;
};

/// Lets the traits below find where a node was written: YAML I/O hands
/// them the context, and the Input knows the node it is reading.
struct YamlContext {
  StringRef text;
  llvm::yaml::Input *input = nullptr;
  /// Offsets of the first character of each line, built on first use, so
  /// that locating a node is a binary search (a spec of N rules is parsed
  /// in O(N log N), not by counting newlines from the start each time).
  mutable std::vector<size_t> lineStarts;

  /// 1-based line and column of `loc`, a pointer into `text`.
  std::pair<unsigned, unsigned> getLineAndColumn(llvm::SMLoc loc) const {
    const char *pointer = loc.getPointer();
    if (!pointer || pointer < text.begin() || pointer > text.end())
      return {0, 0};
    if (lineStarts.empty()) {
      lineStarts.push_back(0);
      for (size_t i = 0; i < text.size(); ++i)
        if (text[i] == '\n')
          lineStarts.push_back(i + 1);
    }
    size_t offset = size_t(pointer - text.begin());
    auto next = std::upper_bound(lineStarts.begin(), lineStarts.end(), offset);
    size_t line = size_t(next - lineStarts.begin()); // 1-based
    return {unsigned(line), unsigned(offset - lineStarts[line - 1] + 1)};
  }

  std::pair<unsigned, unsigned> getCurrentLineAndColumn() const {
    if (const llvm::yaml::Node *node = input->getCurrentNode())
      return getLineAndColumn(node->getSourceRange().Start);
    return {0, 0};
  }
};

/// Collects YAML I/O's own errors (syntax, unknown keys, wrong shapes).
struct YamlErrors {
  std::string displayName;
  std::vector<Problem> *problems;
};
} // namespace

LLVM_YAML_IS_SEQUENCE_VECTOR(LocatedScalar)
LLVM_YAML_IS_SEQUENCE_VECTOR(YamlRule)

namespace llvm::yaml {
template <> struct ScalarTraits<LocatedScalar> {
  static void output(const LocatedScalar &scalar, void *, raw_ostream &os) {
    os << scalar.value;
  }
  static StringRef input(StringRef text, void *context, LocatedScalar &scalar) {
    scalar.value = text.str();
    std::tie(scalar.line, scalar.column) =
        static_cast<YamlContext *>(context)->getCurrentLineAndColumn();
    return {};
  }
  static QuotingType mustQuote(StringRef) { return QuotingType::Double; }
};

/// A rule maps every key it has: `match` and the axes are told apart (and
/// unknown axes reported with the rule) after reading, rather than left to
/// YAML I/O's generic "unknown key".
template <> struct MappingTraits<YamlRule> {
  static void mapping(IO &io, YamlRule &rule) {
    auto *context = static_cast<YamlContext *>(io.getContext());
    rule.line = context->getCurrentLineAndColumn().first;
    std::vector<std::string> keys;
    for (StringRef key : io.keys())
      keys.push_back(key.str());
    for (const std::string &key : keys) {
      LocatedScalar value;
      io.mapRequired(key.c_str(), value);
      rule.entries.emplace_back(key, value);
    }
    llvm::sort(rule.entries, [](const auto &a, const auto &b) {
      return std::make_pair(a.second.line, a.second.column) <
             std::make_pair(b.second.line, b.second.column);
    });
  }
};

template <> struct MappingTraits<YamlSpec> {
  static void mapping(IO &io, YamlSpec &spec) {
    io.mapOptional("default_dtype", spec.defaultDtype);
    io.mapOptional("compute", spec.compute);
    io.mapOptional("shard_units", spec.shardUnits);
    io.mapOptional("rules", spec.rules);
  }
};
} // namespace llvm::yaml

static void collectYamlError(const llvm::SMDiagnostic &diagnostic,
                             void *context) {
  auto *errors = static_cast<YamlErrors *>(context);
  errors->problems->push_back(
      {llvm::formatv("{0}:{1}:{2}: {3}", errors->displayName,
                     diagnostic.getLineNo(), diagnostic.getColumnNo() + 1,
                     diagnostic.getMessage())
           .str(),
       "a spec has the keys default_dtype, compute, shard_units and rules; "
       "each rule "
       "is a mapping with match and the axes it sets",
       {},
       {}});
}

/// `{match: "*norm*", master: fp32}`.
static std::string formatRuleText(const YamlRule &rule) {
  std::string text = "{";
  for (auto [index, entry] : llvm::enumerate(rule.entries)) {
    if (index)
      text += ", ";
    text += entry.first + ": ";
    text += entry.first == "match" ? "\"" + entry.second.value + "\""
                                   : entry.second.value;
  }
  return text + "}";
}

/// Deepest nesting of collections a spec file may have. A real spec nests
/// three (the document's mapping, `rules`, a rule); LLVM's YAML parser
/// recurses once per level and overflows the stack at tens of thousands.
constexpr unsigned kMaxSpecNesting = 32;

/// The first line of `text` at which collections nest deeper than `limit`,
/// or 0. Counted before parsing, without recursion, as an upper bound of what
/// the parser will see: every flow collection (`[`, `{`, outside quotes and
/// comments) is a level, and every block indentation that is deeper than the
/// enclosing one, as is each `- ` or `? ` that opens a collection on the same
/// line. A block collection nested at its parent's indentation
/// (`key:\n- item`) is not counted, so the parser sees at most twice the
/// count.
static unsigned findTooDeeplyNestedLine(StringRef text, unsigned limit) {
  llvm::SmallVector<size_t, 8> blockIndents;
  unsigned flowDepth = 0;
  char quote = 0;
  unsigned lineNumber = 0;
  while (!text.empty()) {
    auto [line, rest] = text.split('\n');
    text = rest;
    ++lineNumber;
    size_t column = 0;
    // Indentation opens block collections only outside flow collections and
    // quoted scalars.
    if (flowDepth == 0 && !quote) {
      column = line.find_first_not_of(' ');
      if (column == StringRef::npos || line[column] == '#')
        continue;
      while (!blockIndents.empty() && blockIndents.back() > column)
        blockIndents.pop_back();
      if (blockIndents.empty() || blockIndents.back() < column)
        blockIndents.push_back(column);
      while (column < line.size() &&
             (line[column] == '-' || line[column] == '?') &&
             (column + 1 == line.size() || line[column + 1] == ' ')) {
        column = line.find_first_not_of(' ', column + 1);
        if (column == StringRef::npos)
          break;
        blockIndents.push_back(column);
      }
      if (column == StringRef::npos)
        column = line.size();
    }
    if (blockIndents.size() + flowDepth > limit)
      return lineNumber;
    for (size_t index = column; index < line.size(); ++index) {
      char c = line[index];
      if (quote == '\'') {
        if (c == '\'' && index + 1 < line.size() && line[index + 1] == '\'')
          ++index;
        else if (c == '\'')
          quote = 0;
        continue;
      }
      if (quote == '"') {
        if (c == '\\')
          ++index;
        else if (c == '"')
          quote = 0;
        continue;
      }
      char before = index ? line[index - 1] : ' ';
      bool startsToken = before == ' ' || before == '\t' ||
                         StringRef(",[{:-?").contains(before);
      if (c == '#' && (before == ' ' || before == '\t' || index == 0))
        break;
      if ((c == '\'' || c == '"') && startsToken) {
        quote = c;
      } else if (c == '[' || c == '{') {
        if (blockIndents.size() + ++flowDepth > limit)
          return lineNumber;
      } else if ((c == ']' || c == '}') && flowDepth) {
        --flowDepth;
      }
    }
  }
  return 0;
}

std::optional<DType> precision::parseComputeDType(StringRef name) {
  return train::parseDTypeName(name);
}

bool precision::parseSpecYaml(StringRef text, StringRef displayName, Spec &spec,
                              std::vector<Problem> &problems) {
  size_t problemsBefore = problems.size();
  if (unsigned line = findTooDeeplyNestedLine(text, kMaxSpecNesting)) {
    problems.push_back(
        {llvm::formatv("{0}:{1}: the spec nests deeper than {2} levels",
                       displayName, line, kMaxSpecNesting)
             .str(),
         "a precision spec nests three levels (the document, rules, a rule); "
         "a deeper one is refused before parsing",
         {},
         {}});
    return false;
  }
  YamlContext context{text};
  YamlErrors errors{displayName.str(), &problems};
  YamlSpec parsed;
  {
    llvm::yaml::Input input(llvm::MemoryBufferRef(text, displayName), &context,
                            collectYamlError, &errors);
    context.input = &input;
    input >> parsed;
    if (input.error() && problems.size() == problemsBefore)
      problems.push_back({(displayName + ": not a valid precision spec").str(),
                          "a spec is a YAML mapping",
                          {},
                          {}});
    context.input = nullptr;
  }
  if (problems.size() != problemsBefore)
    return false;

  auto origin = [&](unsigned line) {
    return llvm::formatv("{0}:{1}", displayName, line).str();
  };

  if (parsed.defaultDtype) {
    std::optional<DType> dtype =
        train::parseDTypeName(parsed.defaultDtype->value);
    if (!dtype)
      problems.push_back({llvm::formatv("unknown dtype '{0}' for default_dtype "
                                        "at {1}",
                                        parsed.defaultDtype->value,
                                        origin(parsed.defaultDtype->line))
                              .str(),
                          kExpectedDTypes.str(),
                          {},
                          {}});
    spec.defaultDtype = dtype;
    spec.defaultDtypeOrigin = origin(parsed.defaultDtype->line);
  }

  if (parsed.compute) {
    std::optional<DType> dtype = parseComputeDType(parsed.compute->value);
    if (!dtype)
      problems.push_back(
          {llvm::formatv("unknown dtype '{0}' for compute at {1}",
                         parsed.compute->value, origin(parsed.compute->line))
               .str(),
           kExpectedDTypes.str(),
           {},
           {}});
    spec.compute = dtype;
    spec.computeOrigin = origin(parsed.compute->line);
  }

  for (const LocatedScalar &unit : parsed.shardUnits) {
    std::string complaint;
    for (StringRef segment : splitSegments(unit.value))
      if (complaint.empty())
        complaint = checkGlob(segment);
    if (!complaint.empty()) {
      problems.push_back(
          {llvm::formatv("invalid shard unit glob '{0}' at {1}: "
                         "{2}",
                         unit.value, origin(unit.line), complaint)
               .str(),
           "shard units are globs over module paths, matched "
           "segment by segment",
           {},
           {}});
      continue;
    }
    spec.shardUnits.push_back({unit.value, origin(unit.line)});
  }

  for (const YamlRule &yamlRule : parsed.rules) {
    Rule rule;
    rule.origin = origin(yamlRule.line);
    rule.text = formatRuleText(yamlRule);
    bool valid = true, hasMatch = false;
    for (const auto &[key, value] : yamlRule.entries) {
      if (key == "match") {
        hasMatch = true;
        rule.match = value.value;
        std::string complaint = checkGlob(value.value);
        if (!complaint.empty()) {
          problems.push_back({llvm::formatv("invalid glob '{0}' in rule {1} at "
                                            "{2}: {3}",
                                            value.value, rule.text,
                                            origin(value.line), complaint)
                                  .str(),
                              "match is a glob over FQNs: * ? [...] {a,b}",
                              {},
                              {}});
          valid = false;
        }
        continue;
      }
      std::optional<Axis> axis = parseAxisName(key);
      if (!axis) {
        problems.push_back(
            {llvm::formatv("unknown precision axis '{0}' in rule {1} at {2}",
                           key, rule.text, origin(value.line))
                 .str(),
             kExpectedAxes.str(),
             {},
             {}});
        valid = false;
        continue;
      }
      bool split = false;
      std::optional<DType> dtype = parseAxisValue(*axis, value.value, split);
      if (!dtype) {
        problems.push_back(
            {llvm::formatv("unknown dtype '{0}' for {1} in rule {2} at {3}",
                           value.value, key, rule.text, origin(value.line))
                 .str(),
             expectedDTypes(*axis),
             {},
             {}});
        valid = false;
        continue;
      }
      rule.dtypes[static_cast<unsigned>(*axis)] = dtype;
      if (*axis == Axis::Master)
        rule.splitMaster = split;
    }
    if (!hasMatch) {
      problems.push_back(
          {llvm::formatv("rule {0} at {1} has no 'match'", rule.text,
                         rule.origin)
               .str(),
           "every rule names the tensors it applies to with match: GLOB",
           {},
           {}});
      valid = false;
    } else if (valid && llvm::none_of(rule.dtypes, [](auto dtype) {
                 return dtype.has_value();
               })) {
      problems.push_back(
          {llvm::formatv("rule {0} at {1} sets no precision axis", rule.text,
                         rule.origin)
               .str(),
           "a rule sets at least one of master, gather, reduce, moments",
           {},
           {}});
      valid = false;
    }
    if (valid)
      spec.rules.push_back(std::move(rule));
  }
  return problems.size() == problemsBefore;
}

//===----------------------------------------------------------------------===//
// Flags
//===----------------------------------------------------------------------===//

bool precision::parseFlagRule(StringRef text, unsigned index, Spec &spec,
                              std::vector<Problem> &problems) {
  Rule rule;
  rule.fromFlag = true;
  rule.origin = llvm::formatv("--precision-rule[{0}]", index).str();
  // Quotes that survived the shell or a pass pipeline string are not part of
  // the rule.
  StringRef body = text.trim();
  if (body.size() >= 2 && (body.front() == '"' || body.front() == '\'') &&
      body.back() == body.front())
    body = body.drop_front().drop_back();
  rule.text = body.str();
  auto fail = [&](const llvm::Twine &message, const llvm::Twine &note) {
    problems.push_back(
        {(message + " in " + rule.describe()).str(), note.str(), {}, {}});
    return false;
  };
  static constexpr llvm::StringLiteral kFlagSyntax =
      "a flag rule is GLOB:AXIS=DTYPE[,AXIS=DTYPE...], e.g. "
      "'*norm*:master=fp32,gather=fp32'";

  // The glob may hold ',' and ':' inside brace alternatives, the axis list
  // holds no ':', so the last ':' separates them.
  if (!body.contains(':'))
    return fail("missing ':' between the glob and the axes", kFlagSyntax);
  auto [glob, axes] = body.rsplit(':');
  if (glob.empty())
    return fail("empty glob", kFlagSyntax);
  std::string complaint = checkGlob(glob);
  if (!complaint.empty())
    return fail("invalid glob '" + glob + "': " + complaint,
                "match is a glob over FQNs: * ? [...] {a,b}");
  rule.match = glob.str();

  // ';' also separates axes, for pass pipelines where ',' separates options.
  llvm::SmallVector<StringRef> settings;
  llvm::SplitString(axes, settings, ",;");
  if (settings.empty())
    return fail("no axis set", kFlagSyntax);
  for (StringRef setting : settings) {
    auto [axisName, dtypeName] = setting.split('=');
    axisName = axisName.trim();
    dtypeName = dtypeName.trim();
    std::optional<Axis> axis = parseAxisName(axisName);
    if (!axis)
      return fail("unknown precision axis '" + axisName + "'", kExpectedAxes);
    bool split = false;
    std::optional<DType> dtype = parseAxisValue(*axis, dtypeName, split);
    if (!dtype)
      return fail("unknown dtype '" + dtypeName + "' for " + axisName,
                  expectedDTypes(*axis));
    rule.dtypes[static_cast<unsigned>(*axis)] = dtype;
    if (*axis == Axis::Master)
      rule.splitMaster = split;
  }
  spec.rules.push_back(std::move(rule));
  return true;
}

/// A dtype given by `flag` (`value`, read by `parse`; empty: not given) for
/// the spec's `key`: taken when the file sets none, accepted when it agrees,
/// else an error.
static void mergeFlagDType(StringRef flag, StringRef key, StringRef what,
                           StringRef value,
                           std::optional<DType> (*parse)(StringRef),
                           std::optional<DType> &target, std::string &origin,
                           std::vector<Problem> &problems) {
  if (value.empty())
    return;
  std::optional<DType> dtype = parse(value);
  if (!dtype) {
    problems.push_back(
        {llvm::formatv("unknown dtype '{0}' in {1}", value, flag).str(),
         kExpectedDTypes.str(),
         {},
         {}});
  } else if (target && *target != *dtype) {
    StringRef set = train::stringifyDType(*target);
    problems.push_back(
        {llvm::formatv("{0}={1} conflicts with {2}: {3} at {4}", flag, value,
                       key, set, origin)
             .str(),
         llvm::formatv("{0} sets {1}: {2}; give the {3} once, or the same "
                       "value in both places",
                       origin, key, set, what)
             .str(),
         {},
         {}});
  } else if (!target) {
    target = dtype;
    origin = flag.str();
  }
}

bool precision::buildSpec(const SpecOptions &options, Spec &spec,
                          std::vector<Problem> &problems) {
  size_t problemsBefore = problems.size();
  if (!options.specPath.empty()) {
    std::vector<uint8_t> bytes;
    std::string readError;
    if (!rt::readRegularFile(options.specPath, bytes, readError)) {
      problems.push_back({llvm::formatv("cannot read precision spec '{0}': {1}",
                                        options.specPath, readError)
                              .str(),
                          "the spec is a YAML file given by path",
                          {},
                          {}});
      return false;
    }
    size_t rulesBefore = spec.rules.size(),
           unitsBefore = spec.shardUnits.size();
    bool hadDefault = spec.defaultDtype.has_value(),
         hadCompute = spec.compute.has_value();
    StringRef text(reinterpret_cast<const char *>(bytes.data()), bytes.size());
    if (parseSpecYaml(text, options.specPath, spec, problems) &&
        spec.rules.size() == rulesBefore &&
        spec.shardUnits.size() == unitsBefore &&
        spec.defaultDtype.has_value() == hadDefault &&
        spec.compute.has_value() == hadCompute)
      // Almost always a wrong or truncated file: training would go on with
      // the exported dtypes as if no spec had been given.
      problems.push_back(
          {llvm::formatv("precision spec '{0}' sets nothing", options.specPath)
               .str(),
           "it has no rules, no default_dtype, no compute and no shard_units; "
           "give at "
           "least one, or no --precision to keep the exported dtypes",
           {},
           {}});
  }
  for (auto [index, text] : llvm::enumerate(options.flagRules))
    parseFlagRule(text, index, spec, problems);

  mergeFlagDType("--precision-default-dtype", "default_dtype", "default dtype",
                 options.defaultDtype, train::parseDTypeName, spec.defaultDtype,
                 spec.defaultDtypeOrigin, problems);
  mergeFlagDType("--precision-compute", "compute", "compute dtype",
                 options.compute, parseComputeDType, spec.compute,
                 spec.computeOrigin, problems);
  return problems.size() == problemsBefore;
}

//===----------------------------------------------------------------------===//
// Resolution
//===----------------------------------------------------------------------===//

int64_t TensorDesc::getNumElements() const {
  int64_t count = 1;
  for (int64_t size : shape)
    count *= size;
  return count;
}

const TensorPlan *StepPlan::lookup(StringRef fqn) const {
  for (const TensorPlan &tensor : tensors)
    if (tensor.tensor.fqn == fqn)
      return &tensor;
  return nullptr;
}

/// Whether `module` is `unit` or lies beneath it.
static bool isWithinUnit(StringRef module, StringRef unit) {
  return unit.empty() || module == unit ||
         (module.starts_with(unit) && module.drop_front(unit.size())[0] == '.');
}

/// Every module path that owns a tensor, and all their ancestors, in first
/// appearance order; the root is not listed.
static std::vector<std::string>
collectModulePaths(llvm::ArrayRef<TensorDesc> tensors) {
  std::vector<std::string> paths;
  llvm::StringSet<> seen;
  for (const TensorDesc &tensor : tensors) {
    llvm::SmallVector<StringRef> segments = splitSegments(tensor.module);
    std::string path;
    for (StringRef segment : segments) {
      if (!path.empty())
        path += ".";
      path += segment.str();
      if (seen.insert(path).second)
        paths.push_back(path);
    }
  }
  return paths;
}

/// Resolves one tensor's axes: the last matching rule per axis, then the
/// defaults of PrecisionSpec.h.
static bool resolveTensor(const TensorDesc &tensor, const Spec &spec,
                          llvm::ArrayRef<llvm::GlobPattern> globs,
                          std::vector<bool> &ruleMatched, TensorPlan &plan,
                          std::vector<Problem> &errors) {
  plan.tensor = tensor;
  std::array<const Rule *, kNumAxes> decidingRule{};
  for (auto [index, rule] : llvm::enumerate(spec.rules)) {
    if (!globs[index].match(tensor.fqn))
      continue;
    ruleMatched[index] = true;
    for (Axis axis : kAllAxes)
      if (rule.get(axis))
        decidingRule[static_cast<unsigned>(axis)] = &rule;
  }
  auto fromRule = [&](Axis axis) -> bool {
    const Rule *rule = decidingRule[static_cast<unsigned>(axis)];
    if (!rule)
      return false;
    plan.dtypes[static_cast<unsigned>(axis)] = *rule->get(axis);
    plan.decidedBy[static_cast<unsigned>(axis)] = rule->origin;
    if (axis == Axis::Master)
      plan.splitMaster = rule->splitMaster;
    return true;
  };
  auto inherit = [&](Axis axis, Axis from) {
    plan.dtypes[static_cast<unsigned>(axis)] = plan.get(from);
    plan.decidedBy[static_cast<unsigned>(axis)] = plan.getDecidedBy(from).str();
  };

  // master: the resident dtype; unset, what torch exported.
  if (!fromRule(Axis::Master)) {
    if (!tensor.exported) {
      errors.push_back(
          {llvm::formatv("{0} '{1}' is left without a precision plan: it was "
                         "exported as {2}, which no plan can hold, and no "
                         "rule sets its master",
                         tensor.isParameter ? "parameter" : "buffer",
                         tensor.fqn, tensor.exportedTypeName)
               .str(),
           llvm::formatv("'{0}' is declared here; add a rule matching it with "
                         "master: fp32, bf16 or fp16",
                         tensor.fqn)
               .str(),
           tensor.fqn, tensor.fqn});
      return false;
    }
    plan.dtypes[static_cast<unsigned>(Axis::Master)] = *tensor.exported;
    plan.decidedBy[static_cast<unsigned>(Axis::Master)] = kExportedOrigin.str();
  }
  // gather: the compute and wire dtype; unset, the default dtype, else the
  // master. The default dtype is the parameters' wire dtype: buffers are not
  // sharded, and rounding them (RoPE tables, position data) would silently
  // change math the exported graph does in their dtype, so only a rule that
  // names them changes their gather dtype.
  if (!fromRule(Axis::Gather)) {
    if (spec.defaultDtype && tensor.isParameter) {
      plan.dtypes[static_cast<unsigned>(Axis::Gather)] = *spec.defaultDtype;
      plan.decidedBy[static_cast<unsigned>(Axis::Gather)] =
          kDefaultOrigin.str();
    } else {
      inherit(Axis::Gather, Axis::Master);
    }
  }
  // fp32_split completes a bf16 value: the remainder is the low half of the
  // fp32 master whose high half is the gathered bf16 parameter.
  if (plan.splitMaster &&
      (!tensor.isParameter || plan.get(Axis::Gather) != DType::bf16)) {
    const Rule *rule = decidingRule[static_cast<unsigned>(Axis::Master)];
    std::string why =
        tensor.isParameter
            ? llvm::formatv("it is gathered in {0} ({1})",
                            train::stringifyDType(plan.get(Axis::Gather)),
                            plan.getDecidedBy(Axis::Gather))
                  .str()
            : std::string("it is a buffer, which has no optimizer state");
    errors.push_back(
        {llvm::formatv(
             "{0} gives {1} '{2}' master fp32_split, but {3}", rule->describe(),
             tensor.isParameter ? "parameter" : "buffer", tensor.fqn, why)
             .str(),
         "fp32_split keeps an fp32 master as the bf16 parameter plus its low "
         "16 bits, so it needs gather: bf16; use master: fp32 for other "
         "gather dtypes",
         tensor.fqn, tensor.fqn});
    return false;
  }
  if (!tensor.isParameter)
    return true;
  // reduce: the gradient's wire dtype; unset, the gather dtype.
  if (!fromRule(Axis::Reduce))
    inherit(Axis::Reduce, Axis::Gather);
  // moments: Adam's state; unset, fp32.
  if (!fromRule(Axis::Moments)) {
    plan.dtypes[static_cast<unsigned>(Axis::Moments)] = DType::fp32;
    plan.decidedBy[static_cast<unsigned>(Axis::Moments)] = kDefaultOrigin.str();
  }
  return true;
}

/// Forms the shard groups: each parameter belongs to the innermost unit
/// containing its module; per unit, the gather dtype holding most elements
/// forms the main group (ties: the dtype of the unit's first parameter) and
/// every other dtype a nested group.
static void formShardGroups(const std::vector<std::string> &units,
                            StepPlan &plan) {
  // Unit of each parameter, and units in first-parameter order.
  std::vector<std::string> unitOrder;
  llvm::StringMap<std::vector<TensorPlan *>> membersByUnit;
  for (TensorPlan &tensor : plan.tensors) {
    if (!tensor.isParameter())
      continue;
    const std::string *owner = nullptr;
    for (const std::string &unit : units)
      if (isWithinUnit(tensor.tensor.module, unit) &&
          (!owner || unit.size() > owner->size()))
        owner = &unit;
    assert(owner && "the root unit contains every module");
    auto [it, fresh] = membersByUnit.try_emplace(*owner);
    if (fresh)
      unitOrder.push_back(*owner);
    it->second.push_back(&tensor);
  }

  for (const std::string &unit : unitOrder) {
    std::vector<TensorPlan *> &members = membersByUnit[unit];
    // Elements per gather dtype, dtypes in first-member order.
    std::vector<std::pair<DType, int64_t>> elementsByDtype;
    for (TensorPlan *member : members) {
      DType gather = member->get(Axis::Gather);
      auto it = llvm::find_if(
          elementsByDtype, [&](auto &entry) { return entry.first == gather; });
      if (it == elementsByDtype.end())
        it = elementsByDtype.insert(it, {gather, 0});
      it->second += member->tensor.getNumElements();
    }
    // std::max_element finds the first of equals: the tie-break. The other
    // dtypes keep first-member order.
    auto main =
        std::max_element(elementsByDtype.begin(), elementsByDtype.end(),
                         [](auto &a, auto &b) { return a.second < b.second; });
    std::rotate(elementsByDtype.begin(), main, std::next(main));

    std::string mainName = unit.empty() ? "root" : unit;
    for (auto [index, entry] : llvm::enumerate(elementsByDtype)) {
      ShardGroup group;
      group.unit = unit;
      group.gather = entry.first;
      if (index == 0) {
        group.name = mainName;
        // The root's parameters (embeddings, final norm, head) are the last
        // used in forward and the first in backward: freeing them in between
        // would only gather them again at once, so, as FSDP2 does for its
        // root, they stay gathered.
        group.reshardAfterForward = !unit.empty();
      } else {
        group.name = mainName + "/" + train::stringifyDType(entry.first).str();
        group.nestedIn = mainName;
        // Nested groups hold the few tensors a rule keeps in another dtype
        // (norm gains, biases): freeing them saves almost no memory while
        // gathering them again costs a collective each, and the
        // precision-sensitive backward ops that read them run early.
        group.reshardAfterForward = false;
      }
      for (TensorPlan *member : members)
        if (member->get(Axis::Gather) == entry.first) {
          group.members.push_back(member->tensor.fqn);
          member->group = group.name;
        }
      plan.groups.push_back(std::move(group));
    }
  }
}

double precision::getSpacing(DType dtype, double magnitude) {
  int explicitBits = 23, minExponent = -126;
  switch (dtype) {
  case DType::fp32:
    break;
  case DType::bf16:
    explicitBits = 7;
    break;
  case DType::fp16:
    explicitBits = 10;
    minExponent = -14;
    break;
  }
  int exponent = minExponent;
  if (std::isfinite(magnitude) && magnitude != 0) {
    int frexpExponent = 0;
    std::frexp(std::fabs(magnitude), &frexpExponent);
    // frexp gives x = m * 2^e with m in [0.5, 1): floor(log2 x) = e - 1.
    exponent = std::max(frexpExponent - 1, minExponent);
  }
  return std::ldexp(1.0, exponent - explicitBits);
}

/// The stall lint and the moments lint.
static void runLints(const Spec &spec, StepPlan &plan) {
  for (const TensorPlan &tensor : plan.tensors) {
    if (!tensor.isParameter() || !tensor.tensor.initRms)
      continue;
    DType master = tensor.get(Axis::Master);
    if (master == DType::fp32)
      continue;
    double magnitude = *tensor.tensor.initRms;
    double spacing = getSpacing(master, magnitude);
    if (!(plan.learningRate < spacing / 2))
      continue;
    StringRef dtypeName = train::stringifyDType(master);
    plan.warnings.push_back(
        {llvm::formatv(
             "parameter '{0}' would stall: its master is {1} ({2}), whose "
             "values near its typical magnitude {3} (initial RMS) are {4} "
             "apart, and an Adam step of about lr = {5} is less than half of "
             "that, so it rounds away",
             tensor.tensor.fqn, dtypeName, tensor.getDecidedBy(Axis::Master),
             formatNumber(magnitude), formatNumber(spacing),
             formatNumber(plan.learningRate))
             .str(),
         llvm::formatv("keep the master of '{0}' in fp32 (master: fp32) so "
                       "that updates accumulate",
                       tensor.tensor.fqn)
             .str(),
         tensor.tensor.fqn, tensor.tensor.fqn});
  }

  // Low-precision moments, once per deciding rule.
  std::vector<std::string> origins;
  llvm::StringMap<std::pair<DType, std::vector<std::string>>> lowMoments;
  for (const TensorPlan &tensor : plan.tensors) {
    if (!tensor.isParameter() || tensor.get(Axis::Moments) == DType::fp32)
      continue;
    std::string origin = tensor.getDecidedBy(Axis::Moments).str();
    auto [it, fresh] = lowMoments.try_emplace(origin, tensor.get(Axis::Moments),
                                              std::vector<std::string>());
    if (fresh)
      origins.push_back(origin);
    it->second.second.push_back(tensor.tensor.fqn);
  }
  for (const std::string &origin : origins) {
    auto &[dtype, fqns] = lowMoments[origin];
    auto rule = llvm::find_if(
        spec.rules, [&](const Rule &rule) { return rule.origin == origin; });
    plan.warnings.push_back(
        {llvm::formatv("{0} keeps the Adam moments of {1} parameter{2} in {3} "
                       "({4}): below fp32, the second moment of small "
                       "gradients underflows and updates lose precision",
                       rule == spec.rules.end() ? origin : rule->describe(),
                       fqns.size(), fqns.size() == 1 ? "" : "s",
                       train::stringifyDType(dtype), quoteSome(fqns))
             .str(),
         "keep the moments in fp32 (moments: fp32), as torch's mixed-precision "
         "recipes do",
         {},
         {}});
  }
}

bool precision::resolvePlan(const Spec &spec,
                            llvm::ArrayRef<TensorDesc> tensors,
                            StringRef stepName, const ResolveOptions &options,
                            StepPlan &plan, std::vector<Problem> &errors) {
  size_t errorsBefore = errors.size();
  plan = StepPlan();
  plan.stepName = stepName.str();
  plan.learningRate = options.learningRate;

  // The globs were checked when the spec was parsed.
  std::vector<llvm::GlobPattern> globs;
  for (const Rule &rule : spec.rules)
    globs.push_back(
        cantFail(llvm::GlobPattern::create(rule.match, kMaxGlobAlternatives)));

  std::vector<bool> ruleMatched(spec.rules.size());
  // Rules also match integer buffers, only to say so when that is all a rule
  // matches.
  std::vector<std::vector<std::string>> ruleMatchedUnplannable(
      spec.rules.size());
  std::vector<std::string> candidates;
  unsigned numParameters = 0, numBuffers = 0;
  for (const TensorDesc &tensor : tensors) {
    if (!tensor.isFloat) {
      for (auto [index, glob] : llvm::enumerate(globs))
        if (glob.match(tensor.fqn))
          ruleMatchedUnplannable[index].push_back(tensor.fqn);
      continue;
    }
    candidates.push_back(tensor.fqn);
    ++(tensor.isParameter ? numParameters : numBuffers);
    TensorPlan tensorPlan;
    if (resolveTensor(tensor, spec, globs, ruleMatched, tensorPlan, errors))
      plan.tensors.push_back(std::move(tensorPlan));
  }

  // Rules that match nothing: the first few each with its note, the rest
  // counted (a generated spec can have thousands).
  constexpr size_t kUnmatchedShown = 10;
  size_t unmatched = 0;
  std::string moreOrigins;
  for (auto [index, rule] : llvm::enumerate(spec.rules)) {
    if (ruleMatched[index])
      continue;
    if (++unmatched > kUnmatchedShown) {
      if (unmatched <= kUnmatchedShown + 3)
        moreOrigins += (moreOrigins.empty() ? "" : ", ") + rule.origin;
      continue;
    }
    std::string note =
        llvm::formatv("step @{0} has {1} parameter{2} and {3} "
                      "floating-point buffer{4}: {5}",
                      stepName, numParameters, numParameters == 1 ? "" : "s",
                      numBuffers, numBuffers == 1 ? "" : "s",
                      quoteSome(candidates))
            .str();
    if (!ruleMatchedUnplannable[index].empty())
      note = llvm::formatv("it matches only {0}, which take{1} no precision "
                           "plan (not floating point)",
                           quoteSome(ruleMatchedUnplannable[index]),
                           ruleMatchedUnplannable[index].size() == 1 ? "s" : "")
                 .str();
    errors.push_back({llvm::formatv("{0} matches no parameter or buffer of "
                                    "step @{1}",
                                    rule.describe(), stepName)
                          .str(),
                      note,
                      {},
                      {}});
  }
  if (unmatched > kUnmatchedShown)
    errors.push_back(
        {llvm::formatv("{0} more rules match no parameter or buffer of step "
                       "@{1}",
                       unmatched - kUnmatchedShown, stepName)
             .str(),
         llvm::formatv("the next are at {0}{1}", moreOrigins,
                       unmatched > kUnmatchedShown + 3 ? ", ..." : "")
             .str(),
         {},
         {}});

  // Shard units: the root, and every module a `shard_units` glob matches.
  std::vector<std::string> modulePaths = collectModulePaths(tensors);
  std::vector<std::string> units = {""};
  for (const ShardUnitPattern &pattern : spec.shardUnits) {
    bool matched = pattern.matches("");
    for (const std::string &path : modulePaths) {
      if (!pattern.matches(path))
        continue;
      matched = true;
      if (!llvm::is_contained(units, path))
        units.push_back(path);
    }
    if (!matched)
      errors.push_back(
          {llvm::formatv("shard unit '{0}' at {1} matches no module of step "
                         "@{2}",
                         pattern.glob, pattern.origin, stepName)
               .str(),
           llvm::formatv("its modules are {0} ('*' matches within one "
                         "segment of a module path, '**' across segments)",
                         quoteSome(modulePaths, 6))
               .str(),
           {},
           {}});
  }
  if (errors.size() != errorsBefore)
    return false;

  formShardGroups(units, plan);
  runLints(spec, plan);
  return true;
}

//===----------------------------------------------------------------------===//
// Totals
//===----------------------------------------------------------------------===//

Totals precision::computeTotals(const StepPlan &plan) {
  Totals totals;
  for (const TensorPlan &tensor : plan.tensors) {
    int64_t elements = tensor.tensor.getNumElements();
    auto bytes = [&](Axis axis) {
      return elements * int64_t(train::getByteWidth(tensor.get(axis)));
    };
    if (!tensor.isParameter()) {
      totals.bufferBytes += bytes(Axis::Master);
      continue;
    }
    ++totals.parameters;
    totals.parameterElements += elements;
    if (tensor.get(Axis::Master) != tensor.get(Axis::Gather))
      totals.parameterBytes += bytes(Axis::Gather);
    // A split master's high half is the bf16 copy just counted.
    totals.masterBytes +=
        tensor.splitMaster ? 2 * elements : bytes(Axis::Master);
    totals.momentsBytes += 2 * bytes(Axis::Moments);
    totals.reducedBytes += bytes(Axis::Reduce);
  }
  totals.residentBytes =
      totals.parameterBytes + totals.masterBytes + totals.momentsBytes;
  for (const ShardGroup &group : plan.groups) {
    int64_t gathers = group.reshardAfterForward ? 2 : 1;
    int64_t bytes = 0;
    for (const std::string &member : group.members)
      if (const TensorPlan *tensor = plan.lookup(member))
        bytes += tensor->tensor.getNumElements() *
                 int64_t(train::getByteWidth(group.gather));
    totals.gatheredBytes += gathers * bytes;
    totals.allGathers += gathers;
    totals.reduceScatters += 1;
  }
  return totals;
}
