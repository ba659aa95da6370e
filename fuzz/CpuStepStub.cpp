//===- CpuStepStub.cpp - The only library the CPU step fuzzer loads -------===//
//
// CpuStep::load dlopens the libraries step.cpu.json names. The fuzzer copies
// this module into its scratch directory under the names of mlp.pt2's step
// libraries, so that a program naming them gets past dlopen and dlsym to the
// checks of its results. It does nothing and has no constructors: loading
// it runs no code, and CpuStep::load never calls an entry.
//
//===----------------------------------------------------------------------===//

extern "C" {
/// The entry mlp.pt2's step.cpu.json names for both of its libraries.
void mlp_packed(void **) {}
/// A second entry, for programs that name another one.
void mantissa_fuzz_entry(void **) {}
}
