//===- GpuStep.cpp - A whole training step on the GPU ---------------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/GpuStep.h"
#include "mantissa/Format/StepTensorJson.h"
#include "mantissa/Runtime/Artifact.h"
#include "mantissa/Runtime/StepInputs.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

using namespace mlir::mantissa::rt;
using json = nlohmann::json;

using detail::ProgramError;

namespace {

/// The file's name for a dtype in conversion kernels ("f32", "bf16").
const char *kernelDTypeName(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "f32";
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "f16";
  default:
    return nullptr;
  }
}

std::string dtypeText(DType dtype) {
  return std::string(safeTensorsDTypeName(dtype));
}

std::string conversionEntry(DType from, DType to) {
  return std::string("mantissa_convert_") + kernelDTypeName(from) + "_to_" +
         kernelDTypeName(to);
}

constexpr DType kConvertible[] = {DType::F32, DType::BF16, DType::F16};

/// Every `.entry` of the PTX with the types of its parameters ("u64",
/// "f32", ...; "" for a declaration this reader does not know).
std::map<std::string, std::vector<std::string>>
ptxEntries(const std::string &ptx) {
  std::map<std::string, std::vector<std::string>> entries;
  auto isName = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
           c == '$' || c == '.';
  };
  auto skipSpace = [&](size_t at) {
    while (at < ptx.size() && std::isspace(static_cast<unsigned char>(ptx[at])))
      ++at;
    return at;
  };
  for (size_t at = ptx.find(".entry"); at != std::string::npos;
       at = ptx.find(".entry", at + 6)) {
    if ((at > 0 && !std::isspace(static_cast<unsigned char>(ptx[at - 1]))) ||
        at + 6 >= ptx.size() ||
        !std::isspace(static_cast<unsigned char>(ptx[at + 6])))
      continue;
    size_t begin = skipSpace(at + 6), end = begin;
    while (end < ptx.size() && isName(ptx[end]))
      ++end;
    std::string entry = ptx.substr(begin, end - begin);
    size_t open = skipSpace(end);
    std::vector<std::string> params;
    if (open < ptx.size() && ptx[open] == '(') {
      size_t close = ptx.find(')', open);
      if (close == std::string::npos)
        close = ptx.size();
      std::string list = ptx.substr(open + 1, close - open - 1);
      size_t from = 0;
      while (from < list.size()) {
        size_t comma = list.find(',', from);
        if (comma == std::string::npos)
          comma = list.size();
        std::string param = list.substr(from, comma - from);
        from = comma + 1;
        size_t p = param.find(".param");
        if (p == std::string::npos)
          continue;
        size_t t = param.find_first_not_of(" \t\r\n", p + 6);
        std::string type;
        if (t != std::string::npos && param[t] == '.') {
          size_t e = t + 1;
          while (e < param.size() && isName(param[e]) && param[e] != '.')
            ++e;
          type = param.substr(t + 1, e - t - 1);
        }
        params.push_back(type);
      }
    }
    if (!entry.empty())
      entries[entry] = params;
  }
  return entries;
}

} // namespace

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

std::unique_ptr<GpuStep> GpuStep::load(const std::string &jsonPath,
                                       std::string &error) {
  std::unique_ptr<GpuStep> step(new GpuStep());
  step->jsonPath = jsonPath;
  std::vector<uint8_t> text;
  if (!readWholeFile(jsonPath, text)) {
    error = jsonPath + ": cannot read the GPU step program";
    return nullptr;
  }
  std::string parseError;
  if (!parseGpuProgram(std::string(text.begin(), text.end()), step->file,
                       parseError)) {
    error = jsonPath + ": " + parseError;
    return nullptr;
  }
  const GpuProgram &file = step->file;
  // The files it names lie beside it (parseGpuProgram allows plain names).
  size_t slash = jsonPath.find_last_of('/');
  std::string directory =
      slash == std::string::npos ? "." : jsonPath.substr(0, slash);
  auto beside = [&](const std::string &name) { return directory + "/" + name; };
  try {
    if (!file.forwardFile.empty())
      step->forwardPath = beside(file.forwardFile);
    step->ptxPath = beside(file.ptxFile);
    std::vector<uint8_t> ptx;
    if (!readWholeFile(step->ptxPath, ptx))
      throw ProgramError{"cannot read the PTX " + step->ptxPath};
    step->ptx.assign(ptx.begin(), ptx.end());
    if (!file.constantsFile.empty()) {
      step->constantsPath = beside(file.constantsFile);
      if (!readWholeFile(step->constantsPath, step->constants))
        throw ProgramError{"cannot read the constants " + step->constantsPath};
      for (size_t i = 0; i < file.buffers.size(); ++i) {
        const GpuStepBuffer &buffer = file.buffers[i];
        if (buffer.kind == GpuStepBuffer::Kind::Constant &&
            buffer.bytes > int64_t(step->constants.size()) - buffer.offset)
          throw ProgramError{
              "buffer " + std::to_string(i) + ": bytes [" +
              std::to_string(buffer.offset) + ", " +
              std::to_string(uint64_t(buffer.offset) + uint64_t(buffer.bytes)) +
              ") lie past the end of " + step->constantsPath + " (" +
              std::to_string(step->constants.size()) + " bytes)"};
      }
    }
    std::map<std::string, std::vector<std::string>> entries =
        ptxEntries(step->ptx);
    auto checkEntry = [&](const std::string &entry, size_t params,
                          const std::string &what) {
      auto it = entries.find(entry);
      if (it == entries.end())
        throw ProgramError{what + ": " + step->ptxPath + " has no entry '" +
                           entry + "'"};
      for (const std::string &type : it->second)
        if (type != "u64")
          throw ProgramError{what + ": entry '" + entry + "' takes a ." + type +
                             " parameter; every parameter must be .u64"};
      if (it->second.size() != params)
        throw ProgramError{what + ": entry '" + entry + "' takes " +
                           std::to_string(it->second.size()) +
                           " parameters, given " + std::to_string(params)};
    };
    for (DType from : kConvertible)
      for (DType to : kConvertible)
        if (from != to)
          checkEntry(conversionEntry(from, to), 3, "the conversion kernels");
    for (size_t i = 0; i < file.ops.size(); ++i)
      if (file.ops[i].kind == GpuStepOp::Kind::Kernel)
        checkEntry(file.ops[i].entry, file.ops[i].buffers.size(),
                   step->describeOp(i));
  } catch (const ProgramError &e) {
    error = jsonPath + ": " + e.message;
    return nullptr;
  }
  return step;
}

static GemmCall libraryChoice(const GpuStepOp &op) {
  GemmCall call;
  call.aType = op.a.dtype;
  call.epilogue = op.epilogue;
  return call;
}

int64_t GpuStep::ltGemms() const {
  return std::count_if(
      file.ops.begin(), file.ops.end(), [](const GpuStepOp &op) {
        return op.kind == GpuStepOp::Kind::Gemm && libraryChoice(op).usesLt();
      });
}

int64_t GpuStep::biasEpilogues() const {
  return std::count_if(file.ops.begin(), file.ops.end(),
                       [](const GpuStepOp &op) {
                         return op.kind == GpuStepOp::Kind::Gemm &&
                                op.epilogue == GemmEpilogue::Bias;
                       });
}

std::string GpuStep::describeOp(size_t index) const {
  return "op " + std::to_string(index) + " (" + file.ops[index].source + ")";
}

//===----------------------------------------------------------------------===//
// On the device
//===----------------------------------------------------------------------===//

GpuStep::~GpuStep() { detach(); }

void GpuStep::detach() {
  if (!device)
    return;
  std::string ignored;
  device->synchronize(ignored);
  for (DevicePtr pointer : {arenaBase, constantsBase})
    if (pointer)
      device->release(pointer);
  device->destroyGraph(graph);
  device->destroyStream(stream);
  graph = stream = nullptr;
  // (What was timed stays, for the report.)
  for (void *event : events)
    device->destroyEvent(event);
  events.clear();
  graphAddresses.clear();
  checkedAddresses.clear();
  runs = 0;
  if (module)
    device->unloadModule(module);
  arenaBase = constantsBase = 0;
  module = nullptr;
  functions.clear();
  opFunctions.clear();
  device = nullptr;
}

bool GpuStep::attach(CudaDevice &target, std::string &error) {
  if (device) {
    error = jsonPath + ": the step is already attached to a device";
    return false;
  }
  device = &target;
  auto failed = [&](const std::string &message) {
    error = message;
    detach();
    return false;
  };
  std::string deviceError;
  if (!device->loadModule(ptx, ptxPath, module, deviceError))
    return failed(deviceError);
  auto resolve = [&](const std::string &entry) -> void * {
    auto it = functions.find(entry);
    if (it != functions.end())
      return it->second;
    void *function = nullptr;
    if (!device->getFunction(module, entry, ptxPath, function, deviceError))
      return nullptr;
    functions[entry] = function;
    return function;
  };
  for (DType from : kConvertible)
    for (DType to : kConvertible)
      if (from != to && !resolve(conversionEntry(from, to)))
        return failed(deviceError);
  bool anyGemm = false;
  for (size_t i = 0; i < file.ops.size(); ++i) {
    const GpuStepOp &op = file.ops[i];
    void *function = nullptr;
    if (op.kind == GpuStepOp::Kind::Kernel) {
      function = resolve(op.entry);
      if (!function)
        return failed(jsonPath + ": " + describeOp(i) + ": " + deviceError);
    }
    anyGemm |= op.kind == GpuStepOp::Kind::Gemm;
    opFunctions.push_back(function);
  }
  if (anyGemm && !device->openBlas(deviceError))
    return failed(jsonPath +
                  ": the step's matrix products need cuBLAS: " + deviceError);
  if (ltGemms() > 0 && !device->openBlasLt(deviceError))
    return failed(jsonPath +
                  ": the step's bf16/fp16 matrix products and "
                  "epilogues need cuBLASLt: " +
                  deviceError);
  if (file.arenaBytes > 0 &&
      !device->allocate(file.arenaBytes, arenaBase, deviceError))
    return failed(jsonPath + ": the arena of " +
                  std::to_string(file.arenaBytes) + " bytes: " + deviceError);
  if (!constants.empty() &&
      (!device->allocate(int64_t(constants.size()), constantsBase,
                         deviceError) ||
       !device->upload(constantsBase, constants.data(),
                       int64_t(constants.size()), deviceError)))
    return failed(constantsPath + ": " + deviceError);
  const char *sync = std::getenv("MANTISSA_GPU_STEP_SYNC");
  syncEachOp = sync && *sync && std::string(sync) != "0";
  // The step's ops are queued on a stream of their own, so that they can be
  // captured into one CUDA graph (see run); without one they run op by op.
  const char *graphs = std::getenv("MANTISSA_GPU_STEP_GRAPH");
  graphNote.clear();
  replays = 0;
  if (syncEachOp)
    graphNote = "MANTISSA_GPU_STEP_SYNC is set";
  else if (graphs && std::string(graphs) == "0")
    graphNote = "MANTISSA_GPU_STEP_GRAPH=0";
  else if (!device->createStream(stream, deviceError))
    graphNote = deviceError;
  return true;
}

bool GpuStep::launch(void *function, int64_t grid,
                     std::vector<DevicePtr> &params, std::string &error) {
  std::vector<void *> pointers;
  pointers.reserve(params.size());
  for (DevicePtr &param : params)
    pointers.push_back(&param);
  return device->launch(function, unsigned(grid), unsigned(file.blockSize),
                        pointers.data(), error, stream);
}

bool GpuStep::timeOps(std::string &error) {
  if (!device) {
    error = jsonPath + ": timing ops needs the step attached to a device";
    return false;
  }
  while (events.size() < file.ops.size() + 1) {
    void *event = nullptr;
    if (!device->createEvent(event, error)) {
      error = jsonPath + ": timing ops: " + error;
      return false;
    }
    events.push_back(event);
  }
  opTimes.assign(file.ops.size(), 0.0);
  timingRuns = 0;
  if (graph) {
    device->destroyGraph(graph);
    graph = nullptr;
  }
  graphNote = "its ops are timed one by one (--op-times)";
  return true;
}

bool GpuStep::readOpTimes(std::string &error) {
  for (size_t i = 0; i < file.ops.size(); ++i) {
    float ms = 0;
    if (!device->elapsedMilliseconds(events[i], events[i + 1], ms, error)) {
      error = jsonPath + ": timing " + describeOp(i) + ": " + error;
      return false;
    }
    opTimes[i] += double(ms) * 1e3;
  }
  return true;
}

bool GpuStep::enqueue(const std::vector<DevicePtr> &addresses,
                      std::string &error) {
  std::string deviceError;
  std::vector<DevicePtr> params;
  bool timing = !events.empty();
  if (timing && !device->recordEvent(events[0], stream, deviceError)) {
    error = jsonPath + ": " + deviceError;
    return false;
  }
  for (size_t i = 0; i < file.ops.size(); ++i) {
    const GpuStepOp &op = file.ops[i];
    bool ok;
    if (op.kind == GpuStepOp::Kind::Kernel) {
      params.clear();
      for (int64_t id : op.buffers)
        params.push_back(addresses[size_t(id)]);
      ok = launch(opFunctions[i], op.grid, params, deviceError);
    } else {
      auto address = [&](const GpuGemmOperand &operand) {
        return addresses[size_t(operand.buffer)] +
               uint64_t(operand.offset) * elementSize(operand.dtype);
      };
      GemmCall call;
      call.transa = op.transa;
      call.transb = op.transb;
      call.m = op.m;
      call.n = op.n;
      call.k = op.k;
      call.batch = op.batch;
      call.alpha = float(op.alpha);
      call.beta = float(op.beta);
      call.a = address(op.a);
      call.b = address(op.b);
      call.c = address(op.c);
      call.aType = op.a.dtype;
      call.bType = op.b.dtype;
      call.cType = op.c.dtype;
      call.lda = op.a.ld;
      call.ldb = op.b.ld;
      call.ldc = op.c.ld;
      call.strideA = op.a.stride;
      call.strideB = op.b.stride;
      call.strideC = op.c.stride;
      call.epilogue = op.epilogue;
      if (op.epilogue != GemmEpilogue::None)
        call.bias = address(op.bias);
      call.tf32 = tf32 && op.a.dtype == DType::F32;
      ok = device->gemm(call, deviceError, stream);
    }
    if (ok && timing)
      ok = device->recordEvent(events[i + 1], stream, deviceError);
    if (ok && syncEachOp)
      ok = device->synchronize(deviceError);
    if (!ok) {
      error = jsonPath + ": " + describeOp(i) + ": " + deviceError;
      return false;
    }
  }
  return true;
}

bool GpuStep::capture(const std::vector<DevicePtr> &addresses,
                      std::string &error) {
  std::string deviceError;
  if (!device->beginCapture(stream, deviceError)) {
    error = deviceError;
    return false;
  }
  std::string enqueueError;
  bool enqueued = enqueue(addresses, enqueueError);
  // The capture ends whatever happened, so that the stream is usable again.
  void *captured = nullptr;
  bool ended = device->endCapture(stream, captured, deviceError);
  if (!enqueued || !ended) {
    device->destroyGraph(captured);
    error = enqueued ? deviceError : enqueueError;
    return false;
  }
  graph = captured;
  graphAddresses = addresses;
  return true;
}

std::string
GpuStep::findOverlappingStorage(const std::vector<DevicePtr> &addresses) const {
  struct Bound {
    DevicePtr begin, end;
    size_t buffer;
  };
  std::vector<Bound> bound;
  for (size_t i = 0; i < file.buffers.size(); ++i)
    if (file.buffers[i].kind == GpuStepBuffer::Kind::Argument ||
        file.buffers[i].kind == GpuStepBuffer::Kind::Result)
      bound.push_back(
          {addresses[i], addresses[i] + uint64_t(file.buffers[i].bytes), i});
  std::sort(bound.begin(), bound.end(), [](const Bound &a, const Bound &b) {
    return a.begin != b.begin ? a.begin < b.begin : a.buffer < b.buffer;
  });
  // Sorted by start, any overlap shows between neighbours.
  for (size_t i = 1; i < bound.size(); ++i)
    if (bound[i].begin < bound[i - 1].end)
      return describeBoundBuffer(bound[i - 1].buffer) + " and " +
             describeBoundBuffer(bound[i].buffer);
  return std::string();
}

std::string
GpuStep::findMisalignedStorage(const std::vector<DevicePtr> &addresses) const {
  for (size_t i = 0; i < file.buffers.size(); ++i)
    if ((file.buffers[i].kind == GpuStepBuffer::Kind::Argument ||
         file.buffers[i].kind == GpuStepBuffer::Kind::Result) &&
        addresses[i] % uint64_t(kGpuStorageAlignment) != 0)
      return describeBoundBuffer(i);
  return std::string();
}

std::string GpuStep::describeBoundBuffer(size_t buffer) const {
  const GpuStepBuffer &entry = file.buffers[buffer];
  bool isArgument = entry.kind == GpuStepBuffer::Kind::Argument;
  const StepTensor &tensor = isArgument ? file.arguments[size_t(entry.index)]
                                        : file.results[size_t(entry.index)];
  return std::string(isArgument ? "argument " : "result ") +
         std::to_string(entry.index) + " '" + tensor.name + "'";
}

bool GpuStep::run(const std::vector<DevicePtr> &arguments,
                  const std::vector<DevicePtr> &results, std::string &error) {
  if (!device) {
    error = jsonPath + ": the step is not attached to a device";
    return false;
  }
  if (arguments.size() != file.arguments.size() ||
      results.size() != file.results.size()) {
    error = jsonPath + ": run with " + std::to_string(arguments.size()) +
            " arguments and " + std::to_string(results.size()) +
            " results; the step has " + std::to_string(file.arguments.size()) +
            " and " + std::to_string(file.results.size());
    return false;
  }
  // Every buffer's address for this run.
  std::vector<DevicePtr> addresses;
  addresses.reserve(file.buffers.size());
  for (size_t i = 0; i < file.buffers.size(); ++i) {
    const GpuStepBuffer &buffer = file.buffers[i];
    DevicePtr address = 0;
    switch (buffer.kind) {
    case GpuStepBuffer::Kind::Argument:
      address = arguments[size_t(buffer.index)];
      break;
    case GpuStepBuffer::Kind::Result:
      address = results[size_t(buffer.index)];
      break;
    case GpuStepBuffer::Kind::Temporary:
      address = arenaBase + uint64_t(buffer.offset);
      break;
    case GpuStepBuffer::Kind::Constant:
      address = constantsBase + uint64_t(buffer.offset);
      break;
    }
    if (!address) {
      bool isArgument = buffer.kind == GpuStepBuffer::Kind::Argument;
      const StepTensor &tensor = isArgument
                                     ? file.arguments[size_t(buffer.index)]
                                     : file.results[size_t(buffer.index)];
      error = jsonPath + ": run without storage for " +
              (isArgument ? "argument " : "result ") +
              std::to_string(buffer.index) + " '" + tensor.name + "'";
      return false;
    }
    addresses.push_back(address);
  }
  // The kernels take their buffers as not aliasing one another (llvm.noalias
  // in the PTX): no two arguments or results may share storage. Checked
  // when the binding changes, not every step.
  if (addresses != checkedAddresses) {
    if (std::string overlap = findOverlappingStorage(addresses);
        !overlap.empty()) {
      error = jsonPath + ": run with overlapping storage for " + overlap;
      return false;
    }
    // The kernels load and store 16 bytes at once.
    if (std::string misaligned = findMisalignedStorage(addresses);
        !misaligned.empty()) {
      error = jsonPath + ": run with storage for " + misaligned +
              " that is not " + std::to_string(kGpuStorageAlignment) +
              "-byte aligned";
      return false;
    }
    checkedAddresses = addresses;
  }
  // After one run op by op (which lets cuBLAS settle its workspaces and
  // choices outside a capture), the step is captured once into a CUDA graph
  // and then replayed with one launch per step: hundreds of small kernels
  // cost one launch's overhead. The graph holds this run's addresses, so it
  // is captured again if any changes; if capturing fails, the step keeps
  // running op by op and graphNote says why.
  std::string deviceError;
  if (graph && addresses != graphAddresses) {
    device->destroyGraph(graph);
    graph = nullptr;
  }
  if (stream && !graph && runs > 0 && events.empty()) {
    std::string captureError;
    if (!capture(addresses, captureError)) {
      graphNote =
          "capturing the step into a CUDA graph failed: " + captureError;
      device->destroyStream(stream);
      stream = nullptr;
    }
  }
  ++runs;
  if (graph) {
    if (!device->launchGraph(graph, stream, deviceError)) {
      error = jsonPath + ": " + deviceError;
      return false;
    }
    ++replays;
  } else if (!enqueue(addresses, error)) {
    return false;
  }
  // Faults on the device surface at the next synchronisation: make it the
  // step's own.
  if (!device->synchronize(deviceError)) {
    error = jsonPath + ": the step failed on the device: " + deviceError +
            " (MANTISSA_GPU_STEP_SYNC=1 names the op)";
    return false;
  }
  // Counted from timeOps on: the first kUntimedRuns runs are not timed.
  if (!events.empty() && ++timingRuns > kUntimedRuns)
    return readOpTimes(error);
  return true;
}

bool GpuStep::convert(DevicePtr source, DType from, DevicePtr target, DType to,
                      int64_t count, std::string &error) {
  if (!device) {
    error = jsonPath + ": the step is not attached to a device";
    return false;
  }
  if (count <= 0)
    return true;
  if (from == to)
    return device->copy(target, source, count * int64_t(elementSize(from)),
                        error);
  if (!kernelDTypeName(from) || !kernelDTypeName(to)) {
    error = jsonPath + ": no conversion kernel from " + dtypeText(from) +
            " to " + dtypeText(to) + " (F32, BF16 and F16 only)";
    return false;
  }
  std::string entry = conversionEntry(from, to);
  int64_t grid = (count + file.blockSize - 1) / file.blockSize;
  if (grid > INT32_MAX) {
    error = jsonPath + ": " + entry + " of " + std::to_string(count) +
            " elements needs more than 2^31 - 1 blocks";
    return false;
  }
  std::vector<DevicePtr> params = {source, target, DevicePtr(count)};
  std::string deviceError;
  if (!launch(functions.at(entry), grid, params, deviceError)) {
    error = jsonPath + ": " + entry + ": " + deviceError;
    return false;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// GpuStepGradients
//===----------------------------------------------------------------------===//

std::unique_ptr<GpuStepGradients>
GpuStepGradients::load(const std::string &programPath,
                       std::vector<std::vector<uint8_t>> arguments,
                       std::string &error, const std::string &inputsOrigin) {
  std::unique_ptr<GpuStep> step = GpuStep::load(programPath, error);
  if (!step)
    return nullptr;
  const std::vector<StepTensor> &expected = step->arguments();
  if (arguments.size() != expected.size()) {
    error = programPath + ": the step takes " +
            std::to_string(expected.size()) + " arguments, " +
            std::to_string(arguments.size()) + " given";
    return nullptr;
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    const StepTensor &tensor = expected[i];
    bool optional = tensor.role == StepTensor::Role::Parameter;
    if (int64_t(arguments[i].size()) != tensor.bytes &&
        !(optional && arguments[i].empty())) {
      error = programPath + ": argument " + std::to_string(i) + " '" +
              tensor.name + "' (" + stepTensorRoleName(tensor.role) + ", " +
              dtypeText(tensor.dtype) +
              "): " + std::to_string(arguments[i].size()) +
              " bytes given, the step takes " + std::to_string(tensor.bytes);
      return nullptr;
    }
  }
  for (size_t i = 0; i < expected.size(); ++i)
    if (expected[i].role == StepTensor::Role::UserInput &&
        !checkIndexIds(
            arguments[i].data(), expected[i].numElements(), expected[i].dtype,
            step->indexBound(i),
            (inputsOrigin.empty() ? std::string() : inputsOrigin + ": ") +
                "user input '" + expected[i].name + "'",
            error))
      return nullptr;
  int losses = 0;
  for (size_t i = 0; i < step->results().size(); ++i) {
    const StepTensor &result = step->results()[i];
    std::string what = programPath + ": result " + std::to_string(i) + " '" +
                       result.name + "'";
    if (result.role == StepTensor::Role::Loss) {
      ++losses;
      if (!isFloatingPoint(result.dtype) || result.numElements() != 1) {
        error = what + ": the loss must be one floating-point element";
        return nullptr;
      }
    }
    if (result.role == StepTensor::Role::BufferMutation &&
        step->arguments()[size_t(step->findArgument(result.name))].role ==
            StepTensor::Role::Parameter) {
      error = what + ": a buffer_mutation of a parameter (parameters change "
                     "only in the update)";
      return nullptr;
    }
  }
  if (losses != 1) {
    error = programPath + ": the step has " + std::to_string(losses) +
            " loss results; training needs one";
    return nullptr;
  }
  std::unique_ptr<GpuStepGradients> source(new GpuStepGradients());
  if (!step->forwardProgramPath().empty()) {
    // Evaluation binds the forward program's arguments as the joint one's.
    source->forward = GpuStep::load(step->forwardProgramPath(), error);
    if (!source->forward)
      return nullptr;
    const GpuStep &forward = *source->forward;
    bool same = forward.arguments().size() == expected.size();
    for (size_t i = 0; same && i < expected.size(); ++i) {
      const StepTensor &a = forward.arguments()[i], &b = expected[i];
      same = a.name == b.name && a.role == b.role && a.dtype == b.dtype &&
             a.shape == b.shape;
    }
    int forwardLosses = 0;
    for (const StepTensor &result : forward.results()) {
      forwardLosses += result.role == StepTensor::Role::Loss;
      same &= result.role != StepTensor::Role::Gradient;
    }
    if (!same || forwardLosses != 1) {
      error = forward.path() + ": not the forward-only step of " + programPath +
              " (it must take the same arguments and return one loss and "
              "no gradients)";
      return nullptr;
    }
  }
  source->step = std::move(step);
  source->hostArguments = std::move(arguments);
  return source;
}

GpuStepGradients::~GpuStepGradients() { detachDevice(); }

void GpuStepGradients::detachDevice() {
  if (!device)
    return;
  std::string ignored;
  device->synchronize(ignored);
  for (std::vector<DevicePtr> *list :
       {&argumentStorage, &resultStorage, &parameterScratch, &gradientScratch,
        &forwardResults})
    for (DevicePtr &pointer : *list) {
      if (pointer)
        device->release(pointer);
      pointer = 0;
    }
  step->detach();
  if (forward)
    forward->detach();
  device = nullptr;
}

bool GpuStepGradients::attachDevice(CudaDevice &target, std::string &error) {
  if (device || used) {
    error = step->path() + ": the step's inputs were already uploaded to a "
                           "device (a GpuStepGradients runs once)";
    return false;
  }
  if (!step->attach(target, error))
    return false;
  device = &target;
  used = true;
  const std::vector<StepTensor> &arguments = step->arguments();
  const std::vector<StepTensor> &results = step->results();
  argumentStorage.assign(arguments.size(), 0);
  resultStorage.assign(results.size(), 0);
  parameterScratch.assign(arguments.size(), 0);
  gradientScratch.assign(results.size(), 0);
  std::string deviceError;
  auto failed = [&](const std::string &what) {
    error = step->path() + ": " + what + ": " + deviceError;
    detachDevice();
    return false;
  };
  // User inputs and buffers once (buffers then change on the device only);
  // a parameter's own value is kept for a parameter the runner does not
  // hold.
  for (size_t i = 0; i < arguments.size(); ++i) {
    std::vector<uint8_t> &bytes = hostArguments[i];
    if (bytes.empty())
      continue;
    std::string what =
        "argument " + std::to_string(i) + " '" + arguments[i].name + "'";
    if (!device->allocate(arguments[i].bytes, argumentStorage[i],
                          deviceError) ||
        !device->upload(argumentStorage[i], bytes.data(), int64_t(bytes.size()),
                        deviceError))
      return failed(what);
    std::vector<uint8_t>().swap(bytes);
  }
  // Results other than gradients have storage of their own; gradients are
  // bound to the runner's memory (or scratch) when the members are known.
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i].role != StepTensor::Role::Gradient &&
        !device->allocate(results[i].bytes, resultStorage[i], deviceError))
      return failed("result " + std::to_string(i) + " '" + results[i].name +
                    "'");
  if (timeOps && !step->timeOps(error)) {
    error = "--op-times: " + error;
    detachDevice();
    return false;
  }
  if (forward) {
    if (!forward->attach(target, error)) {
      detachDevice();
      return false;
    }
    forwardResults.assign(forward->results().size(), 0);
    for (size_t i = 0; i < forwardResults.size(); ++i)
      if (!device->allocate(forward->results()[i].bytes, forwardResults[i],
                            deviceError))
        return failed("forward-only result " + std::to_string(i));
  }
  return true;
}

bool GpuStepGradients::scratch(std::vector<DevicePtr> &list, size_t index,
                               int64_t bytes, std::string &error) {
  if (list[index])
    return true;
  std::string deviceError;
  if (!device->allocate(bytes, list[index], deviceError)) {
    error = step->path() + ": conversion scratch of " + std::to_string(bytes) +
            " bytes: " + deviceError;
    return false;
  }
  return true;
}

void GpuStepGradients::setTf32(bool enable) {
  step->setTf32(enable);
  if (forward)
    forward->setTf32(enable);
}

void GpuStepGradients::setBatchSource(std::unique_ptr<BatchSource> data) {
  batches = std::move(data);
  if (batches)
    tokens = batches->tokensPerMicroBatch();
}

bool GpuStepGradients::uploadInputs(DataSplit split, int64_t index,
                                    std::string &error) {
  if (!device) {
    error = step->path() + ": the step runs on a GPU; it needs --device cuda";
    return false;
  }
  if (!batches->loadMicroBatch(split, batches->firstSample(index), batchTensors,
                               error))
    return false;
  std::string deviceError;
  for (size_t argument = 0; argument < step->arguments().size(); ++argument) {
    const StepTensor &tensor = step->arguments()[argument];
    if (tensor.role != StepTensor::Role::UserInput)
      continue;
    inputBytes.assign(size_t(tensor.bytes), 0);
    if (!storeStepInput(batchTensors, tensor, inputBytes.data(), error))
      return false;
    if (!device->upload(argumentStorage[argument], inputBytes.data(),
                        tensor.bytes, deviceError)) {
      error = step->path() + ": argument '" + tensor.name + "': " + deviceError;
      return false;
    }
  }
  return true;
}

bool GpuStepGradients::selectMicroBatch(const MicroBatch &microBatch,
                                        std::string &error) {
  return (!batches ||
          uploadInputs(DataSplit::Training, microBatch.global, error)) &&
         uploadRandomInputs(microBatch.global, microBatch.step, error);
}

bool GpuStepGradients::uploadRandomInputs(int64_t globalMicroBatch,
                                          int64_t stepNumber,
                                          std::string &error) {
  std::string deviceError;
  for (size_t argument = 0; argument < step->arguments().size(); ++argument) {
    const StepTensor &tensor = step->arguments()[argument];
    if (tensor.role != StepTensor::Role::Random)
      continue;
    if (!device) {
      error = step->path() + ": the step runs on a GPU; it needs --device cuda";
      return false;
    }
    inputBytes.assign(size_t(tensor.bytes), 0);
    storeRandomInput(tensor, randomSeed, globalMicroBatch, stepNumber,
                     inputBytes.data());
    if (!device->upload(argumentStorage[argument], inputBytes.data(),
                        tensor.bytes, deviceError)) {
      error = step->path() + ": argument '" + tensor.name + "': " + deviceError;
      return false;
    }
  }
  return true;
}

int64_t GpuStepGradients::validationMicroBatches() const {
  return batches ? batches->validationMicroBatches() : 0;
}

bool GpuStepGradients::evaluateValidation(int64_t index,
                                          const std::vector<Member> &members,
                                          double &loss, std::string &error) {
  if (!batches) {
    error = "no validation data (--val-data)";
    return false;
  }
  if (!uploadInputs(DataSplit::Validation, index, error) ||
      !uploadRandomInputs(index, 0, error))
    return false;
  ++validationRuns;
  if (!forward)
    // The joint program with its buffer mutations discarded; its gradients
    // land in the runner's buffers, which the next step overwrites. The
    // same addresses as training, so the captured graph is replayed.
    return runOnce(0, members, /*training=*/false, loss, error);
  // The forward-only program: the loss without its backward.
  std::map<std::string, const Member *> byName;
  std::vector<DevicePtr> addresses;
  if (!bindArguments(members, byName, addresses, error))
    return false;
  std::string runError;
  if (!forward->run(addresses, forwardResults, runError)) {
    error = "validation micro-batch " + std::to_string(index) + ": " + runError;
    return false;
  }
  for (size_t i = 0; i < forwardResults.size(); ++i)
    if (forward->results()[i].role == StepTensor::Role::Loss)
      return downloadLoss(forwardResults[i], forward->results()[i].dtype, loss,
                          error);
  return true;
}

bool GpuStepGradients::computeGradients(int64_t stepNumber,
                                        const std::vector<Member> &members,
                                        std::string &error) {
  auto begin = std::chrono::steady_clock::now();
  double loss = 0;
  if (!runOnce(stepNumber, members, /*training=*/true, loss, error))
    return false;
  lossList.push_back(loss);
  totalSeconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
          .count();
  if (onStep)
    onStep(stepNumber, loss);
  return true;
}

bool GpuStepGradients::bindArguments(
    const std::vector<Member> &members,
    std::map<std::string, const Member *> &byName,
    std::vector<DevicePtr> &argumentAddresses, std::string &error) {
  if (!device) {
    error = step->path() + ": the step runs on a GPU; it needs --device cuda";
    return false;
  }
  const std::vector<StepTensor> &arguments = step->arguments();
  auto address = [](const void *pointer) {
    return DevicePtr(reinterpret_cast<uintptr_t>(pointer));
  };
  byName.clear();
  for (const Member &member : members) {
    int64_t index = step->findArgument(*member.fqn);
    if (index < 0 ||
        arguments[size_t(index)].role != StepTensor::Role::Parameter) {
      error =
          step->path() + ": the step has no parameter '" + *member.fqn + "'";
      return false;
    }
    int64_t count = 1;
    for (int64_t dim : *member.shape)
      count *= dim;
    if (count != arguments[size_t(index)].numElements()) {
      error = step->path() + ": parameter '" + *member.fqn + "' has " +
              std::to_string(arguments[size_t(index)].numElements()) +
              " elements in the step, " + std::to_string(count) +
              " in the runtime";
      return false;
    }
    byName[*member.fqn] = &member;
  }
  auto memberOf = [&](const std::string &fqn) -> const Member * {
    auto it = byName.find(fqn);
    return it == byName.end() ? nullptr : it->second;
  };

  // Parameters: where the runner holds them, or converted into scratch.
  argumentAddresses.assign(arguments.size(), 0);
  for (size_t i = 0; i < arguments.size(); ++i) {
    const StepTensor &tensor = arguments[i];
    argumentAddresses[i] = argumentStorage[i];
    if (tensor.role != StepTensor::Role::Parameter)
      continue;
    const Member *member = memberOf(tensor.name);
    if (!member) {
      if (!argumentStorage[i]) {
        error = step->path() + ": parameter '" + tensor.name +
                "' is neither held by the runtime nor given a value";
        return false;
      }
      continue;
    }
    if (member->paramDtype == tensor.dtype) {
      // The step only reads its arguments.
      argumentAddresses[i] = address(member->param);
      continue;
    }
    if (!scratch(parameterScratch, i, tensor.bytes, error))
      return false;
    std::string convertError;
    if (!step->convert(address(member->param), member->paramDtype,
                       parameterScratch[i], tensor.dtype, tensor.numElements(),
                       convertError)) {
      error = "parameter '" + tensor.name + "': " + convertError;
      return false;
    }
    argumentAddresses[i] = parameterScratch[i];
  }
  return true;
}

bool GpuStepGradients::runOnce(int64_t stepNumber,
                               const std::vector<Member> &members,
                               bool training, double &loss,
                               std::string &error) {
  std::map<std::string, const Member *> byName;
  std::vector<DevicePtr> argumentAddresses;
  if (!bindArguments(members, byName, argumentAddresses, error))
    return false;
  const std::vector<StepTensor> &results = step->results();
  auto address = [](const void *pointer) {
    return DevicePtr(reinterpret_cast<uintptr_t>(pointer));
  };
  auto memberOf = [&](const std::string &fqn) -> const Member * {
    auto it = byName.find(fqn);
    return it == byName.end() ? nullptr : it->second;
  };
  std::vector<DevicePtr> resultAddresses(results.size(), 0);
  // Gradients: where the runner reduces them, or into scratch.
  for (size_t i = 0; i < results.size(); ++i) {
    const StepTensor &tensor = results[i];
    resultAddresses[i] = resultStorage[i];
    if (tensor.role != StepTensor::Role::Gradient)
      continue;
    const Member *member = memberOf(tensor.name);
    if (member && member->gradDtype == tensor.dtype) {
      resultAddresses[i] = address(member->grad);
      continue;
    }
    if (!scratch(gradientScratch, i, tensor.bytes, error))
      return false;
    resultAddresses[i] = gradientScratch[i];
  }

  std::string runError;
  if (!step->run(argumentAddresses, resultAddresses, runError)) {
    error = "step " + std::to_string(stepNumber) + ": " + runError;
    return false;
  }

  loss = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const StepTensor &tensor = results[i];
    std::string deviceError;
    switch (tensor.role) {
    case StepTensor::Role::Gradient: {
      const Member *member = memberOf(tensor.name);
      if (member && resultAddresses[i] != address(member->grad) &&
          !step->convert(resultAddresses[i], tensor.dtype,
                         address(member->grad), member->gradDtype,
                         tensor.numElements(), deviceError)) {
        error = "gradient of '" + tensor.name + "': " + deviceError;
        return false;
      }
      break;
    }
    case StepTensor::Role::Loss:
      if (!downloadLoss(resultAddresses[i], tensor.dtype, loss, error)) {
        error = "step " + std::to_string(stepNumber) + ": " + error;
        return false;
      }
      break;
    case StepTensor::Role::BufferMutation: {
      if (!training)
        break;
      // The next step reads the buffer's new value.
      size_t target = size_t(step->findArgument(tensor.name));
      if (!device->copy(argumentStorage[target], resultAddresses[i],
                        tensor.bytes, deviceError)) {
        error = step->path() + ": step " + std::to_string(stepNumber) +
                ": buffer '" + tensor.name + "': " + deviceError;
        return false;
      }
      break;
    }
    default:
      break;
    }
  }
  std::string deviceError;
  if (!device->synchronize(deviceError)) {
    error = step->path() + ": step " + std::to_string(stepNumber) +
            ": after the step: " + deviceError;
    return false;
  }
  return true;
}

bool GpuStepGradients::downloadLoss(DevicePtr from, DType dtype, double &loss,
                                    std::string &error) {
  uint8_t bytes[8] = {0};
  std::string deviceError;
  if (!device->download(bytes, from, int64_t(elementSize(dtype)),
                        deviceError)) {
    error = step->path() + ": the loss: " + deviceError;
    return false;
  }
  if (dtype == DType::F64)
    std::memcpy(&loss, bytes, 8);
  else
    loss = loadFloatElement(bytes, 0, dtype);
  return true;
}

bool GpuStepGradients::writeOpTimes(const std::string &path,
                                    std::string &error) const {
  int64_t timed = step->timedRuns();
  if (timed == 0) {
    error = "--op-times " + path +
            ": no run of the step was timed (the first " +
            std::to_string(GpuStep::kUntimedRuns) +
            " are not: lazy loading, cuBLAS's first choices); train more steps";
    return false;
  }
  nlohmann::json ops = nlohmann::json::array();
  const std::vector<double> &sums = step->opMicroseconds();
  for (size_t i = 0; i < step->ops().size(); ++i) {
    const GpuStepOp &op = step->ops()[i];
    bool gemm = op.kind == GpuStepOp::Kind::Gemm;
    ops.push_back({{"index", i},
                   {"kind", gemm ? "gemm" : "kernel"},
                   {"name", gemm ? describeGemm(op) : op.entry},
                   {"source", op.source},
                   {"measured_us", sums[i] / double(timed)}});
  }
  nlohmann::json report = {{"program", step->path()},
                           {"step", step->stepName()},
                           {"timed_runs", timed},
                           {"untimed_runs", GpuStep::kUntimedRuns},
                           {"ops", ops}};
  return writeFileAtomically(path, report.dump(1) + "\n", error);
}

std::string GpuStepGradients::describeGraphUse() const {
  if (lossList.empty())
    return "";
  // Validation runs the joint program too unless there is a forward one.
  int64_t jointRuns = int64_t(lossList.size()) + (forward ? 0 : validationRuns);
  std::string text;
  if (step->graphReplays() > 0)
    text = "the GPU step ran as one CUDA graph in " +
           std::to_string(step->graphReplays()) + " of " +
           std::to_string(jointRuns) + " runs (" +
           (validationRuns && !forward ? std::to_string(validationRuns) +
                                             " of them on validation data; "
                                       : std::string()) +
           "the first ran op by op)";
  else
    text = "the GPU step ran op by op" + (step->getGraphNote().empty()
                                              ? std::string()
                                              : ": " + step->getGraphNote());
  if (forward && validationRuns)
    text += "; the forward-only step ran " + std::to_string(validationRuns) +
            " validation micro-batches (" +
            std::to_string(forward->graphReplays()) + " as a CUDA graph)";
  // --tf32 changes the step's numbers, so the run says so.
  if (step->usesTf32()) {
    int64_t fp32 = 0;
    for (const GpuStepOp &op : step->ops())
      fp32 += op.kind == GpuStepOp::Kind::Gemm && op.a.dtype == DType::F32;
    text += "; its " + std::to_string(fp32) +
            " fp32 GEMMs computed in TF32 (--tf32)";
  }
  return text;
}
