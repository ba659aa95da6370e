//===- GemmMatching.h - Contractions as cuBLAS GEMMs ------------*- C++ -*-===//
//
// Which linalg contractions over buffers the GPU program runs as
// strided-batched cuBLAS GEMMs (and with which operands, layouts and
// dtypes), for the program builder and the transforms before it that must
// keep a GEMM a GEMM.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_TRAINTOGPU_BUFFERS_GEMMMATCHING_H
#define MANTISSA_CONVERSION_TRAINTOGPU_BUFFERS_GEMMMATCHING_H

#include "mantissa/Format/GpuProgram.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/IR/Operation.h"
#include "mlir/Support/LogicalResult.h"

#include <optional>
#include <string>

namespace mlir::mantissa {

/// The program file's dtype of an element type: train::getStoredDType's,
/// I64 for a type no file stores (an imported step has none).
rt::DType getDType(Type element);

/// How the program names an op in its `source` ("linalg.matmul at
/// loc(...)").
std::string describeOp(Operation *op);

/// A view's static offset and strides relative to its base buffer; failure
/// when any is dynamic.
LogicalResult getViewLayout(Value view, SmallVectorImpl<int64_t> &strides,
                            int64_t &offset);

/// One operand's element strides along each loop of an op (0 where it does
/// not index the loop) and its offset in its base buffer.
struct LoopStrides {
  SmallVector<int64_t> strides;
  int64_t offset = 0;
};

/// The strides of `operand` of `op`; `value`, when given, stands for the
/// operand (a view of the same shape indexed alike). Failure when the view's
/// layout is dynamic or a loop indexes two of its dimensions.
FailureOr<LoopStrides> getLoopStrides(linalg::LinalgOp op, OpOperand &operand,
                                      Value value = {});

/// The element types cuBLAS multiplies with fp32 accumulation.
bool isGemmDType(Type element);

/// A contraction over buffers as a strided-batched GEMM, when its loops
/// collapse to one batch, row, column and reduction loop each, every operand
/// is a column-major matrix (possibly transposed) and the dtypes are ones
/// cuBLAS multiplies with fp32 accumulation. `getBufferId` names an
/// operand's base buffer (called only once the op matches). `output`, when
/// given, is written in place of the op's output (a view of the same shape,
/// in fp32 or the operands' dtype): the GEMM then rounds its fp32 sums into
/// it directly, which is what the op followed by an elementwise rounding
/// computes when the op's output starts at zero.
std::optional<rt::GpuStepOp> matchGemm(linalg::LinalgOp op,
                                       function_ref<int64_t(Value)> getBufferId,
                                       Value output = {});

/// Whether `op` is a matrix product: a contraction with rows and columns
/// (or whose dimensions cannot be told), which the GPU program runs as a
/// GEMM reading its operands as they are; a row-by-row dot product (a norm
/// gain's gradient) is not one, and the reductions' transforms may split or
/// fuse it.
bool isMatrixProduct(linalg::LinalgOp op);

/// Whether `op` is a GEMM (matchGemm), whatever its buffers.
inline bool isGemm(linalg::LinalgOp op) {
  return matchGemm(op, [](Value) -> int64_t { return 0; }).has_value();
}

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_TRAINTOGPU_BUFFERS_GEMMMATCHING_H
