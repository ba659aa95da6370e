//===- AdamWModes.h - The benchmark's group layouts -------------*- C++ -*-===//
//
// The modes of mantissa-bench-adamw and mantissa-adamw-gen: N parameters
// split over M members of one shard group, all members of one kind (or, for
// `mixed`, cycling through every kind).
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_BENCH_ADAMW_ADAMWMODES_H
#define MANTISSA_BENCH_ADAMW_ADAMWMODES_H

#include "mantissa/Conversion/AdamWKernels.h"

#include <optional>
#include <string>

namespace mlir::mantissa::bench {

using train::DType;

/// Ideal bytes moved per parameter by a mode (reads + writes).
inline int64_t getIdealBytesPerParam(const std::string &mode) {
  if (mode == "fp32") // fp32 grad in, param/m/v read + written
    return 28;
  if (mode == "master") // bf16 grad, fp32 master/m/v r+w, bf16 param out
    return 28;
  if (mode == "remainder") // bf16 grad, bf16 param + remainder r+w, m/v r+w
    return 26;
  if (mode == "bf16") // bf16 grad, param/m/v r+w
    return 14;
  return 0;
}

/// Appends one member of the kind `mode` names (`mixed` cycles).
inline bool appendModeMember(AdamWGroup &group, const std::string &mode,
                             int64_t count, int64_t index) {
  std::string kind = mode;
  if (mode == "mixed") {
    static const char *const kinds[] = {"fp32", "master", "remainder", "bf16"};
    kind = kinds[index % 4];
  }
  std::string name = "member" + std::to_string(index);
  if (kind == "fp32")
    appendAdamWMember(group, name, count, DType::fp32, DType::fp32,
                      AdamWMasterKind::None, DType::fp32);
  else if (kind == "master")
    appendAdamWMember(group, name, count, DType::bf16, DType::bf16,
                      AdamWMasterKind::FP32, DType::fp32);
  else if (kind == "remainder")
    appendAdamWMember(group, name, count, DType::bf16, DType::bf16,
                      AdamWMasterKind::Remainder, DType::fp32);
  else if (kind == "bf16")
    appendAdamWMember(group, name, count, DType::bf16, DType::bf16,
                      AdamWMasterKind::None, DType::bf16);
  else
    return false;
  return true;
}

/// N parameters in M members of (nearly) equal size; nullopt for an unknown
/// mode or an impossible split.
inline std::optional<AdamWGroup> makeModeGroup(const std::string &mode,
                                               int64_t n, int64_t members,
                                               bool amsgrad = false,
                                               bool maximize = false) {
  if (n <= 0 || members <= 0 || members > n)
    return std::nullopt;
  AdamWGroup group;
  group.amsgrad = amsgrad;
  group.maximize = maximize;
  for (int64_t i = 0; i < members; ++i) {
    int64_t count = n / members + (i < n % members ? 1 : 0);
    if (!appendModeMember(group, mode, count, i))
      return std::nullopt;
  }
  return group;
}

} // namespace mlir::mantissa::bench

#endif // MANTISSA_BENCH_ADAMW_ADAMWMODES_H
