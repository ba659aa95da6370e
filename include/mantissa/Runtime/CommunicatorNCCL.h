//===- CommunicatorNCCL.h - Collectives on GPUs over NCCL -------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The Communicator interface on device memory: allGather and
// reduceScatterSum take device addresses (DevicePtr values cast to
// pointers) and run as NCCL collectives on the default stream; allAgree,
// allMax and broadcast stay on the host communicator. NCCL (libnccl.so.2) is
// reached through dlopen like the driver. Rank 0 creates the unique id and
// the host communicator (MPI) broadcasts it, so mpirun starts NCCL jobs.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_COMMUNICATORNCCL_H
#define MANTISSA_RUNTIME_COMMUNICATORNCCL_H

#include "mantissa/Runtime/Communicator.h"
#include "mantissa/Runtime/CudaDriver.h"

namespace mlir::mantissa::rt {

/// Creates an NCCL communicator over the ranks of `host` on `device`. Every
/// rank must call it; all fail together (with `error`) if any rank fails.
/// `host` and `device` must outlive the result.
std::unique_ptr<Communicator> createNCCLCommunicator(Communicator &host,
                                                     CudaDevice &device,
                                                     std::string &error);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_COMMUNICATORNCCL_H
