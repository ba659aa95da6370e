//===- TripwireTest.cpp - The resident-state check after the first step ---===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/Tripwire.h"

#include "gtest/gtest.h"

using namespace mlir::mantissa::rt;

namespace {

/// A bf16 parameter with an fp32 master and fp32 moments, 10 x 7.
ArtifactTensor masterPlan() {
  ArtifactTensor plan;
  plan.fqn = "layers.0.attn.w";
  plan.shape = {10, 7};
  plan.exported = DType::BF16;
  plan.master = DType::F32;
  plan.gather = DType::BF16;
  plan.reduce = DType::BF16;
  plan.moments = DType::F32;
  plan.group = "layers.0";
  return plan;
}

/// What a rank holding elements [20, 50) of that plan holds when all is well.
ResidentState goodState() {
  ResidentState state;
  state.fqn = "layers.0.attn.w";
  state.shape = {10, 7};
  state.count = 70;
  state.param = DType::BF16;
  state.grad = DType::BF16;
  state.moments = DType::F32;
  state.master = MasterKind::FP32;
  state.sliceBegin = 20;
  state.sliceEnd = 50;
  state.heldBytes[unsigned(Role::Master)] = 30 * 4;
  state.heldBytes[unsigned(Role::ExpAvg)] = 30 * 4;
  state.heldBytes[unsigned(Role::ExpAvgSq)] = 30 * 4;
  return state;
}

/// Asserts that `message` names the tensor and contains every one of `parts`.
void expectMessage(const std::string &message,
                   std::initializer_list<const char *> parts) {
  ASSERT_FALSE(message.empty()) << "the tripwire did not fire";
  EXPECT_EQ(message.rfind("'layers.0.attn.w'", 0), 0u) << message;
  for (const char *part : parts)
    EXPECT_NE(message.find(part), std::string::npos)
        << "'" << part << "' missing from: " << message;
}

TEST(TripwireTest, AgreeingStatePasses) {
  ArtifactTensor plan = masterPlan();
  EXPECT_EQ(checkResidentState(&plan, goodState()), "");

  // A rank that owns no element of the tensor holds nothing, and that is
  // what the plan wants.
  ResidentState empty = goodState();
  empty.sliceBegin = empty.sliceEnd = 70;
  empty.heldBytes = {};
  EXPECT_EQ(checkResidentState(&plan, empty), "");

  // A plain fp32 parameter: no master, moments only.
  ArtifactTensor fp32 = plan;
  fp32.master = fp32.gather = fp32.reduce = fp32.exported = DType::F32;
  ResidentState plain = goodState();
  plain.param = plain.grad = DType::F32;
  plain.master = MasterKind::None;
  plain.heldBytes[unsigned(Role::Master)] = 0;
  EXPECT_EQ(checkResidentState(&fp32, plain), "");
}

TEST(TripwireTest, MomentsInAnotherDTypeFire) {
  ArtifactTensor plan = masterPlan();
  ResidentState state = goodState();
  state.moments = DType::BF16;
  expectMessage(checkResidentState(&plan, state),
                {"resident moments are bf16", "the plan says fp32"});
}

TEST(TripwireTest, MissingOrExtraMasterFires) {
  ArtifactTensor plan = masterPlan();
  ResidentState state = goodState();
  state.master = MasterKind::None;
  state.heldBytes[unsigned(Role::Master)] = 0;
  expectMessage(checkResidentState(&plan, state),
                {"no master", "needs an fp32 master"});

  // The plan says no master (bf16 everywhere) but the rank keeps one.
  ArtifactTensor pure = plan;
  pure.master = DType::BF16;
  expectMessage(checkResidentState(&pure, goodState()),
                {"an fp32 master", "needs no master"});
}

TEST(TripwireTest, BufferHoldingTheWrongBytesFires) {
  ArtifactTensor plan = masterPlan();
  // The master buffer holds 2 bytes per element: a bf16 master in disguise.
  ResidentState state = goodState();
  state.heldBytes[unsigned(Role::Master)] = 30 * 2;
  expectMessage(checkResidentState(&plan, state),
                {"resident master holds 60 bytes", "30 elements", "master fp32",
                 "needs 120"});

  // A rank whose second moment buffer misses part of its slice.
  state = goodState();
  state.heldBytes[unsigned(Role::ExpAvgSq)] = 29 * 4;
  expectMessage(checkResidentState(&plan, state),
                {"resident exp_avg_sq holds 116 bytes", "needs 120"});

  // AMSGrad keeps a third moment; without its buffer the state is short.
  state = goodState();
  state.amsgrad = true;
  expectMessage(checkResidentState(&plan, state),
                {"resident max_exp_avg_sq holds 0 bytes"});
}

TEST(TripwireTest, ShapeAndDTypesFire) {
  ArtifactTensor plan = masterPlan();
  ResidentState state = goodState();
  state.shape = {7, 10};
  expectMessage(checkResidentState(&plan, state),
                {"resident shape [7, 10]", "the plan's [10, 7]"});

  state = goodState();
  state.count = 71;
  expectMessage(checkResidentState(&plan, state), {"(71 elements)", "[10, 7]"});

  state = goodState();
  state.param = DType::F32;
  expectMessage(checkResidentState(&plan, state),
                {"resident parameter is fp32", "gathers it in bf16"});

  state = goodState();
  state.grad = DType::F32;
  expectMessage(checkResidentState(&plan, state),
                {"gradient is reduced in fp32", "the plan says bf16"});

  state = goodState();
  state.sliceEnd = 80;
  expectMessage(checkResidentState(&plan, state),
                {"resident slice [20, 80)", "70 elements"});
}

TEST(TripwireTest, MissingOrUnrealisablePlanFires) {
  std::string message = checkResidentState(nullptr, goodState());
  EXPECT_EQ(message, "'layers.0.attn.w' has no plan in the manifest");

  ArtifactTensor plan = masterPlan();
  plan.master = DType::BF16;
  plan.gather = DType::F16;
  expectMessage(checkResidentState(&plan, goodState()),
                {"master bf16 with gather fp16 has no resident layout"});

  plan = masterPlan();
  plan.isParameter = false;
  expectMessage(checkResidentState(&plan, goodState()), {"is a buffer"});
}

} // namespace
