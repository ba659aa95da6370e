//===- AccessNarrowFloatsAsIntegers.cpp - bf16/f16 memory as i16 ----------===//
//
// mantissa-access-narrow-floats-as-integers: on the LLVM dialect, loads and
// stores of bf16 and f16 (scalars and vectors) become loads and stores of
// i16 with a bitcast (Passes.td). The CPU step computes in f32 and rounds
// with integer code, so these types exist only in memory; LLVM's x86
// backend has no legal bf16 vector without AVX512-BF16, and its vectorisers
// then cost a vector of bf16 stores as scalars: a rounding loop kept its
// NaN test and stores one element at a time.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToLinalg/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"

using namespace mlir;

namespace mlir::mantissa {
#define GEN_PASS_DEF_ACCESSNARROWFLOATSASINTEGERSPASS
#include "mantissa/Conversion/TrainToLinalg/Passes.h.inc"
} // namespace mlir::mantissa

namespace {

/// The i16 type (or vector of it) that `type` is stored as, or null when it
/// is not bf16 or f16 (or a vector of them).
Type getStorageInteger(Type type) {
  auto element = getElementTypeOrSelf(type);
  if (!element.isBF16() && !element.isF16())
    return {};
  auto integer = IntegerType::get(type.getContext(), 16);
  if (auto vector = dyn_cast<VectorType>(type))
    return vector.clone(integer);
  return isa<FloatType>(type) ? integer : Type();
}

struct AccessNarrowFloatsAsIntegersPass
    : mantissa::impl::AccessNarrowFloatsAsIntegersPassBase<
          AccessNarrowFloatsAsIntegersPass> {
  void runOnOperation() override {
    OpBuilder builder(&getContext());
    getOperation().walk([&](Operation *op) {
      if (auto load = dyn_cast<LLVM::LoadOp>(op)) {
        Type type = load.getType();
        Type integer = getStorageInteger(type);
        if (!integer)
          return;
        load.getResult().setType(integer);
        builder.setInsertionPointAfter(load);
        auto cast = builder.create<LLVM::BitcastOp>(load.getLoc(), type, load);
        load.getResult().replaceAllUsesExcept(cast, cast);
      } else if (auto store = dyn_cast<LLVM::StoreOp>(op)) {
        Type integer = getStorageInteger(store.getValue().getType());
        if (!integer)
          return;
        builder.setInsertionPoint(store);
        auto cast = builder.create<LLVM::BitcastOp>(store.getLoc(), integer,
                                                    store.getValue());
        store.getValueMutable().assign(cast);
      }
    });
  }
};

} // namespace
