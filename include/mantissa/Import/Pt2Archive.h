//===- Pt2Archive.h - Reader for torch.export .pt2 archives -----*- C++ -*-===//
//
// Reads a `.pt2` archive written by `torch.export.save` into a plain C++ model
// of the exported program: the graph, its signature, and the weights and
// constants materialised as contiguous bytes. The MLIR importer is built on
// top of this model; nothing here depends on MLIR, so the reader can be tested
// and fuzzed on its own.
//
// The model mirrors torch/_export/serde/schema.py (schema major version 8).
// Every enum keeps the schema's numbering so that a value can be traced back
// to the JSON it came from.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_IMPORT_PT2ARCHIVE_H
#define MANTISSA_IMPORT_PT2ARCHIVE_H

#include "mantissa/Format/DType.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace mlir::mantissa::pt2 {

/// The serialisation schema's major version this reader understands. torch
/// bumps the major version on breaking changes, so any other major version is
/// rejected instead of being misread.
constexpr int64_t kSupportedSchemaMajorVersion = 8;

//===----------------------------------------------------------------------===//
// Enums of the serialisation schema
//===----------------------------------------------------------------------===//

/// Element types as numbered by the schema's `ScalarType` (which differs from
/// c10's numbering). The names say what the type is rather than torch's
/// historical spelling (BYTE is uint8, CHAR is int8, LONG is int64, ...).
enum class ScalarType : int32_t {
  Unknown = 0,
  UInt8 = 1,
  Int8 = 2,
  Int16 = 3,
  Int32 = 4,
  Int64 = 5,
  Float16 = 6,
  Float32 = 7,
  Float64 = 8,
  Complex32 = 9,
  Complex64 = 10,
  Complex128 = 11,
  Bool = 12,
  BFloat16 = 13,
  UInt16 = 28,
  Float8E4M3FN = 29,
  Float8E5M2 = 30,
  Float8E4M3FNUZ = 31,
  Float8E5M2FNUZ = 32,
};

/// Tensor layouts as numbered by the schema's `Layout`.
enum class Layout : int32_t {
  Unknown = 0,
  SparseCoo = 1,
  SparseCsr = 2,
  SparseCsc = 3,
  SparseBsr = 4,
  SparseBsc = 5,
  Mkldnn = 6,
  Strided = 7,
};

/// Memory formats as numbered by the schema's `MemoryFormat`.
enum class MemoryFormat : int32_t {
  Unknown = 0,
  Contiguous = 1,
  ChannelsLast = 2,
  ChannelsLast3d = 3,
  Preserve = 4,
};

/// The schema's name for an element type ("float32", "bfloat16", ...).
llvm::StringRef stringifyScalarType(ScalarType type);

/// Bytes per element of `type`; 0 for ScalarType::Unknown.
unsigned getScalarTypeByteWidth(ScalarType type);

/// The dtype safetensors files store `type` as, or none (complex, fp8,
/// uint16).
std::optional<rt::DType> getStoredDType(ScalarType type);

//===----------------------------------------------------------------------===//
// Tensors
//===----------------------------------------------------------------------===//

/// A torch device: the type ("cpu", "cuda", "meta") and, if pinned, an index.
struct Device {
  std::string type;
  std::optional<int64_t> index;
};

/// The metadata torch records for a tensor value. Only static shapes are
/// supported, so sizes, strides and the storage offset are plain integers;
/// the reader checks that sizes, strides and offset are non-negative and that
/// the element count fits in int64_t.
struct TensorMeta {
  ScalarType dtype = ScalarType::Unknown;
  std::vector<int64_t> sizes;
  /// In elements, as torch counts them.
  std::vector<int64_t> strides;
  /// In elements from the start of the underlying storage.
  int64_t storageOffset = 0;
  bool requiresGrad = false;
  Device device;
  Layout layout = Layout::Strided;

  int64_t getNumElements() const;
};

//===----------------------------------------------------------------------===//
// Arguments
//===----------------------------------------------------------------------===//

struct Graph;
struct NamedArgument;

/// Which member of the schema's `Argument` union an argument holds; one
/// enumerator per `as_*` key of the schema.
enum class ArgumentKind {
  None,             // as_none
  Tensor,           // as_tensor
  Tensors,          // as_tensors
  Int,              // as_int
  Ints,             // as_ints
  Float,            // as_float
  Floats,           // as_floats
  String,           // as_string
  Strings,          // as_strings
  SymInt,           // as_sym_int
  SymInts,          // as_sym_ints
  ScalarType,       // as_scalar_type
  MemoryFormat,     // as_memory_format
  Layout,           // as_layout
  Device,           // as_device
  Bool,             // as_bool
  Bools,            // as_bools
  SymBool,          // as_sym_bool
  SymBools,         // as_sym_bools
  Graph,            // as_graph
  OptionalTensors,  // as_optional_tensors
  CustomObj,        // as_custom_obj
  Operator,         // as_operator
  SymFloat,         // as_sym_float
  SymFloats,        // as_sym_floats
  OptionalTensor,   // as_optional_tensor
  Complex,          // as_complex
  NestedTensors,    // as_nested_tensors
  IntLists,         // as_int_lists
  StringToArgument, // as_string_to_argument
};

/// The schema's key for `kind` ("as_tensor", "as_ints", ...).
llvm::StringRef stringifyArgumentKind(ArgumentKind kind);

/// A SymInt/SymFloat/SymBool-typed argument. torch serialises a symbolic value
/// as the name of a graph symbol and a concrete one (for example an entry of
/// a list mixing both) as its value.
template <typename ValueT> struct SymArgument {
  /// Set when the value is the graph symbol of this name.
  std::optional<std::string> symbolName;
  /// The concrete value when `symbolName` is unset.
  ValueT value{};

  bool isSymbolic() const { return symbolName.has_value(); }
};
using SymIntArgument = SymArgument<int64_t>;
using SymFloatArgument = SymArgument<double>;
using SymBoolArgument = SymArgument<bool>;

/// A script object passed to a node (`as_custom_obj`).
struct CustomObjArgument {
  std::string name;
  std::string classFqn;
};

struct ComplexValue {
  double real = 0;
  double imag = 0;
};

/// One value passed to or returned from a node, the schema's `Argument`
/// union. `kind` says which payload member is meaningful; the others keep
/// their defaults. Arguments left at their operator-schema default are not
/// serialised by torch at all, so an absent input means "default".
struct Argument {
  ArgumentKind kind = ArgumentKind::None;

  /// Tensor.
  std::string tensorName;
  /// Tensors.
  std::vector<std::string> tensorNames;
  /// OptionalTensor; std::nullopt for a None.
  std::optional<std::string> optionalTensorName;
  /// OptionalTensors; std::nullopt entries for Nones.
  std::vector<std::optional<std::string>> optionalTensorNames;
  /// NestedTensors.
  std::vector<std::vector<std::string>> nestedTensorNames;

  /// Int.
  int64_t intValue = 0;
  /// Ints.
  std::vector<int64_t> intValues;
  /// IntLists.
  std::vector<std::vector<int64_t>> intLists;
  /// Float. May be infinite or NaN (serialised as "Infinity", "NaN", ...).
  double floatValue = 0;
  /// Floats.
  std::vector<double> floatValues;
  /// Bool.
  bool boolValue = false;
  /// Bools.
  std::vector<bool> boolValues;
  /// String, and Operator (the operator's qualified name).
  std::string stringValue;
  /// Strings.
  std::vector<std::string> stringValues;
  /// Complex.
  ComplexValue complexValue;

  ScalarType scalarType = ScalarType::Unknown;
  MemoryFormat memoryFormat = MemoryFormat::Unknown;
  Layout layout = Layout::Unknown;
  Device device;

  SymIntArgument symInt;
  std::vector<SymIntArgument> symInts;
  SymFloatArgument symFloat;
  std::vector<SymFloatArgument> symFloats;
  SymBoolArgument symBool;
  std::vector<SymBoolArgument> symBools;

  /// CustomObj.
  CustomObjArgument customObj;
  /// Graph: the subgraph of a higher-order op (cond, map, ...) and its name.
  /// Shared because subgraphs are immutable once read and Arguments are
  /// copied freely.
  std::string graphName;
  std::shared_ptr<const Graph> graph;
  /// StringToArgument, sorted by key so that the order is deterministic.
  std::vector<NamedArgument> stringToArgument;

  bool isNone() const { return kind == ArgumentKind::None; }
  bool isTensor() const { return kind == ArgumentKind::Tensor; }
};

/// How a node input was passed, the schema's `ArgumentKind` (named
/// differently here because ArgumentKind is the union tag above).
enum class ArgumentPassing : int32_t {
  Unknown = 0,
  Positional = 1,
  Keyword = 2,
};

/// A node input, named after the operator schema's parameter ("self",
/// "dims", "dtype", ...).
struct NamedArgument {
  std::string name;
  Argument arg;
  ArgumentPassing passing = ArgumentPassing::Unknown;
};

/// The argument named `name`, or null when it is absent (which, for a node
/// input, means it was left at its default).
const NamedArgument *findNamedArgument(llvm::ArrayRef<NamedArgument> arguments,
                                       llvm::StringRef name);

//===----------------------------------------------------------------------===//
// Graph
//===----------------------------------------------------------------------===//

/// One frame of a node's `nn_module_stack`: which module call the node came
/// from ("L['self'].layers[0].self_attn") and that module's type.
struct ModuleStackEntry {
  std::string key;
  std::string path;
  std::string type;
};

/// A call of an operator in the graph.
struct Node {
  /// The operator, e.g. "torch.ops.aten.mm.default".
  std::string target;
  /// The node's own name if torch recorded one, else its first output
  /// tensor's name; empty when it has neither (e.g. an op returning nothing).
  std::string name;
  std::vector<NamedArgument> inputs;
  std::vector<Argument> outputs;

  /// Every metadata entry as serialised (stack_trace, torch_fn, ...).
  std::map<std::string, std::string> metadata;
  /// metadata["stack_trace"]: the Python source that produced the node.
  std::string stackTrace;
  /// metadata["nn_module_stack"] verbatim, and the frames that could be
  /// parsed out of it (malformed frames are skipped, not errors: the stack
  /// only serves diagnostics).
  std::string moduleStack;
  std::vector<ModuleStackEntry> moduleStackEntries;
  std::optional<bool> isHopSingleTensorReturn;

  const NamedArgument *findInput(llvm::StringRef inputName) const {
    return findNamedArgument(inputs, inputName);
  }
};

/// A SymInt/SymFloat/SymBool that the graph declares in sym_*_values: either
/// concrete or a sympy expression over shape symbols with an optional hint.
template <typename ValueT> struct SymbolicValue {
  /// The expression ("s0 + s1"); empty when the value is concrete.
  std::string expression;
  /// The concrete value, or the example value recorded for the expression.
  std::optional<ValueT> value;
};

/// A dataflow graph in SSA form: every tensor is defined once, by a graph
/// input or a node output, before it is used. The reader checks this for the
/// top-level graph, and that every defined tensor has metadata.
struct Graph {
  std::vector<Argument> inputs;
  std::vector<Argument> outputs;
  std::vector<Node> nodes;
  std::map<std::string, TensorMeta> tensorValues;
  std::map<std::string, SymbolicValue<int64_t>> symIntValues;
  std::map<std::string, SymbolicValue<double>> symFloatValues;
  std::map<std::string, SymbolicValue<bool>> symBoolValues;
  std::map<std::string, CustomObjArgument> customObjValues;
  bool isSingleTensorReturn = false;

  /// The metadata of tensor `name`, or null if the graph has none.
  const TensorMeta *findTensor(llvm::StringRef name) const;
};

//===----------------------------------------------------------------------===//
// Signature
//===----------------------------------------------------------------------===//

/// What a graph input stands for. Custom objects and effect tokens are
/// rejected by the reader, so they have no enumerator.
struct InputSpec {
  enum class Kind {
    /// A batch tensor (or scalar) the caller passes in.
    UserInput,
    /// A parameter; `fqn` is its state_dict name.
    Parameter,
    /// A buffer; `fqn` is its name, `persistent` whether it is in the
    /// state_dict (non-persistent ones are stored among the constants).
    Buffer,
    /// A tensor constant lifted out of the model; `fqn` is its name.
    TensorConstant,
    /// A Python scalar that export baked in; `arg` holds its value (None,
    /// Int, Float, String or Bool) and `argName` the placeholder's name.
    ConstantInput,
  };

  Kind kind = Kind::UserInput;
  /// The graph input's placeholder name: the tensor name, a symbol name for
  /// symbolic user inputs, or empty for other non-tensor user inputs.
  std::string argName;
  /// The parameter/buffer/tensor-constant name; empty for user inputs.
  std::string fqn;
  bool persistent = true;
  /// The full argument (a Tensor for all kinds but UserInput/ConstantInput).
  Argument arg;
};

/// What a graph output stands for. Effect tokens are rejected by the reader.
struct OutputSpec {
  enum class Kind {
    UserOutput,
    /// The training loss that the backward part of the graph differentiates.
    LossOutput,
    /// The new value of buffer `fqn`.
    BufferMutation,
    /// The gradient of the loss with respect to parameter `fqn`.
    GradientToParameter,
    /// The gradient with respect to user input `fqn` (its placeholder name).
    GradientToUserInput,
    /// The new value of user input `fqn` (its placeholder name).
    UserInputMutation,
    /// The new value of parameter `fqn`.
    ParameterMutation,
  };

  Kind kind = Kind::UserOutput;
  /// The output tensor's name (empty for non-tensor user outputs).
  std::string argName;
  /// The parameter/buffer FQN, or the user input's placeholder name for
  /// GradientToUserInput/UserInputMutation; empty otherwise.
  std::string fqn;
  Argument arg;
};

llvm::StringRef stringifyInputKind(InputSpec::Kind kind);
llvm::StringRef stringifyOutputKind(OutputSpec::Kind kind);

/// The meaning of each graph input and output, in graph order (the reader
/// checks that both line up with the graph).
struct GraphSignature {
  std::vector<InputSpec> inputSpecs;
  std::vector<OutputSpec> outputSpecs;
};

//===----------------------------------------------------------------------===//
// Stored tensors and the program
//===----------------------------------------------------------------------===//

/// A weight (parameter or persistent buffer) or constant (non-persistent
/// buffer, tensor constant) with its data. torch stores each underlying
/// storage once as a raw blob and each tensor as a strided view of it; the
/// view is materialised here so that consumers never deal with strides.
struct StoredTensor {
  std::string fqn;
  /// The view's metadata as torch recorded it (strides and offset describe
  /// the view into the blob, not `contiguousBytes`).
  TensorMeta meta;
  /// The blob's file name under data/weights/ or data/constants/.
  std::string blobName;
  bool isParameter = false;
  /// torch saved a fake tensor (an empty blob for a non-empty tensor): the
  /// shape is known but there is no data, and `contiguousBytes` is empty.
  bool isFake = false;
  /// The elements in row-major order, little-endian, as `meta.dtype`.
  std::vector<uint8_t> contiguousBytes;

  /// True if both are the same view of the same blob, i.e. tied weights
  /// (e.g. an embedding shared with the LM head) that must stay one value.
  bool isTiedTo(const StoredTensor &other) const;
};

/// The batch size a program was specialised for. torch.export names a
/// dynamic batch dimension with one shape symbol ("s17", listed in the
/// program's range_constraints); the reader binds it and evaluates every
/// size, stride and symbolic scalar, so the Program it returns is static.
struct BatchBinding {
  /// The batch symbol; empty for a program exported with a static batch.
  std::string symbol;
  /// The micro-batch the program's sizes now hold.
  int64_t size = 0;
  /// The size of the batch it was exported with (torch's example, the
  /// symbol's hint); equal to `size` for a static program.
  int64_t exportedSize = 0;
  /// The range torch.export allows the symbol; no `maxSize` when unbounded.
  int64_t minSize = 0;
  std::optional<int64_t> maxSize;

  bool isDynamic() const { return !symbol.empty(); }
};

/// An exported program as read from a .pt2 archive.
struct Program {
  int64_t schemaMajorVersion = 0;
  int64_t schemaMinorVersion = 0;
  std::string torchVersion;
  /// Operator set versions, e.g. {"aten": 10}.
  std::map<std::string, int64_t> opsetVersions;
  Graph graph;
  GraphSignature signature;
  /// The micro-batch the program holds; size 0 when no user input has a
  /// batch dimension.
  BatchBinding batch;
  /// From data/weights/, sorted by FQN.
  std::vector<StoredTensor> weights;
  /// From data/constants/, sorted by FQN.
  std::vector<StoredTensor> constants;
  /// The names of the user outputs in graph order, as mantissa.export
  /// records them (extra/mantissa.json's "user_outputs"); unset when the
  /// archive does not name them (another exporter, an older mantissa.export).
  std::optional<std::vector<std::string>> userOutputNames;

  const StoredTensor *findWeight(llvm::StringRef fqn) const;
  const StoredTensor *findConstant(llvm::StringRef fqn) const;
};

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

/// Bounds that keep a hostile or corrupt archive from exhausting memory or
/// stack. The defaults admit any realistic model; the fuzzers lower them.
struct ReadOptions {
  /// Largest uncompressed archive entry that is read (zip headers can claim
  /// any size; every entry is also bounded by what it can hold: a stored
  /// entry by its bytes in the archive, a JSON one by maxJsonInflation, a
  /// weight blob by the views of it that the payload config declares).
  uint64_t maxEntryBytes = uint64_t(64) << 30;
  /// Most a deflated JSON entry (model.json, the payload configs) may
  /// inflate, as a multiple of its compressed size (at least 1 MiB is
  /// allowed). torch stores its JSON uncompressed; model.json deflates about
  /// 20:1, and a deflate bomb (up to 1032:1) is refused before inflating.
  uint64_t maxJsonInflation = 64;
  /// Largest materialised tensor (a stride-0 view of a small blob can
  /// describe an arbitrarily large tensor).
  uint64_t maxTensorBytes = uint64_t(64) << 30;
  /// Deepest JSON nesting accepted; llvm::json's parser recurses per level.
  unsigned maxJsonDepth = 512;
  /// Deepest nesting of subgraphs (as_graph arguments of higher-order ops).
  unsigned maxSubgraphDepth = 16;
  /// The micro-batch to specialise a program with a dynamic batch for
  /// (--micro-batch); unset, the size it was exported with. A static
  /// program given another size is refused.
  std::optional<int64_t> microBatch;
};

/// Reads the .pt2 archive at `path`. Errors are single-line StringErrors that
/// start with `path` and say what is wrong.
llvm::Expected<Program> readPt2Archive(llvm::StringRef path,
                                       const ReadOptions &options = {});

/// Reads a .pt2 archive held in memory; `displayName` stands for the file in
/// error messages.
llvm::Expected<Program>
readPt2ArchiveFromBuffer(llvm::StringRef bytes, llvm::StringRef displayName,
                         const ReadOptions &options = {});

/// Parses and checks the text of models/model.json alone: the returned
/// program has no weights or constants. Exposed so that the JSON layer can be
/// fuzzed without a zip archive around it.
llvm::Expected<Program> parseModelJson(llvm::StringRef json,
                                       llvm::StringRef displayName,
                                       const ReadOptions &options = {});

/// The operators that compute only sizes and check them (sym_size, the
/// Python operators on SymInts, torch.sym_float, _assert_scalar, ...): the
/// reader evaluates them at the bound micro-batch and removes them from
/// the graph, so mantissa-compile --list-ops lists them too.
llvm::ArrayRef<llvm::StringRef> getSymbolicShapeOperators();

/// Prints a human-readable summary (signature, stored tensors, node counts
/// per operator) for debug dumps.
void printProgramSummary(const Program &program, llvm::raw_ostream &os);

} // namespace mlir::mantissa::pt2

#endif // MANTISSA_IMPORT_PT2ARCHIVE_H
