//===- GradientCombination.cpp - Exact sums of micro-batch gradients ------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/GradientCombination.h"

#include <algorithm>
#include <cstring>

using namespace mlir::mantissa::rt;

namespace {

/// The largest power of two strictly below `n` (n >= 2).
int64_t splitOffset(int64_t n) {
  int64_t p = 1;
  while (p * 2 < n)
    p *= 2;
  return p;
}

void collect(SumNode node, SumNode range, std::vector<SumNode> &out) {
  if (node.end <= range.begin || node.begin >= range.end)
    return;
  if (range.begin <= node.begin && node.end <= range.end) {
    out.push_back(node);
    return;
  }
  int64_t mid = node.begin + splitOffset(node.end - node.begin);
  collect({node.begin, mid}, range, out);
  collect({mid, node.end}, range, out);
}

/// True when `left` and `right` are the two children of one tree node.
bool siblings(SumNode left, SumNode right, int64_t total) {
  int64_t size = left.end - left.begin;
  // A left child is a whole dyadic block; its sibling is the next block of
  // the same size, cut at `total`.
  bool powerOfTwo = size > 0 && (size & (size - 1)) == 0;
  return powerOfTwo && left.begin % (2 * size) == 0 &&
         right.begin == left.end &&
         right.end == std::min(left.end + size, total);
}

/// `buffer`, grown to at least `size` bytes, never shrunk: a combination
/// runs every step on buffers of the same sizes, and a fresh buffer of
/// megabytes is fresh pages from the kernel each time (mapped, faulted in
/// and zeroed, then unmapped when freed).
uint8_t *scratch(std::vector<uint8_t> &buffer, size_t size) {
  if (buffer.size() < size)
    buffer.resize(size);
  return buffer.data();
}

} // namespace

SumNode mlir::mantissa::rt::microBatchesOfRank(int rank, int64_t perRank,
                                               int64_t total) {
  int64_t begin = std::min(int64_t(rank) * perRank, total);
  return {begin, std::min(begin + perRank, total)};
}

std::vector<SumNode> mlir::mantissa::rt::maximalNodes(SumNode range,
                                                      int64_t total) {
  std::vector<SumNode> nodes;
  if (total > 0 && range.begin < range.end)
    collect({0, total}, range, nodes);
  return nodes;
}

void TreeSum::push(SumNode node, const uint8_t *value) {
  if (held && siblings(stack[held - 1].node, node, total)) {
    // A right child is added where its sibling is held: no copy.
    add(storage(held - 1), value);
    stack[held - 1].node.end = node.end;
  } else {
    if (stack.size() <= held)
      stack.emplace_back();
    Entry &entry = stack[held++];
    entry.node = node;
    if (held == 1 && root)
      std::memcpy(root, value, size_t(bytes));
    else
      entry.value.assign(value, value + bytes);
  }
  while (held >= 2 &&
         siblings(stack[held - 2].node, stack[held - 1].node, total)) {
    add(storage(held - 2), storage(held - 1));
    stack[held - 2].node.end = stack[held - 1].node.end;
    --held;
  }
}

bool mlir::mantissa::rt::combineAcrossRanks(
    Communicator &comm, const TreeSum &local,
    const std::vector<SumNode> &ranges, int64_t total,
    const std::vector<int64_t> &cuts,
    const std::function<void(uint8_t *, const uint8_t *, int64_t, int64_t)>
        &add,
    uint8_t *out, std::string &error) {
  std::vector<const uint8_t *> values;
  for (size_t n = 0; n < local.size(); ++n)
    values.push_back(local.value(n));
  return combineAcrossRanks(comm, values, ranges, total, cuts, add, out, error);
}

bool mlir::mantissa::rt::combineAcrossRanks(
    Communicator &comm, const std::vector<const uint8_t *> &local,
    const std::vector<SumNode> &ranges, int64_t total,
    const std::vector<int64_t> &cuts,
    const std::function<void(uint8_t *, const uint8_t *, int64_t, int64_t)>
        &add,
    uint8_t *out, std::string &error) {
  int world = comm.worldSize(), me = comm.rank();
  int64_t mine = cuts[me + 1] - cuts[me];
  if (world == 1 && local.size() == 1 && ranges[0] == SumNode{0, total}) {
    // One rank holds the root already.
    if (mine)
      std::memcpy(out, local[0] + cuts[0], size_t(mine));
    return true;
  }
  // What goes to each other rank d: slice d of every local node (this
  // rank's own slice is read in place). With one local node (K a power of
  // two per rank) the slices are sent from the node itself; otherwise they
  // are packed, node after node, into a buffer kept for the next step.
  static thread_local std::vector<uint8_t> packed, received;
  std::vector<int64_t> sendCounts(world), sendDispls(world);
  int64_t packedBytes = 0;
  for (int d = 0; d < world; ++d)
    if (d != me)
      packedBytes += int64_t(local.size()) * (cuts[d + 1] - cuts[d]);
  const uint8_t *send =
      local.size() == 1
          ? local[0]
          : scratch(packed, size_t(std::max<int64_t>(packedBytes, 1)));
  for (int64_t d = 0, at = 0; d < world; ++d) {
    int64_t slice = cuts[d + 1] - cuts[d];
    sendCounts[d] = d == me ? 0 : int64_t(local.size()) * slice;
    sendDispls[d] = local.size() == 1 ? cuts[d] : at;
    if (d == me || local.size() == 1)
      continue;
    for (size_t n = 0; n < local.size(); ++n, at += slice)
      std::memcpy(packed.data() + at, local[n] + cuts[d], size_t(slice));
  }
  // Receive buffer: every other rank's nodes, sliced to this rank's bytes.
  std::vector<std::vector<SumNode>> nodesOf(world);
  std::vector<int64_t> recvCounts(world), recvDispls(world);
  int64_t receivedBytes = 0;
  for (int s = 0; s < world; ++s) {
    nodesOf[s] = maximalNodes(ranges[s], total);
    recvDispls[s] = receivedBytes;
    recvCounts[s] = s == me ? 0 : int64_t(nodesOf[s].size()) * mine;
    receivedBytes += recvCounts[s];
  }
  if (nodesOf[me].size() != local.size()) {
    error = "this rank holds " + std::to_string(local.size()) +
            " partial sums, its micro-batches make " +
            std::to_string(nodesOf[me].size());
    return false;
  }
  uint8_t *recv =
      scratch(received, size_t(std::max<int64_t>(receivedBytes, 1)));
  if (!comm.allToAll(send, sendCounts, sendDispls, recv, recvCounts, recvDispls,
                     error))
    return false;
  int64_t first = cuts[me];
  // The nodes in order, each where it is (this rank's in place); they
  // finish the tree iff they cover the micro-batches one after another.
  std::vector<std::pair<SumNode, const uint8_t *>> nodes;
  bool inOrder = true;
  int64_t covered = 0;
  for (int s = 0; s < world; ++s)
    for (size_t n = 0; n < nodesOf[s].size(); ++n) {
      SumNode node = nodesOf[s][n];
      inOrder = inOrder && node.begin == covered;
      covered = node.end;
      nodes.push_back(
          {node, s == me ? local[n] + first : recv + recvDispls[s] + n * mine});
    }
  if (!inOrder || covered != total) {
    error = "the micro-batch gradients do not cover the step's " +
            std::to_string(total) + " micro-batches";
    return false;
  }
  // The root is summed in `out` (its left child copied there, each right
  // child added), and the tree's buffers are kept for the next step.
  static thread_local TreeSum slice(0, 0, nullptr);
  slice.reset(
      total, mine,
      [&](uint8_t *accumulate, const uint8_t *value) {
        add(accumulate, value, first, mine);
      },
      out);
  for (auto [node, value] : nodes)
    slice.push(node, value);
  bool whole = slice.size() == 1 && slice.node(0) == SumNode{0, total};
  slice.reset(0, 0, nullptr, nullptr); // `add` refers to this call's arguments
  if (!whole)
    error = "the micro-batch gradients do not make the root of the step's "
            "tree";
  return whole;
}

namespace {
void addDoubles(uint8_t *accumulate, const uint8_t *value) {
  double a, b;
  std::memcpy(&a, accumulate, sizeof(double));
  std::memcpy(&b, value, sizeof(double));
  a += b;
  std::memcpy(accumulate, &a, sizeof(double));
}
} // namespace

ValueTreeSum::ValueTreeSum() : local(1, sizeof(double), addDoubles) {}

void ValueTreeSum::reset(int64_t newTotal) {
  total = newTotal;
  local.reset(newTotal);
}

void ValueTreeSum::push(int64_t index, double value) {
  uint8_t bytes[sizeof(double)];
  std::memcpy(bytes, &value, sizeof(double));
  local.push({index, index + 1}, bytes);
}

bool ValueTreeSum::finish(Communicator &comm,
                          const std::vector<SumNode> &ranges, double &sum,
                          std::string &error) {
  int world = comm.worldSize(), me = comm.rank();
  // Every rank's maximal nodes, in rank order: at most floor(log2 K) + 2
  // doubles a rank.
  std::vector<std::vector<SumNode>> nodesOf(static_cast<size_t>(world));
  std::vector<int64_t> displacements, counts;
  int64_t held = 0;
  for (int r = 0; r < world; ++r) {
    nodesOf[size_t(r)] = maximalNodes(ranges[size_t(r)], total);
    displacements.push_back(held * int64_t(sizeof(double)));
    counts.push_back(int64_t(nodesOf[size_t(r)].size() * sizeof(double)));
    held += int64_t(nodesOf[size_t(r)].size());
  }
  if (nodesOf[size_t(me)].size() != local.size()) {
    error = "this rank holds " + std::to_string(local.size()) +
            " partial sums of its values, its micro-batches make " +
            std::to_string(nodesOf[size_t(me)].size());
    return false;
  }
  std::vector<uint8_t> values(size_t(std::max<int64_t>(held, 1)) *
                              sizeof(double));
  for (size_t n = 0; n < local.size(); ++n)
    std::memcpy(values.data() + displacements[size_t(me)] +
                    int64_t(n * sizeof(double)),
                local.value(n), sizeof(double));
  if (world > 1 && !comm.allGather(values.data(), displacements, counts, error))
    return false;
  TreeSum all(total, sizeof(double), addDoubles);
  for (int r = 0; r < world; ++r)
    for (size_t n = 0; n < nodesOf[size_t(r)].size(); ++n)
      all.push(nodesOf[size_t(r)][n], values.data() + displacements[size_t(r)] +
                                          int64_t(n * sizeof(double)));
  if (all.size() != 1 || !(all.node(0) == SumNode{0, total})) {
    error = "the micro-batch values do not cover the step's " +
            std::to_string(total) + " micro-batches";
    return false;
  }
  std::memcpy(&sum, all.value(0), sizeof(double));
  return true;
}
