//===- Pt2Schema.cpp - Reading the serialisation schema's structures ------===//
//
// Reads models/model.json, the schema's ExportedProgram
// (torch/_export/serde/schema.py, major version 8), into a Program. The
// readers follow the order in which schema.py declares the structures: the
// enums and Device; SymInt and TensorMeta; the members of the Argument union
// and Argument itself; NamedArgument, Node and Graph; the input and output
// specs and GraphSignature; ExportedProgram with its GraphModule and
// SchemaVersion. The checks that the graph and its signature agree come last.
// schema.py's PayloadConfig, which embeds TensorMeta, is read by
// Pt2StoredTensors.cpp, which materialises each tensor as it reads it.
//
//===----------------------------------------------------------------------===//

#include "Pt2Schema.h"

#include "Pt2ArchiveLayout.h"
#include "Pt2Json.h"

#include "mantissa/Import/SymbolicExpression.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/JSON.h"

using namespace mlir::mantissa::pt2;
using namespace mlir::mantissa::pt2::detail;
using llvm::StringRef;
using llvm::Twine;
namespace json = llvm::json;

//===----------------------------------------------------------------------===//
// ScalarType, Layout, MemoryFormat, Device
//===----------------------------------------------------------------------===//

/// Maps the schema's number to a ScalarType; std::nullopt for numbers the
/// schema does not define and for UNKNOWN, which no real tensor has.
static std::optional<ScalarType> scalarTypeFromSchema(int64_t value) {
  switch (value) {
  case 1:
  case 2:
  case 3:
  case 4:
  case 5:
  case 6:
  case 7:
  case 8:
  case 9:
  case 10:
  case 11:
  case 12:
  case 13:
  case 28:
  case 29:
  case 30:
  case 31:
  case 32:
    return static_cast<ScalarType>(value);
  default:
    return std::nullopt;
  }
}

static bool readLayout(JsonReader &reader, const json::Value &value,
                       const JsonPath &path, Layout &layout) {
  int64_t number = 0;
  if (!reader.read(value, path, number))
    return false;
  if (number < 0 || number > static_cast<int64_t>(Layout::Strided))
    return reader.fail(path, "unknown layout " + Twine(number));
  layout = static_cast<Layout>(number);
  return true;
}

static bool readMemoryFormat(JsonReader &reader, const json::Value &value,
                             const JsonPath &path, MemoryFormat &format) {
  int64_t number = 0;
  if (!reader.read(value, path, number))
    return false;
  if (number < 0 || number > static_cast<int64_t>(MemoryFormat::Preserve))
    return reader.fail(path, "unknown memory format " + Twine(number));
  format = static_cast<MemoryFormat>(number);
  return true;
}

static bool readDevice(JsonReader &reader, const json::Value &value,
                       const JsonPath &path, Device &device) {
  const json::Object *object = reader.getObject(value, path);
  if (!object || !reader.readField(*object, "type", path, device.type))
    return false;
  if (const json::Value *index =
          JsonReader::getOptionalField(*object, "index")) {
    int64_t deviceIndex = 0;
    if (!reader.read(*index, path.field("index"), deviceIndex))
      return false;
    device.index = deviceIndex;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// SymInt, SymFloat, SymBool and TensorMeta
//===----------------------------------------------------------------------===//

/// Reads a graph-level SymInt/SymFloat/SymBool: concrete (`literalMember`)
/// or an expression with an optional hint.
template <typename ValueT>
static bool readSymbolicValue(JsonReader &reader, const json::Value &value,
                              const JsonPath &path, StringRef literalMember,
                              SymbolicValue<ValueT> &symbolic) {
  StringRef member;
  const json::Value *payload = nullptr;
  if (!reader.readUnion(value, path, member, payload))
    return false;
  JsonPath payloadPath = path.field(member);
  if (member == literalMember) {
    ValueT literal{};
    if (!reader.read(*payload, payloadPath, literal))
      return false;
    symbolic.value = literal;
    return true;
  }
  if (member != "as_expr")
    return reader.fail(path, "unknown member '" + member + "'");
  const json::Object *expr = reader.getObject(*payload, payloadPath);
  if (!expr ||
      !reader.readField(*expr, "expr_str", payloadPath, symbolic.expression))
    return false;
  const json::Value *hint = JsonReader::getOptionalField(*expr, "hint");
  if (!hint)
    return true;
  JsonPath hintPath = payloadPath.field("hint");
  StringRef hintMember;
  const json::Value *hintPayload = nullptr;
  if (!reader.readUnion(*hint, hintPath, hintMember, hintPayload))
    return false;
  // A hint of another kind than the value (which torch does not write)
  // carries nothing usable and is dropped.
  if (hintMember != literalMember)
    return true;
  ValueT literal{};
  if (!reader.read(*hintPayload, hintPath.field(hintMember), literal))
    return false;
  symbolic.value = literal;
  return true;
}

/// Reads a SymInt that must be concrete; `what` names the value for the
/// error ("tensor 'x' has a symbolic size").
static bool readStaticSymInt(JsonReader &reader, const json::Value &value,
                             const JsonPath &path, const Twine &what,
                             int64_t &out) {
  StringRef member;
  const json::Value *payload = nullptr;
  if (!reader.readUnion(value, path, member, payload))
    return false;
  if (member == "as_int")
    return reader.read(*payload, path.field(member), out);
  if (member == "as_expr") {
    std::string expression = "?";
    if (const json::Object *expr = payload->getAsObject())
      if (const json::Value *exprText = expr->get("expr_str"))
        if (std::optional<StringRef> text = exprText->getAsString())
          expression = text->str();
    if (reader.symbols.empty())
      return reader.failPlain(what + " (" + expression +
                              ") but the program declares no batch symbol; "
                              "only a dynamic batch dimension is supported");
    // A dynamic batch: the size at the bound micro-batch.
    llvm::Expected<SymbolicNumber> number =
        evaluateSymbolicExpression(expression, reader.symbols);
    if (!number)
      return reader.failPlain(what + ": " + toString(number.takeError()));
    if (number->isFloat)
      return reader.failPlain(what + " (" + expression +
                              ") that is not an integer");
    out = number->integer;
    return true;
  }
  return reader.fail(path, "unknown SymInt member '" + member + "'");
}

bool mlir::mantissa::pt2::detail::readTensorMeta(JsonReader &reader,
                                                 const json::Value &value,
                                                 const JsonPath &path,
                                                 const Twine &label,
                                                 TensorMeta &meta) {
  const json::Object *object = reader.getObject(value, path);
  if (!object)
    return false;

  int64_t dtype = 0;
  if (!reader.readField(*object, "dtype", path, dtype))
    return false;
  std::optional<ScalarType> scalarType = scalarTypeFromSchema(dtype);
  if (!scalarType)
    return reader.failPlain(label + " has unknown dtype " + Twine(dtype));
  meta.dtype = *scalarType;

  const json::Value *sizes = reader.getField(*object, "sizes", path);
  if (!sizes ||
      !reader.readList(*sizes, path.field("sizes"), meta.sizes,
                       [&](const json::Value &element,
                           const JsonPath &elementPath, int64_t &size) {
                         return readStaticSymInt(reader, element, elementPath,
                                                 label + " has a symbolic size",
                                                 size);
                       }))
    return false;
  const json::Value *strides = reader.getField(*object, "strides", path);
  if (!strides ||
      !reader.readList(*strides, path.field("strides"), meta.strides,
                       [&](const json::Value &element,
                           const JsonPath &elementPath, int64_t &stride) {
                         return readStaticSymInt(
                             reader, element, elementPath,
                             label + " has a symbolic stride", stride);
                       }))
    return false;
  const json::Value *offset = reader.getField(*object, "storage_offset", path);
  if (!offset ||
      !readStaticSymInt(reader, *offset, path.field("storage_offset"),
                        label + " has a symbolic storage offset",
                        meta.storageOffset))
    return false;
  if (!reader.readField(*object, "requires_grad", path, meta.requiresGrad))
    return false;
  if (const json::Value *device =
          JsonReader::getOptionalField(*object, "device"))
    if (!readDevice(reader, *device, path.field("device"), meta.device))
      return false;
  if (const json::Value *layout =
          JsonReader::getOptionalField(*object, "layout"))
    if (!readLayout(reader, *layout, path.field("layout"), meta.layout))
      return false;

  if (meta.sizes.size() != meta.strides.size())
    return reader.failPlain(label + " has " + Twine(meta.sizes.size()) +
                            " sizes but " + Twine(meta.strides.size()) +
                            " strides");
  int64_t elementCount = 1;
  for (size_t dim = 0, e = meta.sizes.size(); dim < e; ++dim) {
    if (meta.sizes[dim] < 0)
      return reader.failPlain(label + " has negative size " +
                              Twine(meta.sizes[dim]) + " in dimension " +
                              Twine(dim));
    if (meta.strides[dim] < 0)
      return reader.failPlain(label + " has negative stride " +
                              Twine(meta.strides[dim]) + " in dimension " +
                              Twine(dim));
    std::optional<int64_t> product =
        llvm::checkedMul(elementCount, meta.sizes[dim]);
    if (!product)
      return reader.failPlain(label + " has more elements than fit in 64 "
                                      "bits");
    elementCount = *product;
  }
  if (meta.storageOffset < 0)
    return reader.failPlain(label + " has negative storage offset " +
                            Twine(meta.storageOffset));
  return true;
}

//===----------------------------------------------------------------------===//
// Node metadata
//===----------------------------------------------------------------------===//

namespace {

/// Splits `text` at commas that are not inside brackets or parentheses, as
/// torch's deserialiser does for nn_module_stack frames (module paths such as
/// "layers.slice(1, None, None)" contain commas).
llvm::SmallVector<StringRef, 3> splitOutsideBrackets(StringRef text) {
  llvm::SmallVector<StringRef, 3> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0, e = text.size(); i < e; ++i) {
    char c = text[i];
    if (c == '[' || c == '(')
      ++depth;
    else if (c == ']' || c == ')')
      --depth;
    else if (c == ',' && depth == 0) {
      parts.push_back(text.slice(start, i));
      start = i + 1;
    }
  }
  parts.push_back(text.drop_front(start));
  return parts;
}

/// Parses torch's "key,path,type;key,path,type;..." spelling of a node's
/// nn_module_stack, skipping frames that do not have three fields.
std::vector<ModuleStackEntry> parseModuleStack(StringRef text) {
  std::vector<ModuleStackEntry> entries;
  llvm::SmallVector<StringRef, 8> frames;
  text.split(frames, ';', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  for (StringRef frame : frames) {
    llvm::SmallVector<StringRef, 3> fields = splitOutsideBrackets(frame);
    if (fields.size() != 3)
      continue;
    entries.push_back({fields[0].str(), fields[1].str(), fields[2].str()});
  }
  return entries;
}

//===----------------------------------------------------------------------===//
// models/model.json
//===----------------------------------------------------------------------===//

/// Reads the schema's ExportedProgram into a Program.
class ModelJsonParser {
public:
  ModelJsonParser(StringRef displayName, const ReadOptions &options)
      : reader(displayName, kModelJsonEntry, options) {}

  llvm::Error parse(StringRef text, Program &program) {
    if (!parseProgram(text, program) || !checkProgram(program) ||
        !specializeProgram(reader, program))
      return reader.takeError();
    return llvm::Error::success();
  }

private:
  //===--------------------------------------------------------------------===//
  // Arguments
  //===--------------------------------------------------------------------===//

  /// Reads a SymIntArgument/SymFloatArgument/SymBoolArgument union:
  /// as_name or `literalMember` (as_int, as_float, as_bool).
  template <typename ValueT>
  bool readSymArgument(const json::Value &value, const JsonPath &path,
                       StringRef literalMember, SymArgument<ValueT> &out) {
    StringRef member;
    const json::Value *payload = nullptr;
    if (!reader.readUnion(value, path, member, payload))
      return false;
    if (member == "as_name") {
      std::string symbol;
      if (!reader.read(*payload, path.field(member), symbol))
        return false;
      out.symbolName = std::move(symbol);
      return true;
    }
    if (member == literalMember)
      return reader.read(*payload, path.field(member), out.value);
    return reader.fail(path, "unknown member '" + member + "'");
  }

  template <typename ValueT>
  bool readSymArgumentList(const json::Value &value, const JsonPath &path,
                           StringRef literalMember,
                           std::vector<SymArgument<ValueT>> &out) {
    return reader.readList(
        value, path, out,
        [&](const json::Value &element, const JsonPath &elementPath,
            SymArgument<ValueT> &result) {
          return readSymArgument(element, elementPath, literalMember, result);
        });
  }

  /// Reads a TensorArgument, {"name": ...}.
  bool readTensorName(const json::Value &value, const JsonPath &path,
                      std::string &name) {
    const json::Object *object = reader.getObject(value, path);
    return object && reader.readField(*object, "name", path, name);
  }

  bool readTensorNameList(const json::Value &value, const JsonPath &path,
                          std::vector<std::string> &names) {
    return reader.readList(value, path, names,
                           [&](const json::Value &element,
                               const JsonPath &elementPath, std::string &name) {
                             return readTensorName(element, elementPath, name);
                           });
  }

  /// Reads an OptionalTensorArgument union: as_tensor or as_none.
  bool readOptionalTensor(const json::Value &value, const JsonPath &path,
                          std::optional<std::string> &name) {
    StringRef member;
    const json::Value *payload = nullptr;
    if (!reader.readUnion(value, path, member, payload))
      return false;
    if (member == "as_none") {
      name.reset();
      return true;
    }
    if (member == "as_tensor") {
      std::string tensorName;
      if (!readTensorName(*payload, path.field(member), tensorName))
        return false;
      name = std::move(tensorName);
      return true;
    }
    return reader.fail(path, "unknown optional tensor member '" + member + "'");
  }

  bool readArgument(const json::Value &value, const JsonPath &path,
                    Argument &arg, unsigned subgraphDepth) {
    StringRef member;
    const json::Value *payload = nullptr;
    if (!reader.readUnion(value, path, member, payload))
      return false;
    JsonPath payloadPath = path.field(member);
    std::optional<ArgumentKind> kind =
        llvm::StringSwitch<std::optional<ArgumentKind>>(member)
            .Case("as_none", ArgumentKind::None)
            .Case("as_tensor", ArgumentKind::Tensor)
            .Case("as_tensors", ArgumentKind::Tensors)
            .Case("as_int", ArgumentKind::Int)
            .Case("as_ints", ArgumentKind::Ints)
            .Case("as_float", ArgumentKind::Float)
            .Case("as_floats", ArgumentKind::Floats)
            .Case("as_string", ArgumentKind::String)
            .Case("as_strings", ArgumentKind::Strings)
            .Case("as_sym_int", ArgumentKind::SymInt)
            .Case("as_sym_ints", ArgumentKind::SymInts)
            .Case("as_scalar_type", ArgumentKind::ScalarType)
            .Case("as_memory_format", ArgumentKind::MemoryFormat)
            .Case("as_layout", ArgumentKind::Layout)
            .Case("as_device", ArgumentKind::Device)
            .Case("as_bool", ArgumentKind::Bool)
            .Case("as_bools", ArgumentKind::Bools)
            .Case("as_sym_bool", ArgumentKind::SymBool)
            .Case("as_sym_bools", ArgumentKind::SymBools)
            .Case("as_graph", ArgumentKind::Graph)
            .Case("as_optional_tensors", ArgumentKind::OptionalTensors)
            .Case("as_custom_obj", ArgumentKind::CustomObj)
            .Case("as_operator", ArgumentKind::Operator)
            .Case("as_sym_float", ArgumentKind::SymFloat)
            .Case("as_sym_floats", ArgumentKind::SymFloats)
            .Case("as_optional_tensor", ArgumentKind::OptionalTensor)
            .Case("as_complex", ArgumentKind::Complex)
            .Case("as_nested_tensors", ArgumentKind::NestedTensors)
            .Case("as_int_lists", ArgumentKind::IntLists)
            .Case("as_string_to_argument", ArgumentKind::StringToArgument)
            .Default(std::nullopt);
    if (!kind)
      return reader.fail(path, "unknown argument kind '" + member + "'");
    arg.kind = *kind;

    switch (*kind) {
    case ArgumentKind::None:
      // The payload is a placeholder `true`; its value carries nothing.
      return true;
    case ArgumentKind::Tensor:
      return readTensorName(*payload, payloadPath, arg.tensorName);
    case ArgumentKind::Tensors:
      return readTensorNameList(*payload, payloadPath, arg.tensorNames);
    case ArgumentKind::Int:
      return reader.read(*payload, payloadPath, arg.intValue);
    case ArgumentKind::Ints:
      return reader.readList(*payload, payloadPath, arg.intValues);
    case ArgumentKind::Float:
      return reader.read(*payload, payloadPath, arg.floatValue);
    case ArgumentKind::Floats:
      return reader.readList(*payload, payloadPath, arg.floatValues);
    case ArgumentKind::String:
    case ArgumentKind::Operator:
      return reader.read(*payload, payloadPath, arg.stringValue);
    case ArgumentKind::Strings:
      return reader.readList(*payload, payloadPath, arg.stringValues);
    case ArgumentKind::SymInt:
      return readSymArgument(*payload, payloadPath, "as_int", arg.symInt);
    case ArgumentKind::SymInts:
      return readSymArgumentList(*payload, payloadPath, "as_int", arg.symInts);
    case ArgumentKind::SymFloat:
      return readSymArgument(*payload, payloadPath, "as_float", arg.symFloat);
    case ArgumentKind::SymFloats:
      return readSymArgumentList(*payload, payloadPath, "as_float",
                                 arg.symFloats);
    case ArgumentKind::SymBool:
      return readSymArgument(*payload, payloadPath, "as_bool", arg.symBool);
    case ArgumentKind::SymBools:
      return readSymArgumentList(*payload, payloadPath, "as_bool",
                                 arg.symBools);
    case ArgumentKind::ScalarType: {
      int64_t number = 0;
      if (!reader.read(*payload, payloadPath, number))
        return false;
      std::optional<ScalarType> scalarType = scalarTypeFromSchema(number);
      if (!scalarType)
        return reader.fail(payloadPath, "unknown dtype " + Twine(number));
      arg.scalarType = *scalarType;
      return true;
    }
    case ArgumentKind::MemoryFormat:
      return readMemoryFormat(reader, *payload, payloadPath, arg.memoryFormat);
    case ArgumentKind::Layout:
      return readLayout(reader, *payload, payloadPath, arg.layout);
    case ArgumentKind::Device:
      return readDevice(reader, *payload, payloadPath, arg.device);
    case ArgumentKind::Bool:
      return reader.read(*payload, payloadPath, arg.boolValue);
    case ArgumentKind::Bools:
      return reader.readList(*payload, payloadPath, arg.boolValues);
    case ArgumentKind::OptionalTensor:
      return readOptionalTensor(*payload, payloadPath, arg.optionalTensorName);
    case ArgumentKind::OptionalTensors:
      return reader.readList(
          *payload, payloadPath, arg.optionalTensorNames,
          [&](const json::Value &element, const JsonPath &elementPath,
              std::optional<std::string> &name) {
            return readOptionalTensor(element, elementPath, name);
          });
    case ArgumentKind::NestedTensors:
      return reader.readList(
          *payload, payloadPath, arg.nestedTensorNames,
          [&](const json::Value &element, const JsonPath &elementPath,
              std::vector<std::string> &names) {
            return readTensorNameList(element, elementPath, names);
          });
    case ArgumentKind::IntLists:
      return reader.readList(
          *payload, payloadPath, arg.intLists,
          [&](const json::Value &element, const JsonPath &elementPath,
              std::vector<int64_t> &ints) {
            return reader.readList(element, elementPath, ints);
          });
    case ArgumentKind::Complex: {
      const json::Object *object = reader.getObject(*payload, payloadPath);
      return object &&
             reader.readField(*object, "real", payloadPath,
                              arg.complexValue.real) &&
             reader.readField(*object, "imag", payloadPath,
                              arg.complexValue.imag);
    }
    case ArgumentKind::CustomObj: {
      const json::Object *object = reader.getObject(*payload, payloadPath);
      return object &&
             reader.readField(*object, "name", payloadPath,
                              arg.customObj.name) &&
             reader.readField(*object, "class_fqn", payloadPath,
                              arg.customObj.classFqn);
    }
    case ArgumentKind::Graph: {
      if (subgraphDepth >= reader.getOptions().maxSubgraphDepth)
        return reader.fail(payloadPath,
                           "subgraphs nest deeper than " +
                               Twine(reader.getOptions().maxSubgraphDepth) +
                               " levels");
      const json::Object *object = reader.getObject(*payload, payloadPath);
      if (!object ||
          !reader.readField(*object, "name", payloadPath, arg.graphName))
        return false;
      const json::Value *graphValue =
          reader.getField(*object, "graph", payloadPath);
      auto subgraph = std::make_shared<Graph>();
      if (!graphValue || !parseGraph(*graphValue, payloadPath.field("graph"),
                                     *subgraph, subgraphDepth + 1))
        return false;
      arg.graph = std::move(subgraph);
      return true;
    }
    case ArgumentKind::StringToArgument: {
      const json::Object *object = reader.getObject(*payload, payloadPath);
      if (!object)
        return false;
      for (const auto &[key, element] : *object) {
        NamedArgument entry;
        entry.name = key.str();
        if (!readArgument(element, payloadPath.field(key), entry.arg,
                          subgraphDepth))
          return false;
        arg.stringToArgument.push_back(std::move(entry));
      }
      llvm::sort(arg.stringToArgument,
                 [](const NamedArgument &lhs, const NamedArgument &rhs) {
                   return lhs.name < rhs.name;
                 });
      return true;
    }
    }
    return reader.fail(path, "unhandled argument kind '" + member + "'");
  }

  //===--------------------------------------------------------------------===//
  // Nodes and graphs
  //===--------------------------------------------------------------------===//

  bool readNamedArgument(const json::Value &value, const JsonPath &path,
                         NamedArgument &named, unsigned subgraphDepth) {
    const json::Object *object = reader.getObject(value, path);
    if (!object || !reader.readField(*object, "name", path, named.name))
      return false;
    const json::Value *arg = reader.getField(*object, "arg", path);
    if (!arg ||
        !readArgument(*arg, path.field("arg"), named.arg, subgraphDepth))
      return false;
    if (const json::Value *kind =
            JsonReader::getOptionalField(*object, "kind")) {
      int64_t number = 0;
      if (!reader.read(*kind, path.field("kind"), number))
        return false;
      if (number < 0 || number > static_cast<int64_t>(ArgumentPassing::Keyword))
        return reader.fail(path.field("kind"),
                           "unknown argument kind " + Twine(number));
      named.passing = static_cast<ArgumentPassing>(number);
    }
    return true;
  }

  /// The first tensor an output list defines, which names nodes that were
  /// serialised before torch recorded node names.
  static std::string
  getFirstOutputTensorName(llvm::ArrayRef<Argument> outputs) {
    for (const Argument &output : outputs) {
      switch (output.kind) {
      case ArgumentKind::Tensor:
        return output.tensorName;
      case ArgumentKind::Tensors:
        if (!output.tensorNames.empty())
          return output.tensorNames.front();
        break;
      case ArgumentKind::OptionalTensor:
        if (output.optionalTensorName)
          return *output.optionalTensorName;
        break;
      case ArgumentKind::OptionalTensors:
        for (const std::optional<std::string> &name :
             output.optionalTensorNames)
          if (name)
            return *name;
        break;
      default:
        break;
      }
    }
    return "";
  }

  bool readNode(const json::Value &value, const JsonPath &path, Node &node,
                unsigned subgraphDepth) {
    const json::Object *object = reader.getObject(value, path);
    if (!object || !reader.readField(*object, "target", path, node.target))
      return false;
    const json::Value *inputs = reader.getField(*object, "inputs", path);
    if (!inputs || !reader.readList(
                       *inputs, path.field("inputs"), node.inputs,
                       [&](const json::Value &element,
                           const JsonPath &elementPath, NamedArgument &named) {
                         return readNamedArgument(element, elementPath, named,
                                                  subgraphDepth);
                       }))
      return false;
    const json::Value *outputs = reader.getField(*object, "outputs", path);
    if (!outputs ||
        !reader.readList(*outputs, path.field("outputs"), node.outputs,
                         [&](const json::Value &element,
                             const JsonPath &elementPath, Argument &arg) {
                           return readArgument(element, elementPath, arg,
                                               subgraphDepth);
                         }))
      return false;

    if (const json::Value *metadata =
            JsonReader::getOptionalField(*object, "metadata")) {
      JsonPath metadataPath = path.field("metadata");
      const json::Object *entries = reader.getObject(*metadata, metadataPath);
      if (!entries)
        return false;
      for (const auto &[key, entry] : *entries) {
        std::string text;
        if (!reader.read(entry, metadataPath.field(key), text))
          return false;
        node.metadata[key.str()] = std::move(text);
      }
      auto lookup = [&](StringRef key) -> std::string {
        auto it = node.metadata.find(key.str());
        return it == node.metadata.end() ? std::string() : it->second;
      };
      node.stackTrace = lookup("stack_trace");
      node.moduleStack = lookup("nn_module_stack");
      node.moduleStackEntries = parseModuleStack(node.moduleStack);
    }

    if (const json::Value *single = JsonReader::getOptionalField(
            *object, "is_hop_single_tensor_return")) {
      bool isSingle = false;
      if (!reader.read(*single, path.field("is_hop_single_tensor_return"),
                       isSingle))
        return false;
      node.isHopSingleTensorReturn = isSingle;
    }
    if (!reader.readOptionalField(*object, "name", path, node.name))
      return false;
    if (node.name.empty())
      node.name = getFirstOutputTensorName(node.outputs);
    return true;
  }

  template <typename ValueT>
  bool readSymbolicValues(const json::Object &graph, StringRef key,
                          const JsonPath &graphPath, StringRef literalMember,
                          std::map<std::string, SymbolicValue<ValueT>> &out) {
    const json::Value *values = JsonReader::getOptionalField(graph, key);
    if (!values)
      return true;
    JsonPath valuesPath = graphPath.field(key);
    const json::Object *object = reader.getObject(*values, valuesPath);
    if (!object)
      return false;
    for (const auto &[name, value] : *object)
      if (!readSymbolicValue(reader, value, valuesPath.field(name),
                             literalMember, out[name.str()]))
        return false;
    return true;
  }

  bool parseGraph(const json::Value &value, const JsonPath &path, Graph &graph,
                  unsigned subgraphDepth) {
    const json::Object *object = reader.getObject(value, path);
    if (!object)
      return false;
    auto readArgumentList = [&](StringRef key, std::vector<Argument> &out) {
      const json::Value *list = reader.getField(*object, key, path);
      return list &&
             reader.readList(*list, path.field(key), out,
                             [&](const json::Value &element,
                                 const JsonPath &elementPath, Argument &arg) {
                               return readArgument(element, elementPath, arg,
                                                   subgraphDepth);
                             });
    };
    if (!readArgumentList("inputs", graph.inputs) ||
        !readArgumentList("outputs", graph.outputs))
      return false;

    const json::Value *nodes = reader.getField(*object, "nodes", path);
    if (!nodes ||
        !reader.readList(*nodes, path.field("nodes"), graph.nodes,
                         [&](const json::Value &element,
                             const JsonPath &elementPath, Node &node) {
                           return readNode(element, elementPath, node,
                                           subgraphDepth);
                         }))
      return false;

    const json::Value *tensorValues =
        reader.getField(*object, "tensor_values", path);
    if (!tensorValues)
      return false;
    JsonPath tensorValuesPath = path.field("tensor_values");
    const json::Object *tensors =
        reader.getObject(*tensorValues, tensorValuesPath);
    if (!tensors)
      return false;
    for (const auto &[name, meta] : *tensors)
      if (!readTensorMeta(reader, meta, tensorValuesPath.field(name),
                          "tensor '" + StringRef(name) + "'",
                          graph.tensorValues[name.str()]))
        return false;

    if (!readSymbolicValues(*object, "sym_int_values", path, "as_int",
                            graph.symIntValues) ||
        !readSymbolicValues(*object, "sym_float_values", path, "as_float",
                            graph.symFloatValues) ||
        !readSymbolicValues(*object, "sym_bool_values", path, "as_bool",
                            graph.symBoolValues))
      return false;

    if (const json::Value *customObjs =
            JsonReader::getOptionalField(*object, "custom_obj_values")) {
      JsonPath customObjsPath = path.field("custom_obj_values");
      const json::Object *entries =
          reader.getObject(*customObjs, customObjsPath);
      if (!entries)
        return false;
      for (const auto &[name, entry] : *entries) {
        JsonPath entryPath = customObjsPath.field(name);
        const json::Object *customObj = reader.getObject(entry, entryPath);
        CustomObjArgument &result = graph.customObjValues[name.str()];
        if (!customObj ||
            !reader.readField(*customObj, "name", entryPath, result.name) ||
            !reader.readField(*customObj, "class_fqn", entryPath,
                              result.classFqn))
          return false;
      }
    }
    return reader.readOptionalField(*object, "is_single_tensor_return", path,
                                    graph.isSingleTensorReturn);
  }

  //===--------------------------------------------------------------------===//
  // Signature
  //===--------------------------------------------------------------------===//

  /// The name a graph input/output placeholder has for `arg`, if any.
  static std::string getPlaceholderName(const Argument &arg) {
    switch (arg.kind) {
    case ArgumentKind::Tensor:
      return arg.tensorName;
    case ArgumentKind::SymInt:
      return arg.symInt.symbolName.value_or("");
    case ArgumentKind::SymFloat:
      return arg.symFloat.symbolName.value_or("");
    case ArgumentKind::SymBool:
      return arg.symBool.symbolName.value_or("");
    case ArgumentKind::CustomObj:
      return arg.customObj.name;
    default:
      return "";
    }
  }

  /// Reads the `arg` field of a spec whose argument is a TensorArgument.
  bool readSpecTensor(const json::Object &spec, const JsonPath &specPath,
                      Argument &arg, std::string &argName) {
    const json::Value *value = reader.getField(spec, "arg", specPath);
    if (!value ||
        !readTensorName(*value, specPath.field("arg"), arg.tensorName))
      return false;
    arg.kind = ArgumentKind::Tensor;
    argName = arg.tensorName;
    return true;
  }

  /// Reads the `arg` field of a spec whose argument is a full Argument.
  bool readSpecArgument(const json::Object &spec, const JsonPath &specPath,
                        Argument &arg, std::string &argName) {
    const json::Value *value = reader.getField(spec, "arg", specPath);
    if (!value ||
        !readArgument(*value, specPath.field("arg"), arg, /*subgraphDepth=*/0))
      return false;
    argName = getPlaceholderName(arg);
    return true;
  }

  bool readInputSpec(const json::Value &value, const JsonPath &path,
                     InputSpec &input) {
    StringRef member;
    const json::Value *payload = nullptr;
    if (!reader.readUnion(value, path, member, payload))
      return false;
    JsonPath specPath = path.field(member);
    const json::Object *spec = reader.getObject(*payload, specPath);
    if (!spec)
      return false;

    if (member == "user_input") {
      input.kind = InputSpec::Kind::UserInput;
      return readSpecArgument(*spec, specPath, input.arg, input.argName);
    }
    if (member == "parameter") {
      input.kind = InputSpec::Kind::Parameter;
      return readSpecTensor(*spec, specPath, input.arg, input.argName) &&
             reader.readField(*spec, "parameter_name", specPath, input.fqn);
    }
    if (member == "buffer") {
      input.kind = InputSpec::Kind::Buffer;
      return readSpecTensor(*spec, specPath, input.arg, input.argName) &&
             reader.readField(*spec, "buffer_name", specPath, input.fqn) &&
             reader.readField(*spec, "persistent", specPath, input.persistent);
    }
    if (member == "tensor_constant") {
      input.kind = InputSpec::Kind::TensorConstant;
      return readSpecTensor(*spec, specPath, input.arg, input.argName) &&
             reader.readField(*spec, "tensor_constant_name", specPath,
                              input.fqn);
    }
    if (member == "constant_input") {
      input.kind = InputSpec::Kind::ConstantInput;
      if (!reader.readField(*spec, "name", specPath, input.argName))
        return false;
      const json::Value *constant = reader.getField(*spec, "value", specPath);
      // ConstantValue's members (as_none, as_int, as_float, as_string,
      // as_bool) are a subset of Argument's, with the same payloads.
      return constant && readArgument(*constant, specPath.field("value"),
                                      input.arg, /*subgraphDepth=*/0);
    }
    if (member == "custom_obj") {
      std::string objectName;
      if (!reader.readField(*spec, "custom_obj_name", specPath, objectName))
        return false;
      return reader.failPlain("input '" + objectName +
                              "' is a custom object (TorchScript class), which "
                              "is not supported");
    }
    if (member == "token")
      return reader.failPlain("the program takes an effect token as input "
                              "(it calls side-effecting ops), which is not "
                              "supported");
    return reader.fail(path, "unknown input spec kind '" + member + "'");
  }

  bool readOutputSpec(const json::Value &value, const JsonPath &path,
                      OutputSpec &output) {
    StringRef member;
    const json::Value *payload = nullptr;
    if (!reader.readUnion(value, path, member, payload))
      return false;
    JsonPath specPath = path.field(member);
    const json::Object *spec = reader.getObject(*payload, specPath);
    if (!spec)
      return false;

    if (member == "user_output") {
      output.kind = OutputSpec::Kind::UserOutput;
      return readSpecArgument(*spec, specPath, output.arg, output.argName);
    }
    if (member == "token")
      return reader.failPlain("the program returns an effect token (it calls "
                              "side-effecting ops), which is not supported");

    struct TensorOutputKind {
      StringRef member;
      OutputSpec::Kind kind;
      /// The field naming what the output belongs to; empty if none.
      StringRef targetField;
    };
    static const TensorOutputKind kTensorOutputKinds[] = {
        {"loss_output", OutputSpec::Kind::LossOutput, ""},
        {"buffer_mutation", OutputSpec::Kind::BufferMutation, "buffer_name"},
        {"gradient_to_parameter", OutputSpec::Kind::GradientToParameter,
         "parameter_name"},
        {"gradient_to_user_input", OutputSpec::Kind::GradientToUserInput,
         "user_input_name"},
        {"user_input_mutation", OutputSpec::Kind::UserInputMutation,
         "user_input_name"},
        {"parameter_mutation", OutputSpec::Kind::ParameterMutation,
         "parameter_name"},
    };
    for (const TensorOutputKind &candidate : kTensorOutputKinds) {
      if (candidate.member != member)
        continue;
      output.kind = candidate.kind;
      if (!readSpecTensor(*spec, specPath, output.arg, output.argName))
        return false;
      return candidate.targetField.empty() ||
             reader.readField(*spec, candidate.targetField, specPath,
                              output.fqn);
    }
    return reader.fail(path, "unknown output spec kind '" + member + "'");
  }

  bool parseSignature(const json::Value &value, const JsonPath &path,
                      GraphSignature &signature) {
    const json::Object *object = reader.getObject(value, path);
    if (!object)
      return false;
    const json::Value *inputs = reader.getField(*object, "input_specs", path);
    if (!inputs || !reader.readList(
                       *inputs, path.field("input_specs"), signature.inputSpecs,
                       [&](const json::Value &element,
                           const JsonPath &elementPath, InputSpec &input) {
                         return readInputSpec(element, elementPath, input);
                       }))
      return false;
    const json::Value *outputs = reader.getField(*object, "output_specs", path);
    return outputs &&
           reader.readList(
               *outputs, path.field("output_specs"), signature.outputSpecs,
               [&](const json::Value &element, const JsonPath &elementPath,
                   OutputSpec &output) {
                 return readOutputSpec(element, elementPath, output);
               });
  }

  //===--------------------------------------------------------------------===//
  // ExportedProgram, with its GraphModule and SchemaVersion
  //===--------------------------------------------------------------------===//

  bool parseProgram(StringRef text, Program &program) {
    std::optional<json::Value> document = reader.parseDocument(text);
    if (!document)
      return false;
    JsonPath root;
    const json::Object *top = reader.getObject(*document, root);
    if (!top)
      return false;

    // The version decides how everything else is laid out, so it is checked
    // before anything else is read.
    const json::Value *versionValue =
        reader.getField(*top, "schema_version", root);
    if (!versionValue)
      return false;
    JsonPath versionPath = root.field("schema_version");
    const json::Object *version = reader.getObject(*versionValue, versionPath);
    if (!version ||
        !reader.readField(*version, "major", versionPath,
                          program.schemaMajorVersion) ||
        !reader.readField(*version, "minor", versionPath,
                          program.schemaMinorVersion))
      return false;
    if (program.schemaMajorVersion != kSupportedSchemaMajorVersion)
      return reader.failPlain("unsupported schema major version " +
                              Twine(program.schemaMajorVersion) +
                              " (expected " +
                              Twine(kSupportedSchemaMajorVersion) + ")");

    if (!reader.readOptionalField(*top, "torch_version", root,
                                  program.torchVersion))
      return false;
    if (const json::Value *opsets =
            JsonReader::getOptionalField(*top, "opset_version")) {
      JsonPath opsetsPath = root.field("opset_version");
      const json::Object *opsetObject = reader.getObject(*opsets, opsetsPath);
      if (!opsetObject)
        return false;
      for (const auto &[name, value] : *opsetObject) {
        int64_t opsetVersion = 0;
        if (!reader.read(value, opsetsPath.field(name), opsetVersion))
          return false;
        program.opsetVersions[name.str()] = opsetVersion;
      }
    }

    const json::Value *moduleValue =
        reader.getField(*top, "graph_module", root);
    if (!moduleValue)
      return false;
    JsonPath modulePath = root.field("graph_module");
    const json::Object *module = reader.getObject(*moduleValue, modulePath);
    if (!module)
      return false;
    // The batch symbol is bound before the graph is read, whose sizes are
    // evaluated as they are read.
    if (!bindBatchSymbol(reader, *top, *module, program.batch))
      return false;
    const json::Value *graphValue =
        reader.getField(*module, "graph", modulePath);
    if (!graphValue ||
        !parseGraph(*graphValue, modulePath.field("graph"), program.graph,
                    /*subgraphDepth=*/0))
      return false;
    const json::Value *signatureValue =
        reader.getField(*module, "signature", modulePath);
    return signatureValue &&
           parseSignature(*signatureValue, modulePath.field("signature"),
                          program.signature);
  }

  //===--------------------------------------------------------------------===//
  // Consistency of the graph and its signature
  //===--------------------------------------------------------------------===//

  /// Calls `fn(name)` for every tensor name `arg` mentions.
  template <typename Fn>
  static void forEachTensorName(const Argument &arg, Fn fn) {
    switch (arg.kind) {
    case ArgumentKind::Tensor:
      fn(arg.tensorName);
      break;
    case ArgumentKind::Tensors:
      for (const std::string &name : arg.tensorNames)
        fn(name);
      break;
    case ArgumentKind::OptionalTensor:
      if (arg.optionalTensorName)
        fn(*arg.optionalTensorName);
      break;
    case ArgumentKind::OptionalTensors:
      for (const std::optional<std::string> &name : arg.optionalTensorNames)
        if (name)
          fn(*name);
      break;
    case ArgumentKind::NestedTensors:
      for (const std::vector<std::string> &names : arg.nestedTensorNames)
        for (const std::string &name : names)
          fn(name);
      break;
    case ArgumentKind::StringToArgument:
      for (const NamedArgument &entry : arg.stringToArgument)
        forEachTensorName(entry.arg, fn);
      break;
    default:
      break;
    }
  }

  /// Checks what the importer relies on: tensors are defined once, before
  /// use, with metadata; and the signature lines up with the graph.
  bool checkProgram(const Program &program) {
    const Graph &graph = program.graph;
    llvm::StringSet<> defined;
    bool ok = true;
    auto define = [&](const std::string &name, const Twine &definer) {
      if (!ok)
        return;
      if (!defined.insert(name).second)
        ok = reader.failPlain("tensor '" + name + "' is defined twice (again " +
                              definer + ")");
      else if (!graph.findTensor(name))
        ok = reader.failPlain("tensor '" + name + "' (" + definer +
                              ") has no entry in tensor_values");
    };
    auto use = [&](const std::string &name, const Twine &user) {
      if (ok && !defined.contains(name))
        ok = reader.failPlain(user + " uses tensor '" + name +
                              "' before it is defined");
    };

    for (const Argument &input : graph.inputs)
      forEachTensorName(input, [&](const std::string &name) {
        define(name, "by a graph input");
      });
    for (const Node &node : graph.nodes) {
      for (const NamedArgument &input : node.inputs)
        forEachTensorName(input.arg, [&](const std::string &name) {
          use(name, "node '" + node.name + "' (" + node.target + ")");
        });
      for (const Argument &output : node.outputs)
        forEachTensorName(output, [&](const std::string &name) {
          define(name, "by node '" + node.name + "'");
        });
      if (!ok)
        return false;
    }
    for (const Argument &output : graph.outputs)
      forEachTensorName(output, [&](const std::string &name) {
        use(name, "a graph output");
      });
    if (!ok)
      return false;

    const GraphSignature &signature = program.signature;
    if (signature.inputSpecs.size() != graph.inputs.size())
      return reader.failPlain(
          "the signature describes " + Twine(signature.inputSpecs.size()) +
          " inputs but the graph has " + Twine(graph.inputs.size()));
    for (auto [position, spec] : llvm::enumerate(signature.inputSpecs)) {
      std::string graphName = getPlaceholderName(graph.inputs[position]);
      if (spec.kind != InputSpec::Kind::ConstantInput &&
          spec.argName != graphName)
        return reader.failPlain(
            "signature input " + Twine(position) + " ('" + spec.argName +
            "') does not match graph input '" + graphName + "'");
    }
    if (signature.outputSpecs.size() != graph.outputs.size())
      return reader.failPlain(
          "the signature describes " + Twine(signature.outputSpecs.size()) +
          " outputs but the graph has " + Twine(graph.outputs.size()));
    for (auto [position, spec] : llvm::enumerate(signature.outputSpecs)) {
      std::string graphName = getPlaceholderName(graph.outputs[position]);
      if (spec.argName != graphName)
        return reader.failPlain(
            "signature output " + Twine(position) + " ('" + spec.argName +
            "') does not match graph output '" + graphName + "'");
    }
    return true;
  }

  JsonReader reader;
};

} // namespace

//===----------------------------------------------------------------------===//
// Entry point
//===----------------------------------------------------------------------===//

llvm::Expected<Program>
mlir::mantissa::pt2::parseModelJson(llvm::StringRef json,
                                    llvm::StringRef displayName,
                                    const ReadOptions &options) {
  Program program;
  ModelJsonParser parser(displayName, options);
  if (llvm::Error error = parser.parse(json, program))
    return std::move(error);
  return std::move(program);
}
