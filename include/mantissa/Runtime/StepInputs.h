//===- StepInputs.h - A micro-batch into the step's user inputs -*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// Every gradient source (the CPU step, the GPU step, the driver's reference
// interpreter) takes its micro-batches from a BatchSource, which names each
// tensor after the step's user input it fills. This is the one place that
// matches them: by name, with the argument's shape, in its dtype.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_STEPINPUTS_H
#define MANTISSA_RUNTIME_STEPINPUTS_H

#include "mantissa/Format/StepTensor.h"
#include "mantissa/Runtime/SafeTensors.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

/// Writes user input `argument`'s bytes (argument.bytes of them) to `out`
/// from `microBatch` (BatchSource::loadMicroBatch): the tensor of its name,
/// of its shape, in its dtype, integer ids converted to the argument's
/// integer type as storeTokenIds does. False with `error` naming the input
/// when the micro-batch lacks it, or holds it in another shape or in a dtype
/// that does not convert.
bool storeStepInput(const std::vector<HostTensor> &microBatch,
                    const StepTensor &argument, uint8_t *out,
                    std::string &error);

/// Fills random argument `argument` (role Random, RandomDraw.h) for
/// global micro-batch `globalMicroBatch` of step `step` under `seed`: a
/// per-sample draw's B samples are global samples [globalMicroBatch * B,
/// (globalMicroBatch + 1) * B), B its leading dimension (the micro-batch's
/// sample count, as BatchSource::firstSample counts them). Validation
/// micro-batches pass their index and step 0.
void storeRandomInput(const StepTensor &argument, uint64_t seed,
                      int64_t globalMicroBatch, int64_t step, uint8_t *out);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_STEPINPUTS_H
