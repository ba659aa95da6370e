//===- GpuCostModel.h - Predicted cost of a step's GPU program --*- C++ -*-===//
//
// A first-principles model of how long a step's GPU program
// (step.gpu.json, docs/gpu-step.md) takes on a named device: for every
// kernel and GEMM the bytes it moves, the flops it does and a predicted
// time, and the predicted step. It reads the program the runtime replays,
// so it guides GPU work without a GPU; docs/gpu-cost-model.md says what it
// assumes and how to calibrate it when a device is lent.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_ANALYSIS_GPUCOSTMODEL_H
#define MANTISSA_ANALYSIS_GPUCOSTMODEL_H

#include "mantissa/Format/GpuProgram.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir::mantissa {

/// What the model knows of a device. Figures are per second.
struct GpuDeviceModel {
  std::string name;
  std::string description;
  /// Device-to-device copy bandwidth as measured (bytes/s).
  double copyBandwidth = 0;
  /// Dense tensor-core peaks for bf16/fp16 and TF32 operands, and the fp32
  /// (CUDA core) peak, with fp32 accumulation (flop/s).
  double bf16Flops = 0, tf32Flops = 0, fp32Flops = 0;
  int streamingMultiprocessors = 0;
  int maxThreadsPerMultiprocessor = 0;
  /// The cost of one more kernel node in a CUDA graph (s).
  double launchSeconds = 0;
  /// Global memory latency as a kernel with one scalar access in flight per
  /// thread sees it (s): with full occupancy, bytes in flight / latency is
  /// the bandwidth such a kernel reaches.
  double memoryLatency = 0;
  /// One iteration of a loop a thread runs in order over global memory (s):
  /// a load and the accumulator's round trip.
  double serialIterationSeconds = 0;
  /// The output tile of one GEMM thread block (elements per side).
  int gemmTile = 0;
};

/// The device `name` (`h200`, `h100`), or nullopt.
std::optional<GpuDeviceModel> lookupGpuDevice(llvm::StringRef name);
/// The names lookupGpuDevice knows, comma-separated, the default (`h200`)
/// first, for messages and help.
std::string listGpuDevices();
/// Prices `device` with a copy bandwidth measured on the machine at hand
/// (bytes/s) instead of its profile's: a PCIe H100 reaches less than the
/// SXM's. The description says so, so that a report shows it.
void setCopyBandwidth(GpuDeviceModel &device, double bytesPerSecond);

/// One op of the program as the model sees it.
struct OpCost {
  std::string name;
  /// `kernel`, `gemm` or `update`.
  std::string kind;
  /// For reports: `elementwise`, `serial loop`, `gemm bf16`, `gemm f32`, ...
  std::string costClass;
  double bytes = 0;
  double flops = 0;
  double predictedSeconds = 0;
  /// Which limit set the time: `memory`, `latency`, `compute`, `launch`.
  std::string boundBy;
  std::string source;
};

struct StepCost {
  GpuDeviceModel device;
  std::string step;
  std::vector<OpCost> ops;
  int64_t kernels = 0, gemms = 0;
  double predictedSeconds = 0;
};

/// The optimizer update's traffic after the step (the fused AdamW kernels),
/// modelled as one memory-bound pass: `bytes` per step in `kernels` launches.
struct UpdateTraffic {
  double bytes = 0;
  int64_t kernels = 0;
};

/// Predicts `program` (a parsed step.gpu.json) on `device`, plus `update`.
StepCost predictGpuStep(const rt::GpuProgram &program,
                        const GpuDeviceModel &device,
                        const UpdateTraffic &update);

/// A table: the device's figures, the ops' classes with counts and totals,
/// and the costliest ops.
void printCostTable(const StepCost &cost, llvm::raw_ostream &os);
/// JSON: `device`, `predicted_step_ms`, `kernel_count`, `gemm_count`,
/// `classes`, and `kernels` (each `name`, `kind`, `class`, `bytes`,
/// `flops`, `predicted_us`, `bound_by`, `source`).
void printCostJson(const StepCost &cost, llvm::raw_ostream &os);

} // namespace mlir::mantissa

#endif // MANTISSA_ANALYSIS_GPUCOSTMODEL_H
