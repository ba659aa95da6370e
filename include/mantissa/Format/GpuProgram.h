//===- GpuProgram.h - The schema of step.gpu.json ---------------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The one definition of the GPU step program's file, `step.gpu.json`
// (docs/gpu-step.md): the compiler fills a GpuProgram and writes it with
// writeGpuProgram; the runtime (GpuStep.h) and the cost model read it with
// parseGpuProgram. Everything the text alone determines is checked when it
// is parsed; what needs the files it names (the PTX's entries, the
// constants' size) is checked by GpuStep::load. Its arguments and results
// are the step's tensors (StepTensor.h), which step.cpu.json lists too.
//
// Part of mantissa_format: no LLVM, MLIR or runtime headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_FORMAT_GPUPROGRAM_H
#define MANTISSA_FORMAT_GPUPROGRAM_H

#include "mantissa/Format/DType.h"
#include "mantissa/Format/GemmEpilogue.h"
#include "mantissa/Format/StepTensor.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

/// The alignment, in bytes, of the storage every argument and result of a
/// step is bound to: the step's kernels load and store up to this many
/// bytes at once (128 bits), and GpuStep::run refuses storage that is not
/// aligned to it. Device allocations are (256 bytes), and so are the
/// members of the runtime's flat parameter and gradient buffers.
constexpr int64_t kGpuStorageAlignment = 16;

/// One entry of `buffers`.
struct GpuStepBuffer {
  enum class Kind { Argument, Result, Temporary, Constant };
  Kind kind = Kind::Temporary;
  /// Argument or result index.
  int64_t index = 0;
  /// Temporary (in the arena) or constant (in the constants file); bytes
  /// is also set for arguments and results (their tensor's) when parsed.
  int64_t offset = 0, bytes = 0;
};

/// A GEMM operand: element (r, c) of batch i of its stored matrix lies at
/// element offset + i * stride + r + c * ld of `buffer` (cuBLAS's
/// column-major terms); stride 0 reads the same matrix for every batch.
struct GpuGemmOperand {
  int64_t buffer = 0, offset = 0, ld = 1, stride = 0;
  DType dtype = DType::F32;
};

/// One entry of `ops`: a generated kernel or a cuBLAS GEMM.
struct GpuStepOp {
  enum class Kind { Kernel, Gemm };
  Kind kind = Kind::Kernel;
  /// The op and location it came from, for messages.
  std::string source;

  // Kernel: launch `entry` with `grid` blocks, one .u64 per buffer.
  std::string entry;
  int64_t grid = 1;
  std::vector<int64_t> buffers;
  /// Threads that do work, and the loop iterations each runs in order (for
  /// reports: a reduction's length, one for elementwise kernels).
  int64_t threads = 1, serialIterations = 1;
  /// For reports and the cost model, a kernel that is not a loop over
  /// elements (the fused attention): the instructions each thread issues
  /// per serial iteration (weighted by their issue rate: a load or store 4,
  /// exp or log 8), and the launch's matrix flops on the tensor cores.
  int64_t opsPerIteration = 1, tensorFlops = 0;
  /// The ops one launch runs (independent ops grouped into one launch),
  /// each on the launch's first `threads` threads; written when there are
  /// several, for reports.
  struct Member {
    /// Its kernel function before grouping (compiler only) and where it
    /// came from.
    std::string function, source;
    /// Its buffers, as indices into the launch's `buffers`.
    std::vector<unsigned> buffers;
    int64_t threads = 1, serialIterations = 1;
    /// Iteration u of a member runs on thread u * threadStride: a fold of a
    /// reduction's partials runs output u on the warp lanes from u * parts,
    /// each lane loading the partial it computed itself (a divisor of the
    /// block size).
    int64_t threadStride = 1;
    /// Independent iterations each of its `threads` runs: thread t runs
    /// t, t + threads, ... (a large elementwise op, several loads in
    /// flight per thread).
    int64_t elementsPerThread = 1;
    /// A member that runs by rows (0: not): its iterations are `threads`
    /// rows of `rowColumns` each, row r on the threadStride lanes from
    /// r * threadStride (the threads of the fold that computed what the row
    /// reads), lane l running columns l, l + threadStride, ... after a
    /// barrier of the block.
    int64_t rowColumns = 0;
  };
  std::vector<Member> members;

  // Gemm: C = alpha * op(A) * op(B) + beta * C (+ the epilogue), `batch`
  // times, accumulated in fp32 and rounded once into C's dtype.
  bool transa = false, transb = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  double alpha = 1, beta = 0;
  GpuGemmOperand a, b, c;
  /// `epilogue` "bias" adds `bias` (m contiguous elements in c's dtype from
  /// its offset; ld and stride unused) to every column.
  GemmEpilogue epilogue = GemmEpilogue::None;
  GpuGemmOperand bias;
};

/// The whole file.
struct GpuProgram {
  /// Format 2 added GEMM epilogues; format 1 files (none) still read.
  static constexpr int64_t kFormat = 2;
  int64_t format = kFormat;
  std::string stepName;
  /// The files it names, beside it: the PTX, the constants (empty: none)
  /// and the forward-only program for evaluation (empty: none).
  std::string ptxFile, constantsFile, forwardFile;
  int64_t blockSize = 256, arenaBytes = 0;
  std::vector<StepTensor> arguments, results;
  std::vector<GpuStepBuffer> buffers;
  std::vector<GpuStepOp> ops;

  int64_t countOps(GpuStepOp::Kind kind) const;
  /// The argument named `name`, or -1.
  int64_t findArgument(const std::string &name) const;
};

/// How reports name a GEMM op: "gemm MxNxK[ xBATCH] A->C" with A's and C's
/// safetensors dtype names (--cost-report, --op-times).
std::string describeGemm(const GpuStepOp &op);

/// The program as step.gpu.json's text (pretty-printed, keys sorted).
std::string writeGpuProgram(const GpuProgram &program);

/// Parses and checks `text`: every field's type and range, roles, dtypes
/// and byte counts, buffer ids, arena bounds, what each GEMM operand
/// reaches, GEMM dtype combinations, file names that stay beside the
/// program. On failure returns false with `error` saying what and where
/// ("op 3 (linalg.matmul): operand a: ..."), without a file name.
bool parseGpuProgram(const std::string &text, GpuProgram &program,
                     std::string &error);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_FORMAT_GPUPROGRAM_H
