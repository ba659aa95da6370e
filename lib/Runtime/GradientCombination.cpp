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
    add(stack[held - 1].value.data(), value);
    stack[held - 1].node.end = node.end;
  } else {
    if (stack.size() <= held)
      stack.emplace_back();
    Entry &entry = stack[held++];
    entry.node = node;
    entry.value.assign(value, value + bytes);
  }
  while (held >= 2 &&
         siblings(stack[held - 2].node, stack[held - 1].node, total)) {
    Entry &left = stack[held - 2];
    add(left.value.data(), stack[held - 1].value.data());
    left.node.end = stack[held - 1].node.end;
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
  // Send buffer: for each other rank d, slice d of every local node (this
  // rank's own slice is read in place).
  std::vector<int64_t> sendCounts(world), sendDispls(world);
  std::vector<uint8_t> send;
  for (int d = 0; d < world; ++d) {
    int64_t slice = cuts[d + 1] - cuts[d];
    sendDispls[d] = int64_t(send.size());
    if (d != me)
      for (size_t n = 0; n < local.size(); ++n)
        send.insert(send.end(), local[n] + cuts[d], local[n] + cuts[d] + slice);
    sendCounts[d] = int64_t(send.size()) - sendDispls[d];
  }
  // Receive buffer: every other rank's nodes, sliced to this rank's bytes.
  std::vector<std::vector<SumNode>> nodesOf(world);
  std::vector<int64_t> recvCounts(world), recvDispls(world);
  int64_t received = 0;
  for (int s = 0; s < world; ++s) {
    nodesOf[s] = maximalNodes(ranges[s], total);
    recvDispls[s] = received;
    recvCounts[s] = s == me ? 0 : int64_t(nodesOf[s].size()) * mine;
    received += recvCounts[s];
  }
  if (nodesOf[me].size() != local.size()) {
    error = "this rank holds " + std::to_string(local.size()) +
            " partial sums, its micro-batches make " +
            std::to_string(nodesOf[me].size());
    return false;
  }
  std::vector<uint8_t> recv(size_t(std::max<int64_t>(received, 1)));
  if (send.empty())
    send.resize(1);
  if (!comm.allToAll(send.data(), sendCounts, sendDispls, recv.data(),
                     recvCounts, recvDispls, error))
    return false;
  int64_t first = cuts[me];
  TreeSum slice(total, mine, [&](uint8_t *accumulate, const uint8_t *value) {
    add(accumulate, value, first, mine);
  });
  for (int s = 0; s < world; ++s)
    for (size_t n = 0; n < nodesOf[s].size(); ++n)
      slice.push(nodesOf[s][n], s == me
                                    ? local[n] + first
                                    : recv.data() + recvDispls[s] + n * mine);
  if (slice.size() != 1 || !(slice.node(0) == SumNode{0, total})) {
    error = "the micro-batch gradients do not cover the step's " +
            std::to_string(total) + " micro-batches";
    return false;
  }
  if (mine)
    std::memcpy(out, slice.value(0), size_t(mine));
  return true;
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
