//===- Pt2Archive.cpp - Reader for torch.export .pt2 archives -------------===//
//
// The archive layout is that of torch/export/pt2_archive/_package.py, the JSON
// that of torch/_export/serde/schema.py. The input is untrusted: every JSON
// access is checked, every size bounded and every offset computed with
// overflow checks, and each failure becomes a one-line error that names the
// file and the offending value.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Import/Pt2Archive.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <zip.h>

#include <cstring>
#include <limits>

using namespace mlir::mantissa::pt2;
using llvm::StringRef;
using llvm::Twine;
namespace json = llvm::json;

//===----------------------------------------------------------------------===//
// Enums and small helpers of the data model
//===----------------------------------------------------------------------===//

llvm::StringRef mlir::mantissa::pt2::stringifyScalarType(ScalarType type) {
  switch (type) {
  case ScalarType::Unknown:
    return "unknown";
  case ScalarType::UInt8:
    return "uint8";
  case ScalarType::Int8:
    return "int8";
  case ScalarType::Int16:
    return "int16";
  case ScalarType::Int32:
    return "int32";
  case ScalarType::Int64:
    return "int64";
  case ScalarType::Float16:
    return "float16";
  case ScalarType::Float32:
    return "float32";
  case ScalarType::Float64:
    return "float64";
  case ScalarType::Complex32:
    return "complex32";
  case ScalarType::Complex64:
    return "complex64";
  case ScalarType::Complex128:
    return "complex128";
  case ScalarType::Bool:
    return "bool";
  case ScalarType::BFloat16:
    return "bfloat16";
  case ScalarType::UInt16:
    return "uint16";
  case ScalarType::Float8E4M3FN:
    return "float8_e4m3fn";
  case ScalarType::Float8E5M2:
    return "float8_e5m2";
  case ScalarType::Float8E4M3FNUZ:
    return "float8_e4m3fnuz";
  case ScalarType::Float8E5M2FNUZ:
    return "float8_e5m2fnuz";
  }
  return "unknown";
}

unsigned mlir::mantissa::pt2::getScalarTypeByteWidth(ScalarType type) {
  switch (type) {
  case ScalarType::Unknown:
    return 0;
  case ScalarType::UInt8:
  case ScalarType::Int8:
  case ScalarType::Bool:
  case ScalarType::Float8E4M3FN:
  case ScalarType::Float8E5M2:
  case ScalarType::Float8E4M3FNUZ:
  case ScalarType::Float8E5M2FNUZ:
    return 1;
  case ScalarType::Int16:
  case ScalarType::UInt16:
  case ScalarType::Float16:
  case ScalarType::BFloat16:
    return 2;
  case ScalarType::Int32:
  case ScalarType::Float32:
  case ScalarType::Complex32:
    return 4;
  case ScalarType::Int64:
  case ScalarType::Float64:
  case ScalarType::Complex64:
    return 8;
  case ScalarType::Complex128:
    return 16;
  }
  return 0;
}

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

int64_t TensorMeta::getNumElements() const {
  // The reader has checked that this product does not overflow.
  int64_t count = 1;
  for (int64_t size : sizes)
    count *= size;
  return count;
}

llvm::StringRef mlir::mantissa::pt2::stringifyArgumentKind(ArgumentKind kind) {
  switch (kind) {
  case ArgumentKind::None:
    return "as_none";
  case ArgumentKind::Tensor:
    return "as_tensor";
  case ArgumentKind::Tensors:
    return "as_tensors";
  case ArgumentKind::Int:
    return "as_int";
  case ArgumentKind::Ints:
    return "as_ints";
  case ArgumentKind::Float:
    return "as_float";
  case ArgumentKind::Floats:
    return "as_floats";
  case ArgumentKind::String:
    return "as_string";
  case ArgumentKind::Strings:
    return "as_strings";
  case ArgumentKind::SymInt:
    return "as_sym_int";
  case ArgumentKind::SymInts:
    return "as_sym_ints";
  case ArgumentKind::ScalarType:
    return "as_scalar_type";
  case ArgumentKind::MemoryFormat:
    return "as_memory_format";
  case ArgumentKind::Layout:
    return "as_layout";
  case ArgumentKind::Device:
    return "as_device";
  case ArgumentKind::Bool:
    return "as_bool";
  case ArgumentKind::Bools:
    return "as_bools";
  case ArgumentKind::SymBool:
    return "as_sym_bool";
  case ArgumentKind::SymBools:
    return "as_sym_bools";
  case ArgumentKind::Graph:
    return "as_graph";
  case ArgumentKind::OptionalTensors:
    return "as_optional_tensors";
  case ArgumentKind::CustomObj:
    return "as_custom_obj";
  case ArgumentKind::Operator:
    return "as_operator";
  case ArgumentKind::SymFloat:
    return "as_sym_float";
  case ArgumentKind::SymFloats:
    return "as_sym_floats";
  case ArgumentKind::OptionalTensor:
    return "as_optional_tensor";
  case ArgumentKind::Complex:
    return "as_complex";
  case ArgumentKind::NestedTensors:
    return "as_nested_tensors";
  case ArgumentKind::IntLists:
    return "as_int_lists";
  case ArgumentKind::StringToArgument:
    return "as_string_to_argument";
  }
  return "as_unknown";
}

llvm::StringRef mlir::mantissa::pt2::stringifyInputKind(InputSpec::Kind kind) {
  switch (kind) {
  case InputSpec::Kind::UserInput:
    return "user_input";
  case InputSpec::Kind::Parameter:
    return "parameter";
  case InputSpec::Kind::Buffer:
    return "buffer";
  case InputSpec::Kind::TensorConstant:
    return "tensor_constant";
  case InputSpec::Kind::ConstantInput:
    return "constant_input";
  }
  return "unknown";
}

llvm::StringRef
mlir::mantissa::pt2::stringifyOutputKind(OutputSpec::Kind kind) {
  switch (kind) {
  case OutputSpec::Kind::UserOutput:
    return "user_output";
  case OutputSpec::Kind::LossOutput:
    return "loss_output";
  case OutputSpec::Kind::BufferMutation:
    return "buffer_mutation";
  case OutputSpec::Kind::GradientToParameter:
    return "gradient_to_parameter";
  case OutputSpec::Kind::GradientToUserInput:
    return "gradient_to_user_input";
  case OutputSpec::Kind::UserInputMutation:
    return "user_input_mutation";
  case OutputSpec::Kind::ParameterMutation:
    return "parameter_mutation";
  }
  return "unknown";
}

const NamedArgument *
mlir::mantissa::pt2::findNamedArgument(llvm::ArrayRef<NamedArgument> arguments,
                                       llvm::StringRef name) {
  for (const NamedArgument &argument : arguments)
    if (argument.name == name)
      return &argument;
  return nullptr;
}

const TensorMeta *Graph::findTensor(llvm::StringRef name) const {
  auto it = tensorValues.find(name.str());
  return it == tensorValues.end() ? nullptr : &it->second;
}

bool StoredTensor::isTiedTo(const StoredTensor &other) const {
  return blobName == other.blobName && meta.dtype == other.meta.dtype &&
         meta.sizes == other.meta.sizes && meta.strides == other.meta.strides &&
         meta.storageOffset == other.meta.storageOffset;
}

static const StoredTensor *
findStoredTensor(llvm::ArrayRef<StoredTensor> tensors, llvm::StringRef fqn) {
  // Sorted by FQN (see Program).
  auto it = llvm::partition_point(
      tensors, [&](const StoredTensor &tensor) { return tensor.fqn < fqn; });
  return it != tensors.end() && it->fqn == fqn ? &*it : nullptr;
}

const StoredTensor *Program::findWeight(llvm::StringRef fqn) const {
  return findStoredTensor(weights, fqn);
}

const StoredTensor *Program::findConstant(llvm::StringRef fqn) const {
  return findStoredTensor(constants, fqn);
}

//===----------------------------------------------------------------------===//
// JSON reading
//===----------------------------------------------------------------------===//

namespace {

constexpr StringRef kModelJsonEntry = "models/model.json";
constexpr StringRef kWeightsDir = "data/weights/";
constexpr StringRef kWeightsConfigEntry =
    "data/weights/model_weights_config.json";
constexpr StringRef kConstantsDir = "data/constants/";
constexpr StringRef kConstantsConfigEntry =
    "data/constants/model_constants_config.json";

llvm::Error makeError(const Twine &message) {
  return llvm::make_error<llvm::StringError>(message,
                                             llvm::inconvertibleErrorCode());
}

/// Where a value sits in a JSON document. Segments point at their parent and
/// the path is only rendered when an error is reported, so walking a large
/// model.json builds no strings. A JsonPath must not outlive its parent: pass
/// `path.field(...)` straight into a call, never store it.
class JsonPath {
public:
  JsonPath() = default;

  JsonPath field(StringRef name) const {
    JsonPath child;
    child.parent = this;
    child.fieldName = name;
    return child;
  }

  JsonPath index(size_t position) const {
    JsonPath child;
    child.parent = this;
    child.arrayIndex = position;
    child.isIndex = true;
    return child;
  }

  std::string str() const {
    llvm::SmallVector<const JsonPath *, 16> segments;
    for (const JsonPath *segment = this; segment && segment->parent;
         segment = segment->parent)
      segments.push_back(segment);
    std::string text;
    llvm::raw_string_ostream os(text);
    for (const JsonPath *segment : llvm::reverse(segments)) {
      if (segment->isIndex)
        os << '[' << segment->arrayIndex << ']';
      else
        os << (text.empty() ? "" : ".") << segment->fieldName;
    }
    if (text.empty())
      os << "(root)";
    return text;
  }

private:
  const JsonPath *parent = nullptr;
  StringRef fieldName;
  size_t arrayIndex = 0;
  bool isIndex = false;
};

/// True if `text` nests arrays/objects deeper than `maxDepth`. llvm::json's
/// parser recurses once per level, so this lexical pre-scan is what keeps a
/// hostile document from overflowing the stack.
bool exceedsJsonNesting(StringRef text, unsigned maxDepth) {
  unsigned depth = 0;
  bool inString = false;
  for (size_t i = 0, e = text.size(); i < e; ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > maxDepth)
        return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

/// Checked accessors over llvm::json values in the style of llvm::json's
/// fromJSON: each returns false after recording the first error, which keeps
/// the schema walk free of Expected<> plumbing at every field.
class JsonReader {
public:
  JsonReader(StringRef displayName, StringRef entryName,
             const ReadOptions &options)
      : displayName(displayName), entryName(entryName), options(options) {}

  /// Parses `text` as the document of this reader's entry.
  std::optional<json::Value> parseDocument(StringRef text) {
    if (exceedsJsonNesting(text, options.maxJsonDepth)) {
      failPlain(entryName + " nests deeper than " +
                Twine(options.maxJsonDepth) + " levels");
      return std::nullopt;
    }
    llvm::Expected<json::Value> document = json::parse(text);
    if (!document) {
      failPlain(entryName + " is not valid JSON (" +
                llvm::toString(document.takeError()) + ")");
      return std::nullopt;
    }
    return std::move(*document);
  }

  /// Records a structural error at `path`; always returns false.
  bool fail(const JsonPath &path, const Twine &message) {
    if (!firstError)
      firstError =
          (displayName + ": " + entryName + ": " + path.str() + ": " + message)
              .str();
    return false;
  }

  /// Records an error that names the offending value itself (a tensor, a
  /// weight) and needs no JSON path; always returns false.
  bool failPlain(const Twine &message) {
    if (!firstError)
      firstError = (displayName + ": " + message).str();
    return false;
  }

  llvm::Error takeError() {
    if (!firstError)
      return llvm::Error::success();
    llvm::Error error = makeError(*firstError);
    firstError.reset();
    return error;
  }

  const json::Object *getObject(const json::Value &value,
                                const JsonPath &path) {
    if (const json::Object *object = value.getAsObject())
      return object;
    fail(path, "expected an object");
    return nullptr;
  }

  const json::Array *getArray(const json::Value &value, const JsonPath &path) {
    if (const json::Array *array = value.getAsArray())
      return array;
    fail(path, "expected an array");
    return nullptr;
  }

  /// A required field; records an error when it is missing.
  const json::Value *getField(const json::Object &object, StringRef key,
                              const JsonPath &objectPath) {
    if (const json::Value *value = object.get(key))
      return value;
    fail(objectPath, "missing field '" + key + "'");
    return nullptr;
  }

  /// An optional field: null when missing or JSON null.
  static const json::Value *getOptionalField(const json::Object &object,
                                             StringRef key) {
    const json::Value *value = object.get(key);
    return value && value->kind() != json::Value::Null ? value : nullptr;
  }

  bool read(const json::Value &value, const JsonPath &path, std::string &out) {
    std::optional<StringRef> text = value.getAsString();
    if (!text)
      return fail(path, "expected a string");
    out = text->str();
    return true;
  }

  bool read(const json::Value &value, const JsonPath &path, int64_t &out) {
    // getAsInteger also accepts integral doubles, which Python never writes
    // for ints but which are harmless.
    std::optional<int64_t> number = value.getAsInteger();
    if (!number)
      return fail(path, "expected an integer");
    out = *number;
    return true;
  }

  bool read(const json::Value &value, const JsonPath &path, double &out) {
    if (std::optional<double> number = value.getAsNumber()) {
      out = *number;
      return true;
    }
    // torch writes non-finite floats as strings because JSON has no
    // spelling for them.
    if (std::optional<StringRef> text = value.getAsString()) {
      std::optional<double> special =
          llvm::StringSwitch<std::optional<double>>(*text)
              .Case("Infinity", std::numeric_limits<double>::infinity())
              .Case("-Infinity", -std::numeric_limits<double>::infinity())
              .Case("NaN", std::numeric_limits<double>::quiet_NaN())
              .Default(std::nullopt);
      if (special) {
        out = *special;
        return true;
      }
    }
    return fail(path, "expected a number");
  }

  bool read(const json::Value &value, const JsonPath &path, bool &out) {
    std::optional<bool> flag = value.getAsBoolean();
    if (!flag)
      return fail(path, "expected a boolean");
    out = *flag;
    return true;
  }

  template <typename T>
  bool readField(const json::Object &object, StringRef key,
                 const JsonPath &objectPath, T &out) {
    const json::Value *value = getField(object, key, objectPath);
    return value && read(*value, objectPath.field(key), out);
  }

  /// Reads an optional field into `out`, leaving it untouched when absent.
  template <typename T>
  bool readOptionalField(const json::Object &object, StringRef key,
                         const JsonPath &objectPath, T &out) {
    const json::Value *value = getOptionalField(object, key);
    return !value || read(*value, objectPath.field(key), out);
  }

  /// Reads an array whose elements `readElement(value, path, element)` reads.
  template <typename T, typename ReadElementFn>
  bool readList(const json::Value &value, const JsonPath &path,
                std::vector<T> &out, ReadElementFn readElement) {
    const json::Array *array = getArray(value, path);
    if (!array)
      return false;
    out.clear();
    out.reserve(array->size());
    for (size_t i = 0, e = array->size(); i < e; ++i) {
      T element{};
      if (!readElement((*array)[i], path.index(i), element))
        return false;
      out.push_back(std::move(element));
    }
    return true;
  }

  template <typename T>
  bool readList(const json::Value &value, const JsonPath &path,
                std::vector<T> &out) {
    return readList(
        value, path, out,
        [&](const json::Value &element, const JsonPath &elementPath,
            T &result) { return read(element, elementPath, result); });
  }

  /// Reads one of the schema's unions, serialised as a one-key object
  /// {"<member>": payload}.
  bool readUnion(const json::Value &value, const JsonPath &path,
                 StringRef &member, const json::Value *&payload) {
    const json::Object *object = getObject(value, path);
    if (!object)
      return false;
    if (object->size() != 1)
      return fail(path, "expected a union (an object with exactly one key), "
                        "got " +
                            Twine(object->size()) + " keys");
    const auto &entry = *object->begin();
    member = entry.first;
    payload = &entry.second;
    return true;
  }

  //===--------------------------------------------------------------------===//
  // Tensor metadata
  //===--------------------------------------------------------------------===//

  /// Reads a SymInt that must be concrete; `what` names the value for the
  /// error ("tensor 'x' has a symbolic size").
  bool readStaticSymInt(const json::Value &value, const JsonPath &path,
                        const Twine &what, int64_t &out) {
    StringRef member;
    const json::Value *payload = nullptr;
    if (!readUnion(value, path, member, payload))
      return false;
    if (member == "as_int")
      return read(*payload, path.field(member), out);
    if (member == "as_expr") {
      std::string expression = "?";
      if (const json::Object *expr = payload->getAsObject())
        if (const json::Value *exprText = expr->get("expr_str"))
          if (std::optional<StringRef> text = exprText->getAsString())
            expression = text->str();
      return failPlain(what + " (" + expression +
                       "); only static shapes are supported");
    }
    return fail(path, "unknown SymInt member '" + member + "'");
  }

  /// Reads a schema TensorMeta. `label` names the tensor in errors, e.g.
  /// "tensor 'x'" or "weight 'fc1.weight'".
  bool readTensorMeta(const json::Value &value, const JsonPath &path,
                      const Twine &label, TensorMeta &meta) {
    const json::Object *object = getObject(value, path);
    if (!object)
      return false;

    int64_t dtype = 0;
    if (!readField(*object, "dtype", path, dtype))
      return false;
    std::optional<ScalarType> scalarType = scalarTypeFromSchema(dtype);
    if (!scalarType)
      return failPlain(label + " has unknown dtype " + Twine(dtype));
    meta.dtype = *scalarType;

    const json::Value *sizes = getField(*object, "sizes", path);
    if (!sizes || !readList(*sizes, path.field("sizes"), meta.sizes,
                            [&](const json::Value &element,
                                const JsonPath &elementPath, int64_t &size) {
                              return readStaticSymInt(
                                  element, elementPath,
                                  label + " has a symbolic size", size);
                            }))
      return false;
    const json::Value *strides = getField(*object, "strides", path);
    if (!strides ||
        !readList(*strides, path.field("strides"), meta.strides,
                  [&](const json::Value &element, const JsonPath &elementPath,
                      int64_t &stride) {
                    return readStaticSymInt(element, elementPath,
                                            label + " has a symbolic stride",
                                            stride);
                  }))
      return false;
    const json::Value *offset = getField(*object, "storage_offset", path);
    if (!offset || !readStaticSymInt(*offset, path.field("storage_offset"),
                                     label + " has a symbolic storage offset",
                                     meta.storageOffset))
      return false;
    if (!readField(*object, "requires_grad", path, meta.requiresGrad))
      return false;
    if (const json::Value *device = getOptionalField(*object, "device"))
      if (!readDevice(*device, path.field("device"), meta.device))
        return false;
    if (const json::Value *layout = getOptionalField(*object, "layout"))
      if (!readLayout(*layout, path.field("layout"), meta.layout))
        return false;

    if (meta.sizes.size() != meta.strides.size())
      return failPlain(label + " has " + Twine(meta.sizes.size()) +
                       " sizes but " + Twine(meta.strides.size()) + " strides");
    int64_t elementCount = 1;
    for (size_t dim = 0, e = meta.sizes.size(); dim < e; ++dim) {
      if (meta.sizes[dim] < 0)
        return failPlain(label + " has negative size " +
                         Twine(meta.sizes[dim]) + " in dimension " +
                         Twine(dim));
      if (meta.strides[dim] < 0)
        return failPlain(label + " has negative stride " +
                         Twine(meta.strides[dim]) + " in dimension " +
                         Twine(dim));
      std::optional<int64_t> product =
          llvm::checkedMul(elementCount, meta.sizes[dim]);
      if (!product)
        return failPlain(label + " has more elements than fit in 64 "
                                 "bits");
      elementCount = *product;
    }
    if (meta.storageOffset < 0)
      return failPlain(label + " has negative storage offset " +
                       Twine(meta.storageOffset));
    return true;
  }

  bool readDevice(const json::Value &value, const JsonPath &path,
                  Device &device) {
    const json::Object *object = getObject(value, path);
    if (!object || !readField(*object, "type", path, device.type))
      return false;
    if (const json::Value *index = getOptionalField(*object, "index")) {
      int64_t deviceIndex = 0;
      if (!read(*index, path.field("index"), deviceIndex))
        return false;
      device.index = deviceIndex;
    }
    return true;
  }

  bool readLayout(const json::Value &value, const JsonPath &path,
                  Layout &layout) {
    int64_t number = 0;
    if (!read(value, path, number))
      return false;
    if (number < 0 || number > static_cast<int64_t>(Layout::Strided))
      return fail(path, "unknown layout " + Twine(number));
    layout = static_cast<Layout>(number);
    return true;
  }

  bool readMemoryFormat(const json::Value &value, const JsonPath &path,
                        MemoryFormat &format) {
    int64_t number = 0;
    if (!read(value, path, number))
      return false;
    if (number < 0 || number > static_cast<int64_t>(MemoryFormat::Preserve))
      return fail(path, "unknown memory format " + Twine(number));
    format = static_cast<MemoryFormat>(number);
    return true;
  }

  StringRef getDisplayName() const { return displayName; }
  const ReadOptions &getOptions() const { return options; }

private:
  std::string displayName;
  std::string entryName;
  const ReadOptions &options;
  std::optional<std::string> firstError;
};

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
    if (!parseProgram(text, program) || !checkProgram(program))
      return reader.takeError();
    return llvm::Error::success();
  }

private:
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
  // Arguments
  //===--------------------------------------------------------------------===//

  /// Reads a TensorArgument, {"name": ...}.
  bool readTensorName(const json::Value &value, const JsonPath &path,
                      std::string &name) {
    const json::Object *object = reader.getObject(value, path);
    return object && reader.readField(*object, "name", path, name);
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

  bool readTensorNameList(const json::Value &value, const JsonPath &path,
                          std::vector<std::string> &names) {
    return reader.readList(value, path, names,
                           [&](const json::Value &element,
                               const JsonPath &elementPath, std::string &name) {
                             return readTensorName(element, elementPath, name);
                           });
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
      return reader.readMemoryFormat(*payload, payloadPath, arg.memoryFormat);
    case ArgumentKind::Layout:
      return reader.readLayout(*payload, payloadPath, arg.layout);
    case ArgumentKind::Device:
      return reader.readDevice(*payload, payloadPath, arg.device);
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

  /// Reads a graph-level SymInt/SymFloat/SymBool: concrete (`literalMember`)
  /// or an expression with an optional hint.
  template <typename ValueT>
  bool readSymbolicValue(const json::Value &value, const JsonPath &path,
                         StringRef literalMember,
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
      if (!readSymbolicValue(value, valuesPath.field(name), literalMember,
                             out[name.str()]))
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
      if (!reader.readTensorMeta(meta, tensorValuesPath.field(name),
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

//===----------------------------------------------------------------------===//
// Zip archive access
//===----------------------------------------------------------------------===//

/// A read-only view of the zip archive, with entry names relative to the
/// archive's root folder.
class ZipArchive {
public:
  static llvm::Expected<std::unique_ptr<ZipArchive>>
  open(StringRef bytes, StringRef displayName, const ReadOptions &options) {
    // 22 bytes is the smallest zip (an empty end-of-central-directory
    // record); libzip would open an empty input as an empty archive.
    if (bytes.size() < 22)
      return makeError(displayName + ": not a zip archive (only " +
                       Twine(bytes.size()) + " bytes)");
    zip_error_t error;
    zip_error_init(&error);
    zip_source_t *source =
        zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
    if (!source)
      return makeZipError(displayName, "cannot read zip archive", &error);
    zip_t *handle =
        zip_open_from_source(source, ZIP_RDONLY | ZIP_CHECKCONS, &error);
    if (!handle) {
      zip_source_free(source);
      int code = zip_error_code_zip(&error);
      bool looksLikeZip = bytes.starts_with(StringRef("PK\x03\x04", 4));
      if (code == ZIP_ER_NOZIP && !looksLikeZip) {
        zip_error_fini(&error);
        return makeError(displayName + ": not a zip archive");
      }
      // A zip whose end was cut off has local headers but no central
      // directory, which libzip also reports as "not a zip archive".
      if (code == ZIP_ER_NOZIP) {
        zip_error_fini(&error);
        return makeError(displayName +
                         ": truncated or corrupt zip archive (it has no "
                         "central directory; was the file cut short?)");
      }
      return makeZipError(displayName, "truncated or corrupt zip archive",
                          &error);
    }
    zip_error_fini(&error);

    auto archive = std::unique_ptr<ZipArchive>(
        new ZipArchive(handle, displayName, options));
    if (llvm::Error indexError = archive->indexEntries())
      return std::move(indexError);
    return std::move(archive);
  }

  ~ZipArchive() { zip_discard(handle); }
  ZipArchive(const ZipArchive &) = delete;
  ZipArchive &operator=(const ZipArchive &) = delete;

  bool contains(StringRef name) const { return entries.count(name); }

  /// Reads entry `name` (relative to the root folder). `found` is set to
  /// false, without an error, when there is no such entry.
  llvm::Error read(StringRef name, std::string &contents, bool &found) {
    auto it = entries.find(name);
    found = it != entries.end();
    if (!found)
      return llvm::Error::success();
    zip_uint64_t index = it->second;

    zip_stat_t stat;
    zip_stat_init(&stat);
    if (zip_stat_index(handle, index, 0, &stat) != 0 ||
        !(stat.valid & ZIP_STAT_SIZE))
      return corrupt("cannot stat " + name + ": " + zip_strerror(handle));
    if (stat.size > options.maxEntryBytes)
      return makeError(displayName + ": entry " + name + " is " +
                       Twine(stat.size) + " bytes, more than the limit of " +
                       Twine(options.maxEntryBytes));

    zip_file_t *file = zip_fopen_index(handle, index, 0);
    if (!file)
      return corrupt("cannot open " + name + ": " + zip_strerror(handle));
    contents.assign(static_cast<size_t>(stat.size), '\0');
    zip_uint64_t done = 0;
    while (done < stat.size) {
      zip_int64_t got =
          zip_fread(file, contents.data() + done, stat.size - done);
      if (got < 0) {
        std::string why = zip_file_strerror(file);
        zip_fclose(file);
        return corrupt("cannot read " + name + ": " + why);
      }
      if (got == 0)
        break;
      done += static_cast<zip_uint64_t>(got);
    }
    if (done != stat.size) {
      zip_fclose(file);
      return corrupt(name + " is shorter than its header says");
    }
    // libzip verifies an entry's CRC only once a read hits its end.
    char pastEnd;
    zip_int64_t extra = zip_fread(file, &pastEnd, 1);
    if (extra != 0) {
      std::string why =
          extra < 0 ? zip_file_strerror(file) : "longer than its header says";
      zip_fclose(file);
      return corrupt("cannot read " + name + ": " + why);
    }
    int closeStatus = zip_fclose(file);
    if (closeStatus != 0) {
      zip_error_t error;
      zip_error_init_with_code(&error, closeStatus);
      std::string why = zip_error_strerror(&error);
      zip_error_fini(&error);
      return corrupt("cannot read " + name + ": " + why);
    }
    return llvm::Error::success();
  }

private:
  ZipArchive(zip_t *handle, StringRef displayName, const ReadOptions &options)
      : handle(handle), displayName(displayName), options(options) {}

  static llvm::Error makeZipError(StringRef displayName, const Twine &what,
                                  zip_error_t *error) {
    std::string why = zip_error_strerror(error);
    zip_error_fini(error);
    return makeError(displayName + ": " + what + " (" + why + ")");
  }

  llvm::Error corrupt(const Twine &why) const {
    return makeError(displayName + ": truncated or corrupt zip archive (" +
                     why + ")");
  }

  /// Maps entry names below the root folder to their indices. Like torch's
  /// reader, the root folder is that of the first entry and entries outside
  /// it are ignored.
  llvm::Error indexEntries() {
    zip_int64_t count = zip_get_num_entries(handle, 0);
    if (count <= 0)
      return makeError(displayName + ": the zip archive is empty");
    StringRef rootFolder;
    std::string firstName;
    for (zip_int64_t index = 0; index < count; ++index) {
      const char *rawName = zip_get_name(handle, index, ZIP_FL_ENC_RAW);
      if (!rawName)
        return corrupt("entry " + Twine(index) + " has no name");
      StringRef name(rawName);
      if (index == 0) {
        size_t slash = name.find('/');
        if (slash == StringRef::npos || slash == 0)
          return makeError(displayName + ": entry '" + name +
                           "' is not inside a root folder, as .pt2 archives' "
                           "entries are");
        firstName = name.str();
        rootFolder = StringRef(firstName).take_front(slash + 1);
      }
      if (!name.consume_front(rootFolder) || name.empty() ||
          name.ends_with("/"))
        continue;
      if (!entries.try_emplace(name, static_cast<zip_uint64_t>(index)).second)
        return corrupt("duplicate entry " + rootFolder + name);
    }
    return llvm::Error::success();
  }

  zip_t *handle;
  std::string displayName;
  const ReadOptions &options;
  llvm::StringMap<zip_uint64_t> entries;
};

//===----------------------------------------------------------------------===//
// Weights and constants
//===----------------------------------------------------------------------===//

/// Reads a payload config (data/weights/model_weights_config.json or its
/// constants counterpart) and materialises each tensor from its blob.
class PayloadReader {
public:
  PayloadReader(ZipArchive &archive, StringRef displayName, StringRef kindName,
                StringRef directory, StringRef configEntry,
                const ReadOptions &options)
      : archive(archive), displayName(displayName), kindName(kindName),
        directory(directory), configEntry(configEntry), options(options),
        reader(displayName, configEntry, options) {}

  llvm::Error read(std::vector<StoredTensor> &tensors) {
    std::string text;
    bool found = false;
    if (llvm::Error error = archive.read(configEntry, text, found))
      return error;
    if (!found)
      return makeError(displayName + ": " + configEntry +
                       " not found in archive");

    std::optional<json::Value> document = reader.parseDocument(text);
    if (!document)
      return reader.takeError();
    JsonPath root;
    const json::Object *top = reader.getObject(*document, root);
    const json::Value *configValue =
        top ? reader.getField(*top, "config", root) : nullptr;
    JsonPath configPath = root.field("config");
    const json::Object *config =
        configValue ? reader.getObject(*configValue, configPath) : nullptr;
    if (!config)
      return reader.takeError();

    for (const auto &[fqn, payload] : *config) {
      StoredTensor tensor;
      tensor.fqn = fqn.str();
      if (llvm::Error error =
              readTensor(payload, configPath.field(fqn), tensor))
        return error;
      tensors.push_back(std::move(tensor));
    }
    llvm::sort(tensors, [](const StoredTensor &lhs, const StoredTensor &rhs) {
      return lhs.fqn < rhs.fqn;
    });
    return llvm::Error::success();
  }

private:
  llvm::Error readTensor(const json::Value &value, const JsonPath &path,
                         StoredTensor &tensor) {
    std::string label = kindName + " '" + tensor.fqn + "'";
    const json::Object *payload = reader.getObject(value, path);
    bool usePickle = false;
    if (!payload ||
        !reader.readField(*payload, "path_name", path, tensor.blobName) ||
        !reader.readField(*payload, "is_param", path, tensor.isParameter) ||
        !reader.readField(*payload, "use_pickle", path, usePickle))
      return reader.takeError();
    // torch pickles tensor subclasses and script objects; reading them would
    // need a Python unpickler and the subclass's code.
    if (usePickle)
      return makeError(displayName + ": " + label +
                       " is stored with use_pickle, which is not supported; "
                       "re-export with plain torch.Tensor " +
                       kindName +
                       "s (tensor subclasses and script objects "
                       "are pickled)");
    const json::Value *meta =
        JsonReader::getOptionalField(*payload, "tensor_meta");
    if (!meta)
      return makeError(displayName + ": " + label + " has no tensor_meta");
    if (!reader.readTensorMeta(*meta, path.field("tensor_meta"), label,
                               tensor.meta))
      return reader.takeError();
    if (tensor.meta.layout != Layout::Strided)
      return makeError(displayName + ": " + label +
                       " has a non-strided layout, which is not supported");

    const std::string *blob = nullptr;
    if (llvm::Error error = getBlob(tensor.blobName, label, blob))
      return error;
    return materialize(*blob, label, tensor);
  }

  /// Reads blob `name` once; tied tensors share it.
  llvm::Error getBlob(StringRef name, StringRef label,
                      const std::string *&blob) {
    auto it = blobs.find(name);
    if (it != blobs.end()) {
      blob = &it->second;
      return llvm::Error::success();
    }
    std::string entryName = (directory + name).str();
    std::string contents;
    bool found = false;
    if (name.empty() || name.contains('/'))
      found = false;
    else if (llvm::Error error = archive.read(entryName, contents, found))
      return error;
    if (!found)
      return makeError(displayName + ": " + label + " refers to blob " +
                       entryName + ", which is not in the archive");
    blob = &blobs.try_emplace(name, std::move(contents)).first->second;
    return llvm::Error::success();
  }

  /// Copies the strided view that `tensor.meta` describes out of `blob` into
  /// row-major order.
  llvm::Error materialize(StringRef blob, StringRef label,
                          StoredTensor &tensor) {
    const TensorMeta &meta = tensor.meta;
    int64_t elementCount = meta.getNumElements();
    if (elementCount == 0)
      return llvm::Error::success();
    // torch writes no bytes for a fake tensor; an empty tensor (handled
    // above) has none either.
    if (blob.empty()) {
      tensor.isFake = true;
      return llvm::Error::success();
    }

    auto tooLarge = [&]() {
      return makeError(displayName + ": " + label +
                       " is a view too large to address");
    };
    int64_t elementBytes = getScalarTypeByteWidth(meta.dtype);
    std::optional<int64_t> lastElement = meta.storageOffset;
    for (size_t dim = 0, e = meta.sizes.size(); dim < e && lastElement; ++dim)
      lastElement = llvm::checkedMulAdd(meta.sizes[dim] - 1, meta.strides[dim],
                                        *lastElement);
    std::optional<int64_t> viewEnd;
    if (lastElement && *lastElement < std::numeric_limits<int64_t>::max())
      viewEnd = llvm::checkedMul(*lastElement + 1, elementBytes);
    if (!viewEnd)
      return tooLarge();
    if (static_cast<uint64_t>(*viewEnd) > blob.size())
      return makeError(displayName + ": " + label + " views bytes up to " +
                       Twine(*viewEnd) + " of blob " + tensor.blobName +
                       ", which holds only " + Twine(blob.size()) + " bytes");
    std::optional<int64_t> totalBytes =
        llvm::checkedMul(elementCount, elementBytes);
    if (!totalBytes)
      return tooLarge();
    if (static_cast<uint64_t>(*totalBytes) > options.maxTensorBytes)
      return makeError(displayName + ": " + label + " is " +
                       Twine(*totalBytes) + " bytes, more than the limit of " +
                       Twine(options.maxTensorBytes));

    tensor.contiguousBytes.resize(static_cast<size_t>(*totalBytes));
    uint8_t *destination = tensor.contiguousBytes.data();
    const uint8_t *source = reinterpret_cast<const uint8_t *>(blob.data());
    size_t rank = meta.sizes.size();

    // Walk the view row by row (the innermost dimension), keeping the
    // element offset of the current row up to date like an odometer. Every
    // offset visited is at most `lastElement`, which was bounds-checked.
    int64_t rowLength = rank ? meta.sizes.back() : 1;
    int64_t rowStride = rank ? meta.strides.back() : 1;
    int64_t rowCount = elementCount / rowLength;
    llvm::SmallVector<int64_t, 6> position(rank ? rank - 1 : 0, 0);
    int64_t rowOffset = meta.storageOffset;
    for (int64_t row = 0; row < rowCount; ++row) {
      if (rowStride == 1) {
        std::memcpy(destination, source + rowOffset * elementBytes,
                    static_cast<size_t>(rowLength * elementBytes));
        destination += rowLength * elementBytes;
      } else {
        for (int64_t column = 0; column < rowLength; ++column) {
          std::memcpy(destination,
                      source + (rowOffset + column * rowStride) * elementBytes,
                      static_cast<size_t>(elementBytes));
          destination += elementBytes;
        }
      }
      for (size_t dim = position.size(); dim-- > 0;) {
        if (++position[dim] < meta.sizes[dim]) {
          rowOffset += meta.strides[dim];
          break;
        }
        rowOffset -= (meta.sizes[dim] - 1) * meta.strides[dim];
        position[dim] = 0;
      }
    }
    return llvm::Error::success();
  }

  ZipArchive &archive;
  std::string displayName;
  std::string kindName;
  std::string directory;
  std::string configEntry;
  const ReadOptions &options;
  JsonReader reader;
  llvm::StringMap<std::string> blobs;
};

/// Checks that every parameter, buffer and tensor constant the signature
/// names has stored data of the graph input's type and shape.
llvm::Error checkStoredInputs(const Program &program, StringRef displayName) {
  for (const InputSpec &spec : program.signature.inputSpecs) {
    const StoredTensor *stored = nullptr;
    StringRef where;
    switch (spec.kind) {
    case InputSpec::Kind::Parameter:
      stored = program.findWeight(spec.fqn);
      where = kWeightsConfigEntry;
      break;
    case InputSpec::Kind::Buffer:
      // Persistent buffers are in the state_dict (weights), non-persistent
      // ones among the constants; accept either in case an exporter differs.
      stored = spec.persistent ? program.findWeight(spec.fqn)
                               : program.findConstant(spec.fqn);
      if (!stored)
        stored = spec.persistent ? program.findConstant(spec.fqn)
                                 : program.findWeight(spec.fqn);
      where = spec.persistent ? kWeightsConfigEntry : kConstantsConfigEntry;
      break;
    case InputSpec::Kind::TensorConstant:
      stored = program.findConstant(spec.fqn);
      where = kConstantsConfigEntry;
      break;
    case InputSpec::Kind::UserInput:
    case InputSpec::Kind::ConstantInput:
      continue;
    }
    StringRef kind = stringifyInputKind(spec.kind);
    if (!stored)
      return makeError(displayName + ": " + kind + " '" + spec.fqn +
                       "' has no stored data in " + where);
    const TensorMeta *placeholder = program.graph.findTensor(spec.argName);
    if (placeholder && (placeholder->dtype != stored->meta.dtype ||
                        placeholder->sizes != stored->meta.sizes)) {
      auto describe = [](const TensorMeta &meta) {
        std::string text = stringifyScalarType(meta.dtype).str() + "[";
        for (auto [dim, size] : llvm::enumerate(meta.sizes))
          text += (dim ? "," : "") + std::to_string(size);
        return text + "]";
      };
      return makeError(displayName + ": " + kind + " '" + spec.fqn +
                       "' is stored as " + describe(stored->meta) +
                       " but graph input '" + spec.argName + "' is " +
                       describe(*placeholder));
    }
  }
  return llvm::Error::success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
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

llvm::Expected<Program>
mlir::mantissa::pt2::readPt2ArchiveFromBuffer(llvm::StringRef bytes,
                                              llvm::StringRef displayName,
                                              const ReadOptions &options) {
  llvm::Expected<std::unique_ptr<ZipArchive>> archiveOrError =
      ZipArchive::open(bytes, displayName, options);
  if (!archiveOrError)
    return archiveOrError.takeError();
  ZipArchive &archive = **archiveOrError;

  std::string text;
  bool found = false;
  if (llvm::Error error = archive.read("archive_format", text, found))
    return std::move(error);
  if (!found)
    return makeError(displayName +
                     ": archive_format not found in archive (not a "
                     "torch.export .pt2 archive)");
  if (StringRef(text).trim() != "pt2")
    return makeError(displayName + ": archive_format is '" +
                     StringRef(text).trim() + "', expected 'pt2'");
  if (llvm::Error error = archive.read("byteorder", text, found))
    return std::move(error);
  if (found && StringRef(text).trim() != "little")
    return makeError(displayName + ": the archive's byte order is '" +
                     StringRef(text).trim() +
                     "'; only little-endian archives are supported");

  if (llvm::Error error = archive.read(kModelJsonEntry, text, found))
    return std::move(error);
  if (!found)
    return makeError(displayName + ": " + kModelJsonEntry +
                     " not found in archive");
  llvm::Expected<Program> program = parseModelJson(text, displayName, options);
  if (!program)
    return program.takeError();
  text.clear();
  text.shrink_to_fit();

  if (archive.contains("data/weights/model.pt"))
    return makeError(displayName +
                     ": the weights are stored in the legacy pickled format "
                     "(data/weights/model.pt), which is not supported; "
                     "re-export with torch >= 2.7");
  PayloadReader weightsReader(archive, displayName, "weight", kWeightsDir,
                              kWeightsConfigEntry, options);
  if (llvm::Error error = weightsReader.read(program->weights))
    return std::move(error);
  PayloadReader constantsReader(archive, displayName, "constant", kConstantsDir,
                                kConstantsConfigEntry, options);
  if (llvm::Error error = constantsReader.read(program->constants))
    return std::move(error);
  if (llvm::Error error = checkStoredInputs(*program, displayName))
    return std::move(error);
  return program;
}

llvm::Expected<Program>
mlir::mantissa::pt2::readPt2Archive(llvm::StringRef path,
                                    const ReadOptions &options) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                  /*RequiresNullTerminator=*/false);
  if (!buffer)
    return makeError(path + ": cannot open: " + buffer.getError().message());
  return readPt2ArchiveFromBuffer((*buffer)->getBuffer(), path, options);
}

//===----------------------------------------------------------------------===//
// Summary
//===----------------------------------------------------------------------===//

static void printTensorMeta(const TensorMeta &meta, llvm::raw_ostream &os) {
  os << stringifyScalarType(meta.dtype) << '[';
  llvm::interleave(meta.sizes, os, ",");
  os << ']';
}

void mlir::mantissa::pt2::printProgramSummary(const Program &program,
                                              llvm::raw_ostream &os) {
  os << "schema " << program.schemaMajorVersion << '.'
     << program.schemaMinorVersion << ", torch " << program.torchVersion
     << '\n';
  os << "inputs (" << program.signature.inputSpecs.size() << "):\n";
  for (const InputSpec &spec : program.signature.inputSpecs) {
    os << "  " << stringifyInputKind(spec.kind) << ' ' << spec.argName;
    if (!spec.fqn.empty())
      os << " <- " << spec.fqn;
    if (spec.kind == InputSpec::Kind::Buffer && !spec.persistent)
      os << " (non-persistent)";
    if (const TensorMeta *meta = program.graph.findTensor(spec.argName)) {
      os << ' ';
      printTensorMeta(*meta, os);
    }
    os << '\n';
  }
  os << "outputs (" << program.signature.outputSpecs.size() << "):\n";
  for (const OutputSpec &spec : program.signature.outputSpecs) {
    os << "  " << stringifyOutputKind(spec.kind) << ' ' << spec.argName;
    if (!spec.fqn.empty())
      os << " -> " << spec.fqn;
    os << '\n';
  }
  auto printStored = [&](StringRef title,
                         llvm::ArrayRef<StoredTensor> tensors) {
    os << title << " (" << tensors.size() << "):\n";
    for (const StoredTensor &tensor : tensors) {
      os << "  " << tensor.fqn << ' ';
      printTensorMeta(tensor.meta, os);
      os << " from " << tensor.blobName;
      if (tensor.isFake)
        os << " (fake)";
      os << '\n';
    }
  };
  printStored("weights", program.weights);
  printStored("constants", program.constants);
  std::map<std::string, unsigned> targetCounts;
  for (const Node &node : program.graph.nodes)
    ++targetCounts[node.target];
  os << "nodes (" << program.graph.nodes.size() << "):\n";
  for (const auto &[target, count] : targetCounts)
    os << "  " << count << " x " << target << '\n';
}
