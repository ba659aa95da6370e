//===- TrainToLLVM.h - train.step to LLVM-dialect CPU code ------*- C++ -*-===//
//
// The CPU pipeline after mantissa-lower-train-to-linalg: bufferization,
// loops, math approximations and the LLVM dialect, for the JIT and for AOT.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_TRAINTOLLVM_H
#define MANTISSA_CONVERSION_TRAINTOLLVM_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <optional>

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace mlir::mantissa {

/// Runs a textual pass pipeline ("builtin.module(...)") on `module`,
/// registering the upstream passes it may name (conversions, bufferization,
/// linalg, GPU) once per process.
LogicalResult runPassPipeline(ModuleOp module, StringRef pipeline);

/// Registers the dialects, bufferization models and LLVM IR translations
/// that lowerTrainStepsToLLVM needs.
void registerTrainToLLVMDialects(DialectRegistry &registry);

/// Registers mantissa-train-cpu-pipeline and every pass it names (Mantissa's
/// and the upstream ones), once per process.
void registerTrainCpuPipelinePasses();

/// Registers the pipeline `mantissa-train-cpu-pipeline{gemm=library|loops}`:
/// lowerTrainStepsToLLVM as one pipeline of registered passes.
void registerTrainCpuPipeline();

/// How the CPU step computes matrix products: calls of the runtime's GEMM
/// (oneDNN; fp32 accumulation in the library's order), or generated loops
/// (bit-identical to the reference interpreter).
enum class CpuGemmMode { Library, Loops };

/// "library" or "loops".
std::optional<CpuGemmMode> parseCpuGemmMode(StringRef text);
StringRef stringifyCpuGemmMode(CpuGemmMode mode);

/// The mode the environment asks for: MANTISSA_CPU_GEMM=library (the
/// default when unset) or loops. Any other value is reported and exits 1.
CpuGemmMode getCpuGemmMode();

/// Lowers every train.step of `module` to an LLVM-dialect function of the
/// same name with the bare-pointer calling convention: one pointer per
/// argument (row-major, dense), then one pointer per result, which the
/// function fills. bf16 rounds to nearest even without runtime calls. Runs
/// mantissa-train-cpu-pipeline{gemm=`gemm`}; with the library, the module
/// exports `mantissa_cpu_gemm_hook`, which the loader must bind
/// (mantissa/Runtime/CpuGemm.h) before calling the step.
///
/// With `cpu` (MANTISSA_CPU_TARGET's names; empty: no choice, bf16 products
/// stay bf16), the bf16 products of a step for a CPU on which oneDNN has no
/// bf16 matmul (!widensBf16Products) become fp32 products of their widened
/// operands (mantissa-widen-bf16-products); `libraryBf16` is the running
/// oneDNN's answer.
LogicalResult lowerTrainStepsToLLVM(ModuleOp module,
                                    CpuGemmMode gemm = getCpuGemmMode(),
                                    StringRef cpu = "",
                                    bool libraryBf16 = true);

/// Whether `cpu` (`native`, the host, or an x86-64 CPU name as LLVM knows
/// it) has every one of `features` (LLVM's names: "avx2", "avx512f").
bool cpuHasFeatures(StringRef cpu, ArrayRef<StringRef> features);

/// Whether `cpu` has what oneDNN 2.x's bf16 matmul needs: AVX-512 F, BW,
/// VL and DQ (its avx512_core).
bool cpuHasBf16Matmul(StringRef cpu);

/// Whether a step compiled for `cpu`, with a oneDNN that computes bf16
/// matmuls (`libraryBf16`) or not, computes its bf16 products as fp32
/// products of widened operands (mantissa-widen-bf16-products).
inline bool widensBf16Products(StringRef cpu, bool libraryBf16) {
  return !libraryBf16 || !cpuHasBf16Matmul(cpu);
}

/// The first half of lowerTrainStepsToLLVM, shared with the GPU: lowers
/// every train.step to a func.func on memrefs (linalg ops on buffers,
/// results as out-parameters after the arguments, every temporary freed by
/// a memref.dealloc, copies as linalg.copy). `tensorPasses` (pipeline
/// text, may be empty) run on the fused linalg ops before bufferization.
LogicalResult bufferizeTrainSteps(ModuleOp module, StringRef tensorPasses = "");

/// bufferizeTrainSteps's passes as pipeline text (without the enclosing
/// `builtin.module(...)`), with `tensorPasses` after the tensor-level
/// fusion: one definition for the CPU and the GPU pipelines.
std::string bufferizationPipelineText(StringRef tensorPasses = "");

/// The second half: linalg to loops, math approximations and the LLVM
/// dialect (bare-pointer calling convention) for the functions of a
/// bufferized module.
LogicalResult lowerBufferizedToLLVM(ModuleOp module);

/// Adds `void entryName(void **values, ...)`, which calls the LLVM function
/// `callee` with its i-th parameter taken from values[i] (each slot holds a
/// pointer-sized value), or with `indirect` from what values[i] points at
/// (as cuLaunchKernel's kernelParams give each parameter). The callee's
/// last `passThrough` parameters are the entry's own after `values`: a
/// fixed C signature for any function.
void addPackedEntry(ModuleOp module, StringRef callee, StringRef entryName,
                    bool indirect = false, unsigned passThrough = 0);

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_TRAINTOLLVM_H
