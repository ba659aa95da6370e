//===- CommunicatorMPI.cpp - Collectives over MPI -------------------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/CommunicatorMPI.h"

#include <mpi.h>

#include <climits>
#include <cstdlib>

using namespace mlir::mantissa::rt;

bool mlir::mantissa::rt::launchedByMPI() {
  for (const char *name :
       {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(name))
      return true;
  return false;
}

namespace {
void sumBF16(void *in, void *inout, int *len, MPI_Datatype *) {
  accumulateSum(inout, in, *len, DType::BF16);
}
void sumF16(void *in, void *inout, int *len, MPI_Datatype *) {
  accumulateSum(inout, in, *len, DType::F16);
}
void finalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

class MPICommunicator final : public Communicator {
public:
  MPICommunicator() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rankValue);
    MPI_Comm_size(MPI_COMM_WORLD, &worldValue);
    MPI_Op_create(&sumBF16, /*commute=*/1, &bf16Sum);
    MPI_Op_create(&sumF16, /*commute=*/1, &f16Sum);
  }
  int rank() const override { return rankValue; }
  int worldSize() const override { return worldValue; }
  std::string name() const override { return "mpi"; }

  bool allGather(uint8_t *buffer, const std::vector<int64_t> &displacements,
                 const std::vector<int64_t> &counts,
                 std::string &error) override {
    std::vector<int> counts32, displs32;
    if (!narrow(counts, counts32, error) ||
        !narrow(displacements, displs32, error))
      return false;
    int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_BYTE, buffer, counts32.data(),
                            displs32.data(), MPI_BYTE, MPI_COMM_WORLD);
    return check(rc, "MPI_Allgatherv", error);
  }

  bool reduceScatterSum(const void *send, void *recv,
                        const std::vector<int64_t> &counts, DType dtype,
                        std::string &error) override {
    std::vector<int> counts32;
    if (!narrow(counts, counts32, error))
      return false;
    MPI_Datatype type = dtype == DType::F32 ? MPI_FLOAT : MPI_UINT16_T;
    MPI_Op op = dtype == DType::F32    ? MPI_SUM
                : dtype == DType::BF16 ? bf16Sum
                                       : f16Sum;
    int rc = MPI_Reduce_scatter(send, recv, counts32.data(), type, op,
                                MPI_COMM_WORLD);
    return check(rc, "MPI_Reduce_scatter", error);
  }

  bool allToAll(const uint8_t *send, const std::vector<int64_t> &sendCounts,
                const std::vector<int64_t> &sendDispls, uint8_t *recv,
                const std::vector<int64_t> &recvCounts,
                const std::vector<int64_t> &recvDispls,
                std::string &error) override {
    std::vector<int> sc, sd, rc32, rd;
    if (!narrow(sendCounts, sc, error) || !narrow(sendDispls, sd, error) ||
        !narrow(recvCounts, rc32, error) || !narrow(recvDispls, rd, error))
      return false;
    int rc = MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv,
                           rc32.data(), rd.data(), MPI_BYTE, MPI_COMM_WORLD);
    return check(rc, "MPI_Alltoallv", error);
  }

  bool allAgree(bool ok) override {
    int local = ok ? 1 : 0, all = 0;
    MPI_Allreduce(&local, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all == 1;
  }

  int64_t allMax(int64_t value) override {
    long long local = value, all = 0;
    MPI_Allreduce(&local, &all, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    return all;
  }

  bool broadcast(void *data, int64_t bytes, int root,
                 std::string &error) override {
    if (bytes < 0 || bytes > INT_MAX) {
      error = "MPI: a broadcast of more than 2^31 bytes is not supported";
      return false;
    }
    int rc = MPI_Bcast(data, int(bytes), MPI_BYTE, root, MPI_COMM_WORLD);
    return check(rc, "MPI_Bcast", error);
  }

  bool shareMachine(const std::vector<uint64_t> &cpus,
                    std::vector<uint64_t> &machineCpus, int &ranksHere,
                    std::string &error) override {
    MPI_Comm machine;
    int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED,
                                 rankValue, MPI_INFO_NULL, &machine);
    if (!check(rc, "MPI_Comm_split_type", error))
      return false;
    MPI_Comm_size(machine, &ranksHere);
    // The masks' lengths agree when every rank runs the same runtime; the
    // longest is taken all the same.
    long long words = (long long)cpus.size(), longest = 0;
    MPI_Allreduce(&words, &longest, 1, MPI_LONG_LONG, MPI_MAX, machine);
    std::vector<uint64_t> mine(cpus);
    mine.resize(size_t(longest));
    machineCpus.assign(size_t(longest), 0);
    rc = MPI_Allreduce(mine.data(), machineCpus.data(), int(longest),
                       MPI_UINT64_T, MPI_BOR, machine);
    MPI_Comm_free(&machine);
    return check(rc, "MPI_Allreduce", error);
  }

private:
  static bool narrow(const std::vector<int64_t> &in, std::vector<int> &out,
                     std::string &error) {
    for (int64_t value : in) {
      if (value < 0 || value > INT_MAX) {
        error = "MPI: a collective of more than 2^31 elements is not "
                "supported yet";
        return false;
      }
      out.push_back(int(value));
    }
    return true;
  }
  static bool check(int rc, const char *what, std::string &error) {
    if (rc == MPI_SUCCESS)
      return true;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(rc, text, &length);
    error = std::string(what) + " failed: " + std::string(text, length);
    return false;
  }

  int rankValue = 0, worldValue = 1;
  MPI_Op bf16Sum, f16Sum;
};
} // namespace

std::unique_ptr<Communicator>
mlir::mantissa::rt::createMPICommunicator(std::string &error) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // A rank waiting in a collective polls; OpenMPI's polling yields the CPU
    // only when it sees more ranks than slots. On a machine that other jobs
    // load, a rank that spins keeps the CPU share its own session's other
    // rank, still computing, needs: llama_medium's W = 2, K = 1 step took
    // 99 and 94 ms instead of 122 and 110 (interleaved, at a load average of
    // 8 on 2 cores). Where nothing else wants the CPU, a yield is one system
    // call per poll. OpenMPI reads OMPI_MCA_* in MPI_Init; a user's setting
    // (mpirun --mca mpi_yield_when_idle 0) is kept.
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
    if (MPI_Init(nullptr, nullptr) != MPI_SUCCESS) {
      error = "MPI_Init failed";
      return nullptr;
    }
    std::atexit(finalizeAtExit);
  }
  return std::make_unique<MPICommunicator>();
}
