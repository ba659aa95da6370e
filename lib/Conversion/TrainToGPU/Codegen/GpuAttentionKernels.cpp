//===- GpuAttentionKernels.cpp - Fused attention on the tensor cores ------===//
//
// Each warp owns 16 rows (queries in the forward and the query backward,
// keys in the key/value backward) and walks the other side 32 at a time,
// the warps of a block consecutive rows of one sequence. Matrix products
// are mma.sync m16n8k16 with bf16 operands and fp32 sums, in the layouts
// the PTX ISA gives (lane = 4 * group + thread-in-group):
//
//   A (16 x 16, row-major)  register r: row group + 8 * (r % 2), columns
//                           2 * thread + 8 * (r / 2) and the next one;
//   B (16 x 8, "col")       register r: rows 2 * thread + 8 * r and the
//                           next one, column group;
//   C (16 x 8, fp32)        value j: row group + 8 * (j / 2), column
//                           2 * thread + j % 2.
//
// A warp's own rows are A fragments loaded once from global memory. The
// other side's 32 rows of a step, which every warp of the block reads, the
// block copies into shared tiles, from which the warps load their B
// fragments with ldmatrix (transposed for the products whose B rows are
// keys or queries), between barriers. Two C fragments side by side are,
// rounded to bf16 and paired, the A fragment of the product that follows
// (scores, then probabilities times values), so no score leaves the
// registers. Where 16 does not divide the head dimension, its last 8
// columns are a k of 16 whose other half is zero registers (A's registers
// 2 and 3, B's register 1), and an 8-column tile of the outputs without a
// neighbour takes its B fragments for the step's 32 rows from one
// ldmatrix. The rows of a C fragment are shared by the 4 lanes of a group,
// whose row maximum and sum take two xor shuffles. A step of the loop that
// the mask closes entirely (above the causal diagonal) is skipped by the
// whole warp (a ballot of the lanes' mask values), and its copy by the
// block where it is closed to every warp, so that causal attention does
// half the work. Rows and columns past the end of a sequence that 16 x 8
// or 32 does not divide load its last position, are closed by the mask and
// are not stored.
//
//===----------------------------------------------------------------------===//

#include "GpuAttentionKernels.h"
#include "GpuKernels.h"
#include "GpuVectorAccesses.h"
#include "mantissa/Transforms/GPU/FusedAttention.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/FormatVariadic.h"
#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::mantissa;

namespace {

constexpr int64_t kTileRows = kAttentionTileRows;
constexpr int64_t kStepColumns = kAttentionStepColumns;
/// m16n8 fragments across one step.
constexpr int64_t kStepFragments = kStepColumns / 8;

/// bf16 after each row of a shared tile (16 bytes): rows then start 4
/// banks apart, so that the 8 rows of a matrix ldmatrix reads (16 bytes
/// each) are in different banks.
constexpr int64_t kTilePadElements = 8;
/// The operands a step stages in shared tiles (k and v, or q and dout).
constexpr int64_t kStagedOperands = 2;
/// bf16 columns in a 16-byte access.
constexpr int64_t kVectorColumns = kVectorAccessBytes / 2;
/// Whether every row of `operand` (each batch, head and position) starts
/// at a multiple of `multiple` elements of its buffer.
bool rowsStartAtMultiplesOf(const AttentionOperand &operand, int64_t multiple) {
  return operand.offset % multiple == 0 &&
         llvm::all_of(ArrayRef(operand.strides).take_front(3),
                      [&](int64_t stride) { return stride % multiple == 0; });
}

/// An fp32 C (or D) fragment: the lane's four values.
using Fragment = std::array<Value, 4>;
/// A warp's 16 x 32 step: four fragments side by side.
using Tile = std::array<Fragment, kStepFragments>;
/// Whether the mask closes each value of a step (i1).
using Closed = std::array<std::array<Value, 4>, kStepFragments>;
/// A step's mask: the values it closes (a bool mask's, and those past the
/// sequence) and, for an additive mask (fp32), what it adds to each score.
struct StepMask {
  Closed closed;
  std::optional<Tile> bias;
};

/// An index as a value (none: 0) plus a constant, so that the elements of
/// a fragment share their value's address arithmetic.
struct Index {
  Value value;
  int64_t constant = 0;
};
Index plus(Index index, int64_t constant) {
  return {index.value, index.constant + constant};
}

/// Builds one attention kernel's body: the warp's lane, its batch and
/// head, and the fragment loads, products and row reductions of
/// docs/gpu-step.md's fused attention.
class AttentionBuilder {
public:
  AttentionBuilder(OpBuilder &builder, Location loc,
                   const AttentionKernelSpec &spec)
      : b(builder), loc(loc), spec(spec) {}

  Value index(int64_t value) {
    return b.create<arith::ConstantIndexOp>(loc, value);
  }
  Value f32(double value) {
    return b.create<arith::ConstantFloatOp>(loc, APFloat(float(value)),
                                            b.getF32Type());
  }
  Value add(Value x, int64_t value) {
    return value == 0 ? x : b.create<arith::AddIOp>(loc, x, index(value));
  }
  Value addf(Value x, Value y) { return b.create<arith::AddFOp>(loc, x, y); }
  Value mulf(Value x, Value y) { return b.create<arith::MulFOp>(loc, x, y); }
  Value subf(Value x, Value y) { return b.create<arith::SubFOp>(loc, x, y); }
  Value maxf(Value x, Value y) {
    return b.create<arith::MaximumFOp>(loc, x, y);
  }
  /// e^x as 2^(x log2 e): one ex2.approx on the GPU (2 ulp), where
  /// libdevice's expf takes six instructions for a value that is rounded
  /// to bf16 or summed in fp32 next.
  Value exp(Value x) {
    return b.create<math::Exp2Op>(loc, mulf(x, f32(M_LOG2E)));
  }
  Value select(Value c, Value x, Value y) {
    return b.create<arith::SelectOp>(loc, c, x, y);
  }

  /// Whether the sequence leaves part of the last warp's rows or of the
  /// last step's columns empty.
  /// A block's warps take consecutive tiles of rows of one sequence, so
  /// that rows past the end are the last block's whole warps too.
  bool ragged() const {
    return spec.sequence % (kTileRows * warpsPerBlock) != 0 ||
           spec.sequence % kStepColumns != 0;
  }
  Value materialize(Index position) {
    return add(position.value ? position.value : index(0), position.constant);
  }
  /// A position of the sequence (a row or column) as loads take it: past
  /// the sequence's end, the last position, at most `last` from the end
  /// (a pair's first element), whose values nothing uses (such columns are
  /// closed, such rows not stored).
  Index inSequence(Index position, int64_t last = 1) {
    if (!ragged())
      return position;
    return {b.create<arith::MinUIOp>(loc, materialize(position),
                                     index(spec.sequence - last))};
  }
  /// `position` compared with the sequence's length (i1): uge, past its
  /// end; ult, in it.
  Value compareWithSequence(Index position, arith::CmpIPredicate predicate) {
    return b.create<arith::CmpIOp>(loc, predicate, materialize(position),
                                   index(spec.sequence));
  }
  Value pastSequence(Index position) {
    return compareWithSequence(position, arith::CmpIPredicate::uge);
  }
  /// Runs `body` at the builder's point for rows in the sequence only.
  void inSequenceOnly(Index row, llvm::function_ref<void()> body) {
    if (!ragged()) {
      body();
      return;
    }
    auto guard = b.create<scf::IfOp>(
        loc, compareWithSequence(row, arith::CmpIPredicate::ult),
        /*withElseRegion=*/false);
    OpBuilder::InsertionGuard insertion(b);
    b.setInsertionPoint(guard.thenBlock()->getTerminator());
    body();
  }

  /// The warp's lane, group and thread in group; its batch and head from
  /// the warp's sequence (of batch * heads).
  void setLane(Value thread) {
    threadInBlock = thread;
    lane = b.create<arith::RemUIOp>(loc, thread, index(32));
    warpInBlock = b.create<arith::DivUIOp>(loc, thread, index(32));
    group = b.create<arith::DivUIOp>(loc, lane, index(4));
    inGroup = b.create<arith::RemUIOp>(loc, lane, index(4));
    twice = b.create<arith::MulIOp>(loc, inGroup, index(2));
  }
  void setSequence(Value sequence) {
    batch = b.create<arith::DivUIOp>(loc, sequence, index(spec.heads));
    head = b.create<arith::RemUIOp>(loc, sequence, index(spec.heads));
    for (auto [operand, buffer] : buffers) {
      Value base = index(operand->offset);
      for (auto [value, stride] : {std::pair{batch, operand->strides[0]},
                                   std::pair{head, operand->strides[1]}})
        if (stride != 0)
          base = b.create<arith::AddIOp>(
              loc, base, b.create<arith::MulIOp>(loc, value, index(stride)));
      sequenceBase[operand] = base;
    }
  }

  /// The position of element (row, column) of `operand` in its buffer: the
  /// warp's sequence's base, the values' terms, then the constants (so that
  /// the elements of a fragment share the terms, which the clean-up's CSE
  /// merges, and the constants fold into the loads' addresses).
  Value at(const AttentionOperand &operand, Index row, Index column) {
    Value position = sequenceBase.lookup(&operand);
    for (auto [value, stride] : {std::pair{row.value, operand.strides[2]},
                                 std::pair{column.value, operand.strides[3]}})
      if (value && stride != 0)
        position = b.create<arith::AddIOp>(
            loc, position, b.create<arith::MulIOp>(loc, value, index(stride)));
    return add(position, row.constant * operand.strides[2] +
                             column.constant * operand.strides[3]);
  }
  Value buffer(const AttentionOperand &operand) {
    return buffers.lookup(&operand);
  }
  /// The element as it is stored (bf16, f32 for lse and delta, i1 for the
  /// mask).
  Value load(const AttentionOperand &operand, Index row, Index column) {
    return b.create<memref::LoadOp>(loc, buffer(operand),
                                    at(operand, row, column));
  }
  void store(Value value, const AttentionOperand &operand, Index row,
             Index column) {
    b.create<memref::StoreOp>(loc, value, buffer(operand),
                              at(operand, row, column));
  }
  /// A bf16 element as f32.
  Value loadF32(const AttentionOperand &operand, Index row, Index column) {
    return widen(load(operand, row, column));
  }
  Value widen(Value value) {
    if (value.getType().isF32())
      return value;
    return b.create<arith::ExtFOp>(loc, b.getF32Type(), value);
  }
  /// Two bf16 values in one register, the first in the low half (the
  /// element of the lower index, as mma.sync takes them): one move in the
  /// PTX (mov.b32 {lo, hi}).
  Value pack(Value low, Value high) {
    Value pair = b.create<vector::FromElementsOp>(
        loc, VectorType::get({2}, b.getBF16Type()), ValueRange{low, high});
    Value word = b.create<vector::BitCastOp>(
        loc, VectorType::get({1}, b.getI32Type()), pair);
    return b.create<vector::ExtractOp>(loc, word, ArrayRef<int64_t>{0});
  }
  /// Two f32 rounded to bf16 and packed: one cvt.rn.bf16x2.f32.
  Value packF32(Value low, Value high) {
    Value pair = b.create<vector::FromElementsOp>(
        loc, VectorType::get({2}, b.getF32Type()), ValueRange{low, high});
    Value rounded = b.create<arith::TruncFOp>(
        loc, VectorType::get({2}, b.getBF16Type()), pair);
    Value word = b.create<vector::BitCastOp>(
        loc, VectorType::get({1}, b.getI32Type()), rounded);
    return b.create<vector::ExtractOp>(loc, word, ArrayRef<int64_t>{0});
  }
  /// x rounded to bf16 and widened back.
  Value roundBf16(Value value) {
    return widen(b.create<arith::TruncFOp>(loc, b.getBF16Type(), value));
  }
  /// Elements (row, column) and (row, column + 1): one 32-bit load when the
  /// operand has pairs (column even, as every fragment's is).
  Value pairAcross(const AttentionOperand &operand, Index row, Index column) {
    if (!pairs.count(&operand))
      return pack(load(operand, row, column),
                  load(operand, row, plus(column, 1)));
    return b.create<memref::LoadOp>(
        loc, pairs.lookup(&operand),
        ValueRange{
            b.create<arith::ShRUIOp>(loc, at(operand, row, column), index(1))});
  }
  /// Stores x and y, rounded to bf16, at (row, column) and (row, column +
  /// 1): one 32-bit store when the operand has pairs.
  void storePair(Value x, Value y, const AttentionOperand &operand, Index row,
                 Index column) {
    inSequenceOnly(row,
                   [&] { storePairInSequence(x, y, operand, row, column); });
  }
  void storePairInSequence(Value x, Value y, const AttentionOperand &operand,
                           Index row, Index column) {
    if (pairs.count(&operand)) {
      b.create<memref::StoreOp>(loc, packF32(x, y), pairs.lookup(&operand),
                                ValueRange{b.create<arith::ShRUIOp>(
                                    loc, at(operand, row, column), index(1))});
      return;
    }
    Type bf16 = b.getBF16Type();
    store(b.create<arith::TruncFOp>(loc, bf16, x), operand, row, column);
    store(b.create<arith::TruncFOp>(loc, bf16, y), operand, row,
          plus(column, 1));
  }
  /// Two bf16 zeros in one register.
  Value zeroPair() { return b.create<arith::ConstantIntOp>(loc, 0, 32); }
  /// Whether the k = 16 columns from column0 of the head dimension are its
  /// last 8, padded with zeros (heads of 8, 24, ...).
  bool halfChunk(int64_t column0) const { return column0 + 8 == spec.headDim; }
  /// The A fragment of rows row0..+16, columns column0..+16 of `operand`;
  /// columns past the head dimension (a half chunk) are zeros.
  std::array<Value, 4> loadA(const AttentionOperand &operand, Value row0,
                             int64_t column0) {
    Index row{b.create<arith::AddIOp>(loc, row0, group)};
    Index column{twice, column0};
    Index upper = inSequence(row), lower = inSequence(plus(row, 8));
    if (halfChunk(column0))
      return {pairAcross(operand, upper, column),
              pairAcross(operand, lower, column), zeroPair(), zeroPair()};
    return {pairAcross(operand, upper, column),
            pairAcross(operand, lower, column),
            pairAcross(operand, upper, plus(column, 8)),
            pairAcross(operand, lower, plus(column, 8))};
  }
  /// The A fragments of the warp's 16 rows from row0, one per 16 columns
  /// of the head dimension (the last one half zeros where 16 does not
  /// divide it).
  SmallVector<std::array<Value, 4>> loadRows(const AttentionOperand &operand,
                                             Value row0) {
    SmallVector<std::array<Value, 4>> rows;
    for (int64_t column = 0; column < spec.headDim; column += 16)
      rows.push_back(loadA(operand, row0, column));
    return rows;
  }
  /// Where matrices 1 (`odd`: i % 2) and 2 (`high`: i / 2) of an
  /// ldmatrix start in the tile, from matrix 0: rows and columns.
  struct MatrixSteps {
    int64_t oddRows, oddColumns, highRows, highColumns;
  };
  /// Four 8 x 8 matrices of bf16 of a shared tile in one ldmatrix: matrix
  /// i from row `row` + (i % 2, i / 2 steps), column `column` + ... of the
  /// tile of `first`; lane l gives the address of row l % 8 of matrix
  /// l / 8. Register i of a lane is matrix i's row group, columns
  /// 2 thread and the next, or, `transposed`, its rows 2 thread and the
  /// next of column group: the B fragment of the matrix, or of its
  /// transpose.
  std::array<Value, 4> loadMatrices(int64_t first, int64_t row, int64_t column,
                                    MatrixSteps steps, bool transposed) {
    // The lane's part: the same in every ldmatrix with these steps.
    auto times = [&](Value x, int64_t y) {
      return b.create<arith::MulIOp>(loc, x, index(y)).getResult();
    };
    Value odd = b.create<arith::AndIOp>(
        loc, b.create<arith::ShRUIOp>(loc, lane, index(3)), index(1));
    Value high = b.create<arith::ShRUIOp>(loc, lane, index(4));
    Value inMatrix = b.create<arith::AndIOp>(loc, lane, index(7));
    int64_t rowElements = tileRowElements();
    Value position = b.create<arith::AddIOp>(
        loc,
        b.create<arith::AddIOp>(
            loc, times(odd, steps.oddRows * rowElements + steps.oddColumns),
            times(high, steps.highRows * rowElements + steps.highColumns)),
        times(inMatrix, rowElements));
    position = add(position, first + row * rowElements + column);
    auto type = VectorType::get({4, 2}, b.getBF16Type());
    Value matrices = b.create<nvgpu::LdMatrixOp>(
        loc, type, tiles, ValueRange{position}, transposed, /*numTiles=*/4);
    std::array<Value, 4> registers;
    for (int64_t i = 0; i < 4; ++i) {
      Value pair =
          b.create<vector::ExtractOp>(loc, matrices, ArrayRef<int64_t>{i});
      Value word = b.create<vector::BitCastOp>(
          loc, VectorType::get({1}, b.getI32Type()), pair);
      registers[i] =
          b.create<vector::ExtractOp>(loc, word, ArrayRef<int64_t>{0});
    }
    return registers;
  }
  /// D = A B + C on the tensor cores, one warp-wide mma.sync.
  Fragment mma(ArrayRef<Value> a, ArrayRef<Value> bFragment,
               const Fragment &c) {
    SmallVector<Value> operands(a);
    llvm::append_range(operands, bFragment);
    llvm::append_range(operands, c);
    Type f32Type = b.getF32Type();
    auto type = LLVM::LLVMStructType::getLiteral(
        b.getContext(), {f32Type, f32Type, f32Type, f32Type});
    auto product = b.create<LLVM::InlineAsmOp>(
        loc, type, operands, kMmaBf16Asm, "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f",
        /*has_side_effects=*/false, /*is_align_stack=*/false,
        LLVM::AsmDialectAttr(), ArrayAttr());
    Fragment d;
    for (int64_t j = 0; j < 4; ++j)
      d[j] = b.create<LLVM::ExtractValueOp>(loc, product.getResult(0), j);
    return d;
  }
  Fragment zeros() {
    Value zero = f32(0.0);
    return {zero, zero, zero, zero};
  }
  /// The A fragment (k = the step's columns 16 * half ..) of a tile's
  /// values rounded to bf16: C fragments 2 * half and 2 * half + 1.
  std::array<Value, 4> tileAsA(const Tile &tile, int64_t half) {
    const Fragment &left = tile[2 * half], &right = tile[2 * half + 1];
    return {packF32(left[0], left[1]), packF32(left[2], left[3]),
            packF32(right[0], right[1]), packF32(right[2], right[3])};
  }
  /// The row's value across the 4 lanes of the group.
  Value acrossGroup(Value value, bool maximum) {
    Value width = b.create<arith::ConstantIntOp>(loc, 32, 32);
    for (int64_t offset : {1, 2}) {
      auto shuffle = b.create<gpu::ShuffleOp>(
          loc, value, b.create<arith::ConstantIntOp>(loc, offset, 32), width,
          gpu::ShuffleMode::XOR);
      value = maximum ? maxf(value, shuffle.getShuffleResult())
                      : addf(value, shuffle.getShuffleResult());
    }
    return value;
  }
  /// Whether any lane's `open` holds (the same on every lane).
  Value anyLane(Value open) {
    Value all = b.create<arith::ConstantIntOp>(loc, -1, 32);
    Value ballot = b.create<NVVM::VoteBallotOp>(loc, b.getI32Type(), all, open);
    return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, ballot,
                                   b.create<arith::ConstantIntOp>(loc, 0, 32));
  }

  /// The tile row (0: group, 1: group + 8) of fragment value j.
  static int64_t rowOf(int64_t j) { return j / 2; }

  /// Whether the mask is added to the scores (fp32) rather than closing
  /// where true (i1).
  bool additive() const {
    return spec.mask.elementType && spec.mask.elementType.isF32();
  }
  /// The step's mask: whether the mask closes each value of the tile at
  /// rows row0 + .., columns column0 + .. (`transposed`: the tile's rows are
  /// the mask's columns, keys, and its columns the mask's rows, queries),
  /// or what it adds to each. Neighbouring columns are one 16-bit load when
  /// a bool mask has pairs.
  StepMask loadMask(Value row0, Value column0, bool transposed) {
    StepMask step;
    Closed &closed = step.closed;
    Index row{b.create<arith::AddIOp>(loc, row0, group)};
    Index column{b.create<arith::AddIOp>(loc, column0, twice)};
    const AttentionOperand &mask = spec.mask;
    for (int64_t n = 0; n < kStepFragments; ++n)
      for (int64_t j = 0; j < 4; j += 2) {
        Index r = plus(row, 8 * rowOf(j)), c = plus(column, 8 * n);
        Index loadedRow = inSequence(r), first = inSequence(c),
              second = inSequence(plus(c, 1));
        if (!mask.elementType || additive()) {
          // No mask (or one that adds): every key open to every query.
          closed[n][j] = closed[n][j + 1] =
              b.create<arith::ConstantIntOp>(loc, 0, 1);
          if (additive()) {
            Tile &bias = step.bias ? *step.bias : step.bias.emplace();
            for (auto [slot, tileColumn] :
                 {std::pair{j, first}, std::pair{j + 1, second}})
              bias[n][slot] = transposed ? load(mask, tileColumn, loadedRow)
                                         : load(mask, loadedRow, tileColumn);
          }
        } else if (transposed) {
          closed[n][j] = load(mask, first, loadedRow);
          closed[n][j + 1] = load(mask, second, loadedRow);
        } else if (!pairs.count(&mask)) {
          closed[n][j] = load(mask, loadedRow, first);
          closed[n][j + 1] = load(mask, loadedRow, second);
        } else {
          // c is even, and so is the sequence where the mask has pairs.
          Value word = b.create<memref::LoadOp>(
              loc, pairs.lookup(&mask),
              ValueRange{b.create<arith::ShRUIOp>(
                  loc, at(mask, loadedRow, inSequence(c, 2)), index(1))});
          Type i16 = b.getI16Type();
          auto nonzero = [&](Value byte) {
            return b.create<arith::CmpIOp>(
                loc, arith::CmpIPredicate::ne, byte,
                b.create<arith::ConstantIntOp>(loc, 0, 16));
          };
          closed[n][j] = nonzero(b.create<arith::AndIOp>(
              loc, word, b.create<arith::ConstantIntOp>(loc, 0xff, i16)));
          closed[n][j + 1] = nonzero(b.create<arith::ShRUIOp>(
              loc, word, b.create<arith::ConstantIntOp>(loc, 8, i16)));
        }
        // Rows and columns past the sequence are closed.
        if (ragged()) {
          Value pastRow = pastSequence(r);
          closed[n][j] = b.create<arith::OrIOp>(
              loc, closed[n][j],
              b.create<arith::OrIOp>(loc, pastRow, pastSequence(c)));
          closed[n][j + 1] = b.create<arith::OrIOp>(
              loc, closed[n][j + 1],
              b.create<arith::OrIOp>(loc, pastRow, pastSequence(plus(c, 1))));
        }
      }
    return step;
  }
  /// Whether any value of the step is open, on every lane.
  Value anyOpen(const Closed &closed) {
    Value open = b.create<arith::ConstantIntOp>(loc, 0, 1);
    Value one = b.create<arith::ConstantIntOp>(loc, 1, 1);
    for (const auto &fragment : closed)
      for (Value value : fragment)
        open = b.create<arith::OrIOp>(loc, open,
                                      b.create<arith::XOrIOp>(loc, value, one));
    return anyLane(open);
  }
  /// The scores of a step: the products rounded to bf16, scaled and
  /// rounded again (the bf16 bmm and its scaling; kept in fp32 with
  /// fp32Scores, as torch's SDPA kernels), plus an additive mask in fp32
  /// (the graph's add of an fp32 mask), -inf where closed.
  Tile scores(const Tile &products, const StepMask &mask) {
    Tile scores;
    Value scale = f32(spec.scale);
    Value minusInfinity = f32(-std::numeric_limits<double>::infinity());
    for (int64_t n = 0; n < kStepFragments; ++n)
      for (int64_t j = 0; j < 4; ++j) {
        Value score = spec.fp32Scores
                          ? mulf(products[n][j], scale)
                          : roundBf16(mulf(roundBf16(products[n][j]), scale));
        if (mask.bias)
          score = addf(score, (*mask.bias)[n][j]);
        scores[n][j] = select(mask.closed[n][j], minusInfinity, score);
      }
    return scores;
  }
  /// Products of the warp's A fragments (`rows`, one per 16 of the head
  /// dimension) with the transposed staged operand's 32 rows of the step:
  /// B(k, n) = X[n][k], from one ldmatrix per two 8-row blocks (n) and 16
  /// columns (k).
  Tile scoreProducts(ArrayRef<std::array<Value, 4>> rows,
                     const AttentionOperand &operand) {
    int64_t first = staged.lookup(&operand);
    Tile tile;
    for (int64_t n = 0; n < kStepFragments; ++n)
      tile[n] = zeros();
    for (size_t kk = 0; kk < rows.size(); ++kk) {
      if (!halfChunk(16 * kk))
        continue;
      // The last 8 columns only: matrices (n, k) for the 4 fragments, whose
      // second B register (k + 8, past the head) is zeros, as is A's.
      std::array<Value, 4> bFragments =
          loadMatrices(first, 0, int64_t(16 * kk), {8, 0, 16, 0},
                       /*transposed=*/false);
      for (int64_t n = 0; n < kStepFragments; ++n)
        tile[n] = mma(rows[kk], {bFragments[n], zeroPair()}, tile[n]);
    }
    for (int64_t n = 0; n < kStepFragments; n += 2)
      for (size_t kk = 0; kk < rows.size(); ++kk) {
        if (halfChunk(16 * kk))
          continue;
        // Matrices: (n, k), (n, k + 8), (n + 1, k), (n + 1, k + 8).
        std::array<Value, 4> bFragments =
            loadMatrices(first, 8 * n, int64_t(16 * kk), {0, 8, 8, 0},
                         /*transposed=*/false);
        tile[n] = mma(rows[kk], {bFragments[0], bFragments[1]}, tile[n]);
        tile[n + 1] =
            mma(rows[kk], {bFragments[2], bFragments[3]}, tile[n + 1]);
      }
    return tile;
  }
  /// acc[d] += tile (as A) times the staged operand's rows of the step
  /// (as B: B(k, n) = X[k][8 d + n]), one ldmatrix.trans per 16 rows (k)
  /// and two 8-column tiles (d); a last tile without a neighbour (heads of
  /// 8, 24, ...) from one ldmatrix.trans of its 32 rows.
  void accumulate(SmallVector<Fragment> &acc, const Tile &tile,
                  const AttentionOperand &operand) {
    int64_t first = staged.lookup(&operand);
    std::array<std::array<Value, 4>, 2> a = {tileAsA(tile, 0),
                                             tileAsA(tile, 1)};
    size_t paired = acc.size() - acc.size() % 2;
    if (paired != acc.size()) {
      // Matrices: (k, d), (k + 8, d), (k + 16, d), (k + 24, d).
      size_t d = paired;
      std::array<Value, 4> bFragments =
          loadMatrices(first, 0, int64_t(8 * d), {8, 0, 16, 0},
                       /*transposed=*/true);
      for (int64_t half = 0; half < 2; ++half)
        acc[d] = mma(a[half], {bFragments[2 * half], bFragments[2 * half + 1]},
                     acc[d]);
    }
    for (int64_t half = 0; half < 2; ++half) {
      for (size_t d = 0; d < paired; d += 2) {
        // Matrices: (k, d), (k + 8, d), (k, d + 1), (k + 8, d + 1).
        std::array<Value, 4> bFragments =
            loadMatrices(first, 16 * half, int64_t(8 * d), {8, 0, 0, 8},
                         /*transposed=*/true);
        acc[d] = mma(a[half], {bFragments[0], bFragments[1]}, acc[d]);
        acc[d + 1] = mma(a[half], {bFragments[2], bFragments[3]}, acc[d + 1]);
      }
    }
  }
  /// Stores acc (rows row0.., the head dimension in 8-column tiles) as
  /// bf16, times factor[r]: values 2 r and 2 r + 1 of tile d are row
  /// group + 8 r, columns 8 d + 2 thread and the next.
  void storeRows(ArrayRef<Fragment> acc, const AttentionOperand &operand,
                 Value row0, ArrayRef<Value> factor) {
    Index row{b.create<arith::AddIOp>(loc, row0, group)};
    for (auto [d, fragment] : llvm::enumerate(acc))
      for (int64_t r = 0; r < 2; ++r) {
        Value x = fragment[2 * r], y = fragment[2 * r + 1];
        if (!factor.empty()) {
          x = mulf(x, factor[r]);
          y = mulf(y, factor[r]);
        }
        storePair(x, y, operand, plus(row, 8 * r),
                  Index{twice, int64_t(8 * d)});
      }
  }

  /// Stores one value per row of the lane's two (row0 + group and 8 rows
  /// further: lse, delta) from the first lane of each group.
  void storeRowValues(ArrayRef<Value> values, const AttentionOperand &operand,
                      Value row0) {
    Value first = b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq,
                                          inGroup, index(0));
    auto write = b.create<scf::IfOp>(loc, first, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(write.thenBlock()->getTerminator());
    Index row{b.create<arith::AddIOp>(loc, row0, group)};
    for (size_t r = 0; r < values.size(); ++r) {
      Index at = plus(row, 8 * int64_t(r));
      inSequenceOnly(at, [&] { store(values[r], operand, at, Index{}); });
    }
  }

  /// Each operand's buffer (a kernel argument) as elements and, where it
  /// has them, as pairs (AttentionArgument), and its base in the warp's
  /// sequence.
  /// The shared tiles (docs/gpu-step.md, "Shared tiles"): a step's 32
  /// rows of each staged operand in `tiles`, a row every tileRowElements()
  /// bf16 from the operand's first element; `flags`, a word per warp of
  /// the block (whether its rows see the step).
  int64_t tileRowElements() const { return spec.headDim + kTilePadElements; }
  int64_t tileElements() const { return kStepColumns * tileRowElements(); }
  Value tilePosition(int64_t first, Index row, Index column) {
    Value position =
        index(first + row.constant * tileRowElements() + column.constant);
    if (row.value)
      position = b.create<arith::AddIOp>(
          loc, position,
          b.create<arith::MulIOp>(loc, row.value, index(tileRowElements())));
    if (column.value)
      position = b.create<arith::AddIOp>(loc, position, column.value);
    return position;
  }
  void barrier() { b.create<gpu::BarrierOp>(loc); }
  /// Whether every row of `operand` starts 16 bytes into its buffer (the
  /// runtime aligns buffers to 16 bytes), so that a thread copies 8
  /// columns of a row with one 16-byte load.
  bool hasAlignedRows(const AttentionOperand &operand) const {
    return pairs.count(&operand) &&
           rowsStartAtMultiplesOf(operand, kVectorColumns);
  }
  /// The block's threads copy the step's 32 rows (from `row0`) of each
  /// staged operand into its tile, 8 columns (16 bytes) or a pair of
  /// columns per thread and copy, neighbouring threads neighbouring
  /// columns; rows past the sequence copy its last (nothing uses them).
  void stageTiles(Value row0) {
    for (const auto &tile : staged) {
      const AttentionOperand &operand = *tile.first;
      int64_t first = tile.second;
      // Each thread copies `width` pairs at a time, neighbouring threads
      // neighbouring ones.
      int64_t width = hasAlignedRows(operand) ? kVectorColumns / 2 : 1;
      int64_t rowCopies = spec.headDim / 2 / width;
      int64_t copies = kStepColumns * rowCopies;
      for (int64_t copied = 0; copied < copies; copied += blockSize) {
        Value pair = add(threadInBlock, copied);
        auto copy = [&] {
          Value row = b.create<arith::DivUIOp>(loc, pair, index(rowCopies));
          Index column{b.create<arith::MulIOp>(
              loc, b.create<arith::RemUIOp>(loc, pair, index(rowCopies)),
              index(2 * width))};
          Index at = inSequence(Index{b.create<arith::AddIOp>(loc, row0, row)});
          Value position = tilePosition(first, Index{row}, column);
          auto bf16Type = VectorType::get({2 * width}, b.getBF16Type());
          if (width == 1) {
            Value word = b.create<vector::FromElementsOp>(
                loc, VectorType::get({1}, b.getI32Type()),
                ValueRange{pairAcross(operand, at, column)});
            b.create<vector::StoreOp>(
                loc, b.create<vector::BitCastOp>(loc, bf16Type, word), tiles,
                position);
            return;
          }
          Location vectorLoc = getVectorAccessLoc(loc);
          Value words = b.create<vector::LoadOp>(
              vectorLoc, VectorType::get({width}, b.getI32Type()),
              pairs.lookup(&operand),
              ValueRange{b.create<arith::ShRUIOp>(
                  loc, this->at(operand, at, column), index(1))});
          b.create<vector::StoreOp>(
              vectorLoc, b.create<vector::BitCastOp>(loc, bf16Type, words),
              tiles, position);
        };
        if (copied + blockSize <= copies) {
          copy();
          continue;
        }
        auto inside = b.create<scf::IfOp>(
            loc,
            b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ult, pair,
                                    index(copies)),
            /*withElseRegion=*/false);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPoint(inside.thenBlock()->getTerminator());
        copy();
      }
    }
  }
  /// Whether `open` (uniform in each warp) holds in any warp of the block:
  /// each warp's first lane writes its flag, and after a barrier every
  /// thread reads them all.
  Value anyWarp(Value open) {
    if (warpsPerBlock == 1)
      return open;
    auto first = b.create<scf::IfOp>(
        loc,
        b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::eq, lane, index(0)),
        /*withElseRegion=*/false);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(first.thenBlock()->getTerminator());
      b.create<memref::StoreOp>(
          loc, b.create<arith::ExtUIOp>(loc, b.getI32Type(), open), flags,
          ValueRange{warpInBlock});
    }
    barrier();
    Value any = b.create<arith::ConstantIntOp>(loc, 0, 32);
    for (int64_t warp = 0; warp < warpsPerBlock; ++warp)
      any = b.create<arith::OrIOp>(
          loc, any,
          b.create<memref::LoadOp>(loc, flags, ValueRange{index(warp)}));
    return b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::ne, any,
                                   b.create<arith::ConstantIntOp>(loc, 0, 32));
  }

  /// Each operand's buffer, in the kernel's argument order: setSequence
  /// builds the operands' bases in this order, which must not depend on
  /// where the operands lie in memory (the PTX would differ from run to
  /// run).
  llvm::MapVector<const AttentionOperand *, Value> buffers;
  llvm::DenseMap<const AttentionOperand *, Value> pairs, sequenceBase;
  /// The operands of the step's shared tiles, and each one's first word.
  llvm::MapVector<const AttentionOperand *, int64_t> staged;
  OpBuilder &b;
  Location loc;
  const AttentionKernelSpec &spec;
  int64_t blockSize = 32, warpsPerBlock = 1;
  Value group, inGroup, twice, batch, head;
  Value lane, warpInBlock, threadInBlock, tiles, flags;
};

/// The flat memref type of an operand's buffer: its elements, or their
/// pairs as one integer twice as wide.
MemRefType getBufferType(const AttentionOperand &operand, bool packed) {
  if (!packed)
    return MemRefType::get({std::max<int64_t>(1, operand.elements)},
                           operand.elementType);
  int64_t width = operand.elementType.isBF16() ? 32 : 16;
  return MemRefType::get(
      {operand.elements / 2},
      IntegerType::get(operand.elementType.getContext(), width));
}

/// Flattens state for scf loops and branches.
SmallVector<Value> flatten(ArrayRef<Value> head, ArrayRef<Fragment> fragments) {
  SmallVector<Value> values(head);
  for (const Fragment &fragment : fragments)
    llvm::append_range(values, fragment);
  return values;
}
SmallVector<Fragment> unflatten(ValueRange values) {
  SmallVector<Fragment> fragments;
  for (size_t i = 0; i + 4 <= values.size(); i += 4)
    fragments.push_back(
        {values[i], values[i + 1], values[i + 2], values[i + 3]});
  return fragments;
}

/// The loop over the other side, 32 columns a step: `initial` the state it
/// carries; each step loads the mask (rows row0.., columns the step's, or
/// the other way round when `transposed`) and, unless it closes the whole
/// step for the warp, runs `body(column0, state, closed)`, which returns the
/// next state.
scf::ForOp buildStepLoop(
    AttentionBuilder &w, ValueRange initial, Value row0, bool transposed,
    llvm::function_ref<SmallVector<Value>(Value, ValueRange, const StepMask &)>
        body) {
  OpBuilder &b = w.b;
  Location loc = w.loc;
  auto loop = b.create<scf::ForOp>(
      loc, w.index(0), w.index(llvm::alignTo(w.spec.sequence, kStepColumns)),
      w.index(kStepColumns), initial);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value column0 = loop.getInductionVar();
  ValueRange state = loop.getRegionIterArgs();
  StepMask mask = w.loadMask(row0, column0, transposed);
  Value open = w.anyOpen(mask.closed);
  // The block stages the step's tiles where any of its warps takes the
  // step. The barriers: the tiles are read after every thread has copied
  // its part, and copied after every warp has read the last step's (and
  // its flag, the barrier in anyWarp).
  auto stage = b.create<scf::IfOp>(loc, w.anyWarp(open),
                                   /*withElseRegion=*/false);
  {
    OpBuilder::InsertionGuard stageGuard(b);
    b.setInsertionPoint(stage.thenBlock()->getTerminator());
    w.stageTiles(column0);
  }
  w.barrier();
  auto step = b.create<scf::IfOp>(loc, state.getTypes(), open,
                                  /*withElseRegion=*/true);
  b.create<scf::YieldOp>(loc, step.getResults());
  b.setInsertionPointToStart(step.elseBlock());
  b.create<scf::YieldOp>(loc, state);
  b.setInsertionPointToStart(step.thenBlock());
  b.create<scf::YieldOp>(loc, body(column0, state, mask));
  return loop;
}

/// The forward: out and lse of the warp's 16 queries.
void buildForward(AttentionBuilder &w, Value row0) {
  OpBuilder &b = w.b;
  Location loc = w.loc;
  const AttentionKernelSpec &spec = w.spec;
  int64_t columns = spec.headDim / 8;
  SmallVector<std::array<Value, 4>> rows = w.loadRows(spec.q, row0);
  Value minusInfinity = w.f32(-std::numeric_limits<double>::infinity());
  SmallVector<Fragment> acc(columns, w.zeros());
  // State: the running maximum and sum of each of the lane's two rows, then
  // the output's fragments.
  SmallVector<Value> initial =
      flatten({minusInfinity, minusInfinity, w.f32(0), w.f32(0)}, acc);
  auto loop = buildStepLoop(
      w, initial, row0, /*transposed=*/false,
      [&](Value key0, ValueRange state, const StepMask &mask) {
        Tile s = w.scores(w.scoreProducts(rows, spec.k), mask);
        SmallVector<Value> maximum, sum, alpha, base;
        for (int64_t r = 0; r < 2; ++r) {
          Value rowMax = minusInfinity;
          for (const Fragment &fragment : s)
            for (int64_t j = 2 * r; j < 2 * r + 2; ++j)
              rowMax = w.maxf(rowMax, fragment[j]);
          Value next = w.maxf(state[r], w.acrossGroup(rowMax, true));
          // A row closed so far subtracts 0 (exp(-inf - 0) = 0, not NaN).
          Value closedRow = b.create<arith::CmpFOp>(
              loc, arith::CmpFPredicate::OEQ, next, minusInfinity);
          base.push_back(w.select(closedRow, w.f32(0), next));
          maximum.push_back(next);
          alpha.push_back(w.exp(w.subf(state[r], base[r])));
        }
        Tile p;
        for (int64_t r = 0; r < 2; ++r) {
          Value rowSum = w.f32(0);
          for (int64_t n = 0; n < kStepFragments; ++n)
            for (int64_t j = 2 * r; j < 2 * r + 2; ++j) {
              p[n][j] = w.exp(w.subf(s[n][j], base[r]));
              rowSum = w.addf(rowSum, p[n][j]);
            }
          sum.push_back(w.addf(w.mulf(state[2 + r], alpha[r]),
                               w.acrossGroup(rowSum, false)));
        }
        SmallVector<Fragment> next = unflatten(state.drop_front(4));
        for (Fragment &fragment : next)
          for (int64_t j = 0; j < 4; ++j)
            fragment[j] =
                w.mulf(fragment[j], alpha[AttentionBuilder::rowOf(j)]);
        w.accumulate(next, p, spec.v);
        return flatten({maximum[0], maximum[1], sum[0], sum[1]}, next);
      });
  ValueRange final = loop.getResults();
  SmallVector<Value> inverse;
  for (int64_t r = 0; r < 2; ++r)
    inverse.push_back(b.create<arith::DivFOp>(loc, w.f32(1), final[2 + r]));
  w.storeRows(unflatten(final.drop_front(4)), spec.out, row0, inverse);
  // lse = max + log(sum), -inf for a row the mask closes.
  SmallVector<Value> lse;
  for (int64_t r = 0; r < 2; ++r) {
    Value closedRow = b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OEQ,
                                              final[r], minusInfinity);
    lse.push_back(
        w.select(closedRow, minusInfinity,
                 w.addf(final[r], b.create<math::LogOp>(loc, final[2 + r]))));
  }
  w.storeRowValues(lse, spec.lse, row0);
}

/// The probabilities and the scores' gradient (times the scale, zero where
/// closed) of one step: p = exp(s - lse), ds = p (dp - delta) with
/// dp = bf16(dout v^T) (fp32 with spec.fp32Scores), ds rounded to bf16
/// before the scale where the graph rounds it there (spec.roundedGradient;
/// the A fragment it becomes rounds it after). `lse` and `delta` per tile
/// value.
std::pair<Tile, Tile> buildScoreGradient(AttentionBuilder &w, const Tile &s,
                                         const Tile &dpProducts,
                                         const Tile &lse, const Tile &delta,
                                         const Closed &closed) {
  Tile p, ds;
  Value zero = w.f32(0), scale = w.f32(w.spec.scale);
  for (int64_t n = 0; n < kStepFragments; ++n)
    for (int64_t j = 0; j < 4; ++j) {
      p[n][j] = w.select(closed[n][j], zero, w.exp(w.subf(s[n][j], lse[n][j])));
      Value dp =
          w.spec.fp32Scores ? dpProducts[n][j] : w.roundBf16(dpProducts[n][j]);
      Value gradient = w.mulf(p[n][j], w.subf(dp, delta[n][j]));
      if (w.spec.roundedGradient)
        gradient = w.roundBf16(gradient);
      ds[n][j] = w.select(closed[n][j], zero, w.mulf(gradient, scale));
    }
  return {p, ds};
}

/// The query backward: delta of the warp's 16 queries, then their dq.
void buildBackwardQuery(AttentionBuilder &w, Value row0) {
  OpBuilder &b = w.b;
  Location loc = w.loc;
  const AttentionKernelSpec &spec = w.spec;
  int64_t columns = spec.headDim / 8;
  SmallVector<std::array<Value, 4>> queries = w.loadRows(spec.q, row0),
                                    gradients = w.loadRows(spec.dout, row0);
  // delta of rows group and group + 8: the lane's columns, then the group's.
  Index row{b.create<arith::AddIOp>(loc, row0, w.group)};
  SmallVector<Value> rowDelta, rowLse;
  for (int64_t r = 0; r < 2; ++r) {
    Value sum = w.f32(0);
    Index at = w.inSequence(plus(row, 8 * r));
    for (int64_t c = 0; c < spec.headDim; c += 8)
      for (int64_t i = 0; i < 2; ++i) {
        Index column{w.twice, c + i};
        sum = w.addf(sum, w.mulf(w.loadF32(spec.dout, at, column),
                                 w.loadF32(spec.out, at, column)));
      }
    rowDelta.push_back(w.acrossGroup(sum, false));
    rowLse.push_back(w.load(spec.lse, at, Index{}));
  }
  w.storeRowValues(rowDelta, spec.delta, row0);
  Tile lseTile, deltaTile;
  for (int64_t n = 0; n < kStepFragments; ++n)
    for (int64_t j = 0; j < 4; ++j) {
      lseTile[n][j] = rowLse[AttentionBuilder::rowOf(j)];
      deltaTile[n][j] = rowDelta[AttentionBuilder::rowOf(j)];
    }
  SmallVector<Fragment> acc(columns, w.zeros());
  auto loop = buildStepLoop(
      w, flatten({}, acc), row0, /*transposed=*/false,
      [&](Value key0, ValueRange state, const StepMask &mask) {
        Tile s = w.scores(w.scoreProducts(queries, spec.k), mask);
        Tile dp = w.scoreProducts(gradients, spec.v);
        Tile ds = buildScoreGradient(w, s, dp, lseTile, deltaTile, mask.closed)
                      .second;
        SmallVector<Fragment> next = unflatten(state);
        w.accumulate(next, ds, spec.k);
        return flatten({}, next);
      });
  w.storeRows(unflatten(loop.getResults()), spec.dq, row0, {});
}

/// The key/value backward: dk and dv of the warp's 16 keys, over every
/// query (its tiles transposed: rows are keys, columns queries).
void buildBackwardKeyValue(AttentionBuilder &w, Value row0) {
  OpBuilder &b = w.b;
  Location loc = w.loc;
  const AttentionKernelSpec &spec = w.spec;
  int64_t columns = spec.headDim / 8;
  SmallVector<std::array<Value, 4>> keys = w.loadRows(spec.k, row0),
                                    values = w.loadRows(spec.v, row0);
  SmallVector<Fragment> acc(2 * columns, w.zeros());
  auto loop = buildStepLoop(
      w, flatten({}, acc), row0, /*transposed=*/true,
      [&](Value query0, ValueRange state, const StepMask &mask) {
        Tile s = w.scores(w.scoreProducts(keys, spec.q), mask);
        Tile dp = w.scoreProducts(values, spec.dout);
        // Each value's query's lse and delta.
        Tile lseTile, deltaTile;
        Value column = b.create<arith::AddIOp>(loc, query0, w.twice);
        for (int64_t n = 0; n < kStepFragments; ++n)
          for (int64_t i = 0; i < 2; ++i) {
            Index at = w.inSequence(Index{column, 8 * n + i});
            Value rowLse = w.load(spec.lse, at, Index{});
            Value rowDelta = w.load(spec.delta, at, Index{});
            for (int64_t j = i; j < 4; j += 2) {
              lseTile[n][j] = rowLse;
              deltaTile[n][j] = rowDelta;
            }
          }
        auto [p, ds] =
            buildScoreGradient(w, s, dp, lseTile, deltaTile, mask.closed);
        SmallVector<Fragment> next = unflatten(state);
        SmallVector<Fragment> dkAcc(next.begin(), next.begin() + columns),
            dvAcc(next.begin() + columns, next.end());
        w.accumulate(dvAcc, p, spec.dout);
        w.accumulate(dkAcc, ds, spec.q);
        llvm::append_range(dkAcc, dvAcc);
        return flatten({}, dkAcc);
      });
  SmallVector<Fragment> result = unflatten(loop.getResults());
  w.storeRows(ArrayRef(result).take_front(columns), spec.dk, row0, {});
  w.storeRows(ArrayRef(result).drop_front(columns), spec.dv, row0, {});
}

} // namespace

std::string
mlir::mantissa::whyAttentionKernelsCannotRun(const AttentionKernelSpec &spec) {
  std::string why = whyAttentionShapeIsUnsupported(spec.sequence, spec.headDim);
  if (!why.empty())
    return why;
  if (spec.batch <= 0 || spec.heads <= 0)
    return "the batch or the heads are empty";
  auto reaches = [&](const AttentionOperand &operand, int64_t rows,
                     int64_t columns) {
    int64_t last = operand.offset;
    for (auto [extent, stride] : llvm::zip_equal(
             std::array<int64_t, 4>{spec.batch, spec.heads, rows, columns},
             operand.strides)) {
      if (stride < 0)
        return false;
      last += (extent - 1) * stride;
    }
    return operand.offset >= 0 && last < operand.elements;
  };
  struct Named {
    const char *name;
    const AttentionOperand *operand;
    bool bf16;
    int64_t columns;
  };
  for (const Named &named : {Named{"q", &spec.q, true, spec.headDim},
                             Named{"k", &spec.k, true, spec.headDim},
                             Named{"v", &spec.v, true, spec.headDim},
                             Named{"out", &spec.out, true, spec.headDim},
                             Named{"dout", &spec.dout, true, spec.headDim},
                             Named{"dq", &spec.dq, true, spec.headDim},
                             Named{"dk", &spec.dk, true, spec.headDim},
                             Named{"dv", &spec.dv, true, spec.headDim},
                             Named{"mask", &spec.mask, false, spec.sequence},
                             Named{"lse", &spec.lse, false, 1},
                             Named{"delta", &spec.delta, false, 1}}) {
    if (!named.operand->elementType)
      continue;
    if (named.operand == &spec.mask && !spec.mask.elementType.isInteger(1) &&
        !spec.mask.elementType.isF32())
      return "mask is neither i1 nor fp32";
    Type expected =
        named.bf16
            ? Type(BFloat16Type::get(named.operand->elementType.getContext()))
            : named.operand->elementType;
    if (named.operand->elementType != expected)
      return llvm::formatv("{0} is not bf16", named.name);
    if (!reaches(*named.operand, spec.sequence, named.columns))
      return llvm::formatv("{0} has elements outside its buffer", named.name);
  }
  return "";
}

SmallVector<AttentionArgument>
mlir::mantissa::getAttentionKernelArguments(AttentionKernel kind,
                                            const AttentionKernelSpec &spec) {
  SmallVector<const AttentionOperand *> operands;
  switch (kind) {
  case AttentionKernel::Forward:
    operands = {&spec.q, &spec.k, &spec.v, &spec.mask, &spec.out, &spec.lse};
    break;
  case AttentionKernel::BackwardQuery:
    operands = {&spec.q,    &spec.k,   &spec.v,     &spec.mask, &spec.out,
                &spec.dout, &spec.lse, &spec.delta, &spec.dq};
    break;
  case AttentionKernel::BackwardKeyValue:
    operands = {&spec.q,   &spec.k,     &spec.v,  &spec.mask, &spec.dout,
                &spec.lse, &spec.delta, &spec.dk, &spec.dv};
    break;
  }
  SmallVector<AttentionArgument> arguments;
  for (const AttentionOperand *operand : operands) {
    // The mask, where there is none.
    if (!operand->elementType)
      continue;
    arguments.push_back({operand, false});
    // Pairs of columns: contiguous, every pair at an even element. The
    // mask's where its rows are the warp's (not transposed).
    bool even =
        operand->elements % 2 == 0 && rowsStartAtMultiplesOf(*operand, 2);
    bool pairs = operand->strides[3] == 1 &&
                 (operand->elementType.isBF16() ||
                  (operand == &spec.mask && operand->elementType.isInteger(1) &&
                   kind != AttentionKernel::BackwardKeyValue));
    if (even && pairs)
      arguments.push_back({operand, true});
  }
  return arguments;
}

bool mlir::mantissa::isWrittenByAttentionKernel(
    AttentionKernel kind, const AttentionKernelSpec &spec,
    const AttentionOperand *operand) {
  return operand == &spec.out || operand == &spec.lse || operand == &spec.dq ||
         operand == &spec.dk || operand == &spec.dv ||
         (operand == &spec.delta && kind == AttentionKernel::BackwardQuery);
}

std::string
mlir::mantissa::describeAttentionKernel(AttentionKernel kind,
                                        const AttentionKernelSpec &spec) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << int(kind) << ' ' << spec.batch << ' ' << spec.heads << ' '
     << spec.sequence << ' ' << spec.headDim << ' ';
  os << llvm::formatv("{0:e17}", spec.scale) << ' ' << spec.roundedGradient
     << ' ' << spec.fp32Scores;
  for (const AttentionOperand *operand :
       {&spec.q, &spec.k, &spec.v, &spec.mask, &spec.out, &spec.lse, &spec.dout,
        &spec.delta, &spec.dq, &spec.dk, &spec.dv}) {
    os << " | ";
    if (operand->elementType)
      os << operand->elementType;
    os << ' ' << operand->elements << ' ' << operand->offset;
    for (int64_t stride : operand->strides)
      os << ' ' << stride;
  }
  return text;
}

/// What a step of `kernel`'s loop issues per lane (the mask's loads and the
/// ballot every step, the rest where the step is open): weighted
/// instructions and mma.syncs, into `launch`; false when it has no loop.
static bool countStep(gpu::GPUFuncOp kernel, AttentionLaunch &launch) {
  scf::ForOp loop;
  kernel.walk([&](scf::ForOp found) { loop = found; });
  if (!loop)
    return false;
  loop.getBody()->walk([&](Operation *op) {
    if (isa<LLVM::InlineAsmOp>(op)) {
      ++launch.mmasPerStep;
    } else if (isa<math::ExpOp, math::Exp2Op, math::LogOp>(op)) {
      launch.opsPerStep += 8;
    } else if (isa<memref::LoadOp, memref::StoreOp, vector::LoadOp,
                   vector::StoreOp, nvgpu::LdMatrixOp>(op)) {
      // A memory access of any width (an ldmatrix of four matrices too).
      launch.opsPerStep += 4;
    } else if (!op->hasTrait<OpTrait::ConstantLike>() &&
               !op->hasTrait<OpTrait::IsTerminator>() &&
               // Reinterpretations, free in the machine code.
               !isa<LLVM::ExtractValueOp, scf::IfOp, vector::BitCastOp,
                    vector::ExtractOp>(op)) {
      ++launch.opsPerStep;
    }
  });
  return true;
}

AttentionLaunch mlir::mantissa::buildAttentionKernel(
    gpu::GPUModuleOp gpuModule, StringRef name, AttentionKernel kind,
    const AttentionKernelSpec &spec, int64_t blockSize) {
  SmallVector<AttentionArgument> arguments =
      getAttentionKernelArguments(kind, spec);
  SmallVector<Type> types;
  for (const AttentionArgument &argument : arguments)
    types.push_back(getBufferType(*argument.operand, argument.pairs));
  Location loc = gpuModule.getLoc();
  OpBuilder b = getModuleEndBuilder(gpuModule);
  auto kernel =
      b.create<gpu::GPUFuncOp>(loc, name, b.getFunctionType(types, {}));
  kernel->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
  kernel->setAttr(kWarpLockstepAttr, b.getUnitAttr());
  // An operand's two views are two arguments: noalias holds where they are
  // only read; an output is written through one of them only (its pairs
  // where it has them).
  for (auto [position, argument] : llvm::enumerate(arguments)) {
    kernel.setArgAttr(position, LLVM::LLVMDialect::getNoAliasAttrName(),
                      b.getUnitAttr());
    if (!isWrittenByAttentionKernel(kind, spec, argument.operand))
      kernel.setArgAttr(position, LLVM::LLVMDialect::getReadonlyAttrName(),
                        b.getUnitAttr());
  }
  Block *entry = &kernel.getBody().front();
  b.setInsertionPointToStart(entry);
  b.setInsertionPoint(b.create<gpu::ReturnOp>(loc));
  AttentionBuilder w(b, loc, spec);
  for (auto [argument, value] :
       llvm::zip_equal(arguments, entry->getArguments()))
    if (argument.pairs)
      w.pairs[argument.operand] = value;
    else
      w.buffers[argument.operand] = value;
  // The operands every warp of a block reads a step of: staged in shared
  // tiles.
  const AttentionOperand *first = &spec.k, *second = &spec.v;
  if (kind == AttentionKernel::BackwardKeyValue)
    first = &spec.q, second = &spec.dout;
  w.staged[first] = 0;
  w.staged[second] = w.tileElements();
  // A block's warps take consecutive tiles of 16 rows of one sequence:
  // block = sequence * blocks per sequence + the tiles' group. Warps past
  // the sequence's last tile (its last block's) stage tiles and wait at
  // the barriers with the others; the mask closes their rows.
  w.blockSize = blockSize;
  w.warpsPerBlock = blockSize / 32;
  int64_t tiles = llvm::divideCeil(spec.sequence, kTileRows);
  int64_t blocksPerSequence = llvm::divideCeil(tiles, w.warpsPerBlock);
  int64_t warps = spec.batch * spec.heads * tiles;
  auto workgroup =
      gpu::AddressSpaceAttr::get(b.getContext(), gpu::AddressSpace::Workgroup);
  w.tiles = kernel.addWorkgroupAttribution(
      MemRefType::get({kStagedOperands * w.tileElements()}, b.getBF16Type(),
                      AffineMap(), workgroup),
      loc);
  w.flags = kernel.addWorkgroupAttribution(
      MemRefType::get({w.warpsPerBlock}, b.getI32Type(), AffineMap(),
                      workgroup),
      loc);
  Value thread = b.create<gpu::ThreadIdOp>(loc, gpu::Dimension::x);
  Value block = b.create<gpu::BlockIdOp>(loc, gpu::Dimension::x);
  w.setLane(thread);
  w.setSequence(
      b.create<arith::DivUIOp>(loc, block, w.index(blocksPerSequence)));
  Value row0 = b.create<arith::MulIOp>(
      loc,
      b.create<arith::AddIOp>(
          loc,
          b.create<arith::MulIOp>(
              loc,
              b.create<arith::RemUIOp>(loc, block, w.index(blocksPerSequence)),
              w.index(w.warpsPerBlock)),
          w.warpInBlock),
      w.index(kTileRows));
  // The tiles' rows, 16-byte vectors where the copies are.
  kernel.setWorkgroupAttributionAttr(0, LLVM::LLVMDialect::getAlignAttrName(),
                                     b.getI64IntegerAttr(kVectorAccessBytes));
  switch (kind) {
  case AttentionKernel::Forward:
    buildForward(w, row0);
    break;
  case AttentionKernel::BackwardQuery:
    buildBackwardQuery(w, row0);
    break;
  case AttentionKernel::BackwardKeyValue:
    buildBackwardKeyValue(w, row0);
    break;
  }
  // What LLVM would share and hoist anyway, so that the counts below are
  // of what a step issues.
  PassManager cleanup(gpuModule.getContext(),
                      gpu::GPUFuncOp::getOperationName());
  cleanup.addPass(createCanonicalizerPass());
  cleanup.addPass(createCSEPass());
  cleanup.addPass(createLoopInvariantCodeMotionPass());
  cleanup.addPass(createCanonicalizerPass());
  cleanup.addPass(createCSEPass());
  if (failed(cleanup.run(kernel)))
    llvm::report_fatal_error("the attention kernel does not clean up");
  AttentionLaunch launch;
  launch.warps = warps;
  launch.grid = spec.batch * spec.heads * blocksPerSequence;
  // Steps under a causal mask: rows (queries) 16 t .. 16 t + 15 see the
  // keys up to theirs; keys 16 t .. are seen by the queries from theirs.
  // The mask's values are not known here: one [S, S] mask for every batch
  // and head is taken for causal, and one per batch or head (a padded
  // batch's key padding) or none for closing nothing, every step taken.
  bool causal = spec.mask.elementType && spec.mask.elementType.isInteger(1) &&
                spec.mask.strides[0] == 0 && spec.mask.strides[1] == 0 &&
                spec.mask.strides[2] != 0;
  int64_t steps = llvm::divideCeil(spec.sequence, kStepColumns), taken = 0;
  for (int64_t tile = 0; tile < tiles; ++tile)
    taken +=
        !causal ? steps
        : kind == AttentionKernel::BackwardKeyValue
            ? steps - (tile * kTileRows) / kStepColumns
            : std::min(steps,
                       (tile * kTileRows + kTileRows - 1) / kStepColumns + 1);
  launch.stepsPerWarp = double(taken) / double(tiles);
  if (!countStep(kernel, launch)) {
    // One step, whose loop the clean-up unrolled: the step of the same
    // kernel over two, built aside.
    OwningOpRef<ModuleOp> scratch = ModuleOp::create(loc);
    auto aside = OpBuilder::atBlockEnd(scratch->getBody())
                     .create<gpu::GPUModuleOp>(loc, "aside");
    AttentionKernelSpec twoSteps = spec;
    twoSteps.sequence = 2 * kStepColumns;
    AttentionLaunch twin =
        buildAttentionKernel(aside, name, kind, twoSteps, blockSize);
    launch.opsPerStep = twin.opsPerStep;
    launch.mmasPerStep = twin.mmasPerStep;
  }
  return launch;
}

int64_t AttentionLaunch::tensorFlops() const {
  // One mma.sync m16n8k16: 16 x 8 x 16 multiply-adds.
  return int64_t(double(warps) * stepsPerWarp * double(mmasPerStep) * 2 * 16 *
                 8 * 16);
}
