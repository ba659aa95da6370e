//===- GradientCombination.h - Exact sums of micro-batch gradients -*- C++ -*-//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// A step's gradient is the mean of its M micro-batch gradients (M = W ranks
// times K accumulation steps). Floating-point addition is not associative,
// and MPI's and NCCL's reductions do not fix their order, so the trainer sums
// in an order of its own that depends on the micro-batch index only: a fixed
// binary tree over [0, M). Node [lo, hi) with hi - lo > 1 splits at lo + P,
// P the largest power of two below hi - lo; so every node is a dyadic block
// [c * 2^j, (c + 1) * 2^j) cut at M. Whichever rank computes a node, its value
// is the same function of its leaves, so W x K = (1, 4), (2, 2) and (4, 1)
// give the same bits.
//
// Each rank first sums its own micro-batches [rK, rK + K) as far as the tree
// allows (its maximal nodes: one when K is a power of two), then sends slice
// d of each of those partial sums to rank d (one all-to-all), and rank d
// finishes the tree on its slice in the same order. With one node per rank
// that moves exactly the bytes of a ring reduce-scatter; in general a rank
// sends at most floor(log2 K) + 2 partial sums.
//
// Sums are in the reduce dtype, rounded after each addition (as the
// reduce-scatter was), so the wire dtype loses nothing the tree would keep.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_GRADIENTCOMBINATION_H
#define MANTISSA_RUNTIME_GRADIENTCOMBINATION_H

#include "mantissa/Runtime/Communicator.h"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace mlir::mantissa::rt {

/// A node of the summation tree: micro-batches [begin, end).
struct SumNode {
  int64_t begin = 0, end = 0;
  bool operator==(const SumNode &other) const {
    return begin == other.begin && end == other.end;
  }
};

/// The micro-batches rank `rank` evaluates when each of `world` ranks takes
/// `perRank` consecutive ones of `total`: [rank * perRank, +perRank) cut at
/// `total` (empty past it).
SumNode microBatchesOfRank(int rank, int64_t perRank, int64_t total);

/// The maximal tree nodes over [0, total) that lie inside [begin, end), in
/// order: what a rank holding those micro-batches can sum on its own.
std::vector<SumNode> maximalNodes(SumNode range, int64_t total);

/// Sums buffers of `bytes` bytes in the tree's order as they arrive: nodes
/// are pushed in order of their micro-batches, each starting where the last
/// ended, and siblings are added as soon as both are there (so at most
/// log2(total) + 1 buffers are held).
class TreeSum {
public:
  /// `accumulate += value`, elementwise in the reduce dtype(s).
  using Add = std::function<void(uint8_t *accumulate, const uint8_t *value)>;
  TreeSum(int64_t total, int64_t bytes, Add add)
      : total(total), bytes(bytes), add(std::move(add)) {}
  /// Adds node `node` with value `value` (copied).
  void push(SumNode node, const uint8_t *value);
  /// The nodes held now, in order: after pushing the leaves of a range, its
  /// maximal nodes; after pushing everything, the root alone.
  size_t size() const { return held; }
  SumNode node(size_t index) const { return stack[index].node; }
  const uint8_t *value(size_t index) const {
    return index == 0 && root ? root : stack[index].value.data();
  }
  /// Forgets every node (keeping the buffers for the next step) and sums
  /// over `newTotal` micro-batches from now on.
  void reset(int64_t newTotal) {
    total = newTotal;
    held = 0;
  }
  /// The same for values of `newBytes` bytes added by `newAdd`, the first
  /// node held (the one that becomes the root) in `rootStorage` when it is
  /// given, not in a buffer of the tree's: a finished sum is then where
  /// the caller wants it, without a copy. `rootStorage` must not overlap
  /// the values pushed.
  void reset(int64_t newTotal, int64_t newBytes, Add newAdd,
             uint8_t *rootStorage) {
    reset(newTotal);
    bytes = newBytes;
    add = std::move(newAdd);
    root = rootStorage;
  }

private:
  struct Entry {
    SumNode node;
    std::vector<uint8_t> value;
  };
  int64_t total, bytes;
  Add add;
  std::vector<Entry> stack;
  size_t held = 0;
  uint8_t *root = nullptr;
  uint8_t *storage(size_t index) {
    return const_cast<uint8_t *>(std::as_const(*this).value(index));
  }
};

/// Finishes the tree across ranks: `local` holds this rank's maximal nodes
/// (after pushing its micro-batches), each rank r's micro-batches are
/// `ranges[r]`, and rank r owns bytes [cuts[r], cuts[r + 1]) of the buffer.
/// Writes this rank's slice of the root into `out`; `add(acc, value, first,
/// count)` adds `count` bytes that start at byte `first` of the buffer.
bool combineAcrossRanks(Communicator &comm, const TreeSum &local,
                        const std::vector<SumNode> &ranges, int64_t total,
                        const std::vector<int64_t> &cuts,
                        const std::function<void(uint8_t *, const uint8_t *,
                                                 int64_t, int64_t)> &add,
                        uint8_t *out, std::string &error);

/// The same with this rank's maximal nodes given as their values, in order
/// (e.g. a single micro-batch's gradient where it was computed, uncopied).
bool combineAcrossRanks(Communicator &comm,
                        const std::vector<const uint8_t *> &local,
                        const std::vector<SumNode> &ranges, int64_t total,
                        const std::vector<int64_t> &cuts,
                        const std::function<void(uint8_t *, const uint8_t *,
                                                 int64_t, int64_t)> &add,
                        uint8_t *out, std::string &error);

/// One double per micro-batch (a micro-batch's loss), summed in double over
/// every rank in the same tree as the gradients, so that its memory is
/// O(log M) whatever the micro-batch count M and the sum is the same bits
/// for any split (W, K) of one M: push each of this rank's values as the
/// node {m, m + 1}, then finish() all-gathers every rank's maximal nodes
/// and adds them in the tree's order.
class ValueTreeSum {
public:
  ValueTreeSum();
  /// Forgets every value; sums over `total` micro-batches from now on.
  void reset(int64_t total);
  /// Adds the value of micro-batch `index`, in order of index.
  void push(int64_t index, double value);
  /// The sum of every rank's values (rank r's are micro-batches
  /// `ranges[r]`), the same on every rank.
  bool finish(Communicator &comm, const std::vector<SumNode> &ranges,
              double &sum, std::string &error);

private:
  int64_t total = 1;
  TreeSum local;
};

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_GRADIENTCOMBINATION_H
