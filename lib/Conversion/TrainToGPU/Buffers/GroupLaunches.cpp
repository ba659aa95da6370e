//===- GroupLaunches.cpp - Kernels of a GPU step that share a launch ------===//
//
// mantissa-group-launches: each kernel of a bufferized step joins an earlier
// launch where running it there changes no result (independent, dependent
// thread by thread on one element, or folding partials that the launch's
// lanes computed), marked for the program builder (GpuStepOps.h).
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/GemmMatching.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/GpuStepOps.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Utils/Utils.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::mantissa {
#define GEN_PASS_DEF_GROUPLAUNCHESPASS
#include "mantissa/Conversion/TrainToGPU/Buffers/Passes.h.inc"
} // namespace mlir::mantissa

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// Ops a launch holds at most (each is a branch in its body), and how far
/// back a kernel looks for one to join.
constexpr size_t kMaxMembers = 16, kLookBack = 12;

/// The part of its base buffer a view covers, [start, end) along each of
/// the base's dimensions.
using Region = SmallVector<std::pair<int64_t, int64_t>, 4>;

/// The region of `base` that `view` covers, and the dimension of `base`
/// each of the view's dimensions walks.
struct Box {
  Region region;
  SmallVector<int64_t, 4> dims;
};

/// The box of `base` that `view` covers: all of it, a transpose of a box,
/// or a subview of one with static offsets and sizes and unit strides
/// (a part of a concatenation written in another layout, say); none (it
/// may touch anything) otherwise.
std::optional<Box> getBox(Value view, Value base) {
  auto type = dyn_cast<MemRefType>(base.getType());
  if (!type || !type.hasStaticShape())
    return std::nullopt;
  if (view == base) {
    Box box;
    for (auto [dim, size] : llvm::enumerate(type.getShape())) {
      box.region.push_back({0, size});
      box.dims.push_back(dim);
    }
    return box;
  }
  if (auto transpose = view.getDefiningOp<memref::TransposeOp>()) {
    std::optional<Box> box = getBox(transpose.getIn(), base);
    if (!box)
      return std::nullopt;
    Box result{box->region, {}};
    AffineMap permutation = transpose.getPermutation();
    for (unsigned i = 0; i < permutation.getNumResults(); ++i)
      result.dims.push_back(box->dims[permutation.getDimPosition(i)]);
    return result;
  }
  auto subview = view.getDefiningOp<memref::SubViewOp>();
  if (!subview ||
      subview.getType().getRank() != subview.getSourceType().getRank() ||
      llvm::any_of(subview.getStaticStrides(),
                   [](int64_t stride) { return stride != 1; }))
    return std::nullopt;
  std::optional<Box> box = getBox(subview.getSource(), base);
  if (!box)
    return std::nullopt;
  for (auto [i, offset, size] :
       llvm::enumerate(subview.getStaticOffsets(), subview.getStaticSizes())) {
    if (ShapedType::isDynamic(offset) || ShapedType::isDynamic(size))
      return std::nullopt;
    std::pair<int64_t, int64_t> &range = box->region[box->dims[i]];
    range = {range.first + offset, range.first + offset + size};
  }
  return box;
}

/// The region of `base` that `view` covers (getBox).
std::optional<Region> getRegion(Value view, Value base) {
  std::optional<Box> box = getBox(view, base);
  if (!box)
    return std::nullopt;
  return box->region;
}

/// Whether two regions of a buffer (none: any part) share no element.
bool areDisjoint(const std::optional<Region> &a,
                 const std::optional<Region> &b) {
  if (!a || !b || a->size() != b->size())
    return false;
  for (auto [x, y] : llvm::zip_equal(*a, *b))
    if (x.second <= y.first || y.second <= x.first)
      return true;
  return false;
}

/// Per base buffer, in the order first touched, the regions of it that
/// views cover (none: any part).
using BufferRegions =
    llvm::MapVector<Value, SmallVector<std::optional<Region>, 1>>;

/// The base buffers an op of the program writes and touches (reads or
/// writes), with the regions of each.
struct Touches {
  BufferRegions writes, touches;
  /// For a linalg kernel: its threads' shape (its parallel loops, in
  /// order) and, per buffer, the one element each thread touches of it
  /// (getThreadElement) when every access of the buffer touches one.
  std::optional<SmallVector<int64_t>> threadShape;
  llvm::DenseMap<Value, std::optional<SmallVector<int64_t>>> elements;
  /// For the fold of a split reduction (getTreeFoldParts): the parts each
  /// output folds and the buffer of the partials.
  int64_t foldParts = 0;
  Value partials;

  void add(Value view, bool written) {
    Value base = getBaseBuffer(view);
    std::optional<Region> region = getRegion(view, base);
    touches[base].push_back(region);
    if (written)
      writes[base].push_back(region);
  }
  void merge(const Touches &other) {
    for (const auto &[base, regions] : other.writes)
      llvm::append_range(writes[base], regions);
    for (const auto &[base, regions] : other.touches)
      llvm::append_range(touches[base], regions);
  }
};

/// Whether every region of `a` on `buffer` is disjoint from every one of
/// `b`'s (true where either has none).
bool areDisjointOn(const BufferRegions &a, const BufferRegions &b,
                   Value buffer) {
  auto first = a.find(buffer), second = b.find(buffer);
  if (first == a.end() || second == b.end())
    return true;
  for (const std::optional<Region> &x : first->second)
    for (const std::optional<Region> &y : second->second)
      if (!areDisjoint(x, y))
        return false;
  return true;
}

/// Whether the later of two ops conflicts with the earlier on `buffer`: the
/// later touches what the earlier writes, or writes what the earlier
/// touches (two subviews of the buffer that share no element, as the parts
/// of a concatenation, do not conflict).
bool conflictsOn(const Touches &later, const Touches &earlier, Value buffer) {
  return !areDisjointOn(later.touches, earlier.writes, buffer) ||
         !areDisjointOn(later.writes, earlier.touches, buffer);
}

/// Whether two ops conflict on any buffer.
bool conflict(const Touches &a, const Touches &b) {
  return llvm::any_of(llvm::make_first_range(a.touches),
                      [&](Value buffer) { return conflictsOn(a, b, buffer); });
}

/// The element of `operand` that an iteration of the first `count`
/// parallel loops of `op` (in `parallelDims` order) touches, as [offset in
/// its base buffer, coefficient of each of those loops]; none when another
/// loop (a later parallel loop or a reduction) moves it, or an index is
/// neither a loop nor a constant.
std::optional<SmallVector<int64_t>>
getLoopElement(linalg::LinalgOp op, OpOperand &operand,
               ArrayRef<unsigned> parallelDims, size_t count) {
  SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(getViewLayout(operand.get(), strides, offset)))
    return std::nullopt;
  SmallVector<int64_t> element(1 + count, 0);
  element[0] = offset;
  AffineMap map = op.getMatchingIndexingMap(&operand);
  for (auto [position, expr] : llvm::enumerate(map.getResults())) {
    if (auto constant = dyn_cast<AffineConstantExpr>(expr)) {
      element[0] += constant.getValue() * strides[position];
      continue;
    }
    auto dim = dyn_cast<AffineDimExpr>(expr);
    if (!dim)
      return std::nullopt;
    size_t loop =
        llvm::find(parallelDims, dim.getPosition()) - parallelDims.begin();
    if (loop < count)
      element[1 + loop] += strides[position];
    else if (strides[position] != 0)
      return std::nullopt;
  }
  return element;
}

/// The one element of `operand` that each thread of `op` touches, when
/// there is one (getLoopElement over all its parallel loops, of extents
/// `shape`) and no two threads share it.
std::optional<SmallVector<int64_t>>
getThreadElement(linalg::LinalgOp op, OpOperand &operand,
                 ArrayRef<unsigned> parallelDims, ArrayRef<int64_t> shape) {
  std::optional<SmallVector<int64_t>> element =
      getLoopElement(op, operand, parallelDims, parallelDims.size());
  if (!element)
    return std::nullopt;
  // Distinct threads, distinct elements: the loops' strides nest.
  SmallVector<std::pair<int64_t, int64_t>> loops; // (coefficient, extent)
  for (auto [coefficient, extent] :
       llvm::zip_equal(ArrayRef(*element).drop_front(), shape))
    if (extent > 1)
      loops.push_back({coefficient, extent});
  llvm::sort(loops);
  int64_t covered = 1;
  for (auto [coefficient, extent] : loops) {
    if (coefficient < covered)
      return std::nullopt;
    covered = coefficient * extent;
  }
  return element;
}

/// `element` ([offset, coefficient of each thread loop], loops of extents
/// `shape`) without the loops of extent 1, which no two threads tell apart.
SmallVector<int64_t> withoutUnitLoops(ArrayRef<int64_t> element,
                                      ArrayRef<int64_t> shape) {
  SmallVector<int64_t> result = {element.front()};
  for (auto [position, extent] : llvm::enumerate(shape))
    if (extent != 1)
      result.push_back(element[1 + position]);
  return result;
}

/// How many leading loops of `shape` are the rows `rows` (the same extents
/// in order, loops of extent 1 aside: a keepdim reduction's rows), if some
/// are.
std::optional<size_t> getRowLoops(ArrayRef<int64_t> shape,
                                  ArrayRef<int64_t> rows) {
  SmallVector<int64_t> wanted;
  llvm::copy_if(rows, std::back_inserter(wanted),
                [](int64_t extent) { return extent != 1; });
  size_t matched = 0;
  for (size_t loops = 0;; ++loops) {
    if (matched == wanted.size())
      return loops;
    if (loops == shape.size() ||
        (shape[loops] != 1 && shape[loops] != wanted[matched++]))
      return std::nullopt;
  }
}

/// The one element of `buffer` that every iteration of row r of `op` (its
/// first `rowLoops` parallel loops, of its thread loops' extents `shape`)
/// touches, whatever its columns (its other parallel loops), as [offset,
/// coefficient of each row loop] (withoutUnitLoops); none when an access
/// moves with a column or a reduction loop, or two accesses differ.
std::optional<SmallVector<int64_t>> getRowElement(linalg::LinalgOp op,
                                                  Value buffer,
                                                  ArrayRef<int64_t> shape,
                                                  size_t rowLoops) {
  SmallVector<unsigned> parallelDims;
  for (auto [dim, iterator] : llvm::enumerate(op.getIteratorTypesArray()))
    if (linalg::isParallelIterator(iterator))
      parallelDims.push_back(dim);
  std::optional<SmallVector<int64_t>> result;
  for (OpOperand &operand : op->getOpOperands()) {
    if (!isa<MemRefType>(operand.get().getType()) ||
        getBaseBuffer(operand.get()) != buffer)
      continue;
    std::optional<SmallVector<int64_t>> element =
        getLoopElement(op, operand, parallelDims, rowLoops);
    if (!element)
      return std::nullopt;
    SmallVector<int64_t> row =
        withoutUnitLoops(*element, shape.take_front(rowLoops));
    if (result && *result != row)
      return std::nullopt;
    result = row;
  }
  return result;
}

/// Where the accesses of `op` to `buffer` fall for row r (its first
/// `rowLoops` parallel loops, of its thread loops' extents `shape`): all
/// within [start(r), start(r) + span], start(r) = offset + the row loops'
/// coefficients times r (`row`: withoutUnitLoops), the same for every
/// access, and span what its other loops (parallel or reduction) add at
/// most; none when an access is not a loop or a constant per dimension, or
/// the rows' ranges may overlap (each row loop's coefficient must exceed
/// what the span and the faster row loops cover).
struct RowAccess {
  SmallVector<int64_t> row;
  int64_t span = 0;
};
std::optional<RowAccess> getRowAccess(linalg::LinalgOp op, Value buffer,
                                      ArrayRef<int64_t> shape,
                                      size_t rowLoops) {
  SmallVector<unsigned> rowDims;
  for (auto [dim, iterator] : llvm::enumerate(op.getIteratorTypesArray()))
    if (linalg::isParallelIterator(iterator) && rowDims.size() < rowLoops)
      rowDims.push_back(dim);
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  std::optional<RowAccess> result;
  for (OpOperand &operand : op->getOpOperands()) {
    if (!isa<MemRefType>(operand.get().getType()) ||
        getBaseBuffer(operand.get()) != buffer)
      continue;
    SmallVector<int64_t> strides;
    int64_t offset;
    if (failed(getViewLayout(operand.get(), strides, offset)))
      return std::nullopt;
    SmallVector<int64_t> coefficients(op.getNumLoops(), 0);
    AffineMap map = op.getMatchingIndexingMap(&operand);
    for (auto [position, expr] : llvm::enumerate(map.getResults())) {
      if (auto constant = dyn_cast<AffineConstantExpr>(expr)) {
        offset += constant.getValue() * strides[position];
        continue;
      }
      auto dim = dyn_cast<AffineDimExpr>(expr);
      if (!dim || strides[position] < 0)
        return std::nullopt;
      coefficients[dim.getPosition()] += strides[position];
    }
    RowAccess access;
    SmallVector<int64_t> row = {offset};
    for (unsigned dim : rowDims)
      row.push_back(coefficients[dim]);
    access.row = withoutUnitLoops(row, shape.take_front(rowLoops));
    for (auto [dim, coefficient] : llvm::enumerate(coefficients))
      if (!llvm::is_contained(rowDims, dim))
        access.span += coefficient * (ranges[dim] - 1);
    if (result && (result->row != access.row))
      return std::nullopt;
    if (!result || result->span < access.span)
      result = access;
  }
  if (!result)
    return std::nullopt;
  // Rows apart: the row loops' strides nest above the span.
  SmallVector<std::pair<int64_t, int64_t>> loops; // (coefficient, extent)
  for (auto [dim, extent] : llvm::zip(rowDims, shape.take_front(rowLoops)))
    if (extent > 1)
      loops.push_back({result->row[1 + loops.size()], extent});
  llvm::sort(loops);
  int64_t covered = result->span + 1;
  for (auto [coefficient, extent] : loops) {
    if (coefficient < covered)
      return std::nullopt;
    covered = coefficient * extent;
  }
  return result;
}

/// What the launch for `op` touches, with its threads' elements when it
/// is a kernel that reads and writes memory only through the operands of
/// one linalg op.
Touches getTouches(Operation *op, const GpuStepOpRole &role) {
  Touches result;
  GpuOpBuffers buffers = getGpuOpBuffers(op, role);
  for (Value view : buffers.writes)
    result.add(view, true);
  for (Value view : buffers.reads)
    result.add(view, false);
  if (role.kind != GpuStepOpRole::Kind::Kernel)
    return result;
  if (std::optional<int64_t> parts = getTreeFoldParts(op)) {
    result.foldParts = *parts;
    result.partials = getBaseBuffer(op->getOperand(0));
  }
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  if (!linalgOp || llvm::any_of(buffers.reads, [&](Value view) {
        return !llvm::is_contained(op->getOperands(), view);
      }))
    return result;
  SmallVector<int64_t> ranges = linalgOp.getStaticLoopRanges();
  SmallVector<unsigned> parallelDims;
  SmallVector<int64_t> shape;
  for (auto [dim, iterator] : llvm::enumerate(linalgOp.getIteratorTypesArray()))
    if (linalg::isParallelIterator(iterator)) {
      parallelDims.push_back(dim);
      shape.push_back(ranges[dim]);
    }
  if (llvm::any_of(shape, ShapedType::isDynamic))
    return result;
  result.threadShape = shape;
  for (OpOperand &operand : op->getOpOperands()) {
    if (!isa<MemRefType>(operand.get().getType()))
      continue;
    std::optional<SmallVector<int64_t>> element =
        getThreadElement(linalgOp, operand, parallelDims, shape);
    auto [entry, inserted] =
        result.elements.try_emplace(getBaseBuffer(operand.get()), element);
    if (!inserted && entry->second != element)
      entry->second = std::nullopt;
  }
  return result;
}

/// A launch being formed: its members in order, each with its thread
/// stride, and what they touch together.
struct Launch {
  /// Its op, the stride of its threads and, for a member that runs by
  /// rows, the columns of a row (0: it does not).
  struct Member {
    Operation *op;
    int64_t stride, columns = 0;

    /// Whether it runs iteration t on thread t: a member by rows with one
    /// column per lane does too (after its barrier).
    bool runsOnItsOwnThreads() const {
      return columns == 0 ? stride == 1 : columns == stride;
    }
  };
  SmallVector<Member> members;
  /// Whether kernels may join it (not a GEMM nor the attention kernels).
  bool joinable = false;
  Touches touches;
};

class LaunchGrouper {
public:
  void add(Operation *op, const GpuStepOpRole &role);
  void mark(MLIRContext *context) const;

private:
  /// Whether `op` may run in `launch` although it depends on it: in every
  /// buffer where they conflict, each thread of both touches only one
  /// element, the same in both, and no other thread touches it. Then the
  /// thread mapping it runs with there (its partners', all alike).
  std::optional<Launch::Member>
  dependsOnlyThreadLocally(Operation *op, const Launch &launch) const;
  /// Whether `op` folds the partials that a member of `launch` computed,
  /// thread t partial t: it may then run in that launch after it, output u
  /// on the threads from u * parts, where each lane loads the partial that
  /// it computed itself and the warp's shuffles do the rest. Anything else
  /// of the launch it conflicts with must be a member that nothing else of
  /// the launch conflicts with, touching only what `op`'s thread for the
  /// same iteration touches (the output's fill): the indices of those
  /// members, which move to the end of the launch, onto the fold's threads.
  std::optional<SmallVector<size_t>>
  foldsPartialsOf(Operation *op, const Launch &launch) const;
  /// Whether `op` may run in `launch` by rows: it is a linalg op whose
  /// parallel loops are the rows of a fold in the launch (its outputs) and
  /// then columns, and where it conflicts with the launch, it only reads
  /// what the threads of a row wrote for that row (the fold's output, the
  /// ops on its threads), the same element for every column. Row r then
  /// runs on the fold's lanes for r after a barrier of the block, each
  /// lane a strided share of the columns: the row's sums reach the op
  /// without a launch in between. Then its mapping (the fold's stride, the
  /// columns of a row). Where a row has one column per lane (the partials
  /// of a second reduction reading the first's result: a LayerNorm's
  /// variance, a softmax's sum after its max), it may also depend thread
  /// by thread on members on their own threads.
  std::optional<Launch::Member> readsRowsOf(Operation *op,
                                            const Launch &launch) const;

  llvm::DenseMap<Operation *, Touches> touches;
  std::vector<Launch> launches;
};

void LaunchGrouper::add(Operation *op, const GpuStepOpRole &role) {
  using Kind = GpuStepOpRole::Kind;
  if (role.kind != Kind::Kernel) {
    Launch launch;
    launch.members.push_back({op, 1});
    launch.touches = getTouches(op, role);
    launches.push_back(std::move(launch));
    return;
  }
  const Touches &own = touches[op] = getTouches(op, role);
  // The latest launch this kernel can join, looking back past what it is
  // independent of, and the threads it runs on there: independent of it,
  // its own.
  Launch *target = nullptr;
  Launch::Member mapping{op, std::max<int64_t>(1, own.foldParts)};
  for (size_t back = 0; back < std::min(kLookBack, launches.size()); ++back) {
    Launch &other = launches[launches.size() - 1 - back];
    bool independent =
        llvm::none_of(llvm::make_first_range(own.touches), [&](Value buffer) {
          return conflictsOn(own, other.touches, buffer);
        });
    bool roomy = other.joinable && other.members.size() < kMaxMembers;
    if (!independent) {
      if (!roomy)
        break;
      if (std::optional<Launch::Member> local =
              dependsOnlyThreadLocally(op, other)) {
        // On the threads of the members it depends on.
        target = &other;
        mapping = *local;
      } else if (std::optional<SmallVector<size_t>> moved =
                     foldsPartialsOf(op, other)) {
        target = &other;
        mapping.stride = own.foldParts;
        // The output's fill, independent of the rest of the launch, last,
        // on the fold's threads.
        for (size_t position : llvm::reverse(*moved)) {
          Launch::Member member = other.members[position];
          other.members.erase(other.members.begin() + position);
          member.stride = mapping.stride;
          other.members.push_back(member);
        }
      } else if (std::optional<Launch::Member> rows = readsRowsOf(op, other)) {
        target = &other;
        mapping = *rows;
      }
      break;
    }
    if (roomy) {
      target = &other;
      break;
    }
  }
  if (!target) {
    Launch launch;
    launch.members.push_back(mapping);
    launch.joinable = true;
    launch.touches = own;
    launches.push_back(std::move(launch));
    return;
  }
  target->members.push_back(mapping);
  target->touches.merge(own);
}

std::optional<Launch::Member>
LaunchGrouper::dependsOnlyThreadLocally(Operation *op,
                                        const Launch &launch) const {
  const Touches &own = touches.find(op)->second;
  if (!own.threadShape)
    return std::nullopt;
  // A fold's threads are fixed (a tree over its parts); any other kernel
  // takes its partners' stride.
  int64_t ownStride = std::max<int64_t>(1, own.foldParts);
  std::optional<Launch::Member> partner;
  for (const Launch::Member &member : launch.members) {
    const Touches &other = touches.find(member.op)->second;
    for (Value buffer : llvm::make_first_range(own.touches)) {
      if (!conflictsOn(own, other, buffer))
        continue;
      // The same threads, each touching one element that no other thread
      // touches, the same in both: thread t runs the earlier member's
      // iteration, then this op's, on that element alone.
      // (A member by rows on its own threads counts as one.)
      Launch::Member mapping = member;
      if (mapping.runsOnItsOwnThreads())
        mapping = {member.op, 1};
      if (other.threadShape != own.threadShape ||
          (partner && (partner->stride != mapping.stride ||
                       partner->columns != mapping.columns)) ||
          (ownStride != 1 && ownStride != mapping.stride))
        return std::nullopt;
      partner = mapping;
      auto mine = own.elements.find(buffer);
      auto theirs = other.elements.find(buffer);
      if (mine == own.elements.end() || theirs == other.elements.end() ||
          !mine->second || mine->second != theirs->second)
        return std::nullopt;
    }
  }
  if (!partner)
    return Launch::Member{op, ownStride};
  return Launch::Member{op, partner->stride, partner->columns};
}

std::optional<SmallVector<size_t>>
LaunchGrouper::foldsPartialsOf(Operation *op, const Launch &launch) const {
  const Touches &own = touches.find(op)->second;
  int64_t parts = own.foldParts;
  if (parts < 2 || !own.threadShape)
    return std::nullopt;
  // Thread t of the partials' generic computes partial t: its threads are
  // the outputs' then the part, and it writes [output..., part] densely.
  SmallVector<int64_t> partialThreads(*own.threadShape);
  partialThreads.push_back(parts);
  SmallVector<int64_t> dense(1 + partialThreads.size(), 0);
  int64_t stride = 1;
  for (size_t dim = partialThreads.size(); dim-- > 0;) {
    dense[1 + dim] = stride;
    stride *= partialThreads[dim];
  }
  dense = withoutUnitLoops(dense, partialThreads);
  bool computed = false;
  SmallVector<size_t> moved;
  for (auto [index, member] : llvm::enumerate(launch.members)) {
    const Touches &other = touches.find(member.op)->second;
    bool conflicts = false;
    for (Value buffer : llvm::make_first_range(own.touches)) {
      if (!conflictsOn(own, other, buffer))
        continue;
      conflicts = true;
      if (!member.runsOnItsOwnThreads() || !other.threadShape)
        return std::nullopt;
      auto element = other.elements.find(buffer);
      if (element == other.elements.end() || !element->second)
        return std::nullopt;
      if (buffer != own.partials) {
        // Thread-local to the fold (the output's fill).
        auto mine = own.elements.find(buffer);
        if (*other.threadShape != *own.threadShape ||
            mine == own.elements.end() || mine->second != element->second)
          return std::nullopt;
        continue;
      }
      if (*other.threadShape != partialThreads ||
          withoutUnitLoops(*element->second, partialThreads) != dense)
        return std::nullopt;
      computed = true;
    }
    if (conflicts && !other.writes.contains(own.partials))
      moved.push_back(index);
  }
  // What moves must not conflict with anything else of the launch.
  for (size_t index : moved) {
    const Touches &mover = touches.find(launch.members[index].op)->second;
    for (auto [other, member] : llvm::enumerate(launch.members))
      if (other != index && conflict(mover, touches.find(member.op)->second))
        return std::nullopt;
  }
  if (!computed)
    return std::nullopt;
  return moved;
}

std::optional<Launch::Member>
LaunchGrouper::readsRowsOf(Operation *op, const Launch &launch) const {
  const Touches &own = touches.find(op)->second;
  auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
  if (!linalgOp || !own.threadShape || own.foldParts)
    return std::nullopt;
  ArrayRef<int64_t> shape = *own.threadShape;
  std::optional<Launch::Member> rows;
  std::optional<SmallVector<int64_t>> rowShape;
  size_t rowLoops = 0;
  // Whether it depends thread by thread on a member on its own threads.
  bool local = false;
  // Members on their own threads that wrote what it reads, and the buffer.
  SmallVector<std::pair<Operation *, Value>> rowWriters;
  for (const Launch::Member &member : launch.members) {
    const Touches &other = touches.find(member.op)->second;
    for (Value buffer : llvm::make_first_range(own.touches)) {
      if (!conflictsOn(own, other, buffer))
        continue;
      if (member.runsOnItsOwnThreads() &&
          other.threadShape == own.threadShape) {
        auto mine = own.elements.find(buffer);
        auto theirs = other.elements.find(buffer);
        if (mine == own.elements.end() || theirs == other.elements.end() ||
            !mine->second || mine->second != theirs->second)
          return std::nullopt;
        local = true;
        continue;
      }
      if (own.writes.contains(buffer))
        return std::nullopt;
      // Written by a member on its own threads, a row's lanes side by side
      // (partials that computed the row's elements as they folded them):
      // checked once the rows are known.
      if (member.stride == 1 && member.columns == 0 && other.threadShape) {
        rowWriters.push_back({member.op, buffer});
        continue;
      }
      // Only reads of what the lanes of one row wrote, all members on the
      // same lanes.
      if (member.stride < 2 || member.columns != 0 || !other.threadShape ||
          (rows && rows->stride != member.stride) ||
          (rowShape && *rowShape != *other.threadShape))
        return std::nullopt;
      if (!rowShape) {
        // Its rows first, then at least one column.
        std::optional<size_t> loops = getRowLoops(shape, *other.threadShape);
        if (!loops || *loops == shape.size())
          return std::nullopt;
        rowLoops = *loops;
        rowShape = *other.threadShape;
        rows = Launch::Member{op, member.stride};
      }
      auto written = other.elements.find(buffer);
      if (written == other.elements.end() || !written->second ||
          getRowElement(linalgOp, buffer, shape, rowLoops) !=
              withoutUnitLoops(*written->second, *rowShape))
        return std::nullopt;
    }
  }
  if (!rows)
    return std::nullopt;
  // Such a member's threads must be the rows' lanes (its thread loops the
  // rows, then as many as a row has lanes), and what it wrote for row r
  // must be all that this op reads there: the same rows of the buffer,
  // apart from every other row's.
  for (auto [writer, buffer] : rowWriters) {
    const Touches &other = touches.find(writer)->second;
    std::optional<size_t> loops = getRowLoops(*other.threadShape, *rowShape);
    auto writerOp = dyn_cast<linalg::LinalgOp>(writer);
    if (!loops || !writerOp)
      return std::nullopt;
    int64_t lanes = 1;
    for (int64_t extent : ArrayRef(*other.threadShape).drop_front(*loops))
      lanes *= extent;
    std::optional<RowAccess> written =
        getRowAccess(writerOp, buffer, *other.threadShape, *loops);
    std::optional<RowAccess> read =
        getRowAccess(linalgOp, buffer, shape, rowLoops);
    if (lanes != rows->stride || !written || !read || written->row != read->row)
      return std::nullopt;
  }
  rows->columns = 1;
  for (int64_t extent : shape.drop_front(rowLoops))
    rows->columns *= extent;
  if (local && !rows->runsOnItsOwnThreads())
    return std::nullopt;
  return rows;
}

void LaunchGrouper::mark(MLIRContext *context) const {
  Builder builder(context);
  int64_t number = 0;
  for (const Launch &launch : launches) {
    if (!launch.joinable)
      continue;
    for (auto [index, member] : llvm::enumerate(launch.members)) {
      member.op->setAttr(kGpuLaunchAttr, builder.getI64IntegerAttr(number));
      member.op->setAttr(kGpuLaunchMemberAttr,
                         builder.getI64IntegerAttr(index));
      member.op->setAttr(kGpuThreadStrideAttr,
                         builder.getI64IntegerAttr(member.stride));
      if (member.columns != 0)
        member.op->setAttr(kGpuRowColumnsAttr,
                           builder.getI64IntegerAttr(member.columns));
    }
    ++number;
  }
}

struct GroupLaunchesPass
    : public mlir::mantissa::impl::GroupLaunchesPassBase<GroupLaunchesPass> {
  void runOnOperation() override {
    func::FuncOp function = getOperation();
    if (function.isExternal())
      return;
    Block &body = function.getBody().front();
    FailureOr<llvm::DenseMap<Operation *, GpuStepOpRole>> roles =
        getGpuStepOpRoles(body);
    if (failed(roles))
      return signalPassFailure();
    LaunchGrouper grouper;
    for (Operation &op : body) {
      const GpuStepOpRole &role = roles->find(&op)->second;
      if (role.kind != GpuStepOpRole::Kind::Free &&
          role.kind != GpuStepOpRole::Kind::InGemm)
        grouper.add(&op, role);
    }
    grouper.mark(function.getContext());
  }
};

} // namespace
