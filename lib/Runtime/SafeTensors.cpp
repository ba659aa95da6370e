//===- SafeTensors.cpp - Reading and writing safetensors files ------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The header is tokenized by nlohmann::json's SAX parser and assembled by
// HeaderBuilder, which also records the file order of the tensor names,
// rejects duplicate keys and bounds the nesting depth. Everything the header
// says is then checked against the file before a single tensor byte is read.
// Offsets and sizes are uint64_t and every product or sum of them is
// overflow-checked, because they come from the file.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/SafeTensors.h"
#include "mantissa/Format/InputFile.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <tuple>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors stores little-endian elements and the runtime "
              "copies them as they are");

namespace mlir::mantissa::rt {

namespace {

using Json = nlohmann::json;

/// The limit the reference (Rust) implementation uses, so that a header it
/// accepts we accept too, and a corrupt length cannot make us allocate
/// gigabytes before noticing.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

/// The header nests at most three levels (object, entry, list); anything
/// deeper is malformed, and refusing it early keeps a hostile "[[[[..." header
/// from costing memory proportional to its length.
constexpr int kMaxJsonDepth = 8;

constexpr std::string_view kMetadataKey = "__metadata__";

/// One header entry after validation; `begin` and `end` are relative to the
/// start of the data section.
struct TensorEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin;
  uint64_t end;
};

struct ParsedHeader {
  std::vector<TensorEntry> entries;
  std::map<std::string, std::string> metadata;
};

std::string quoteName(std::string_view text) {
  std::string result;
  result.reserve(text.size() + 2);
  result += '\'';
  result += text;
  result += '\'';
  return result;
}

std::string formatShape(const std::vector<int64_t> &shape) {
  std::string result = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      result += ", ";
    result += std::to_string(shape[i]);
  }
  return result + "]";
}

/// Extracts a JSON integer in [0, limit]; floats, negatives, and integers
/// too large for uint64_t (which nlohmann parses as floats) are rejected.
std::optional<uint64_t> nonNegativeInteger(const Json &value, uint64_t limit) {
  if (!value.is_number_unsigned())
    return std::nullopt;
  uint64_t number = value.get<uint64_t>();
  if (number > limit)
    return std::nullopt;
  return number;
}

/// Checks one tensor's entry; `dataSize` is the length of the data section.
bool parseTensorEntry(const std::string &name, const Json &value,
                      uint64_t dataSize, TensorEntry &entry,
                      std::string &error) {
  std::string where = "tensor " + quoteName(name) + ": ";
  if (!value.is_object()) {
    error = where + "entry is not a JSON object";
    return false;
  }
  for (const auto &field : value.items()) {
    if (field.key() != "dtype" && field.key() != "shape" &&
        field.key() != "data_offsets") {
      error = where + "unknown field " + quoteName(field.key());
      return false;
    }
  }
  auto dtypeIt = value.find("dtype");
  auto shapeIt = value.find("shape");
  auto offsetsIt = value.find("data_offsets");
  if (dtypeIt == value.end() || shapeIt == value.end() ||
      offsetsIt == value.end()) {
    error = where + "entry needs 'dtype', 'shape' and 'data_offsets'";
    return false;
  }

  if (!dtypeIt->is_string()) {
    error = where + "dtype is not a string";
    return false;
  }
  const std::string &dtypeName = dtypeIt->get_ref<const std::string &>();
  std::optional<DType> dtype = parseSafeTensorsDTypeName(dtypeName);
  if (!dtype) {
    error = where + "unknown dtype " + quoteName(dtypeName);
    return false;
  }

  if (!shapeIt->is_array()) {
    error = where + "shape is not a list of non-negative integers";
    return false;
  }
  std::vector<int64_t> shape;
  shape.reserve(shapeIt->size());
  for (const Json &dim : *shapeIt) {
    std::optional<uint64_t> size =
        nonNegativeInteger(dim, std::numeric_limits<int64_t>::max());
    if (!size) {
      error = where + "shape is not a list of non-negative integers";
      return false;
    }
    shape.push_back(static_cast<int64_t>(*size));
  }
  std::optional<int64_t> numElements = checkedNumElements(shape);
  uint64_t byteSize = 0;
  if (!numElements ||
      __builtin_mul_overflow(static_cast<uint64_t>(*numElements),
                             static_cast<uint64_t>(elementSize(*dtype)),
                             &byteSize)) {
    error = where + "shape " + formatShape(shape) + " of " + dtypeName +
            " overflows the addressable size";
    return false;
  }

  std::optional<uint64_t> begin, end;
  if (offsetsIt->is_array() && offsetsIt->size() == 2) {
    begin = nonNegativeInteger((*offsetsIt)[0], UINT64_MAX);
    end = nonNegativeInteger((*offsetsIt)[1], UINT64_MAX);
  }
  if (!begin || !end) {
    error = where + "data_offsets is not a list [begin, end] of two "
                    "non-negative integers";
    return false;
  }
  if (*begin > *end || *end > dataSize) {
    error = where + "data_offsets [" + std::to_string(*begin) + ", " +
            std::to_string(*end) + "] are not within the data section of " +
            std::to_string(dataSize) + " bytes";
    return false;
  }
  if (*end - *begin != byteSize) {
    error = where + "data_offsets span " + std::to_string(*end - *begin) +
            " bytes but shape " + formatShape(shape) + " of " + dtypeName +
            " needs " + std::to_string(byteSize);
    return false;
  }

  entry = TensorEntry{name, *dtype, std::move(shape), *begin, *end};
  return true;
}

/// Builds the header's JSON value from nlohmann's SAX events, adding what
/// the stock parser lacks: duplicate keys are an error (it keeps one of them
/// silently), the order of top-level keys is recorded (std::map forgets it),
/// and nesting is bounded so a hostile "[[[[..." cannot cost memory in
/// proportion to its length. The stock parser's callback hook would do the
/// first two, but it rescans the parent object after every member, which is
/// quadratic in the number of tensors.
class HeaderBuilder {
public:
  explicit HeaderBuilder(Json &root) : root(root) {}

  bool null() { return addValue(nullptr); }
  bool boolean(bool value) { return addValue(value); }
  bool number_integer(Json::number_integer_t value) { return addValue(value); }
  bool number_unsigned(Json::number_unsigned_t value) {
    return addValue(value);
  }
  bool number_float(Json::number_float_t value, const Json::string_t &) {
    return addValue(value);
  }
  bool string(Json::string_t &value) { return addValue(std::move(value)); }
  bool binary(Json::binary_t &) {
    error = "header is not valid JSON: binary value";
    return false;
  }

  bool start_object(std::size_t) { return openContainer(Json::object()); }
  bool start_array(std::size_t) { return openContainer(Json::array()); }
  bool end_object() { return closeContainer(); }
  bool end_array() { return closeContainer(); }

  bool key(Json::string_t &key) {
    Json &object = *openContainers.back();
    if (object.contains(key)) {
      if (openContainers.size() == 1)
        error = "duplicate tensor name " + quoteName(key);
      else
        error = "duplicate key " + quoteName(key) + " in entry of " +
                quoteName(topLevelKeys.empty() ? "" : topLevelKeys.back());
      return false;
    }
    if (openContainers.size() == 1)
      topLevelKeys.push_back(key);
    pendingMember = &object[key];
    return true;
  }

  bool parse_error(std::size_t, const std::string &,
                   const Json::exception &parseError) {
    error = std::string("header is not valid JSON: ") + parseError.what();
    return false;
  }

  std::vector<std::string> topLevelKeys;
  std::string error;

private:
  /// Stores `value` where the parser is: the root, the next array element,
  /// or the member named by the last key. Returns where it went.
  template <typename Value> Json *place(Value &&value) {
    if (openContainers.empty()) {
      root = Json(std::forward<Value>(value));
      return &root;
    }
    Json &container = *openContainers.back();
    if (container.is_array()) {
      container.emplace_back(std::forward<Value>(value));
      return &container.back();
    }
    *pendingMember = Json(std::forward<Value>(value));
    return pendingMember;
  }

  template <typename Value> bool addValue(Value &&value) {
    place(std::forward<Value>(value));
    return true;
  }

  bool openContainer(Json empty) {
    if (openContainers.size() >= static_cast<size_t>(kMaxJsonDepth)) {
      error = "header nests deeper than " + std::to_string(kMaxJsonDepth) +
              " levels";
      return false;
    }
    // Pointers into the tree stay valid: only the innermost open container
    // grows, and its ancestors' storage is not touched while it is open.
    openContainers.push_back(place(std::move(empty)));
    return true;
  }

  bool closeContainer() {
    openContainers.pop_back();
    return true;
  }

  Json &root;
  std::vector<Json *> openContainers;
  Json *pendingMember = nullptr;
};

/// Parses and validates the header text. Messages do not name the file; the
/// caller prefixes it.
bool parseHeader(std::string_view headerText, uint64_t dataSize,
                 ParsedHeader &out, std::string &error) {
  Json header;
  HeaderBuilder builder(header);
  bool parsed = false;
  try {
    parsed = Json::sax_parse(headerText.begin(), headerText.end(), &builder);
  } catch (const Json::exception &parseError) {
    builder.error =
        std::string("header is not valid JSON: ") + parseError.what();
  }
  if (!parsed) {
    error = builder.error.empty() ? "header is not valid JSON" : builder.error;
    return false;
  }
  if (!header.is_object()) {
    error = "header is not a JSON object";
    return false;
  }

  for (const std::string &key : builder.topLevelKeys) {
    const Json &value = header.at(key);
    if (key == kMetadataKey) {
      if (!value.is_object()) {
        error = "__metadata__ is not a JSON object";
        return false;
      }
      for (const auto &field : value.items()) {
        if (!field.value().is_string()) {
          error = "__metadata__ value of " + quoteName(field.key()) +
                  " is not a string";
          return false;
        }
        out.metadata.emplace(field.key(), field.value().get<std::string>());
      }
      continue;
    }
    TensorEntry entry;
    if (!parseTensorEntry(key, value, dataSize, entry, error))
      return false;
    out.entries.push_back(std::move(entry));
  }

  // The format requires the tensors to tile the data section exactly: no
  // overlap (two tensors aliasing bytes) and no hole (bytes no tensor owns,
  // which is how polyglot files are smuggled). Empty tensors own nothing.
  std::vector<const TensorEntry *> byOffset;
  byOffset.reserve(out.entries.size());
  for (const TensorEntry &entry : out.entries)
    byOffset.push_back(&entry);
  std::sort(byOffset.begin(), byOffset.end(),
            [](const TensorEntry *lhs, const TensorEntry *rhs) {
              return std::tie(lhs->begin, lhs->end) <
                     std::tie(rhs->begin, rhs->end);
            });
  uint64_t coveredEnd = 0;
  const TensorEntry *previous = nullptr;
  for (const TensorEntry *entry : byOffset) {
    if (entry->begin == entry->end)
      continue;
    if (entry->begin < coveredEnd) {
      error = "tensor " + quoteName(entry->name) +
              ": data_offsets overlap those of tensor " +
              quoteName(previous->name);
      return false;
    }
    if (entry->begin > coveredEnd) {
      error = "tensor " + quoteName(entry->name) + ": data section bytes [" +
              std::to_string(coveredEnd) + ", " + std::to_string(entry->begin) +
              ") before it belong to no tensor";
      return false;
    }
    coveredEnd = entry->end;
    previous = entry;
  }
  if (coveredEnd != dataSize) {
    error = "data section bytes [" + std::to_string(coveredEnd) + ", " +
            std::to_string(dataSize) + ") belong to no tensor";
    return false;
  }
  return true;
}

uint64_t decodeLittleEndian64(const uint8_t *bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i)
    value = (value << 8) | bytes[i];
  return value;
}

/// Reads `length` bytes at `offset` of the file image into `destination`;
/// false on a short read.
using ReadAt =
    std::function<bool(uint64_t offset, size_t length, uint8_t *destination)>;

bool preadAll(int fd, uint64_t offset, size_t length, uint8_t *destination) {
  while (length > 0) {
    if (offset > static_cast<uint64_t>(std::numeric_limits<off_t>::max()))
      return false;
    ssize_t count =
        ::pread(fd, destination, length, static_cast<off_t>(offset));
    if (count < 0 && errno == EINTR)
      continue;
    if (count <= 0)
      return false;
    destination += count;
    offset += static_cast<uint64_t>(count);
    length -= static_cast<size_t>(count);
  }
  return true;
}

bool writeAll(int fd, const uint8_t *data, size_t length) {
  while (length > 0) {
    // Linux writes at most about 2 GiB per call.
    size_t chunk = std::min<size_t>(length, size_t(1) << 30);
    ssize_t count = ::write(fd, data, chunk);
    if (count < 0 && errno == EINTR)
      continue;
    if (count <= 0)
      return false;
    data += count;
    length -= static_cast<size_t>(count);
  }
  return true;
}

template <typename T> T loadElement(const uint8_t *bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof(T));
  return value;
}

template <typename T> void storeElement(uint8_t *bytes, T value) {
  std::memcpy(bytes, &value, sizeof(T));
}

/// float -> integer without undefined behavior: truncate toward zero,
/// saturate at the type's limits, NaN to 0. The limits are powers of two (or
/// one less), so comparing against them as floats is exact enough: a float
/// below max+1 truncates to a value that fits.
template <typename IntT> IntT saturatingCast(float value) {
  if (std::isnan(value))
    return 0;
  constexpr IntT lowest = std::numeric_limits<IntT>::lowest();
  constexpr IntT highest = std::numeric_limits<IntT>::max();
  if (value <= static_cast<float>(lowest))
    return lowest;
  // static_cast<float>(highest) is highest + 1 for the wide types.
  if (value >= static_cast<float>(highest))
    return highest;
  return static_cast<IntT>(value);
}

std::string errnoText() { return std::strerror(errno); }

} // namespace

//===----------------------------------------------------------------------===//
// HostTensor and conversions
//===----------------------------------------------------------------------===//

std::optional<int64_t> checkedNumElements(const std::vector<int64_t> &shape) {
  int64_t product = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(product, dim, &product))
      return std::nullopt;
  }
  return product;
}

int64_t HostTensor::numElements() const {
  return checkedNumElements(shape).value_or(-1);
}

std::vector<float> toFloat32(const HostTensor &tensor) {
  size_t size = elementSize(tensor.dtype);
  size_t count = tensor.bytes.size() / size;
  std::vector<float> result(count);
  const uint8_t *bytes = tensor.bytes.data();
  for (size_t i = 0; i < count; ++i, bytes += size) {
    float &value = result[i];
    switch (tensor.dtype) {
    case DType::F32:
      value = loadElement<float>(bytes);
      break;
    case DType::BF16:
      value = bf16BitsToFloat(loadElement<uint16_t>(bytes));
      break;
    case DType::F16:
      value = f16BitsToFloat(loadElement<uint16_t>(bytes));
      break;
    case DType::F64:
      value = static_cast<float>(loadElement<double>(bytes));
      break;
    case DType::I64:
      value = static_cast<float>(loadElement<int64_t>(bytes));
      break;
    case DType::I32:
      value = static_cast<float>(loadElement<int32_t>(bytes));
      break;
    case DType::I16:
      value = static_cast<float>(loadElement<int16_t>(bytes));
      break;
    case DType::I8:
      value = static_cast<float>(loadElement<int8_t>(bytes));
      break;
    case DType::U8:
      value = static_cast<float>(loadElement<uint8_t>(bytes));
      break;
    case DType::Bool:
      value = loadElement<uint8_t>(bytes) != 0 ? 1.0f : 0.0f;
      break;
    }
  }
  return result;
}

HostTensor fromFloat32(std::string name, std::vector<int64_t> shape,
                       const float *values, DType target) {
  HostTensor tensor;
  tensor.name = std::move(name);
  tensor.dtype = target;
  tensor.shape = std::move(shape);
  std::optional<int64_t> numElements = checkedNumElements(tensor.shape);
  size_t size = elementSize(target);
  size_t byteSize = 0;
  if (!numElements || (*numElements > 0 && !values) ||
      __builtin_mul_overflow(static_cast<size_t>(*numElements), size,
                             &byteSize))
    return tensor;
  tensor.bytes.resize(byteSize);
  uint8_t *bytes = tensor.bytes.data();
  for (int64_t i = 0; i < *numElements; ++i, bytes += size) {
    float value = values[i];
    switch (target) {
    case DType::F32:
      storeElement(bytes, value);
      break;
    case DType::BF16:
      storeElement(bytes, floatToBF16Bits(value));
      break;
    case DType::F16:
      storeElement(bytes, floatToF16Bits(value));
      break;
    case DType::F64:
      storeElement(bytes, static_cast<double>(value));
      break;
    case DType::I64:
      storeElement(bytes, saturatingCast<int64_t>(value));
      break;
    case DType::I32:
      storeElement(bytes, saturatingCast<int32_t>(value));
      break;
    case DType::I16:
      storeElement(bytes, saturatingCast<int16_t>(value));
      break;
    case DType::I8:
      storeElement(bytes, saturatingCast<int8_t>(value));
      break;
    case DType::U8:
      storeElement(bytes, saturatingCast<uint8_t>(value));
      break;
    case DType::Bool:
      storeElement(bytes, static_cast<uint8_t>(value != 0.0f));
      break;
    }
  }
  return tensor;
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

/// Shared by read() and parse(): they differ only in how bytes are fetched.
class SafeTensorsReader {
public:
  static bool load(std::string_view source, uint64_t fileSize,
                   const ReadAt &readAt, SafeTensorsFile &out,
                   std::string &error,
                   const SafeTensorsFile::TensorFilter *select = nullptr) {
    out.clear();
    std::string prefix = std::string(source) + ": ";
    if (!loadImpl(fileSize, readAt, out, error, select)) {
      error = prefix + error;
      out.clear();
      return false;
    }
    return true;
  }

private:
  static bool loadImpl(uint64_t fileSize, const ReadAt &readAt,
                       SafeTensorsFile &out, std::string &error,
                       const SafeTensorsFile::TensorFilter *select) {
    if (fileSize < 8) {
      error = "file is " + std::to_string(fileSize) +
              " bytes, shorter than the 8-byte header length";
      return false;
    }
    uint8_t lengthBytes[8];
    if (!readAt(0, 8, lengthBytes)) {
      error = "cannot read the header length";
      return false;
    }
    uint64_t headerLength = decodeLittleEndian64(lengthBytes);
    if (headerLength > kMaxHeaderBytes) {
      error = "header length " + std::to_string(headerLength) +
              " exceeds the limit of " + std::to_string(kMaxHeaderBytes) +
              " bytes";
      return false;
    }
    if (headerLength > fileSize - 8) {
      error = "header length " + std::to_string(headerLength) +
              " is larger than the " + std::to_string(fileSize - 8) +
              " bytes that follow it in the file";
      return false;
    }
    std::string headerText(headerLength, '\0');
    if (!readAt(8, headerLength,
                reinterpret_cast<uint8_t *>(headerText.data()))) {
      error = "cannot read the header";
      return false;
    }

    uint64_t dataStart = 8 + headerLength;
    ParsedHeader header;
    if (!parseHeader(headerText, fileSize - dataStart, header, error))
      return false;
    headerText = std::string(); // free it before the tensor data arrives

    out.metadataMap = std::move(header.metadata);
    out.tensorList.reserve(header.entries.size());
    out.tensorNames.reserve(header.entries.size());
    for (TensorEntry &entry : header.entries) {
      HostTensor tensor;
      tensor.name = entry.name;
      tensor.dtype = entry.dtype;
      tensor.shape = std::move(entry.shape);
      bool wanted = !select || (*select)(entry.name, out.metadataMap);
      if (wanted)
        tensor.bytes.resize(entry.end - entry.begin);
      if (wanted && !readAt(dataStart + entry.begin, tensor.bytes.size(),
                            tensor.bytes.data())) {
        error = "tensor " + quoteName(entry.name) +
                ": cannot read its data (was the file truncated?)";
        return false;
      }
      out.indexByName.emplace(entry.name, out.tensorList.size());
      out.dataOffsetList.push_back(dataStart + entry.begin);
      out.tensorNames.push_back(std::move(entry.name));
      out.tensorList.push_back(std::move(tensor));
    }
    return true;
  }
};

void SafeTensorsFile::clear() {
  tensorList.clear();
  tensorNames.clear();
  dataOffsetList.clear();
  indexByName.clear();
  metadataMap.clear();
}

/// Element `index` of a floating-point tensor as a double (F64 exactly).
static double floatElement(const HostTensor &tensor, int64_t index) {
  if (tensor.dtype != DType::F64)
    return loadFloatElement(tensor.bytes.data(), index, tensor.dtype);
  double value;
  std::memcpy(&value, tensor.bytes.data() + 8 * index, 8);
  return value;
}

int64_t firstNonFiniteElement(const HostTensor &tensor) {
  if (!isFloatingPoint(tensor.dtype))
    return -1;
  int64_t count = int64_t(tensor.bytes.size() / elementSize(tensor.dtype));
  for (int64_t i = 0; i < count; ++i)
    if (!std::isfinite(floatElement(tensor, i)))
      return i;
  return -1;
}

bool checkFiniteTensor(const HostTensor &tensor, const std::string &source,
                       std::string &error, int64_t firstElement) {
  int64_t bad = firstNonFiniteElement(tensor);
  if (bad < 0)
    return true;
  double value = floatElement(tensor, bad);
  int64_t flat = firstElement + bad;
  // The index of the flat element in the tensor's shape (row-major), when
  // the shape covers it (a checkpoint piece is flat).
  std::string where = "element " + std::to_string(flat);
  std::optional<int64_t> total = checkedNumElements(tensor.shape);
  if (tensor.shape.size() > 1 && total && flat < *total) {
    std::vector<int64_t> index(tensor.shape.size());
    int64_t rest = flat;
    for (size_t d = tensor.shape.size(); d-- > 0;) {
      index[d] = rest % tensor.shape[d];
      rest /= tensor.shape[d];
    }
    where += " (index [";
    for (size_t d = 0; d < index.size(); ++d)
      where += (d ? ", " : "") + std::to_string(index[d]);
    where += "])";
  }
  error = source + ": tensor '" + tensor.name + "' holds " +
          (std::isnan(value) ? "nan"
           : value > 0       ? "inf"
                             : "-inf") +
          " at " + where + "; training cannot start from a non-finite value";
  return false;
}

bool checkStateCoverage(const SafeTensorsFile &file, const std::string &path,
                        const std::vector<std::string> &parameters,
                        const std::vector<std::string> &buffers,
                        bool allowPartial, std::string &error,
                        const std::map<std::string, std::string> &tiedTo) {
  std::set<std::string> expected(parameters.begin(), parameters.end());
  expected.insert(buffers.begin(), buffers.end());
  std::vector<std::string> extra, missing;
  // Tied names form groups under one kept name; an unexpected name stands for
  // the expected name of its group.
  auto keptName = [&](const std::string &name) {
    auto tied = tiedTo.find(name);
    return tied == tiedTo.end() ? name : tied->second;
  };
  std::map<std::string, std::string> expectedOfGroup;
  for (const std::string &name : expected)
    expectedOfGroup[keptName(name)] = name;
  for (const std::string &name : file.names()) {
    if (expected.count(name))
      continue;
    auto group = expectedOfGroup.find(keptName(name));
    if (group != expectedOfGroup.end()) {
      const HostTensor *alias = file.find(name);
      const HostTensor *kept = file.find(group->second);
      if (kept && alias->dtype == kept->dtype && alias->shape == kept->shape &&
          alias->bytes == kept->bytes)
        continue;
      error =
          path + ": '" + name + "' is tied to '" + group->second +
          "' in the model, but " +
          (kept ? "holds other values" : "'" + group->second + "' is absent");
      return false;
    }
    extra.push_back(name);
  }
  if (!allowPartial)
    for (const std::string &name : parameters)
      if (!file.find(name))
        missing.push_back(name);
  if (extra.empty() && missing.empty())
    return true;
  auto list = [](const std::vector<std::string> &names) {
    std::string text;
    for (size_t i = 0; i < names.size() && i < 10; ++i)
      text += (i ? ", '" : "'") + names[i] + "'";
    if (names.size() > 10)
      text += " and " + std::to_string(names.size() - 10) + " more";
    return text;
  };
  error = path + ": not this model's state:";
  if (!extra.empty())
    error += " " + std::to_string(extra.size()) + " tensor" +
             (extra.size() == 1 ? "" : "s") +
             " the model has no parameter or buffer for (" + list(extra) + ")";
  if (!missing.empty())
    error += std::string(extra.empty() ? "" : ";") + " " +
             std::to_string(missing.size()) + " of the model's " +
             std::to_string(parameters.size()) + " parameters missing (" +
             list(missing) +
             "; --allow-partial-weights takes the rest from the model)";
  return false;
}

const HostTensor *SafeTensorsFile::find(std::string_view name) const {
  auto it = indexByName.find(name);
  return it == indexByName.end() ? nullptr : &tensorList[it->second];
}

bool SafeTensorsFile::parse(const uint8_t *data, size_t size,
                            std::string_view sourceName, SafeTensorsFile &out,
                            std::string &error) {
  try {
    ReadAt readAt = [&](uint64_t offset, size_t length, uint8_t *destination) {
      if (offset > size || length > size - offset)
        return false;
      if (length)
        std::memcpy(destination, data + offset, length);
      return true;
    };
    return SafeTensorsReader::load(sourceName, size, readAt, out, error);
  } catch (const std::exception &exception) {
    out.clear();
    error = std::string(sourceName) + ": " + exception.what();
    return false;
  }
}

bool SafeTensorsFile::read(const std::string &path, SafeTensorsFile &out,
                           std::string &error) {
  return read(path, out, error, TensorFilter());
}

bool SafeTensorsFile::read(const std::string &path, SafeTensorsFile &out,
                           std::string &error, const TensorFilter &select) {
  out.clear();
  int fd = openRegularFile(path, error);
  if (fd < 0) {
    error = path + ": " + error;
    return false;
  }
  bool ok = false;
  try {
    struct stat status;
    if (::fstat(fd, &status) != 0) {
      error = path + ": cannot stat: " + errnoText();
    } else {
      ReadAt readAt = [fd](uint64_t offset, size_t length,
                           uint8_t *destination) {
        return preadAll(fd, offset, length, destination);
      };
      ok = SafeTensorsReader::load(path, static_cast<uint64_t>(status.st_size),
                                   readAt, out, error,
                                   select ? &select : nullptr);
    }
  } catch (const std::exception &exception) {
    out.clear();
    error = path + ": " + exception.what();
    ok = false;
  }
  ::close(fd);
  return ok;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {

/// Removes the temporary file unless the rename committed it, so that every
/// early return cleans up.
class TemporaryFile {
public:
  explicit TemporaryFile(std::string path) : path(std::move(path)) {}
  TemporaryFile(const TemporaryFile &) = delete;
  TemporaryFile &operator=(const TemporaryFile &) = delete;
  ~TemporaryFile() {
    closeFile();
    if (created && !committed)
      ::unlink(path.c_str());
  }

  bool open() {
    fd = ::open(path.c_str(),
                O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
    created = fd >= 0;
    return created;
  }
  /// close() reports delayed write errors (e.g. NFS), so its result counts.
  bool closeFile() {
    if (fd < 0)
      return true;
    int result = ::close(fd);
    fd = -1;
    return result == 0;
  }
  int descriptor() const { return fd; }
  const std::string &name() const { return path; }
  void markCommitted() { committed = true; }

private:
  std::string path;
  int fd = -1;
  /// Only a file this object opened is ours to remove.
  bool created = false;
  bool committed = false;
};

std::string directoryOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  if (slash == 0)
    return "/";
  return path.substr(0, slash);
}

/// Checks the tensors before anything touches the disk and returns them
/// sorted by name (the order they are written in).
bool validateForWrite(const std::vector<const HostTensor *> &tensors,
                      std::vector<const HostTensor *> &sorted,
                      std::string &error) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const HostTensor *tensor = tensors[i];
    if (!tensor) {
      error = "tensor #" + std::to_string(i) + " is null";
      return false;
    }
    std::string where = "tensor " + quoteName(tensor->name) + ": ";
    if (tensor->name == kMetadataKey) {
      error = where + "the name is reserved for the metadata";
      return false;
    }
    std::optional<int64_t> numElements = checkedNumElements(tensor->shape);
    if (!numElements) {
      error = where + "shape " + formatShape(tensor->shape) +
              " has a negative dimension or overflows";
      return false;
    }
    uint64_t byteSize = 0;
    if (__builtin_mul_overflow(
            static_cast<uint64_t>(*numElements),
            static_cast<uint64_t>(elementSize(tensor->dtype)), &byteSize) ||
        byteSize != tensor->bytes.size()) {
      error = where + "has " + std::to_string(tensor->bytes.size()) +
              " bytes but shape " + formatShape(tensor->shape) + " of " +
              std::string(safeTensorsDTypeName(tensor->dtype)) + " needs " +
              std::to_string(byteSize);
      return false;
    }
  }
  sorted = tensors;
  std::sort(sorted.begin(), sorted.end(),
            [](const HostTensor *lhs, const HostTensor *rhs) {
              return lhs->name < rhs->name;
            });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->name == sorted[i - 1]->name) {
      error = "duplicate tensor name " + quoteName(sorted[i]->name);
      return false;
    }
  }
  return true;
}

/// The header as written: compact JSON, `__metadata__` first, then tensors in
/// name order with fields in the order torch's writer uses (so single-dtype
/// files come out byte-identical), padded with spaces so that the data section
/// starts 8-byte aligned. The top-level object is joined from dumped members
/// rather than built as one ordered_json, whose insertion is linear per key.
bool buildHeader(const std::vector<const HostTensor *> &sorted,
                 const std::map<std::string, std::string> &metadata,
                 std::string &headerText, std::string &error) {
  try {
    headerText = "{";
    auto appendMember = [&](const std::string &key, const auto &value) {
      if (headerText.size() > 1)
        headerText += ',';
      headerText += Json(key).dump();
      headerText += ':';
      headerText += value.dump();
    };
    if (!metadata.empty())
      appendMember(std::string(kMetadataKey), Json(metadata));
    uint64_t offset = 0;
    for (const HostTensor *tensor : sorted) {
      uint64_t end = offset + tensor->bytes.size();
      nlohmann::ordered_json entry = {
          {"dtype", std::string(safeTensorsDTypeName(tensor->dtype))},
          {"shape", tensor->shape},
          {"data_offsets", {offset, end}}};
      appendMember(tensor->name, entry);
      offset = end;
    }
    headerText += '}';
  } catch (const Json::exception &) {
    error = "a tensor name or metadata string is not valid UTF-8";
    return false;
  }
  headerText.append((8 - headerText.size() % 8) % 8, ' ');
  if (headerText.size() > kMaxHeaderBytes) {
    error = "header of " + std::to_string(headerText.size()) +
            " bytes exceeds the limit of " + std::to_string(kMaxHeaderBytes);
    return false;
  }
  return true;
}

bool writeSafeTensorsImpl(const std::string &path,
                          const std::vector<const HostTensor *> &tensors,
                          const std::map<std::string, std::string> &metadata,
                          std::string &error) {
  std::vector<const HostTensor *> sorted;
  std::string headerText;
  if (!validateForWrite(tensors, sorted, error) ||
      !buildHeader(sorted, metadata, headerText, error))
    return false;

  TemporaryFile temporary(path + ".tmp." + std::to_string(::getpid()));
  if (!temporary.open()) {
    error = "cannot create " + temporary.name() + ": " + errnoText();
    return false;
  }
  uint8_t lengthBytes[8];
  uint64_t headerLength = headerText.size();
  for (int i = 0; i < 8; ++i)
    lengthBytes[i] = static_cast<uint8_t>(headerLength >> (8 * i));
  bool written =
      writeAll(temporary.descriptor(), lengthBytes, sizeof(lengthBytes)) &&
      writeAll(temporary.descriptor(),
               reinterpret_cast<const uint8_t *>(headerText.data()),
               headerText.size());
  for (const HostTensor *tensor : sorted) {
    if (!written)
      break;
    written = writeAll(temporary.descriptor(), tensor->bytes.data(),
                       tensor->bytes.size());
  }
  if (!written) {
    error = "cannot write " + temporary.name() + ": " + errnoText();
    return false;
  }
  // Without the fsync the rename could reach the disk before the data, and a
  // crash would leave `path` naming an empty or partial file.
  if (::fsync(temporary.descriptor()) != 0) {
    error = "cannot fsync " + temporary.name() + ": " + errnoText();
    return false;
  }
  if (!temporary.closeFile()) {
    error = "cannot close " + temporary.name() + ": " + errnoText();
    return false;
  }
  if (::rename(temporary.name().c_str(), path.c_str()) != 0) {
    error = "cannot rename " + temporary.name() + " over it: " + errnoText();
    return false;
  }
  temporary.markCommitted();

  // Makes the rename itself durable.
  std::string directory = directoryOf(path);
  int directoryFd =
      ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directoryFd < 0 || ::fsync(directoryFd) != 0) {
    error = "the file was replaced, but fsync of directory " + directory +
            " failed: " + errnoText();
    if (directoryFd >= 0)
      ::close(directoryFd);
    return false;
  }
  ::close(directoryFd);
  return true;
}

} // namespace

bool writeSafeTensors(const std::string &path,
                      const std::vector<const HostTensor *> &tensors,
                      const std::map<std::string, std::string> &metadata,
                      std::string &error) {
  try {
    if (writeSafeTensorsImpl(path, tensors, metadata, error))
      return true;
  } catch (const std::exception &exception) {
    error = exception.what();
  }
  error = path + ": " + error;
  return false;
}

bool writeSafeTensors(const std::string &path,
                      const std::vector<HostTensor> &tensors,
                      const std::map<std::string, std::string> &metadata,
                      std::string &error) {
  std::vector<const HostTensor *> pointers;
  try {
    pointers.reserve(tensors.size());
  } catch (const std::exception &exception) {
    error = path + ": " + exception.what();
    return false;
  }
  for (const HostTensor &tensor : tensors)
    pointers.push_back(&tensor);
  return writeSafeTensors(path, pointers, metadata, error);
}

} // namespace mlir::mantissa::rt
