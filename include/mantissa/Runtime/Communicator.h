//===- Communicator.h - Collectives across ranks ----------------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The collectives the update path needs, behind one interface: a single rank
// (no communication), MPI on CPU ranks (CommunicatorMPI.cpp, in the separate
// library mantissa_rt_mpi so that libmantissa_rt builds without MPI), NCCL on
// GPUs (CommunicatorNCCL.h: the same calls on device memory), and torchrun's
// environment (RANK / WORLD_SIZE / LOCAL_RANK) where MPI is absent.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_COMMUNICATOR_H
#define MANTISSA_RUNTIME_COMMUNICATOR_H

#include "mantissa/Format/DType.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

class Communicator {
public:
  virtual ~Communicator();
  virtual int rank() const = 0;
  virtual int worldSize() const = 0;
  /// "single", "mpi", "torchrun".
  virtual std::string name() const = 0;

  /// In-place all-gather of bytes: rank r's part is `counts[r]` bytes at
  /// `buffer + displacements[r]`; afterwards every rank holds every part.
  virtual bool allGather(uint8_t *buffer,
                         const std::vector<int64_t> &displacements,
                         const std::vector<int64_t> &counts,
                         std::string &error) = 0;

  /// Reduce-scatter with a sum in `dtype` (F32, BF16 or F16; a bf16/fp16 sum
  /// is rounded to the dtype after each addition, as NCCL does): `send`
  /// holds sum(counts) elements on every rank; rank r receives the sum of
  /// elements [sum(counts[0..r)), +counts[r]) in `recv`.
  virtual bool reduceScatterSum(const void *send, void *recv,
                                const std::vector<int64_t> &counts, DType dtype,
                                std::string &error) = 0;

  /// Personalised exchange of host bytes (all-to-all): this rank sends
  /// `sendCounts[d]` bytes at `send + sendDispls[d]` to rank d and receives
  /// `recvCounts[s]` bytes from rank s at `recv + recvDispls[s]`. The exact
  /// gradient combination (GradientCombination.h) moves its partial sums
  /// this way.
  virtual bool allToAll(const uint8_t *send,
                        const std::vector<int64_t> &sendCounts,
                        const std::vector<int64_t> &sendDispls, uint8_t *recv,
                        const std::vector<int64_t> &recvCounts,
                        const std::vector<int64_t> &recvDispls,
                        std::string &error) = 0;
  /// True on every rank iff `ok` is true on every rank (so that all ranks
  /// stop together when one fails).
  virtual bool allAgree(bool ok) = 0;

  /// The maximum of `value` over ranks.
  virtual int64_t allMax(int64_t value) = 0;

  /// Copies `bytes` bytes at `data` on rank `root` to `data` on every rank
  /// (host memory; NCCL's unique id travels this way).
  virtual bool broadcast(void *data, int64_t bytes, int root,
                         std::string &error) = 0;

  /// The ranks that share this rank's machine (its memory and CPUs), this
  /// one included, and the CPUs they may run on together: the union of
  /// their affinity masks `cpus` (bits indexed by CPU number). A collective.
  /// This default is one rank alone on its machine.
  virtual bool shareMachine(const std::vector<uint64_t> &cpus,
                            std::vector<uint64_t> &machineCpus, int &ranksHere,
                            std::string &error);
};

/// One rank, no communication.
std::unique_ptr<Communicator> createSingleRankCommunicator();

/// Sums `count` elements of `dtype` in `accumulate += value`, rounding to the
/// dtype after each addition (shared by every implementation).
void accumulateSum(void *accumulate, const void *value, int64_t count,
                   DType dtype);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_COMMUNICATOR_H
