//===- Pt2Json.cpp - Checked reading of a .pt2 archive's JSON -------------===//
//
// The JSON documents of a .pt2 archive are untrusted: JsonReader checks the
// nesting depth before llvm::json's recursive parser sees a document, and the
// type of every value it returns, and renders a JsonPath only when it reports
// an error.
//
//===----------------------------------------------------------------------===//

#include "Pt2Json.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/raw_ostream.h"

#include <limits>

using namespace mlir::mantissa::pt2;
using namespace mlir::mantissa::pt2::detail;
using llvm::StringRef;
using llvm::Twine;
namespace json = llvm::json;

llvm::Error mlir::mantissa::pt2::detail::makeError(const Twine &message) {
  return llvm::make_error<llvm::StringError>(message,
                                             llvm::inconvertibleErrorCode());
}

//===----------------------------------------------------------------------===//
// JsonPath
//===----------------------------------------------------------------------===//

std::string JsonPath::str() const {
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

//===----------------------------------------------------------------------===//
// JsonReader
//===----------------------------------------------------------------------===//

/// True if `text` nests arrays/objects deeper than `maxDepth`. llvm::json's
/// parser recurses once per level, so this lexical pre-scan is what keeps a
/// hostile document from overflowing the stack.
static bool exceedsJsonNesting(StringRef text, unsigned maxDepth) {
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

std::optional<json::Value> JsonReader::parseDocument(StringRef text) {
  if (exceedsJsonNesting(text, options.maxJsonDepth)) {
    failPlain(entryName + " nests deeper than " + Twine(options.maxJsonDepth) +
              " levels");
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

bool JsonReader::fail(const JsonPath &path, const Twine &message) {
  if (!firstError)
    firstError =
        (displayName + ": " + entryName + ": " + path.str() + ": " + message)
            .str();
  return false;
}

bool JsonReader::failPlain(const Twine &message) {
  if (!firstError)
    firstError = (displayName + ": " + message).str();
  return false;
}

llvm::Error JsonReader::takeError() {
  if (!firstError)
    return llvm::Error::success();
  llvm::Error error = makeError(*firstError);
  firstError.reset();
  return error;
}

const json::Object *JsonReader::getObject(const json::Value &value,
                                          const JsonPath &path) {
  if (const json::Object *object = value.getAsObject())
    return object;
  fail(path, "expected an object");
  return nullptr;
}

const json::Array *JsonReader::getArray(const json::Value &value,
                                        const JsonPath &path) {
  if (const json::Array *array = value.getAsArray())
    return array;
  fail(path, "expected an array");
  return nullptr;
}

const json::Value *JsonReader::getField(const json::Object &object,
                                        StringRef key,
                                        const JsonPath &objectPath) {
  if (const json::Value *value = object.get(key))
    return value;
  fail(objectPath, "missing field '" + key + "'");
  return nullptr;
}

const json::Value *JsonReader::getOptionalField(const json::Object &object,
                                                StringRef key) {
  const json::Value *value = object.get(key);
  return value && value->kind() != json::Value::Null ? value : nullptr;
}

bool JsonReader::read(const json::Value &value, const JsonPath &path,
                      std::string &out) {
  std::optional<StringRef> text = value.getAsString();
  if (!text)
    return fail(path, "expected a string");
  out = text->str();
  return true;
}

bool JsonReader::read(const json::Value &value, const JsonPath &path,
                      int64_t &out) {
  // getAsInteger also accepts integral doubles, which Python never writes
  // for ints but which are harmless.
  std::optional<int64_t> number = value.getAsInteger();
  if (!number)
    return fail(path, "expected an integer");
  out = *number;
  return true;
}

bool JsonReader::read(const json::Value &value, const JsonPath &path,
                      double &out) {
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

bool JsonReader::read(const json::Value &value, const JsonPath &path,
                      bool &out) {
  std::optional<bool> flag = value.getAsBoolean();
  if (!flag)
    return fail(path, "expected a boolean");
  out = *flag;
  return true;
}

bool JsonReader::readUnion(const json::Value &value, const JsonPath &path,
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
