//===- GpuStepFuzzer.cpp - libFuzzer entry for step.gpu.json --------------===//
//
// Writes each input as step.gpu.json beside a small fixed step.ptx and
// step.constants.bin and loads it with GpuStep::load, which needs no
// device: tensors, buffers, kernel and GEMM operand bounds, PTX entries.
// Any crash, sanitizer report or leak is a bug; errors are the expected
// outcome. Use the seeds in corpus/gpu_step and gpu_step.dict.
//
// The PTX holds the entries of mlp.pt2's programs (step and forward-only),
// declarations only, since the loader reads nothing else. A program may
// also name step.gpu.json itself as its PTX, which puts the PTX entry
// scanner on fuzzed text (corpus/gpu_step/ptx_is_program.json does).
//
//===----------------------------------------------------------------------===//

#include "FuzzScratch.h"

#include "mantissa/Runtime/GpuStep.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

/// Each entry of the fixed PTX with its number of .u64 parameters.
const struct {
  const char *name;
  int params;
} kEntries[] = {
    {"mantissa_convert_bf16_to_f16", 3},
    {"mantissa_convert_bf16_to_f32", 3},
    {"mantissa_convert_f16_to_bf16", 3},
    {"mantissa_convert_f16_to_f32", 3},
    {"mantissa_convert_f32_to_bf16", 3},
    {"mantissa_convert_f32_to_f16", 3},
    {"mlp_forward_k1", 3},
    {"mlp_forward_k3", 1},
    {"mlp_forward_k4", 4},
    {"mlp_forward_k5", 2},
    {"mlp_k1", 3},
    {"mlp_k2", 2},
    {"mlp_k4", 3},
    {"mlp_k5", 1},
    {"mlp_k6", 3},
    {"mlp_k7", 2},
    {"mlp_k8", 3},
    {"mlp_k11", 1},
    {"mlp_k12", 2},
    {"mlp_k13", 2},
    {"mlp_k14", 3},
    {"mlp_k16", 1},
    {"mlp_k17", 2},
    {"mlp_k18", 2},
    {"mlp_k19", 2},
    {"mlp_k20", 2},
};

std::string fixedPtx() {
  std::string ptx = ".version 8.0\n.target sm_90\n.address_size 64\n\n";
  for (const auto &entry : kEntries) {
    ptx += std::string(".visible .entry ") + entry.name + "(";
    for (int i = 0; i < entry.params; ++i)
      ptx += std::string(i ? ", " : "") + ".param .u64 " + entry.name +
             "_param_" + std::to_string(i);
    ptx += ")\n{\n\tret;\n}\n";
  }
  // An entry the loader must refuse (not every parameter is .u64).
  ptx += ".visible .entry mantissa_fuzz_f32(.param .f32 x, .param .u64 y)\n"
         "{\n\tret;\n}\n";
  return ptx;
}

/// The directory with the fixed PTX and constants written, once per process.
const std::string &programDirectory() {
  static const std::string directory = [] {
    const std::string &dir = mantissa_fuzz::scratchDirectory();
    std::string ptx = fixedPtx();
    mantissa_fuzz::writeFileOrDie(dir + "/step.ptx", ptx);
    mantissa_fuzz::writeFileOrDie(dir + "/step.forward.ptx", ptx);
    std::string constants(1024, '\0');
    for (size_t i = 0; i < constants.size(); ++i)
      constants[i] = char(i * 7);
    mantissa_fuzz::writeFileOrDie(dir + "/step.constants.bin", constants);
    return dir;
  }();
  return directory;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace mlir::mantissa::rt;
  const std::string &dir = programDirectory();
  std::string path = dir + "/step.gpu.json";
  mantissa_fuzz::writeFileOrDie(path, data, size);
  std::string error;
  std::unique_ptr<GpuStep> step = GpuStep::load(path, error);
  if (!step) {
    mantissa_fuzz::noteError(error);
    // A refusal must say why.
    if (error.empty())
      std::abort();
    return 0;
  }
  // What the trainer reads of a loaded program before any device is
  // involved; the loader promised it is consistent.
  for (size_t i = 0; i < step->ops().size(); ++i)
    (void)step->describeOp(i);
  for (size_t i = 0; i < step->arguments().size(); ++i)
    (void)step->indexBound(i);
  return 0;
}
