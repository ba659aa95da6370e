//===- GpuVectorAccesses.cpp - Consecutive iterations as vectors ----------===//
//
// A warp of scalar loads moves 32 elements per instruction: 64 bytes of
// bf16. Given `width` consecutive iterations of an elementwise member, a
// thread instead loads and stores each contiguous operand 16 bytes at a
// time (ld.global.nc.v4.b32, st.global.v4.b32), a warp 512 contiguous
// bytes per instruction. The accesses must be aligned to their vector:
// every buffer's address is (the arena's offsets are multiples of 256
// bytes, and the runtime refuses arguments and results that are not
// 16-byte aligned), and the element's position within it is a multiple of
// the width whenever the first iteration is, which the view's static
// offset and strides say.
//
//===----------------------------------------------------------------------===//

#include "GpuVectorAccesses.h"
#include "mantissa/Conversion/TrainToGPU/Buffers/BufferAccesses.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include <numeric>

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// The metadata of the location fuseCopiesIntoVectors gives the accesses it
/// builds, which their lowering keeps.
constexpr llvm::StringLiteral kVectorAccessTag = "mantissa.vector_access";

/// Whether elements of `type` make a vector of consecutive elements in
/// memory: floats and integers of whole bytes (a vector of i1 packs bits,
/// while a buffer of i1 holds a byte each).
bool isVectorElement(Type type) {
  if (!type.isIntOrFloat())
    return false;
  unsigned bits = type.getIntOrFloatBitWidth();
  return bits >= 8 && llvm::isPowerOf2_32(bits);
}

Value getMemRef(Operation *op) {
  if (auto load = dyn_cast<memref::LoadOp>(op))
    return load.getMemRef();
  return cast<memref::StoreOp>(op).getMemRef();
}

ValueRange getIndices(Operation *op) {
  if (auto load = dyn_cast<memref::LoadOp>(op))
    return load.getIndices();
  return cast<memref::StoreOp>(op).getIndices();
}

/// The dimension of the access's view along which `iv` indexes it with
/// unit stride, and its alignment (VectorCandidates::Access), when no other
/// index depends on `iv` (`varying`) and the view's layout is static.
std::optional<std::pair<size_t, int64_t>>
getContiguousDimension(Operation *op, Value iv,
                       const llvm::SmallPtrSetImpl<Value> &varying,
                       int64_t lower) {
  std::optional<size_t> dimension;
  for (auto [position, index] : llvm::enumerate(getIndices(op))) {
    if (index == iv && !dimension)
      dimension = position;
    else if (varying.contains(index))
      return std::nullopt;
  }
  if (!dimension)
    return std::nullopt;
  SmallVector<int64_t> strides;
  int64_t offset;
  if (failed(getStridesAndOffset(cast<MemRefType>(getMemRef(op).getType()),
                                 strides, offset)) ||
      ShapedType::isDynamic(offset) || strides[*dimension] != 1)
    return std::nullopt;
  int64_t alignment = std::gcd(offset, lower);
  for (auto [position, stride] : llvm::enumerate(strides)) {
    if (ShapedType::isDynamic(stride))
      return std::nullopt;
    if (position != *dimension)
      alignment = std::gcd(alignment, stride);
  }
  return std::pair{*dimension, alignment};
}

} // namespace

FailureOr<VectorCandidates>
mlir::mantissa::findVectorCandidates(func::FuncOp function,
                                     ArrayRef<scf::ForOp> loops) {
  if (loops.empty())
    return failure();
  scf::ForOp inner = loops.back();
  std::optional<int64_t> lower = getConstantIntValue(inner.getLowerBound());
  std::optional<int64_t> upper = getConstantIntValue(inner.getUpperBound());
  std::optional<int64_t> step = getConstantIntValue(inner.getStep());
  if (!lower || !upper || step != 1 || *upper <= *lower)
    return failure();
  // Only loads and stores touch memory, so moving them within an
  // iteration's copies is all that changes.
  bool effects = false;
  function.walk([&](Operation *op) {
    if (op->getNumRegions() == 0 && !isMemoryEffectFree(op) &&
        !isa<memref::LoadOp, memref::StoreOp>(op))
      effects = true;
  });
  if (effects)
    return failure();
  VectorCandidates candidates;
  candidates.tripCount = *upper - *lower;
  Block *body = inner.getBody();
  Value iv = inner.getInductionVar();
  llvm::SmallPtrSet<Value, 16> varying = {iv};
  // Every access of the body in order, nested ones included.
  SmallVector<Operation *> accesses;
  body->walk<WalkOrder::PreOrder>([&](Operation *op) {
    if (llvm::any_of(op->getOperands(),
                     [&](Value operand) { return varying.contains(operand); }))
      varying.insert(op->result_begin(), op->result_end());
    if (isa<memref::LoadOp, memref::StoreOp>(op))
      accesses.push_back(op);
  });
  for (auto [position, op] : llvm::enumerate(accesses)) {
    if (op->getBlock() != body)
      continue;
    Value memref = getMemRef(op);
    Type element = cast<MemRefType>(memref.getType()).getElementType();
    if (!isVectorElement(element))
      continue;
    auto contiguous = getContiguousDimension(op, iv, varying, *lower);
    if (!contiguous)
      continue;
    // A load moves up to the first copy's, past the copies' earlier stores;
    // a store down to the last copy's, past their later loads and stores.
    // Of other iterations, those touch other elements; of its own, none
    // may touch the buffer.
    Value base = getBaseBuffer(memref);
    bool isLoad = isa<memref::LoadOp>(op);
    auto touches = [&](Operation *other) {
      return getBaseBuffer(getMemRef(other)) == base &&
             (!isLoad || isa<memref::StoreOp>(other));
    };
    ArrayRef<Operation *> others =
        isLoad ? ArrayRef(accesses).take_front(position)
               : ArrayRef(accesses).drop_front(position + 1);
    if (llvm::any_of(others, touches))
      continue;
    candidates.accesses.push_back(
        {op, getStorageBytes(element), contiguous->first, contiguous->second});
  }
  return candidates;
}

bool mlir::mantissa::isVectorAccess(const VectorCandidates::Access &access,
                                    int64_t width) {
  return width > 1 && access.alignment % width == 0;
}

int64_t mlir::mantissa::chooseVectorWidth(ArrayRef<VectorCandidates> members) {
  int64_t narrowest = 0;
  for (const VectorCandidates &member : members)
    for (const VectorCandidates::Access &access : member.accesses)
      narrowest = narrowest == 0 ? access.elementBytes
                                 : std::min(narrowest, access.elementBytes);
  if (narrowest == 0)
    return 1;
  for (int64_t width = kVectorAccessBytes / narrowest; width > 1; width /= 2) {
    bool divides = llvm::all_of(members, [&](const VectorCandidates &member) {
      return member.tripCount % width == 0;
    });
    bool used = llvm::any_of(members, [&](const VectorCandidates &member) {
      return llvm::any_of(member.accesses, [&](const auto &access) {
        return isVectorAccess(access, width);
      });
    });
    if (divides && used)
      return width;
  }
  return 1;
}

Location mlir::mantissa::getVectorAccessLoc(Location loc) {
  MLIRContext *context = loc->getContext();
  return FusedLoc::get(context, {loc},
                       StringAttr::get(context, kVectorAccessTag));
}

void mlir::mantissa::fuseCopiesIntoVectors(ArrayRef<Operation *> copies,
                                           size_t dimension) {
  Operation *first = copies.front();
  MLIRContext *context = first->getContext();
  Location loc = getVectorAccessLoc(first->getLoc());
  Value memref = getMemRef(first);
  Type element = cast<MemRefType>(memref.getType()).getElementType();
  int64_t width = copies.size();
  int64_t chunk =
      std::min(width, kVectorAccessBytes / getStorageBytes(element));
  auto vectorType = VectorType::get({chunk}, element);
  bool isLoad = isa<memref::LoadOp>(first);
  // Loads at the first copy's place, stores at the last's, with the first
  // copy's view and indices.
  OpBuilder builder(isLoad ? first : copies.back());
  SmallVector<Value> indices(getIndices(first));
  if (dimension + 1 != indices.size()) {
    // vector.load and vector.store read the view's last dimension: a view
    // contiguous along another (a transpose) as one dimension of the same
    // elements, at the position its strides give.
    auto type = cast<MemRefType>(memref.getType());
    SmallVector<int64_t> strides;
    int64_t offset;
    (void)getStridesAndOffset(type, strides, offset);
    int64_t extent = 1;
    Value position;
    for (auto [index, size, stride] :
         llvm::zip_equal(indices, type.getShape(), strides)) {
      extent += (size - 1) * stride;
      Value term = builder.create<arith::MulIOp>(
          loc, index, builder.create<arith::ConstantIndexOp>(loc, stride));
      position =
          position ? builder.create<arith::AddIOp>(loc, position, term) : term;
    }
    memref = builder.create<memref::ReinterpretCastOp>(
        loc,
        MemRefType::get({extent}, element,
                        StridedLayoutAttr::get(context, offset, {1})),
        memref, offset, ArrayRef<int64_t>{extent}, ArrayRef<int64_t>{1});
    indices = {position};
    dimension = 0;
  }
  Value start = indices[dimension];
  for (int64_t begin = 0; begin < width; begin += chunk) {
    indices[dimension] =
        begin == 0 ? start
                   : builder.create<arith::AddIOp>(
                         loc, start,
                         builder.create<arith::ConstantIndexOp>(loc, begin));
    ArrayRef<Operation *> part = copies.slice(begin, chunk);
    if (isLoad) {
      Value vector =
          builder.create<vector::LoadOp>(loc, vectorType, memref, indices);
      for (auto [position, copy] : llvm::enumerate(part)) {
        OpBuilder at(copy);
        copy->getResult(0).replaceAllUsesWith(
            at.create<vector::ExtractOp>(loc, vector, int64_t(position)));
      }
    } else {
      SmallVector<Value> elements;
      for (Operation *copy : part)
        elements.push_back(cast<memref::StoreOp>(copy).getValueToStore());
      builder.create<vector::StoreOp>(
          loc,
          builder.create<vector::FromElementsOp>(loc, vectorType, elements),
          memref, indices);
    }
  }
  for (Operation *copy : copies)
    copy->erase();
}

void mlir::mantissa::alignVectorAccesses(gpu::GPUModuleOp gpuModule) {
  auto isTagged = [](Operation *op) {
    auto fused = dyn_cast<FusedLoc>(op->getLoc());
    auto tag = fused ? dyn_cast_or_null<StringAttr>(fused.getMetadata())
                     : StringAttr();
    return tag && tag.getValue() == kVectorAccessTag;
  };
  auto bytes = [](Type type) {
    auto vector = cast<VectorType>(type);
    return vector.getNumElements() * getStorageBytes(vector.getElementType());
  };
  gpuModule.walk([&](Operation *op) {
    if (!isTagged(op))
      return;
    if (auto load = dyn_cast<LLVM::LoadOp>(op);
        load && isa<VectorType>(load.getType()))
      load.setAlignment(bytes(load.getType()));
    if (auto store = dyn_cast<LLVM::StoreOp>(op);
        store && isa<VectorType>(store.getValue().getType()))
      store.setAlignment(bytes(store.getValue().getType()));
  });
}
