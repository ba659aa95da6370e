//===- ModelJsonFuzzer.cpp - libFuzzer entry for models/model.json --------===//
//
// Random bytes rarely form a zip archive, so the archive fuzzer seldom gets
// past the zip layer. This one feeds model.json text straight to the schema
// parser; use the seeds in corpus/model_json and the keys in model_json.dict.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Import/Pt2Archive.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace mlir::mantissa::pt2;
  llvm::Expected<Program> program = parseModelJson(
      llvm::StringRef(reinterpret_cast<const char *>(data), size),
      "fuzz-input.json");
  if (!program)
    llvm::consumeError(program.takeError());
  return 0;
}
