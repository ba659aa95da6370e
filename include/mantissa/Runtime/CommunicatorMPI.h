//===- CommunicatorMPI.h - Collectives over MPI -----------------*- C++ -*-===//
//
// Part of the Mantissa project. In mantissa_rt_mpi (built only when CMake
// finds MPI); libmantissa_rt itself never links MPI.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_COMMUNICATORMPI_H
#define MANTISSA_RUNTIME_COMMUNICATORMPI_H

#include "mantissa/Runtime/Communicator.h"

namespace mlir::mantissa::rt {

/// Whether this process was started by an MPI launcher (mpirun / srun).
bool launchedByMPI();

/// Initialises MPI (once) and returns a communicator over MPI_COMM_WORLD, or
/// null with `error`. MPI is finalised at process exit.
std::unique_ptr<Communicator> createMPICommunicator(std::string &error);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_COMMUNICATORMPI_H
