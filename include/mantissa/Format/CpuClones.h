//===- CpuClones.h - Loops compiled for AVX2 and the baseline ---*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The library is built for the baseline x86-64 (SSE2: 4 lanes), as it must
// run on every CPU. Its few hot loops over whole tensors are compiled twice,
// for AVX2 (8 lanes) and for the baseline, and the dynamic loader picks one
// when the library loads (an ifunc). Every CPU these machines have had, the
// AMD EPYCs and the Intel Xeons alike, runs the AVX2 version.
//
// AVX2 without FMA on purpose: no multiply and add is contracted into one
// rounding, so both versions give the same bits, whichever CPU runs them.
// Loops a clone calls must be inlined into it (always_inline) to be
// compiled for AVX2 too.
//
// Plain C++: built without LLVM or MLIR, as all of Format.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_FORMAT_CPUCLONES_H
#define MANTISSA_FORMAT_CPUCLONES_H

#define MANTISSA_AVX2_AND_BASELINE                                             \
  __attribute__((target_clones("avx2", "default")))

#endif // MANTISSA_FORMAT_CPUCLONES_H
