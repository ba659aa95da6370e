//===- WeightsFile.h - A program's stored tensors as safetensors -*- C++
//-*-===//

#ifndef MANTISSA_DRIVER_WEIGHTSFILE_H
#define MANTISSA_DRIVER_WEIGHTSFILE_H

#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Import/Pt2Archive.h"
#include "mantissa/Runtime/SafeTensors.h"
#include "llvm/Support/Error.h"

namespace mlir::mantissa {

/// The parameters, buffers and constants of `program` as host tensors keyed
/// by FQN, in their exported dtypes. Tied weights appear once, under the
/// first FQN; `tiedTo` maps every other FQN to it. Fails on fake tensors
/// (no data) and dtypes safetensors cannot hold.
llvm::Error collectStoredTensors(const pt2::Program &program,
                                 std::vector<rt::HostTensor> &tensors,
                                 std::map<std::string, std::string> &tiedTo);

/// The tied weights of `program`: every FQN that names the same stored
/// tensor as an earlier one (weights before constants), mapped to that one.
/// A state_dict lists a tied weight under each of its names.
std::map<std::string, std::string> getTiedAliases(const pt2::Program &program);

/// Writes the program's stored tensors to `path` (crash-safe; see
/// rt::writeSafeTensors), with the tie map in the metadata under `tied`.
llvm::Error writeWeightsFile(const pt2::Program &program, llvm::StringRef path);

/// Attaches each parameter's initial RMS (`train.init_rms`), the magnitude
/// the precision pass's stall lint measures dtype spacings at.
void attachInitialRms(train::StepOp step, const pt2::Program &program);

} // namespace mlir::mantissa

#endif // MANTISSA_DRIVER_WEIGHTSFILE_H
