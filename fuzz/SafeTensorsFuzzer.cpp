//===- SafeTensorsFuzzer.cpp - libFuzzer entry for safetensors files ------===//
//
// The safetensors reader alone (--weights, --inputs, --grads, artifacts'
// weights and checkpoints' shards all go through it): each input is parsed
// in memory, and read from a file as a checkpoint rank reads its shard (only
// some tensors' data). What loads must be what it says (every tensor's bytes
// its dtype times its shape) and must survive a round trip through the
// writer unchanged. Any crash, sanitizer report or leak is a bug; errors are
// the expected outcome. Use the seeds in corpus/safetensors.
//
//===----------------------------------------------------------------------===//

#include "FuzzScratch.h"

#include "mantissa/Runtime/SafeTensors.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

using namespace mlir::mantissa::rt;

/// Aborts unless every tensor that has data holds exactly its shape's bytes;
/// with `allLoaded`, every tensor must have its data.
void checkLoaded(const SafeTensorsFile &file, bool allLoaded) {
  if (file.names().size() != file.tensors().size())
    std::abort();
  for (const HostTensor &tensor : file.tensors()) {
    int64_t elements = tensor.numElements();
    if (elements < 0)
      std::abort();
    uint64_t expected = uint64_t(elements) * elementSize(tensor.dtype);
    bool loaded = tensor.bytes.size() == expected;
    if (!loaded && (allLoaded || !tensor.bytes.empty()))
      std::abort();
  }
}

bool sameTensors(const SafeTensorsFile &a, const SafeTensorsFile &b) {
  if (a.size() != b.size() || a.metadata() != b.metadata())
    return false;
  for (const HostTensor &tensor : a.tensors()) {
    const HostTensor *other = b.find(tensor.name);
    if (!other || other->dtype != tensor.dtype ||
        other->shape != tensor.shape || other->bytes != tensor.bytes)
      return false;
  }
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  SafeTensorsFile parsed;
  std::string error;
  bool parsedOk = SafeTensorsFile::parse(data, size, "fuzz-input.safetensors",
                                         parsed, error);
  if (!parsedOk) {
    mantissa_fuzz::noteError(error);
    if (error.empty() || parsed.size() != 0)
      std::abort();
  } else {
    checkLoaded(parsed, /*allLoaded=*/true);
  }

  // The same bytes from a file, loading every other tensor's data: the
  // header is validated alike, so the verdict must agree.
  std::string path = mantissa_fuzz::scratchDirectory() + "/input.safetensors";
  mantissa_fuzz::writeFileOrDie(path, data, size);
  SafeTensorsFile selected;
  std::string selectedError;
  size_t seen = 0;
  bool readOk = SafeTensorsFile::read(
      path, selected, selectedError,
      [&](const std::string &, const std::map<std::string, std::string> &) {
        return seen++ % 2 == 0;
      });
  if (readOk != parsedOk)
    std::abort();
  if (readOk)
    checkLoaded(selected, /*allLoaded=*/false);

  // What loads is written back and read again unchanged.
  if (parsedOk) {
    std::string copy = mantissa_fuzz::scratchDirectory() + "/copy.safetensors";
    SafeTensorsFile again;
    if (!writeSafeTensors(copy, parsed.tensors(), parsed.metadata(), error)) {
      // The writer refuses only what the reader cannot have produced.
      std::fprintf(stderr, "writer refused what the reader loaded: %s\n",
                   error.c_str());
      std::abort();
    }
    if (!SafeTensorsFile::read(copy, again, error) ||
        !sameTensors(parsed, again))
      std::abort();
  }
  return 0;
}
