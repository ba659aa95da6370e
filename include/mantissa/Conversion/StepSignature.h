//===- StepSignature.h - A train.step's arguments and results ---*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The signature of a train.step as both step programs declare it
// (mantissa/Format/StepTensor.h): the GPU program's builder (TrainToGPU.h)
// and the CPU step's writer (CpuStepWriter.h) list its arguments and results
// from here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_STEPSIGNATURE_H
#define MANTISSA_CONVERSION_STEPSIGNATURE_H

#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Format/StepTensor.h"

namespace mlir::mantissa {

/// Argument or result `index` of `step` as the step programs (step.gpu.json,
/// step.cpu.json) declare it, without an index bound.
rt::StepTensor getStepArgumentTensor(train::StepOp step, unsigned index);
rt::StepTensor getStepResultTensor(train::StepOp step, unsigned index);

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_STEPSIGNATURE_H
