//===- PrecisionSpecFuzzer.cpp - libFuzzer entry for precision specs ------===//
//
// Feeds arbitrary text to the precision spec parser (--precision SPEC.yaml
// of both tools: the nesting bound, LLVM's YAML I/O, the rules' globs,
// dtypes and axes). A spec either parses with no problem or fails with at
// least one message. Any crash (a stack overflow in the
// YAML parser among them), sanitizer report or leak is a bug. Use the seeds
// in corpus/precision_spec.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Transforms/PrecisionSpec.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace mlir::mantissa::precision;
  Spec spec;
  std::vector<Problem> problems;
  bool parsed =
      parseSpecYaml(llvm::StringRef(reinterpret_cast<const char *>(data), size),
                    "fuzz.yaml", spec, problems);
  if (parsed != problems.empty())
    std::abort();
  for (const Problem &problem : problems)
    if (problem.message.empty())
      std::abort();
  for (const Rule &rule : spec.rules)
    if (rule.origin.rfind("fuzz.yaml:", 0) != 0)
      std::abort();
  return 0;
}
