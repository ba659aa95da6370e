//===- Pt2StoredTensors.cpp - Weights and constants of a .pt2 archive -----===//
//
// Reads data/weights/ and data/constants/. Each directory's payload config
// (schema.py's PayloadConfig) gives, per tensor, the blob that holds its
// storage and the strided view of that storage the tensor is; the view is
// copied out of the blob into contiguous bytes, with every offset checked
// against the blob's size. Tied tensors share one read of their blob. Each
// blob's declared size is checked against the views of it before it is read,
// and contiguous views are streamed from it straight into their tensors.
//
//===----------------------------------------------------------------------===//

#include "Pt2StoredTensors.h"

#include "Pt2ArchiveLayout.h"
#include "Pt2Json.h"
#include "Pt2Schema.h"
#include "Pt2Zip.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

using namespace mlir::mantissa::pt2;
using namespace mlir::mantissa::pt2::detail;
using llvm::StringRef;
using llvm::Twine;
namespace json = llvm::json;

//===----------------------------------------------------------------------===//
// Payload configs
//===----------------------------------------------------------------------===//

namespace {

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
    if (llvm::Error error = archive.readJson(configEntry, text, found))
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

    // The metadata of every tensor first, so that each blob is bounded by
    // the views of it before a byte of it is read.
    size_t first = tensors.size();
    std::map<std::string, std::vector<size_t>> viewsOfBlob;
    for (const auto &[fqn, payload] : *config) {
      StoredTensor tensor;
      tensor.fqn = fqn.str();
      if (llvm::Error error =
              readTensor(payload, configPath.field(fqn), tensor))
        return error;
      viewsOfBlob[tensor.blobName].push_back(tensors.size());
      tensors.push_back(std::move(tensor));
    }
    for (const auto &[name, views] : viewsOfBlob)
      if (llvm::Error error = readBlob(name, views, tensors))
        return error;
    std::sort(tensors.begin() + first, tensors.end(),
              [](const StoredTensor &lhs, const StoredTensor &rhs) {
                return lhs.fqn < rhs.fqn;
              });
    return llvm::Error::success();
  }

private:
  std::string labelOf(const StoredTensor &tensor) const {
    return kindName + " '" + tensor.fqn + "'";
  }

  /// Reads a tensor's payload entry: its blob's name and its metadata.
  llvm::Error readTensor(const json::Value &value, const JsonPath &path,
                         StoredTensor &tensor) {
    std::string label = labelOf(tensor);
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
    if (!readTensorMeta(reader, *meta, path.field("tensor_meta"), label,
                        tensor.meta))
      return reader.takeError();
    if (tensor.meta.layout != Layout::Strided)
      return makeError(displayName + ": " + label +
                       " has a non-strided layout, which is not supported");
    return llvm::Error::success();
  }

  /// Checks that the view `tensor.meta` describes lies within a blob of
  /// `blobBytes`, and returns the byte just past its last element and its
  /// size once materialised.
  llvm::Error measureView(const StoredTensor &tensor, uint64_t blobBytes,
                          uint64_t &viewEnd, uint64_t &totalBytes) {
    const TensorMeta &meta = tensor.meta;
    std::string label = labelOf(tensor);
    auto tooLarge = [&]() {
      return makeError(displayName + ": " + label +
                       " is a view too large to address");
    };
    int64_t elementBytes = getScalarTypeByteWidth(meta.dtype);
    std::optional<int64_t> lastElement = meta.storageOffset;
    for (size_t dim = 0, e = meta.sizes.size(); dim < e && lastElement; ++dim)
      lastElement = llvm::checkedMulAdd(meta.sizes[dim] - 1, meta.strides[dim],
                                        *lastElement);
    std::optional<int64_t> end;
    if (lastElement && *lastElement < std::numeric_limits<int64_t>::max())
      end = llvm::checkedMul(*lastElement + 1, elementBytes);
    if (!end)
      return tooLarge();
    if (static_cast<uint64_t>(*end) > blobBytes)
      return makeError(displayName + ": " + label + " views bytes up to " +
                       Twine(*end) + " of blob " + tensor.blobName +
                       ", which holds only " + Twine(blobBytes) + " bytes");
    std::optional<int64_t> total =
        llvm::checkedMul(meta.getNumElements(), elementBytes);
    if (!total)
      return tooLarge();
    if (static_cast<uint64_t>(*total) > options.maxTensorBytes)
      return makeError(displayName + ": " + label + " is " + Twine(*total) +
                       " bytes, more than the limit of " +
                       Twine(options.maxTensorBytes));
    viewEnd = static_cast<uint64_t>(*end);
    totalBytes = static_cast<uint64_t>(*total);
    return llvm::Error::success();
  }

  /// True if the view is one run of bytes in the blob, in row-major order.
  static bool isContiguous(const TensorMeta &meta) {
    int64_t expected = 1;
    for (size_t dim = meta.sizes.size(); dim-- > 0;) {
      if (meta.sizes[dim] != 1 && meta.strides[dim] != expected)
        return false;
      expected *= meta.sizes[dim];
    }
    return true;
  }

  /// Materialises the tensors `views` (indices into `tensors`) of blob
  /// `name`. The blob's declared size is checked against the views before it
  /// is read: it must hold every view, and a deflated blob no more than they
  /// need (a stored one may hold more: torch saves a view's whole storage,
  /// and its bytes are in the file). Contiguous views, the usual case, are
  /// streamed from the entry straight into the tensors, so that reading
  /// costs the tensors' memory and one chunk; strided ones need the blob in
  /// memory.
  llvm::Error readBlob(StringRef name, llvm::ArrayRef<size_t> views,
                       std::vector<StoredTensor> &tensors) {
    std::string entryName = (directory + name).str();
    ZipArchive::EntryStat entry;
    bool found = false;
    if (!name.empty() && !name.contains('/'))
      if (llvm::Error error = archive.stat(entryName, entry, found))
        return error;
    if (!found)
      return makeError(displayName + ": " + labelOf(tensors[views.front()]) +
                       " refers to blob " + entryName +
                       ", which is not in the archive");

    uint64_t needed = 0;
    bool allContiguous = true;
    llvm::SmallVector<size_t, 4> materialized;
    llvm::SmallVector<uint64_t, 4> totals;
    for (size_t index : views) {
      StoredTensor &tensor = tensors[index];
      if (tensor.meta.getNumElements() == 0)
        continue;
      // torch writes no bytes for a fake tensor; an empty tensor (handled
      // above) has none either.
      if (entry.size == 0) {
        tensor.isFake = true;
        continue;
      }
      uint64_t viewEnd = 0, totalBytes = 0;
      if (llvm::Error error =
              measureView(tensor, entry.size, viewEnd, totalBytes))
        return error;
      needed = std::max(needed, viewEnd);
      allContiguous &= isContiguous(tensor.meta);
      materialized.push_back(index);
      totals.push_back(totalBytes);
    }
    if (entry.compressed && entry.size > needed)
      return makeError(displayName + ": blob " + entryName + " declares " +
                       Twine(entry.size) + " bytes, but its " + kindName +
                       "s view only " + Twine(needed) +
                       " of them (a deflated blob may hold no more)");
    if (materialized.empty())
      return llvm::Error::success();
    for (auto [index, totalBytes] : llvm::zip(materialized, totals))
      tensors[index].contiguousBytes.resize(static_cast<size_t>(totalBytes));

    if (allContiguous)
      return archive.readChunks(
          entryName, entry, [&](uint64_t offset, StringRef chunk) {
            uint64_t chunkEnd = offset + chunk.size();
            for (size_t index : materialized) {
              StoredTensor &tensor = tensors[index];
              uint64_t begin =
                  static_cast<uint64_t>(tensor.meta.storageOffset) *
                  getScalarTypeByteWidth(tensor.meta.dtype);
              uint64_t end = begin + tensor.contiguousBytes.size();
              uint64_t from = std::max(begin, offset);
              uint64_t to = std::min(end, chunkEnd);
              if (from < to)
                std::memcpy(tensor.contiguousBytes.data() + (from - begin),
                            chunk.data() + (from - offset),
                            static_cast<size_t>(to - from));
            }
          });

    std::string blob;
    if (llvm::Error error =
            archive.read(entryName, blob, found, entry.size, "it declares"))
      return error;
    for (size_t index : materialized)
      copyView(blob, tensors[index]);
    return llvm::Error::success();
  }

  /// Copies the strided view that `tensor.meta` describes out of `blob` into
  /// `tensor.contiguousBytes` (sized already) in row-major order. measureView
  /// has checked the view against the blob.
  static void copyView(StringRef blob, StoredTensor &tensor) {
    const TensorMeta &meta = tensor.meta;
    int64_t elementCount = meta.getNumElements();
    int64_t elementBytes = getScalarTypeByteWidth(meta.dtype);
    uint8_t *destination = tensor.contiguousBytes.data();
    const uint8_t *source = reinterpret_cast<const uint8_t *>(blob.data());
    size_t rank = meta.sizes.size();

    // Walk the view row by row (the innermost dimension), keeping the
    // element offset of the current row up to date like an odometer. Every
    // offset visited is at most the view's last element, which was
    // bounds-checked.
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
  }

  ZipArchive &archive;
  std::string displayName;
  std::string kindName;
  std::string directory;
  std::string configEntry;
  const ReadOptions &options;
  JsonReader reader;
};

} // namespace

llvm::Error mlir::mantissa::pt2::detail::readStoredTensors(
    ZipArchive &archive, StringRef displayName, StringRef kindName,
    StringRef directory, StringRef configEntry, const ReadOptions &options,
    std::vector<StoredTensor> &tensors) {
  PayloadReader payloadReader(archive, displayName, kindName, directory,
                              configEntry, options);
  return payloadReader.read(tensors);
}

//===----------------------------------------------------------------------===//
// Agreement with the signature
//===----------------------------------------------------------------------===//

llvm::Error
mlir::mantissa::pt2::detail::checkStoredInputs(const Program &program,
                                               StringRef displayName) {
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
