//===- CpuProgram.h - The schema of step.cpu.json ---------------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The one definition of the CPU step program's file, `step.cpu.json`
// (docs/training.md): the compiler (Driver/CpuStepWriter.cpp) fills a
// CpuProgram and writes it with writeCpuProgram; the runtime
// (Runtime/CpuStep.h) reads it with parseCpuProgram and then loads the
// libraries it names. It names a shared library whose entry takes one
// pointer per argument, then one per result, and optionally the
// forward-only step in a second library with the same arguments; its
// arguments and results are the step's tensors (StepTensor.h), which
// step.gpu.json lists too. Everything the text alone determines is checked
// when it is parsed; what needs the libraries (their entries, the GEMM
// hook, this CPU's extensions) is checked by CpuStep::load.
//
// Part of mantissa_format: no LLVM, MLIR or runtime headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_FORMAT_CPUPROGRAM_H
#define MANTISSA_FORMAT_CPUPROGRAM_H

#include "mantissa/Format/StepTensor.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

/// The version the compiler writes. Version 2 adds cpu_gemm_abi: the
/// libraries' matrix products call the runtime (CpuGemmAbi.h) with
/// descriptors of that version; the runtime reads versions 1 and 2.
constexpr int kCpuProgramVersion = 2;

/// One compiled step: its library (relative to the program's directory),
/// its entry symbol and its results (exactly one of them the loss).
struct CpuProgramLibrary {
  std::string library, entry;
  std::vector<StepTensor> results;
};

struct CpuProgram {
  int version = kCpuProgramVersion;
  /// The GEMM descriptors' version (0: a version 1 program, whose
  /// libraries call no runtime products).
  int64_t cpuGemmAbi = 0;
  /// The compiling CPU and the extensions the libraries may use
  /// (rt::checkCompiledFor).
  std::string targetCpu;
  std::optional<std::vector<std::string>> targetFeatures;
  /// The line a run prints once (rt::warnOfWidenedProductsOnce) when the
  /// compiler made the step's bf16 products fp32 products of widened
  /// operands (mantissa-widen-bf16-products), saying why; empty when it did
  /// not (`widened_bf16_products`, absent then).
  std::string widenedBf16Products;
  std::vector<StepTensor> arguments;
  CpuProgramLibrary step;
  std::optional<CpuProgramLibrary> forward;
};

/// step.cpu.json's text for `program` (2-space indented JSON, keys sorted,
/// with a final newline).
std::string writeCpuProgram(const CpuProgram &program);

/// Parses and checks step.cpu.json's `text` into `out`; on failure returns
/// false with `error` saying what and where (without the file's path).
bool parseCpuProgram(const std::string &text, CpuProgram &out,
                     std::string &error);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_FORMAT_CPUPROGRAM_H
