//===- GpuCostModel.cpp - Predicted cost of a step's GPU program ----------===//
//
// Each op of step.gpu.json gets the larger of the times its limits allow,
// plus the cost of launching it inside the step's CUDA graph:
//
// - a kernel moves the bytes of the buffers it names (an upper bound: a
//   kernel that touches a slice is charged the whole buffer) at the
//   bandwidth its parallelism sustains: with one scalar access in flight
//   per thread, min(threads, resident threads) * bytes per thread-iteration
//   / latency, at most the copy bandwidth; a kernel whose threads each run
//   `serial_iterations` in order also takes that many loop iterations one
//   after the other, per wave of resident threads, and a launch of several
//   ops the sum of its members' such times (each on its own threads);
// - a GEMM does 2 m n k flops per batch element at its operands' peak, in
//   waves of output tiles over the multiprocessors (a 128x128 tile per
//   block: a small product leaves most of the chip idle), and moves its
//   operands and result once;
// - the update is one memory-bound pass over the optimizer state.
//
// The device figures are first principles and this project's own
// measurements (../shared/TOOLCHAIN.md); docs/gpu-cost-model.md lists them
// and how to calibrate them against a measured step. Two devices: the H200
// (measured) and the H100 SXM (the same chip; its memory priced from the
// H200's measurements until one is lent), and a measured copy bandwidth may
// replace either's (setCopyBandwidth).
//
//===----------------------------------------------------------------------===//

#include "mantissa/Analysis/GpuCostModel.h"
#include "mantissa/Format/DType.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>
#include <map>

using namespace mlir::mantissa;
using llvm::StringRef;
namespace rt = mlir::mantissa::rt;

namespace {
/// The sm_90 figures the H100 SXM and the H200 share: the same chip (132
/// multiprocessors of 2048 resident threads, the same clocks) behind
/// different memory, so only the memory figures tell them apart.
GpuDeviceModel hopperSxm() {
  GpuDeviceModel device;
  // Dense peaks (no sparsity) from the H100/H200 SXM data sheet.
  device.bf16Flops = 989e12;
  device.tf32Flops = 494e12;
  device.fp32Flops = 67e12;
  device.streamingMultiprocessors = 132;
  device.maxThreadsPerMultiprocessor = 2048;
  // A kernel node after another inside a CUDA graph.
  device.launchSeconds = 2.0e-6;
  // A dependent global load/store round trip per iteration (L1/L2 hits).
  device.serialIterationSeconds = 40e-9;
  device.gemmTile = 128;
  return device;
}

/// The H200's copy bandwidth as measured here against its 4.8 TB/s nominal
/// HBM3e bandwidth: the share of the nominal figure a device-to-device copy
/// reaches, which prices a device that has not been measured.
constexpr double kH200CopyBandwidth = 4.2e12;
constexpr double kH200NominalBandwidth = 4.8e12;

GpuDeviceModel h200() {
  GpuDeviceModel device = hopperSxm();
  device.name = "h200";
  device.description = "NVIDIA H200 (SXM, 132 SMs, HBM3e)";
  // Measured here: device-to-device copy 4182-4245 GB/s (TOOLCHAIN.md).
  device.copyBandwidth = kH200CopyBandwidth;
  // Calibrated so that a scalar-load kernel at full occupancy moving 6 B per
  // element reaches the 2195 GB/s measured on the H200 (TOOLCHAIN.md):
  // 270336 threads * 6 B / 2.195e12 B/s = 739 ns.
  device.memoryLatency = 739e-9;
  return device;
}

GpuDeviceModel h100() {
  GpuDeviceModel device = hopperSxm();
  device.name = "h100";
  // 80 GB of HBM3 at 3.35 TB/s nominal; the model does not price capacity.
  device.description = "NVIDIA H100 (SXM, 132 SMs, HBM3)";
  // Not yet measured: the nominal 3.35 TB/s at the share of its nominal
  // bandwidth the H200's copy reached (4.2 of 4.8 TB/s, 0.875), 2.93 TB/s.
  // A measured figure replaces it (--cost-bandwidth-gbs; the device check
  // measures one, bench/device/check_gpu.sh).
  device.copyBandwidth = 3.35e12 * (kH200CopyBandwidth / kH200NominalBandwidth);
  // The H200's fitted latency: the same multiprocessors, L2 and memory
  // controllers, and HBM3's latency close to HBM3e's, so a kernel with one
  // scalar access in flight per thread is bound by the same latency, not
  // by the slower memory (its 2195 GB/s at full occupancy is below either
  // copy bandwidth). To calibrate when an H100 is lent.
  device.memoryLatency = 739e-9;
  return device;
}

/// Every device the model knows, the default (h200) first: lookup and the
/// list in messages both read it.
struct KnownDevice {
  StringRef name;
  GpuDeviceModel (*make)();
};
constexpr KnownDevice kDevices[] = {{"h200", h200}, {"h100", h100}};
} // namespace

std::optional<GpuDeviceModel> mlir::mantissa::lookupGpuDevice(StringRef name) {
  for (const KnownDevice &known : kDevices)
    if (known.name == name)
      return known.make();
  return std::nullopt;
}

std::string mlir::mantissa::listGpuDevices() {
  std::string names;
  for (const KnownDevice &known : kDevices)
    names += (names.empty() ? "" : ", ") + known.name.str();
  return names;
}

void mlir::mantissa::setCopyBandwidth(GpuDeviceModel &device,
                                      double bytesPerSecond) {
  device.copyBandwidth = bytesPerSecond;
  device.description += llvm::formatv(", copy bandwidth given as {0:f0} GB/s",
                                      bytesPerSecond / 1e9);
}

namespace {
/// The unit of global memory transactions.
constexpr int64_t kSectorBytes = 32;

/// A GEMM operand's bytes: `elements` per batch element.
double operandBytes(const rt::GpuGemmOperand &operand, double elements) {
  return elements * double(rt::elementSize(operand.dtype));
}

/// One line of a time decision: the largest limit wins.
void decide(OpCost &op, double launch,
            std::initializer_list<std::pair<double, StringRef>> limits) {
  double longest = 0;
  StringRef bound = "launch";
  for (auto [seconds, name] : limits)
    if (seconds > longest)
      longest = seconds, bound = name;
  op.predictedSeconds = longest + launch;
  op.boundBy = longest > launch ? bound.str() : "launch";
}

OpCost predictKernel(const rt::GpuStepOp &op, const rt::GpuProgram &program,
                     const GpuDeviceModel &device) {
  OpCost cost;
  cost.kind = "kernel";
  cost.name = op.entry;
  cost.source = op.source;
  double threads = double(op.threads);
  double serial = double(op.serialIterations);
  std::vector<int64_t> seen;
  for (int64_t id : op.buffers)
    if (!llvm::is_contained(seen, id)) {
      seen.push_back(id);
      cost.bytes += double(program.buffers[size_t(id)].bytes);
    }
  double resident = double(device.streamingMultiprocessors) *
                    device.maxThreadsPerMultiprocessor;
  // A launch that runs several ops runs them one after the other in each
  // thread, each on the launch's first threads: the wave that holds thread
  // t waits for every member with more than t threads, so each member adds
  // its own serial loop to as many waves as it has. One operation per
  // thread-iteration: the kernels' bodies are short elementwise or
  // accumulate steps.
  // A member with a thread stride (a fold of partials, one output per
  // `stride` threads) spreads its threads over that many more.
  // A member whose threads each run several independent iterations
  // (elements_per_thread) does that many times the work; its loads are in
  // flight together, so its bytes per thread are that many times more.
  struct Share {
    double threads, serial, elements;
  };
  std::vector<Share> members;
  for (const rt::GpuStepOp::Member &member : op.members)
    members.push_back({double(member.threads * member.threadStride),
                       double(member.serialIterations),
                       double(member.elementsPerThread)});
  if (members.empty())
    members.push_back({threads, serial, 1});
  double serialSeconds = 0;
  for (auto [memberThreads, memberSerial, elements] : members) {
    cost.flops += memberThreads * memberSerial * elements;
    if (memberSerial > 1)
      serialSeconds += std::ceil(memberThreads / resident) * memberSerial *
                       device.serialIterationSeconds;
  }
  cost.costClass = serial > 1 ? "serial loop" : "elementwise";
  // A kernel that says what it issues (the fused attention): its weighted
  // instructions at the fp32 peak's instruction rate (an FMA counts two
  // flops there, one instruction), then its matrix flops at the tensor
  // cores' bf16 peak, one after the other (the same warps issue both).
  double compute = cost.flops / device.fp32Flops;
  if (op.tensorFlops > 0 || op.opsPerIteration > 1) {
    double instructions = threads * serial * double(op.opsPerIteration);
    cost.flops = instructions + double(op.tensorFlops);
    compute = instructions / (device.fp32Flops / 2) +
              double(op.tensorFlops) / device.bf16Flops;
    if (op.tensorFlops > 0)
      cost.costClass = "attention";
  }

  double active = std::min(threads, resident);
  // Bytes a thread has in flight: its scalar accesses of one iteration, or,
  // walking a row in order, the 32-byte sector that serves the next few.
  double inFlight =
      serial > 1 ? double(kSectorBytes) : cost.bytes / std::max(1.0, threads);
  double bandwidth =
      std::min(device.copyBandwidth, active * inFlight / device.memoryLatency);
  double memory = bandwidth > 0 ? cost.bytes / bandwidth : 0;
  decide(
      cost, device.launchSeconds,
      {{memory, "memory"}, {serialSeconds, "latency"}, {compute, "compute"}});
  return cost;
}

OpCost predictGemm(const rt::GpuStepOp &op, const GpuDeviceModel &device) {
  OpCost cost;
  cost.kind = "gemm";
  cost.source = op.source;
  double m = double(op.m), n = double(op.n), k = double(op.k),
         batch = double(op.batch);
  cost.name = rt::describeGemm(op);
  cost.flops = 2 * m * n * k * batch;
  cost.bytes = batch * (operandBytes(op.a, m * k) + operandBytes(op.b, k * n) +
                        operandBytes(op.c, m * n) * (op.beta != 0 ? 2 : 1));
  if (op.epilogue == rt::GemmEpilogue::Bias)
    cost.bytes += m * double(rt::elementSize(op.c.dtype));
  bool lowPrecision =
      op.a.dtype == rt::DType::BF16 || op.a.dtype == rt::DType::F16;
  // fp32 products as the runtime runs them by default (no TF32).
  double peak = lowPrecision ? device.bf16Flops : device.fp32Flops;
  cost.costClass = lowPrecision ? "gemm bf16/fp16" : "gemm fp32";
  double tile = double(device.gemmTile);
  double tiles = std::ceil(m / tile) * std::ceil(n / tile) * batch;
  double waves = std::ceil(tiles / device.streamingMultiprocessors);
  // A wave runs one tile per multiprocessor at 1/SMs of the peak.
  double compute =
      waves * 2 * tile * tile * k / (peak / device.streamingMultiprocessors);
  double memory = cost.bytes / device.copyBandwidth;
  decide(cost, device.launchSeconds,
         {{memory, "memory"}, {compute, "compute"}});
  return cost;
}
} // namespace

StepCost mlir::mantissa::predictGpuStep(const rt::GpuProgram &program,
                                        const GpuDeviceModel &device,
                                        const UpdateTraffic &update) {
  StepCost cost;
  cost.device = device;
  cost.step = program.stepName;
  for (const rt::GpuStepOp &op : program.ops) {
    if (op.kind == rt::GpuStepOp::Kind::Kernel) {
      cost.ops.push_back(predictKernel(op, program, device));
      ++cost.kernels;
    } else {
      cost.ops.push_back(predictGemm(op, device));
      ++cost.gemms;
    }
  }
  if (update.kernels > 0) {
    OpCost op;
    op.kind = "update";
    op.costClass = "update";
    op.name = "adamw update";
    op.source = "the fused AdamW kernels of every shard group";
    op.bytes = update.bytes;
    decide(op, update.kernels * device.launchSeconds,
           {{update.bytes / device.copyBandwidth, "memory"}});
    cost.ops.push_back(op);
  }
  for (const OpCost &op : cost.ops)
    cost.predictedSeconds += op.predictedSeconds;
  return cost;
}

namespace {
struct ClassTotal {
  int64_t count = 0;
  double bytes = 0, flops = 0, seconds = 0;
};

std::map<std::string, ClassTotal> totalsByClass(const StepCost &cost) {
  std::map<std::string, ClassTotal> totals;
  for (const OpCost &op : cost.ops) {
    ClassTotal &total = totals[op.costClass];
    ++total.count;
    total.bytes += op.bytes;
    total.flops += op.flops;
    total.seconds += op.predictedSeconds;
  }
  return totals;
}
} // namespace

void mlir::mantissa::printCostTable(const StepCost &cost,
                                    llvm::raw_ostream &os) {
  const GpuDeviceModel &d = cost.device;
  os << "Predicted GPU step @" << cost.step << " on " << d.description << "\n";
  os << llvm::formatv("  copy {0:f0} GB/s, bf16 {1:f0} / tf32 {2:f0} / fp32 "
                      "{3:f0} TFLOP/s, {4:f1} us per launch in a CUDA graph\n",
                      d.copyBandwidth / 1e9, d.bf16Flops / 1e12,
                      d.tf32Flops / 1e12, d.fp32Flops / 1e12,
                      d.launchSeconds * 1e6);
  os << llvm::formatv("predicted step: {0:f3} ms ({1} kernels, {2} GEMMs)\n\n",
                      cost.predictedSeconds * 1e3, cost.kernels, cost.gemms);
  os << "class             ops     MB       GFLOP    predicted us  share\n";
  for (const auto &[name, total] : totalsByClass(cost))
    os << llvm::formatv(
        "{0,-16} {1,5} {2,8:f2} {3,10:f3} {4,14:f1} {5,6:f1}%\n", name,
        total.count, total.bytes / 1e6, total.flops / 1e9, total.seconds * 1e6,
        100 * total.seconds / std::max(cost.predictedSeconds, 1e-30));
  std::vector<const OpCost *> sorted;
  for (const OpCost &op : cost.ops)
    sorted.push_back(&op);
  llvm::stable_sort(sorted, [](const OpCost *a, const OpCost *b) {
    return a->predictedSeconds > b->predictedSeconds;
  });
  os << "\ncostliest ops                         predicted us  bound by  MB\n";
  for (const OpCost *op : llvm::ArrayRef(sorted).take_front(15))
    os << llvm::formatv("{0,-36} {1,12:f1}  {2,-8}  {3:f3}  {4}\n", op->name,
                        op->predictedSeconds * 1e6, op->boundBy,
                        op->bytes / 1e6, op->source);
}

void mlir::mantissa::printCostJson(const StepCost &cost,
                                   llvm::raw_ostream &os) {
  llvm::json::OStream json(os, /*IndentSize=*/1);
  const GpuDeviceModel &d = cost.device;
  json.object([&] {
    json.attributeObject("device", [&] {
      json.attribute("name", d.name);
      json.attribute("description", d.description);
      json.attribute("copy_bandwidth_gbs", d.copyBandwidth / 1e9);
      json.attribute("bf16_tflops", d.bf16Flops / 1e12);
      json.attribute("tf32_tflops", d.tf32Flops / 1e12);
      json.attribute("fp32_tflops", d.fp32Flops / 1e12);
      json.attribute("launch_us", d.launchSeconds * 1e6);
      json.attribute("memory_latency_ns", d.memoryLatency * 1e9);
      json.attribute("serial_iteration_ns", d.serialIterationSeconds * 1e9);
    });
    json.attribute("step", cost.step);
    json.attribute("predicted_step_ms", cost.predictedSeconds * 1e3);
    json.attribute("kernel_count", cost.kernels);
    json.attribute("gemm_count", cost.gemms);
    json.attributeObject("classes", [&] {
      for (const auto &[name, total] : totalsByClass(cost))
        json.attributeObject(name, [&] {
          json.attribute("ops", total.count);
          json.attribute("bytes", total.bytes);
          json.attribute("flops", total.flops);
          json.attribute("predicted_us", total.seconds * 1e6);
        });
    });
    json.attributeArray("kernels", [&] {
      for (const OpCost &op : cost.ops)
        json.object([&] {
          json.attribute("name", op.name);
          json.attribute("kind", op.kind);
          json.attribute("class", op.costClass);
          json.attribute("bytes", op.bytes);
          json.attribute("flops", op.flops);
          json.attribute("predicted_us", op.predictedSeconds * 1e6);
          json.attribute("bound_by", op.boundBy);
          json.attribute("source", op.source);
        });
    });
  });
  os << "\n";
}
