//===- ThreadCommunicator.h - Ranks as threads, for the tests ---*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// A Communicator whose ranks are threads of the test's process, with the
// collectives the tests use: allAgree (verifying a checkpoint) and
// allToAll (the gradients' exact combination). The others fail the test.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_UNITTESTS_RUNTIME_THREADCOMMUNICATOR_H
#define MANTISSA_UNITTESTS_RUNTIME_THREADCOMMUNICATOR_H

#include "mantissa/Runtime/Communicator.h"

#include "gtest/gtest.h"

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

class ThreadCommunicator final : public Communicator {
public:
  /// What the ranks share: one per test, outliving the ranks' threads.
  struct World {
    explicit World(int size = 2)
        : size(size), posted(size_t(size),
                             std::vector<std::vector<uint8_t>>(size_t(size))) {}
    /// Waits for every rank; the last to arrive runs `last` first.
    void meet(const std::function<void()> &last) {
      std::unique_lock<std::mutex> lock(mutex);
      uint64_t seen = round;
      if (++arrived == size) {
        last();
        arrived = 0;
        ++round;
        done.notify_all();
        return;
      }
      done.wait(lock, [&] { return round != seen; });
    }
    int size, arrived = 0;
    uint64_t round = 0;
    bool all = true, result = true;
    /// posted[from][to]: the bytes rank `from` sends rank `to`.
    std::vector<std::vector<std::vector<uint8_t>>> posted;
    std::mutex mutex;
    std::condition_variable done;
  };

  ThreadCommunicator(World &world, int rank) : world(world), rankIndex(rank) {}
  int rank() const override { return rankIndex; }
  int worldSize() const override { return world.size; }
  std::string name() const override { return "threads"; }

  bool allAgree(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(world.mutex);
      world.all = world.all && ok;
    }
    world.meet([&] {
      world.result = world.all;
      world.all = true;
    });
    // The next round needs this rank too: the result stays until it reads.
    std::lock_guard<std::mutex> lock(world.mutex);
    return world.result;
  }

  bool allToAll(const uint8_t *send, const std::vector<int64_t> &sendCounts,
                const std::vector<int64_t> &sendDispls, uint8_t *recv,
                const std::vector<int64_t> &recvCounts,
                const std::vector<int64_t> &recvDispls,
                std::string &error) override {
    for (int to = 0; to < world.size; ++to)
      world.posted[size_t(rankIndex)][size_t(to)].assign(
          send + sendDispls[size_t(to)],
          send + sendDispls[size_t(to)] + sendCounts[size_t(to)]);
    world.meet([] {});
    bool ok = true;
    for (int from = 0; from < world.size; ++from) {
      const std::vector<uint8_t> &bytes =
          world.posted[size_t(from)][size_t(rankIndex)];
      if (int64_t(bytes.size()) != recvCounts[size_t(from)]) {
        error = "rank " + std::to_string(from) + " sent " +
                std::to_string(bytes.size()) + " bytes, " +
                std::to_string(recvCounts[size_t(from)]) + " expected";
        ok = false;
      } else {
        std::copy(bytes.begin(), bytes.end(), recv + recvDispls[size_t(from)]);
      }
    }
    world.meet([] {}); // every rank has read its bytes before they change
    return ok;
  }

  bool allGather(uint8_t *, const std::vector<int64_t> &,
                 const std::vector<int64_t> &, std::string &error) override {
    return unsupported("allGather", error);
  }
  bool reduceScatterSum(const void *, void *, const std::vector<int64_t> &,
                        DType, std::string &error) override {
    return unsupported("reduceScatterSum", error);
  }
  int64_t allMax(int64_t value) override {
    std::string error;
    unsupported("allMax", error);
    return value;
  }
  bool broadcast(void *, int64_t, int, std::string &error) override {
    return unsupported("broadcast", error);
  }

private:
  static bool unsupported(const char *collective, std::string &error) {
    ADD_FAILURE() << collective << " is not one of the test communicator's";
    error = std::string(collective) + " is not supported by the test's "
                                      "communicator";
    return false;
  }
  World &world;
  int rankIndex;
};

} // namespace mlir::mantissa::rt

#endif // MANTISSA_UNITTESTS_RUNTIME_THREADCOMMUNICATOR_H
