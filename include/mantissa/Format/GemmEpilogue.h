//===- GemmEpilogue.h - What a GPU GEMM adds to its product -----*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The epilogue of a GEMM of the GPU step program: the compiler decides it
// (a bias it folds into the product) and records it in step.gpu.json
// (GpuProgram.h), the runtime asks cuBLASLt for it (CudaDriver.h's
// GemmCall). Apart from the program so that the driver's wrapper needs
// nothing else of the format.
//
// Part of mantissa_format: no LLVM, MLIR or runtime headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_FORMAT_GEMMEPILOGUE_H
#define MANTISSA_FORMAT_GEMMEPILOGUE_H

namespace mlir::mantissa::rt {

/// What a GEMM adds to its product before rounding into C.
enum class GemmEpilogue {
  None,
  /// C_i(r, c) = alpha * (op(A_i) op(B_i))(r, c) + bias[r], beta 0: the
  /// bias is a dense vector of m elements in C's dtype
  /// (CUBLASLT_EPILOGUE_BIAS).
  Bias
};

} // namespace mlir::mantissa::rt

#endif // MANTISSA_FORMAT_GEMMEPILOGUE_H
