//===- HostCpu.cpp - Whether this CPU runs code compiled elsewhere --------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/HostCpu.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

using namespace mlir::mantissa::rt;

const std::vector<std::string> &mlir::mantissa::rt::checkedCpuFeatures() {
  /// The extensions -march=native turns on that code generation uses
  /// (vector widths, FMA, bf16 and fp16 arithmetic, AMX).
  static const std::vector<std::string> features = {
      "sse4_1",       "sse4_2",      "avx",
      "avx2",         "fma",         "f16c",
      "bmi1",         "bmi2",        "avx512f",
      "avx512bw",     "avx512dq",    "avx512vl",
      "avx512cd",     "avx512ifma",  "avx512vbmi",
      "avx512_vbmi2", "avx512_vnni", "avx512_bitalg",
      "avx512_bf16",  "avx512_fp16", "avx512_vpopcntdq",
      "avx_vnni",     "amx_tile",    "amx_bf16",
      "amx_int8"};
  return features;
}

std::string
mlir::mantissa::rt::checkCompiledFor(const std::vector<std::string> &required,
                                     const std::string &targetCpu,
                                     const std::string &what) {
  std::vector<std::string> missing = missingCpuFeatures(required);
  if (missing.empty())
    return "";
  std::string list;
  for (const std::string &feature : missing)
    list += (list.empty() ? "" : ", ") + feature;
  return what + " was compiled for " +
         (targetCpu.empty() ? std::string("another CPU") : targetCpu) +
         " and uses " + list +
         ", which this CPU lacks (it would stop with an illegal "
         "instruction); compile the artifact on this machine "
         "(mantissa-compile MODEL.pt2 -o DIR)";
}

std::vector<std::string> mlir::mantissa::rt::missingCpuFeatures(
    const std::vector<std::string> &required) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::set<std::string> flags;
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("flags", 0) != 0)
      continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string word; words >> word;)
      flags.insert(word);
    break;
  }
  std::vector<std::string> missing;
  if (flags.empty())
    return missing;
  for (const std::string &feature : required)
    if (!flags.count(feature))
      missing.push_back(feature);
  return missing;
}
