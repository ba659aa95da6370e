//===- ImportLinear.cpp - Matrix products ---------------------------------===//
//
// mm, bmm and addmm, each one `train` operation (the GPU backend runs them as
// cuBLAS GEMMs, the CPU backend as linalg matmuls).
//
//===----------------------------------------------------------------------===//

#include "StepImporter.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::train;
using namespace mlir::mantissa::importer;
using llvm::StringRef;

/// mm and bmm: `self` times `mat2`.
template <typename OpTy> static LogicalResult importMatmul(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<Value> other = s.tensorArgument("mat2");
  if (failed(self) || failed(other))
    return failure();
  return s.emitSingle<OpTy>(*self, *other);
}

static LogicalResult importAddmm(StepImporter &s) {
  FailureOr<Value> bias = s.tensorArgument("self");
  FailureOr<Value> lhs = s.tensorArgument("mat1");
  FailureOr<Value> rhs = s.tensorArgument("mat2");
  FailureOr<double> beta = s.floatArgument("beta", 1.0);
  FailureOr<double> alpha = s.floatArgument("alpha", 1.0);
  if (failed(bias) || failed(lhs) || failed(rhs) || failed(beta) ||
      failed(alpha))
    return failure();
  return s.emitSingle<AddmmOp>(*bias, *lhs, *rhs,
                               s.builder.getF64FloatAttr(*beta),
                               s.builder.getF64FloatAttr(*alpha));
}

void mlir::mantissa::importer::addLinearHandlers(HandlerTable &table) {
  auto add = [&](StringRef overload, Handler handler) {
    addAtenHandler(table, overload, std::move(handler));
  };
  // Matrix products.
  add("mm.default", importMatmul<MatmulOp>);
  add("bmm.default", importMatmul<BatchMatmulOp>);
  add("addmm.default", importAddmm);
}
