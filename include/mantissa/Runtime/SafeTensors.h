//===- SafeTensors.h - Reading and writing safetensors files ----*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// Host tensors and the safetensors file format (an 8-byte little-endian
// header length, a JSON header, then the raw tensor bytes), which is how
// checkpoints, inputs and reference gradients reach the runtime.
//
// Reading validates every header field against the file, because files come
// from outside (and the reader is fuzzed): no input may crash it. Errors are
// returned as messages naming the file and the tensor; no exception escapes.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_SAFETENSORS_H
#define MANTISSA_RUNTIME_SAFETENSORS_H

#include "mantissa/Format/DType.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlir::mantissa::rt {

/// A named tensor in host memory: row-major, contiguous, little-endian
/// elements. `bytes.size()` is expected to be numElements() *
/// elementSize(dtype); the writer checks this, the reader guarantees it.
struct HostTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  /// Product of the dimensions (1 for a scalar), or -1 when a dimension is
  /// negative or the product overflows int64_t: a tensor built by hand can be
  /// malformed, and callers must be able to tell without undefined behavior.
  int64_t numElements() const;
};

/// Product of `shape`, or std::nullopt when a dimension is negative or the
/// product overflows int64_t.
std::optional<int64_t> checkedNumElements(const std::vector<int64_t> &shape);

/// The elements of `tensor` as floats. Floating-point dtypes are widened
/// exactly (F64 is rounded to nearest); integer and Bool elements are
/// converted by value, so the function is total. Converts
/// `bytes.size() / elementSize(dtype)` elements, so a malformed tensor never
/// causes an out-of-bounds read.
std::vector<float> toFloat32(const HostTensor &tensor);

/// A tensor of dtype `target` holding `values` (numElements(shape) floats),
/// rounded to nearest-even for BF16/F16. For integer targets values are
/// truncated toward zero and saturated to the type's range (NaN becomes 0),
/// and Bool stores `value != 0`, so no input has undefined behavior. An
/// invalid `shape` yields a tensor with no bytes, which writeSafeTensors
/// rejects.
HostTensor fromFloat32(std::string name, std::vector<int64_t> shape,
                       const float *values, DType target);

/// The contents of one safetensors file, fully loaded and validated.
class SafeTensorsFile {
public:
  /// Reads and validates `path` into `out`. On failure returns false, sets
  /// `error` to a message that starts with the path and names the offending
  /// tensor where there is one, and leaves `out` empty.
  static bool read(const std::string &path, SafeTensorsFile &out,
                   std::string &error);

  /// Chooses which tensors' data read() loads, given a tensor's name and the
  /// file's `__metadata__`: the others keep their name, dtype and shape but
  /// no bytes (bytes().empty()), and none of their data is read.
  using TensorFilter = std::function<bool(
      const std::string &name, const std::map<std::string, std::string> &)>;
  /// Like read(), validating the whole header but reading only the data of
  /// the tensors `select` chooses (a checkpoint rank's own ranges).
  static bool read(const std::string &path, SafeTensorsFile &out,
                   std::string &error, const TensorFilter &select);

  /// Like read(), on a file image already in memory; `sourceName` stands in
  /// for the path in messages. This is the entry point for fuzzing.
  static bool parse(const uint8_t *data, size_t size,
                    std::string_view sourceName, SafeTensorsFile &out,
                    std::string &error);

  /// The tensor called `name`, or nullptr.
  const HostTensor *find(std::string_view name) const;

  /// Tensor names in the order the file's header lists them.
  const std::vector<std::string> &names() const { return tensorNames; }

  /// Tensors in the same order as names().
  const std::vector<HostTensor> &tensors() const { return tensorList; }

  /// The header's `__metadata__` map (empty when the file has none).
  const std::map<std::string, std::string> &metadata() const {
    return metadataMap;
  }

  size_t size() const { return tensorList.size(); }

  /// Where tensor `index` (of tensors()) starts in the file, in bytes from
  /// its beginning: what a reader that maps the file (TensorDataset.h) needs
  /// to use the data in place, without read() loading it.
  uint64_t dataOffset(size_t index) const { return dataOffsetList[index]; }

private:
  friend class SafeTensorsReader;
  void clear();

  std::vector<HostTensor> tensorList;
  std::vector<std::string> tensorNames;
  std::vector<uint64_t> dataOffsetList;
  /// Index into tensorList; std::less<> allows lookup by string_view.
  std::map<std::string, size_t, std::less<>> indexByName;
  std::map<std::string, std::string> metadataMap;
};

/// Checks that `file` (read from `path`, e.g. --weights) is the state of
/// this model: every tensor it holds must be one of `parameters` or
/// `buffers` (buffers and constants, which a state_dict may or may not
/// hold), and, unless `allowPartial`, it must hold every parameter. A
/// misspelt name or another model's file is refused with the names that
/// are extra or missing (at most 10 of each, then a count).
/// `tiedTo` maps the other names of tied weights to the name the model
/// keeps (a state_dict lists a tied weight under each name): such a name is
/// accepted when the file holds the same bytes under the kept name.
bool checkStateCoverage(const SafeTensorsFile &file, const std::string &path,
                        const std::vector<std::string> &parameters,
                        const std::vector<std::string> &buffers,
                        bool allowPartial, std::string &error,
                        const std::map<std::string, std::string> &tiedTo = {});

/// The flat index of the first NaN or infinite element of `tensor`, or -1
/// when every element is finite or the tensor is not floating-point. F64 is
/// read as double (a large finite double is finite here).
int64_t firstNonFiniteElement(const HostTensor &tensor);

/// Refuses a floating-point tensor with a NaN or infinite element, which no
/// step could train from (every step would be skipped): `error` says
/// "SOURCE: tensor 'NAME' holds nan at element I (index [..] of shape [..])"
/// with `firstElement` added to the flat index (a checkpoint piece's first
/// element of the whole tensor).
bool checkFiniteTensor(const HostTensor &tensor, const std::string &source,
                       std::string &error, int64_t firstElement = 0);

/// Writes `tensors` and `metadata` to `path` as a safetensors file, tensors in
/// name order, header padded with spaces to an 8-byte boundary.
///
/// Crash-safe: every tensor is validated first (no null, no duplicate or
/// reserved name, byte size matching shape and dtype) so that bad input never
/// touches the disk; the data goes to `<path>.tmp.<pid>` in the same
/// directory, which is fsynced and renamed over `path`, then the directory is
/// fsynced. A reader therefore sees either the old file or the complete new
/// one. On failure the temporary file is removed and an existing `path` is
/// left as it was (except when only the final directory fsync fails, which
/// the message says). Concurrent writers of the same path in one process
/// would share the temporary name and must be serialized by the caller.
bool writeSafeTensors(const std::string &path,
                      const std::vector<const HostTensor *> &tensors,
                      const std::map<std::string, std::string> &metadata,
                      std::string &error);

/// Convenience overload for tensors held by value.
bool writeSafeTensors(const std::string &path,
                      const std::vector<HostTensor> &tensors,
                      const std::map<std::string, std::string> &metadata,
                      std::string &error);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_SAFETENSORS_H
