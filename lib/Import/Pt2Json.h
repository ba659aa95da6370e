//===- Pt2Json.h - Checked reading of a .pt2 archive's JSON -----*- C++ -*-===//
//
// The layer between llvm::json and the readers of the schema's structures:
// JsonPath names where a value sits for error messages, and JsonReader checks
// the type of every value it hands out and records the first error, so that
// the schema readers can walk a document field by field. Nothing here knows
// the schema. makeError, the one-line error every layer of the reader
// returns, lives here too. Private to lib/Import.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_LIB_IMPORT_PT2JSON_H
#define MANTISSA_LIB_IMPORT_PT2JSON_H

#include "mantissa/Import/Pt2Archive.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlir::mantissa::pt2::detail {

llvm::Error makeError(const llvm::Twine &message);

/// Where a value sits in a JSON document. Segments point at their parent and
/// the path is only rendered when an error is reported, so walking a large
/// model.json builds no strings. A JsonPath must not outlive its parent: pass
/// `path.field(...)` straight into a call, never store it.
class JsonPath {
public:
  JsonPath() = default;

  JsonPath field(llvm::StringRef name) const {
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

  std::string str() const;

private:
  const JsonPath *parent = nullptr;
  llvm::StringRef fieldName;
  size_t arrayIndex = 0;
  bool isIndex = false;
};

/// Checked accessors over llvm::json values in the style of llvm::json's
/// fromJSON: each returns false after recording the first error, which keeps
/// the schema walk free of Expected<> plumbing at every field.
class JsonReader {
public:
  JsonReader(llvm::StringRef displayName, llvm::StringRef entryName,
             const ReadOptions &options)
      : displayName(displayName), entryName(entryName), options(options) {}

  /// Parses `text` as the document of this reader's entry.
  std::optional<llvm::json::Value> parseDocument(llvm::StringRef text);

  /// Records a structural error at `path`; always returns false.
  bool fail(const JsonPath &path, const llvm::Twine &message);

  /// Records an error that names the offending value itself (a tensor, a
  /// weight) and needs no JSON path; always returns false.
  bool failPlain(const llvm::Twine &message);

  llvm::Error takeError();

  const llvm::json::Object *getObject(const llvm::json::Value &value,
                                      const JsonPath &path);

  const llvm::json::Array *getArray(const llvm::json::Value &value,
                                    const JsonPath &path);

  /// A required field; records an error when it is missing.
  const llvm::json::Value *getField(const llvm::json::Object &object,
                                    llvm::StringRef key,
                                    const JsonPath &objectPath);

  /// An optional field: null when missing or JSON null.
  static const llvm::json::Value *
  getOptionalField(const llvm::json::Object &object, llvm::StringRef key);

  bool read(const llvm::json::Value &value, const JsonPath &path,
            std::string &out);
  bool read(const llvm::json::Value &value, const JsonPath &path, int64_t &out);
  bool read(const llvm::json::Value &value, const JsonPath &path, double &out);
  bool read(const llvm::json::Value &value, const JsonPath &path, bool &out);

  template <typename T>
  bool readField(const llvm::json::Object &object, llvm::StringRef key,
                 const JsonPath &objectPath, T &out) {
    const llvm::json::Value *value = getField(object, key, objectPath);
    return value && read(*value, objectPath.field(key), out);
  }

  /// Reads an optional field into `out`, leaving it untouched when absent.
  template <typename T>
  bool readOptionalField(const llvm::json::Object &object, llvm::StringRef key,
                         const JsonPath &objectPath, T &out) {
    const llvm::json::Value *value = getOptionalField(object, key);
    return !value || read(*value, objectPath.field(key), out);
  }

  /// Reads an array whose elements `readElement(value, path, element)` reads.
  template <typename T, typename ReadElementFn>
  bool readList(const llvm::json::Value &value, const JsonPath &path,
                std::vector<T> &out, ReadElementFn readElement) {
    const llvm::json::Array *array = getArray(value, path);
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
  bool readList(const llvm::json::Value &value, const JsonPath &path,
                std::vector<T> &out) {
    return readList(
        value, path, out,
        [&](const llvm::json::Value &element, const JsonPath &elementPath,
            T &result) { return read(element, elementPath, result); });
  }

  /// Reads one of the schema's unions, serialised as a one-key object
  /// {"<member>": payload}.
  bool readUnion(const llvm::json::Value &value, const JsonPath &path,
                 llvm::StringRef &member, const llvm::json::Value *&payload);

  llvm::StringRef getDisplayName() const { return displayName; }
  const ReadOptions &getOptions() const { return options; }

  /// The shape symbols' values (the batch symbol bound to the micro-batch,
  /// Pt2Specialization.cpp), with which symbolic sizes are evaluated; empty
  /// for a static program, whose symbolic sizes are errors.
  std::map<std::string, int64_t> symbols;

private:
  std::string displayName;
  std::string entryName;
  const ReadOptions &options;
  std::optional<std::string> firstError;
};

} // namespace mlir::mantissa::pt2::detail

#endif // MANTISSA_LIB_IMPORT_PT2JSON_H
