//===- Tripwire.h - Resident optimizer state against the plan ---*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// After the first step of every run (a resumed one too) the update path
// checks what each rank actually holds for every parameter against the
// tensor's plan in the manifest, and stops with a message naming the tensor
// if anything differs. Master-weight optimizers have shipped with state that
// silently became bf16 or lost its master on resume; the first step is the
// earliest point where every buffer has been through load, kernel and
// collectives, so that is where the runtime looks.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_TRIPWIRE_H
#define MANTISSA_RUNTIME_TRIPWIRE_H

#include "mantissa/Runtime/Artifact.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

/// What one rank holds for one parameter, read off its buffers rather than
/// copied from the plan, so that the check can disagree with the plan.
struct ResidentState {
  std::string fqn;
  std::vector<int64_t> shape;
  /// Elements of the tensor the layout reserves.
  int64_t count = 0;
  /// The dtypes of the resident gathered parameter, of the gradient as it is
  /// reduced, and of the moments; the kind of master kept.
  DType param = DType::F32, grad = DType::F32, moments = DType::F32;
  MasterKind master = MasterKind::None;
  /// This rank's elements [sliceBegin, sliceEnd) of the tensor.
  int64_t sliceBegin = 0, sliceEnd = 0;
  /// Bytes of the slice that this rank's buffer of each role actually holds
  /// (0 when the rank has no buffer bytes for it). Grad and Param are not
  /// checked here: the gradient's reduce-scatter and the parameter's
  /// all-gather check their own sizes.
  std::array<int64_t, kNumRoles> heldBytes{};
  bool amsgrad = false;
};

/// The master a plan implies: none when the master dtype is the gather dtype,
/// an fp32 master for an fp32 master dtype, a remainder for fp32_split (with
/// bf16 gathers only); false when the plan has no resident layout (e.g. a
/// bf16 master with fp16 gathers).
bool plannedMasterKind(const ArtifactTensor &plan, MasterKind &master);

/// Whether a member's layout keeps the master `plan` implies: empty if so,
/// else what differs, naming the tensor.
std::string checkPlannedMaster(const ArtifactTensor *plan, MasterKind kept);

/// Compares `resident` with `plan` (null: the tensor has no plan). Returns
/// an empty string when they agree, else the first difference as a message
/// that starts with the tensor's FQN in quotes and names both sides, e.g.
/// "'w': resident moments are fp32, the plan says bf16".
std::string checkResidentState(const ArtifactTensor *plan,
                               const ResidentState &resident);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_TRIPWIRE_H
