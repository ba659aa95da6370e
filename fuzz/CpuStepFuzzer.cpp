//===- CpuStepFuzzer.cpp - libFuzzer entry for step.cpu.json --------------===//
//
// Writes each input as step.cpu.json into a scratch directory and loads it
// with CpuStep::load: the program's fields, its arguments' and results'
// tensor entries and index bounds. Any crash, sanitizer report or leak is a
// bug; errors are the expected outcome. Use the seeds in corpus/cpu_step
// and cpu_step.dict.
//
// CpuStep::load dlopens DIR/<library> for the `library` of "step" and
// "forward", so a fuzzed name must not reach a real library: an input
// whose library name has a '/' (which could climb out of DIR, e.g.
// "../../usr/lib/...") is skipped before the loader sees it. Every other
// name is a file of DIR, which holds only this input and copies of
// CpuStepStub.cpp's empty module under mlp.pt2's library names
// (step.cpu.so, step.cpu.forward.so), so dlopen loads that module or
// nothing, and no entry is ever called.
//
//===----------------------------------------------------------------------===//

#include "FuzzScratch.h"

#include "mantissa/Runtime/CpuStep.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#ifndef MANTISSA_FUZZ_CPU_STEP_STUB
#error "MANTISSA_FUZZ_CPU_STEP_STUB must name the stub module"
#endif

namespace {

/// The directory with the stub libraries copied in, once per process.
const std::string &programDirectory() {
  static const std::string directory = [] {
    const std::string &dir = mantissa_fuzz::scratchDirectory();
    for (const char *name : {"step.cpu.so", "step.cpu.forward.so"}) {
      std::error_code error;
      std::filesystem::copy_file(
          MANTISSA_FUZZ_CPU_STEP_STUB, dir + "/" + name,
          std::filesystem::copy_options::overwrite_existing, error);
      if (error) {
        std::fprintf(stderr, "fuzzer: cannot copy %s: %s\n",
                     MANTISSA_FUZZ_CPU_STEP_STUB, error.message().c_str());
        std::abort();
      }
    }
    return dir;
  }();
  return directory;
}

/// Whether every library CpuStep::load would dlopen for this input lies in
/// its directory. The loader parses the same bytes with the same parser and
/// reads root["step"]["library"] and root["forward"]["library"] only when
/// they are strings in objects, so this sees exactly the names it would.
bool loadsOnlyFromDirectory(const uint8_t *data, size_t size) {
  using json = nlohmann::json;
  json root = json::parse(data, data + size, nullptr,
                          /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object())
    return true; // refused before any dlopen
  for (const char *key : {"step", "forward"}) {
    auto library = root.find(key);
    if (library == root.end() || !library->is_object())
      continue;
    auto name = library->find("library");
    if (name != library->end() && name->is_string() &&
        name->get_ref<const std::string &>().find('/') != std::string::npos)
      return false;
  }
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace mlir::mantissa::rt;
  if (!loadsOnlyFromDirectory(data, size))
    return -1; // never added to the corpus
  const std::string &dir = programDirectory();
  std::string path = dir + "/step.cpu.json";
  mantissa_fuzz::writeFileOrDie(path, data, size);
  std::string error;
  std::unique_ptr<CpuStep> step = CpuStep::load(path, error);
  if (!step) {
    mantissa_fuzz::noteError(error);
    // A refusal must say why.
    if (error.empty())
      std::abort();
    return 0;
  }
  for (size_t i = 0; i < step->arguments().size(); ++i)
    (void)step->indexBound(i);
  if (!step->joint().entry)
    std::abort();
  if (const CpuStep::Library *forward = step->forward())
    if (forward->results.empty())
      std::abort(); // the loader requires a loss result
  return 0;
}
