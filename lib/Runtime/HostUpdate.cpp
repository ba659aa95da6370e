//===- HostUpdate.cpp - The trainer's update on the CPU -------------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// `--device cpu` (UpdateBackend.h): the state stays in ShardedState's host
// buffers; each group's compiled CPU kernel (kernels.so) updates this rank's
// tiles, and the parameters are all-gathered over the run's communicator.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#include "UpdateBackend.h"

using namespace mlir::mantissa::rt;
using namespace mlir::mantissa::rt::detail;

namespace {

class HostUpdate : public UpdateBackend {
public:
  HostUpdate(ShardedState &state, const OptimizerOptions &options,
             Communicator &comm, RunError &errors)
      : state(state), options(options), comm(comm), errors(errors) {}

  bool prepare(GradientSource *) override { return true; }

  bool sourceMembers(const GradientSource *,
                     std::vector<GradientSource::Member> &members) override {
    for (GroupState &group : state.groups)
      for (const ArtifactMember &member : group.group->members)
        members.push_back({&member.fqn, &member.shape, member.param,
                           group.fullParam.data() + member.paramOffset,
                           member.grad,
                           group.fullGrad.data() + member.gradOffset});
    return true;
  }

  bool fetchGradients(const GradientSource *) override { return true; }

  bool update(const UpdateStep &step) override {
    std::string collectiveError;
    for (GroupState &group : state.groups) {
      const ArtifactGroup &artifactGroup = *group.group;
      artifactGroup.kernel(
          group.kernelPointer(Role::Grad), group.kernelPointer(Role::Param),
          group.kernelPointer(Role::Master), group.kernelPointer(Role::ExpAvg),
          group.kernelPointer(Role::ExpAvgSq),
          group.kernelPointer(Role::MaxExpAvgSq), step.lr, options.beta1,
          options.beta2, options.eps, options.weightDecay, step.optimizerStep,
          step.gradScale, state.rank, state.world);
      std::vector<int64_t> displacements, byteCounts;
      for (const ByteRange &range : group.paramRanges) {
        displacements.push_back(range.begin);
        byteCounts.push_back(range.size());
      }
      if (!comm.allGather(group.fullParam.data(), displacements, byteCounts,
                          collectiveError))
        return errors.fail("group '" + artifactGroup.name +
                           "': " + collectiveError);
    }
    return true;
  }

  bool copyStateToHost() override { return true; }

  int64_t residentBytes(size_t group, Role role) const override {
    return state.groups[group].shardState[unsigned(role)].size();
  }

  const char *processor() const override { return "CPU"; }

private:
  ShardedState &state;
  const OptimizerOptions &options;
  Communicator &comm;
  RunError &errors;
};

} // namespace

std::unique_ptr<UpdateBackend> mlir::mantissa::rt::detail::createHostUpdate(
    ShardedState &state, const OptimizerOptions &options, Communicator &comm,
    RunError &errors) {
  return std::make_unique<HostUpdate>(state, options, comm, errors);
}
