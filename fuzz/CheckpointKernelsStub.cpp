//===- CheckpointKernelsStub.cpp - kernels.so of the checkpoint fuzzer ----===//
//
// Artifact::load dlopens the artifact's kernels.so and resolves each
// group's update kernel. The checkpoint index fuzzer's artifact is written
// at fuzzer start, with this module as its kernels.so: one group, whose
// kernel does nothing. The fuzzer runs two steps with it once, to have the
// runtime itself save the checkpoint it then fuzzes; a checkpoint is the
// state the runner holds, whatever the kernel computed, and loading one
// never calls the kernel. No constructors: loading it runs no code.
//
//===----------------------------------------------------------------------===//

#include <cstdint>

extern "C" {
/// The group's update kernel, with the ABI of AdamWKernelFn (Artifact.h),
/// so that the call through that pointer type is well defined.
void mantissa_adamw_0(void *grad, void *param, void *master, void *expAvg,
                      void *expAvgSq, void *maxExpAvgSq, double lr,
                      double beta1, double beta2, double eps,
                      double weightDecay, int64_t step, float gradScale,
                      int64_t part, int64_t parts) {
  (void)grad, (void)param, (void)master, (void)expAvg, (void)expAvgSq;
  (void)maxExpAvgSq, (void)lr, (void)beta1, (void)beta2, (void)eps;
  (void)weightDecay, (void)step, (void)gradScale, (void)part, (void)parts;
}
}
