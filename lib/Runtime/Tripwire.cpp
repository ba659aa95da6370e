//===- Tripwire.cpp - Resident optimizer state against the plan -----------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/Tripwire.h"

#include "mantissa/Runtime/SafeTensors.h"

using namespace mlir::mantissa::rt;

namespace {
std::string name(DType dtype) { return std::string(projectDTypeName(dtype)); }

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

const char *masterText(MasterKind kind) {
  switch (kind) {
  case MasterKind::None:
    return "no master";
  case MasterKind::FP32:
    return "an fp32 master";
  case MasterKind::Remainder:
    return "a remainder master";
  }
  return "?";
}

/// The plan's master as the manifest names it.
std::string masterName(const ArtifactTensor &plan) {
  return plan.masterSplit ? "fp32_split" : name(plan.master);
}
} // namespace

bool mlir::mantissa::rt::plannedMasterKind(const ArtifactTensor &plan,
                                           MasterKind &master) {
  if (plan.masterSplit) {
    master = MasterKind::Remainder;
    return plan.gather == DType::BF16;
  }
  if (plan.master == plan.gather) {
    master = MasterKind::None;
    return true;
  }
  if (plan.master == DType::F32) {
    master = MasterKind::FP32;
    return true;
  }
  return false;
}

std::string mlir::mantissa::rt::checkPlannedMaster(const ArtifactTensor *plan,
                                                   MasterKind kept) {
  if (!plan)
    return "has no plan in the manifest";
  std::string where = "'" + plan->fqn + "'";
  MasterKind master;
  if (!plannedMasterKind(*plan, master))
    return where + ": the plan's master " + masterName(*plan) +
           " with gather " + name(plan->gather) + " has no resident layout";
  if (kept != master)
    return where + " keeps " + masterText(kept) + ", but the plan's master " +
           masterName(*plan) + " with gather " + name(plan->gather) +
           " needs " + masterText(master);
  return "";
}

std::string mlir::mantissa::rt::checkResidentState(const ArtifactTensor *plan,
                                                   const ResidentState &state) {
  std::string where = "'" + state.fqn + "'";
  if (!plan)
    return where + " has no plan in the manifest";
  if (!plan->isParameter)
    return where + " is a buffer in the plan, but the optimizer holds state "
                   "for it";
  MasterKind master;
  if (!plannedMasterKind(*plan, master))
    return where + ": the plan's master " + masterName(*plan) +
           " with gather " + name(plan->gather) + " has no resident layout";
  std::optional<int64_t> count = checkedNumElements(plan->shape);
  if (state.shape != plan->shape || !count || state.count != *count)
    return where + ": resident shape " + shapeText(state.shape) + " (" +
           std::to_string(state.count) + " elements) differs from the plan's " +
           shapeText(plan->shape);
  if (state.param != plan->gather)
    return where + ": resident parameter is " + name(state.param) +
           ", the plan gathers it in " + name(plan->gather);
  if (state.grad != plan->reduce)
    return where + ": gradient is reduced in " + name(state.grad) +
           ", the plan says " + name(plan->reduce);
  if (state.moments != plan->moments)
    return where + ": resident moments are " + name(state.moments) +
           ", the plan says " + name(plan->moments);
  if (state.master != master)
    return where + ": resident state has " + masterText(state.master) +
           ", the plan's master " + masterName(*plan) + " with gather " +
           name(plan->gather) + " needs " + masterText(master);
  if (state.sliceBegin < 0 || state.sliceEnd < state.sliceBegin ||
      state.sliceEnd > state.count)
    return where + ": resident slice [" + std::to_string(state.sliceBegin) +
           ", " + std::to_string(state.sliceEnd) + ") is outside its " +
           std::to_string(state.count) + " elements";

  // Every state buffer must hold exactly the slice, in the planned width.
  int64_t elements = state.sliceEnd - state.sliceBegin;
  int64_t momentBytes = int64_t(elementSize(plan->moments));
  std::array<std::pair<Role, int64_t>, 4> expected = {{
      {Role::Master, master == MasterKind::FP32        ? 4
                     : master == MasterKind::Remainder ? 2
                                                       : 0},
      {Role::ExpAvg, momentBytes},
      {Role::ExpAvgSq, momentBytes},
      {Role::MaxExpAvgSq, state.amsgrad ? momentBytes : 0},
  }};
  for (auto [role, width] : expected) {
    int64_t held = state.heldBytes[unsigned(role)];
    if (held != elements * width)
      return where + ": resident " + roleName(role) + " holds " +
             std::to_string(held) + " bytes for its " +
             std::to_string(elements) + " elements on this rank, the plan (" +
             (role == Role::Master ? "master " + masterName(*plan)
                                   : "moments " + name(plan->moments)) +
             ") needs " + std::to_string(elements * width);
  }
  return "";
}
