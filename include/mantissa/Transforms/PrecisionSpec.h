//===- PrecisionSpec.h - Precision specs and resolved plans -----*- C++ -*-===//
//
// The precision spec (YAML rules over FQN globs, flag rules, a default dtype
// and shard units), its resolution into one plan per parameter and buffer,
// the shard groups those plans imply, and the lints that run before anything
// is compiled. Nothing here touches IR: the pass (Passes.h) and the driver's
// report (PrecisionReport.h) are built on these plain structures, and the
// unit tests drive them directly.
//
// A spec file looks like this:
//
//   default_dtype: bf16            # gather dtype of parameters no rule sets
//   compute: bf16                  # matrix products in bf16, as torch.autocast
//   shard_units: ["layers.*"]      # module-path globs, one per segment
//   rules:                         # FQN globs; the last match wins per axis
//     - match: "*norm*"
//       master: fp32
//       gather: fp32
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_TRANSFORMS_PRECISIONSPEC_H
#define MANTISSA_TRANSFORMS_PRECISIONSPEC_H

#include "mantissa/Dialect/Train/IR/TrainAttrs.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlir::mantissa::precision {

using train::DType;

//===----------------------------------------------------------------------===//
// Axes and problems
//===----------------------------------------------------------------------===//

/// The four decisions a plan makes per tensor, in the order reports print
/// them. Buffers have no gradient and no optimizer state: only the first two.
enum class Axis : unsigned { Master = 0, Gather = 1, Reduce = 2, Moments = 3 };
inline constexpr unsigned kNumAxes = 4;
inline constexpr std::array<Axis, kNumAxes> kAllAxes = {
    Axis::Master, Axis::Gather, Axis::Reduce, Axis::Moments};

/// `master`, `gather`, `reduce` or `moments`.
llvm::StringRef stringifyAxis(Axis axis);
std::optional<Axis> parseAxisName(llvm::StringRef name);

/// How `decided_by` names a decision that no rule made: the dtype the tensor
/// was exported with, or a default (the spec's default dtype for gather, fp32
/// for moments).
inline constexpr llvm::StringLiteral kExportedOrigin = "exported";
inline constexpr llvm::StringLiteral kDefaultOrigin = "default";

/// One error or warning, said in words a person can act on. `message` names
/// the rule (its text and where it was written, `spec.yaml:4` or
/// `--precision-rule[1]`) and the tensor; `note` says what it conflicts with.
/// `fqn`/`noteFqn` name the tensor each is about, so that the pass can place
/// them on the step argument that declares it (empty: on the step).
struct Problem {
  std::string message;
  std::string note;
  std::string fqn;
  std::string noteFqn;
};

//===----------------------------------------------------------------------===//
// The spec
//===----------------------------------------------------------------------===//

/// One rule: a glob over FQNs and the axes it sets.
struct Rule {
  /// The glob as written (`*norm*`; `{a,b}` alternatives allowed). Checked
  /// when parsed; compiled again where it is matched, because a
  /// llvm::GlobPattern points into the text it was made from.
  std::string match;
  std::array<std::optional<DType>, kNumAxes> dtypes;
  /// Where it was written: `spec.yaml:4` or `--precision-rule[0]`.
  std::string origin;
  /// The rule as written, for messages: `{match: "*norm*", master: fp32}`
  /// for a file rule, the flag's value for a flag rule.
  std::string text;

  /// Whether it came from `--precision-rule` rather than the file.
  bool fromFlag = false;
  /// `master: fp32_split`: an fp32 master (dtypes[Master] is fp32) kept as
  /// the bf16 parameter plus its low 16 bits.
  bool splitMaster = false;

  std::optional<DType> get(Axis axis) const {
    return dtypes[static_cast<unsigned>(axis)];
  }
  /// How messages name it: `rule {match: "*norm*", master: fp32} at
  /// spec.yaml:4` or `--precision-rule[0] '*norm*:master=fp32'`.
  std::string describe() const;
};

/// One `shard_units` entry: a glob over module paths, matched segment by
/// segment (split at '.'), so that `*` stays within one segment and
/// `layers.*` names each layer but not its submodules; a `**` segment
/// matches any number of segments.
struct ShardUnitPattern {
  std::string glob;
  std::string origin;

  /// Whether `modulePath` (empty for the root) matches. The glob must have
  /// been checked by the parser.
  bool matches(llvm::StringRef modulePath) const;
};

/// A parsed spec: the file's rules first, then the flags'.
struct Spec {
  /// The gather dtype of parameters that no rule gives one (buffers are not
  /// gathered: they keep their master unless a rule names them).
  std::optional<DType> defaultDtype;
  /// Where the default dtype was set: `spec.yaml:1` or
  /// `--precision-default-dtype`.
  std::string defaultDtypeOrigin;
  /// The dtype matrix products compute in (`compute: bf16`: torch.autocast
  /// over the whole joint graph); unset or fp32: the exported dtypes.
  std::optional<DType> compute;
  /// Where it was set: `spec.yaml:2` or `--precision-compute`.
  std::string computeOrigin;
  std::vector<ShardUnitPattern> shardUnits;
  std::vector<Rule> rules;
};

/// What the user gave on the command line or as pass options.
struct SpecOptions {
  /// The YAML spec file; empty for none. Origins name it as written here.
  std::string specPath;
  /// `--precision-rule` values, in order: `GLOB:AXIS=DTYPE[,AXIS=DTYPE...]`.
  std::vector<std::string> flagRules;
  /// `--precision-default-dtype`; empty when not given.
  std::string defaultDtype;
  /// `--precision-compute`; empty when not given.
  std::string compute;
};

/// The dtype a compute dtype names: fp32, bf16 or fp16, or torch's names for
/// them. The spec's `compute`, `--precision-compute` and mantissa-autocast's
/// `compute` option all parse it here, so that the three accept the same
/// names; nullopt for any other.
std::optional<DType> parseComputeDType(llvm::StringRef name);

/// Parses the YAML text of a spec file whose origins are named after
/// `displayName`, appending to `spec`. Returns false (with `problems`) on any
/// error: bad YAML, an unknown key, axis or dtype, a rule without `match`, a
/// bad glob.
bool parseSpecYaml(llvm::StringRef text, llvm::StringRef displayName,
                   Spec &spec, std::vector<Problem> &problems);

/// Parses `--precision-rule[index]` and appends it to `spec`.
bool parseFlagRule(llvm::StringRef text, unsigned index, Spec &spec,
                   std::vector<Problem> &problems);

/// Reads the spec file (if any), then the flag rules and the flag default
/// dtype, which must agree with the file's if both are given.
bool buildSpec(const SpecOptions &options, Spec &spec,
               std::vector<Problem> &problems);

//===----------------------------------------------------------------------===//
// Tensors and plans
//===----------------------------------------------------------------------===//

/// What resolution needs to know of a parameter or buffer of a step.
struct TensorDesc {
  std::string fqn;
  /// The owning module's path (empty for the root).
  std::string module;
  bool isParameter = true;
  std::vector<int64_t> shape;
  /// The exported dtype, when it is one a plan can name.
  std::optional<DType> exported;
  /// The exported element type as MLIR prints it (`f32`, `f64`, `i1`).
  std::string exportedTypeName;
  /// Whether the exported type is floating point. Integer and boolean
  /// buffers (masks, positions) are never planned: no rule applies to them.
  bool isFloat = true;
  /// The RMS of the initial values: the typical magnitude the stall lint
  /// measures the dtype's spacing at.
  std::optional<double> initRms;

  int64_t getNumElements() const;
};

/// The resolved dtypes of one tensor and the rule that decided each axis.
struct TensorPlan {
  TensorDesc tensor;
  std::array<DType, kNumAxes> dtypes{};
  /// `spec.yaml:4`, `--precision-rule[0]`, `default` or `exported`.
  std::array<std::string, kNumAxes> decidedBy;
  /// The shard group of a parameter; empty for buffers.
  std::string group;
  /// `master: fp32_split`: the fp32 master (get(Master) is fp32) is the bf16
  /// parameter plus a 16-bit remainder; only with a bf16 gather dtype.
  bool splitMaster = false;

  DType get(Axis axis) const { return dtypes[static_cast<unsigned>(axis)]; }
  /// What plans and reports call the axis's value: the dtype, or
  /// `fp32_split` for a split master.
  llvm::StringRef getName(Axis axis) const;
  llvm::StringRef getDecidedBy(Axis axis) const {
    return decidedBy[static_cast<unsigned>(axis)];
  }
  bool isParameter() const { return tensor.isParameter; }
};

/// One shard group: parameters all-gathered together in one dtype.
struct ShardGroup {
  std::string name;
  /// The shard unit's module path ("" for the root).
  std::string unit;
  DType gather = DType::fp32;
  /// The main group of the unit, for nested groups.
  std::optional<std::string> nestedIn;
  bool reshardAfterForward = false;
  std::vector<std::string> members;
};

/// One matrix product of a step (`train.mm`, `bmm`, `addmm`; convolutions
/// are batched products after import) as it will be computed: what the
/// report lists, so that a user sees which products run in the compute dtype.
struct MatrixProduct {
  /// torch's node name (`mm_3`), or the op's location when it has none.
  std::string node;
  /// `mm`, `bmm` or `addmm`.
  std::string op;
  std::vector<int64_t> lhsShape;
  std::vector<int64_t> rhsShape;
  /// Element types as MLIR prints them (`bf16`, `f32`): the operands' (the
  /// dtype the product reads, accumulating in fp32) and the result's.
  std::string operandType;
  std::string resultType;
  /// 2 * M * N * K (times the batch).
  int64_t flops = 0;
  /// How the CPU step computes it on this machine (`oneDNN bf16`, `fp32
  /// GEMM on widened bf16`, `loops`, ...: mantissa/Runtime/CpuGemm.h), when
  /// the driver asked the runtime; empty otherwise.
  std::string cpuPath;
};

/// Everything the precision pass decided for one step.
struct StepPlan {
  std::string stepName;
  /// Parameters and floating-point buffers, in argument order.
  std::vector<TensorPlan> tensors;
  /// Main groups first, each followed by its nested groups; units in the
  /// order their first parameter appears.
  std::vector<ShardGroup> groups;
  /// Stall lint and low-precision moments.
  std::vector<Problem> warnings;
  double learningRate = 1e-3;
  /// The spec's compute dtype (autocast), when it set one other than fp32.
  std::optional<DType> compute;
  /// The step's matrix products after the plan (and autocast) applied.
  std::vector<MatrixProduct> matrixProducts;
  /// The CPU GEMM library the products' `cpuPath` was asked of (`oneDNN
  /// 2.6.3, ISA avx2, ...`), when the driver asked.
  std::string cpuGemmLibrary;

  const TensorPlan *lookup(llvm::StringRef fqn) const;
};

struct ResolveOptions {
  /// The learning rate the stall lint compares with dtype spacings.
  double learningRate = 1e-3;
};

/// Resolves every parameter and floating-point buffer of step `stepName`
/// against `spec`, forms the shard groups and runs the lints. Returns false
/// with `errors` when a rule or shard unit matches nothing or a tensor is
/// left without a plan; warnings go to `plan.warnings` either way.
bool resolvePlan(const Spec &spec, llvm::ArrayRef<TensorDesc> tensors,
                 llvm::StringRef stepName, const ResolveOptions &options,
                 StepPlan &plan, std::vector<Problem> &errors);

//===----------------------------------------------------------------------===//
// Numerics and totals
//===----------------------------------------------------------------------===//

/// The gap between `magnitude` and the next larger value of `dtype`: the ulp
/// at x as IEEE 754 defines it, 2^(floor(log2 x) - p) with p explicit
/// mantissa bits (bf16 7, fp16 10, fp32 23), never below the subnormal
/// spacing. At a power of two this is the gap above it (bf16 at 1.0:
/// 2^-7 = 0.0078; the gap below, 0.0039, belongs to the binade below).
double getSpacing(DType dtype, double magnitude);

/// The step's costs under a plan. Sizes are of whole, unsharded tensors: a
/// rank holds 1/N of the resident bytes and receives (N-1)/N of the gathered
/// bytes on N ranks.
struct Totals {
  int64_t parameters = 0;
  int64_t parameterElements = 0;
  /// The parameter copies used in forward/backward, in the gather dtype;
  /// a parameter whose master equals its gather dtype is its own master and
  /// is counted once, under `masterBytes`.
  int64_t parameterBytes = 0;
  /// Masters in the master dtype. A split master (`fp32_split`) is the bf16
  /// copy, counted under `parameterBytes`, plus 2 bytes of remainder per
  /// element, counted here.
  int64_t masterBytes = 0;
  /// Adam's two moments (exp_avg, exp_avg_sq) in the moments dtype.
  int64_t momentsBytes = 0;
  int64_t residentBytes = 0;
  /// Buffers in their master dtype (not part of the per-parameter figure).
  int64_t bufferBytes = 0;
  /// All-gathered per step: each group's members in its gather dtype, twice
  /// for groups that reshard after forward (gathered again for backward).
  int64_t gatheredBytes = 0;
  /// Reduce-scattered per step: every gradient in its reduce dtype.
  int64_t reducedBytes = 0;
  /// Per group: one all-gather (two if it reshards after forward) and one
  /// reduce-scatter.
  int64_t allGathers = 0;
  int64_t reduceScatters = 0;

  int64_t getCollectives() const { return allGathers + reduceScatters; }
  /// Resident bytes per parameter element (14 for an fp32 master, a bf16
  /// copy and fp32 moments; 12 when that master is split, 2 + 2 + 8).
  double getResidentBytesPerParameter() const {
    return parameterElements ? double(residentBytes) / parameterElements : 0;
  }
};

Totals computeTotals(const StepPlan &plan);

} // namespace mlir::mantissa::precision

#endif // MANTISSA_TRANSFORMS_PRECISIONSPEC_H
