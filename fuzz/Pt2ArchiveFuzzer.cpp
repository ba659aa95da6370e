//===- Pt2ArchiveFuzzer.cpp - libFuzzer entry for the .pt2 reader ---------===//
//
// Feeds arbitrary bytes to the whole archive reader: zip handling, model.json,
// payload configs and strided-view materialisation. Any crash, sanitizer
// report or leak is a bug; errors are the expected outcome.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Import/Pt2Archive.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace mlir::mantissa::pt2;
  // Small limits keep a header that claims gigabytes from turning into an
  // out-of-memory report instead of exercising the reader.
  ReadOptions options;
  options.maxEntryBytes = 16 << 20;
  options.maxTensorBytes = 16 << 20;
  llvm::Expected<Program> program = readPt2ArchiveFromBuffer(
      llvm::StringRef(reinterpret_cast<const char *>(data), size),
      "fuzz-input.pt2", options);
  if (!program)
    llvm::consumeError(program.takeError());
  return 0;
}
