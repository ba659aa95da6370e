//===- GpuProgram.cpp - Reading and writing step.gpu.json -----------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Format/GpuProgram.h"
#include "JsonFields.h"
#include "mantissa/Format/StepTensorJson.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>

using namespace mlir::mantissa::rt;
using namespace mlir::mantissa::rt::detail;

namespace {

/// Each buffer kind and its name in the file.
const struct {
  const char *text;
  GpuStepBuffer::Kind kind;
} kBufferKinds[] = {{"argument", GpuStepBuffer::Kind::Argument},
                    {"result", GpuStepBuffer::Kind::Result},
                    {"temporary", GpuStepBuffer::Kind::Temporary},
                    {"constant", GpuStepBuffer::Kind::Constant}};

/// The files the program names lie beside it: plain file names only, not
/// empty, no '/' (neither absolute nor climbing out, e.g. "../../dev/zero",
/// which a reader would read without end), and neither "." nor "..". The
/// compiler writes only such names.
std::string fileName(const json &root, const char *key) {
  if (!root[key].is_string())
    throw ProgramError{"'" + std::string(key) +
                       "' is not a file name beside the program"};
  std::string name = root[key].get<std::string>();
  if (name.empty() || name == "." || name == ".." ||
      name.find('/') != std::string::npos)
    throw ProgramError{
        "'" + std::string(key) + "' is not a file name beside the program: " +
        json(name).dump(-1, ' ', false, json::error_handler_t::replace)};
  return name;
}

json operandJson(const GpuGemmOperand &operand) {
  return {{"buffer", operand.buffer},
          {"offset", operand.offset},
          {"ld", operand.ld},
          {"stride", operand.stride},
          {"dtype", dtypeText(operand.dtype)}};
}

/// Reads the tensor lists and checks what ties results to arguments.
void parseTensors(const json &root, GpuProgram &program) {
  const json &arguments = array(root, "arguments", "the program");
  for (size_t i = 0; i < arguments.size(); ++i)
    program.arguments.push_back(detail::parseStepTensor(
        arguments[i], /*isArgument=*/true, i, "argument"));
  const json &results = array(root, "results", "the program");
  for (size_t i = 0; i < results.size(); ++i)
    program.results.push_back(
        detail::parseStepTensor(results[i], /*isArgument=*/false, i, "result"));
  for (size_t i = 0; i < program.results.size(); ++i) {
    const StepTensor &result = program.results[i];
    std::string what = "result " + std::to_string(i) + " '" + result.name + "'";
    if (result.role == StepTensor::Role::BufferMutation) {
      int64_t target = program.findArgument(result.name);
      if (target < 0)
        throw ProgramError{what + ": a buffer_mutation of no argument"};
      const StepTensor &argument = program.arguments[size_t(target)];
      if (argument.dtype != result.dtype || argument.bytes != result.bytes)
        throw ProgramError{
            what + ": a buffer_mutation of " + dtypeText(result.dtype) + ", " +
            std::to_string(result.bytes) + " bytes, but argument " +
            std::to_string(target) + " is " + dtypeText(argument.dtype) + ", " +
            std::to_string(argument.bytes) + " bytes"};
    } else if (result.role == StepTensor::Role::Gradient) {
      int64_t target = program.findArgument(result.name);
      if (target < 0 ||
          program.arguments[size_t(target)].role != StepTensor::Role::Parameter)
        throw ProgramError{what + ": a gradient of no parameter"};
      if (program.arguments[size_t(target)].numElements() !=
          result.numElements())
        throw ProgramError{what + ": a gradient of another size than its "
                                  "parameter"};
    }
  }
}

void parseBuffers(const json &root, GpuProgram &program) {
  const json &buffers = array(root, "buffers", "the program");
  for (size_t i = 0; i < buffers.size(); ++i) {
    std::string what = "buffer " + std::to_string(i);
    GpuStepBuffer buffer;
    std::string kind = string(buffers[i], "kind", what);
    auto known =
        std::find_if(std::begin(kBufferKinds), std::end(kBufferKinds),
                     [&](const auto &entry) { return kind == entry.text; });
    if (known == std::end(kBufferKinds))
      throw ProgramError{what + ": unknown kind '" + kind + "'"};
    buffer.kind = known->kind;
    if (buffer.kind == GpuStepBuffer::Kind::Argument ||
        buffer.kind == GpuStepBuffer::Kind::Result) {
      const auto &list = buffer.kind == GpuStepBuffer::Kind::Argument
                             ? program.arguments
                             : program.results;
      buffer.index = integer(buffers[i], "index", what);
      if (buffer.index >= int64_t(list.size()))
        throw ProgramError{what + ": " + kind + " " +
                           std::to_string(buffer.index) + " does not exist (" +
                           std::to_string(list.size()) + " " + kind + "s)"};
      buffer.bytes = list[size_t(buffer.index)].bytes;
    } else {
      bool temporary = buffer.kind == GpuStepBuffer::Kind::Temporary;
      buffer.offset = integer(buffers[i], "offset", what);
      buffer.bytes = integer(buffers[i], "bytes", what);
      if (buffer.offset % 256)
        throw ProgramError{what + ": offset " + std::to_string(buffer.offset) +
                           " is not a multiple of 256"};
      // Offset and size are each at most 2^63 - 1: compared without
      // adding them, and their end printed in uint64_t.
      if (temporary && buffer.bytes > program.arenaBytes - buffer.offset)
        throw ProgramError{
            what + ": bytes [" + std::to_string(buffer.offset) + ", " +
            std::to_string(uint64_t(buffer.offset) + uint64_t(buffer.bytes)) +
            ") lie past the arena of " + std::to_string(program.arenaBytes) +
            " bytes"};
    }
    program.buffers.push_back(buffer);
  }
}

/// A buffer id an op names: one of the program's buffers.
int64_t bufferId(const json &value, const std::string &where,
                 const GpuProgram &program) {
  if (!value.is_number_integer())
    throw ProgramError{where + ": a buffer id is not an integer"};
  int64_t id = value.get<int64_t>();
  if (id < 0 || id >= int64_t(program.buffers.size()))
    throw ProgramError{where + ": buffer " + std::to_string(id) +
                       " does not exist (" +
                       std::to_string(program.buffers.size()) + " buffers)"};
  return id;
}

/// A kernel entry's launch and, for reports, its members.
void parseKernel(const json &entry, const std::string &what,
                 const GpuProgram &program, GpuStepOp &op) {
  op.entry = string(entry, "entry", what);
  op.grid = integer(entry, "grid", what, 1, INT32_MAX);
  for (const json &id : array(entry, "buffers", what))
    op.buffers.push_back(bufferId(id, what, program));
  // Without `threads`, every thread of the launch does work.
  op.threads =
      optionalInteger(entry, "threads", what, op.grid * program.blockSize, 1);
  op.serialIterations = optionalInteger(entry, "serial_iterations", what, 1, 1);
  op.opsPerIteration = optionalInteger(entry, "ops_per_iteration", what, 1, 1);
  op.tensorFlops = optionalInteger(entry, "tensor_flops", what, 0, 0);
  if (!entry.contains("members"))
    return;
  const json &members = array(entry, "members", what);
  for (size_t m = 0; m < members.size(); ++m) {
    std::string where = what + ": member " + std::to_string(m);
    GpuStepOp::Member member;
    member.source = string(members[m], "source", where);
    member.threads = integer(members[m], "threads", where, 1);
    member.serialIterations =
        integer(members[m], "serial_iterations", where, 1);
    member.threadStride =
        optionalInteger(members[m], "thread_stride", where, 1, 1);
    member.elementsPerThread =
        optionalInteger(members[m], "elements_per_thread", where, 1, 1);
    member.rowColumns = optionalInteger(members[m], "row_columns", where, 0, 0);
    if (program.blockSize % member.threadStride != 0)
      throw ProgramError{where + ": thread_stride " +
                         std::to_string(member.threadStride) +
                         " does not divide the block size " +
                         std::to_string(program.blockSize)};
    for (const json &index : array(members[m], "buffers", where)) {
      if (!index.is_number_integer() || index.get<int64_t>() < 0 ||
          index.get<int64_t>() >= int64_t(op.buffers.size()))
        throw ProgramError{where + ": a buffer index is not one of the " +
                           std::to_string(op.buffers.size()) +
                           " the launch takes"};
      member.buffers.push_back(index.get<unsigned>());
    }
    op.members.push_back(std::move(member));
  }
}

void parseGemm(const json &entry, const std::string &what,
               const GpuProgram &program, GpuStepOp &op) {
  op.transa = boolean(entry, "transa", what);
  op.transb = boolean(entry, "transb", what);
  op.m = integer(entry, "m", what, 0, INT32_MAX);
  op.n = integer(entry, "n", what, 0, INT32_MAX);
  op.k = integer(entry, "k", what, 0, INT32_MAX);
  op.batch = integer(entry, "batch", what, 1, INT32_MAX);
  op.alpha = number(entry, "alpha", what);
  op.beta = number(entry, "beta", what);
  auto operand = [&](const char *key, int64_t rows, int64_t columns) {
    std::string where = what + ": operand " + key;
    if (!entry.contains(key) || !entry[key].is_object())
      throw ProgramError{where + " is missing"};
    const json &value = entry[key];
    GpuGemmOperand out;
    if (!value.contains("buffer"))
      throw ProgramError{where + ": 'buffer' is missing"};
    out.buffer = bufferId(value["buffer"], where, program);
    out.offset = integer(value, "offset", where);
    out.ld = integer(value, "ld", where, 1, INT32_MAX);
    out.stride = integer(value, "stride", where);
    out.dtype = dtype(value, where);
    // cuBLAS's own requirement: the leading dimension covers a column of
    // the stored matrix.
    if (out.ld < std::max<int64_t>(1, rows))
      throw ProgramError{where + ": ld " + std::to_string(out.ld) +
                         " is less than its " + std::to_string(rows) + " rows"};
    if (rows > 0 && columns > 0) {
      // Offset and stride come from the file unbounded: an operand whose
      // end does not fit in int64_t reaches past any buffer.
      // rows + (columns - 1) * ld < 2^62, as each is below 2^31.
      int64_t strided = 0, endElement = 0, end = 0;
      bool overflows =
          __builtin_mul_overflow(op.batch - 1, out.stride, &strided) ||
          __builtin_add_overflow(out.offset, strided, &endElement) ||
          __builtin_add_overflow(endElement, rows + (columns - 1) * out.ld,
                                 &endElement) ||
          __builtin_mul_overflow(endElement, int64_t(elementSize(out.dtype)),
                                 &end);
      int64_t size = program.buffers[size_t(out.buffer)].bytes;
      if (overflows || end > size)
        throw ProgramError{
            where + ": reaches byte " +
            (overflows ? std::string("2^63 or more") : std::to_string(end)) +
            " of buffer " + std::to_string(out.buffer) + ", which has " +
            std::to_string(size)};
    }
    return out;
  };
  // The stored (untransposed) shapes: op(A) is m x k, op(B) k x n.
  op.a = operand("a", op.transa ? op.k : op.m, op.transa ? op.m : op.k);
  op.b = operand("b", op.transb ? op.n : op.k, op.transb ? op.k : op.n);
  op.c = operand("c", op.m, op.n);
  bool floatInputs = op.a.dtype == DType::F32 || op.a.dtype == DType::BF16 ||
                     op.a.dtype == DType::F16;
  if (!floatInputs || op.b.dtype != op.a.dtype ||
      (op.c.dtype != DType::F32 && op.c.dtype != op.a.dtype))
    throw ProgramError{what + ": unsupported dtypes " + dtypeText(op.a.dtype) +
                       " x " + dtypeText(op.b.dtype) + " -> " +
                       dtypeText(op.c.dtype) +
                       " (a and b alike, F32, BF16 or F16; c F32 or a's "
                       "dtype)"};
  if (program.format >= 2) {
    std::string epilogue = string(entry, "epilogue", what);
    if (epilogue == "bias") {
      op.epilogue = GemmEpilogue::Bias;
      std::string where = what + ": bias";
      if (!entry.contains("bias") || !entry["bias"].is_object())
        throw ProgramError{where + " is missing"};
      const json &value = entry["bias"];
      if (!value.contains("buffer"))
        throw ProgramError{where + ": 'buffer' is missing"};
      op.bias.buffer = bufferId(value["buffer"], where, program);
      op.bias.offset = integer(value, "offset", where);
      op.bias.dtype = dtype(value, where);
      // cuBLASLt's bias is in D's dtype (its default bias type).
      if (op.bias.dtype != op.c.dtype)
        throw ProgramError{where + ": dtype " + dtypeText(op.bias.dtype) +
                           " is not c's " + dtypeText(op.c.dtype)};
      int64_t end = 0;
      int64_t size = program.buffers[size_t(op.bias.buffer)].bytes;
      if (__builtin_add_overflow(op.bias.offset, op.m, &end) ||
          __builtin_mul_overflow(end, int64_t(elementSize(op.bias.dtype)),
                                 &end) ||
          end > size)
        throw ProgramError{where + ": " + std::to_string(op.m) +
                           " elements from " + std::to_string(op.bias.offset) +
                           " reach past buffer " +
                           std::to_string(op.bias.buffer) + ", which has " +
                           std::to_string(size) + " bytes"};
    } else if (epilogue != "none") {
      throw ProgramError{what + ": unknown epilogue '" + epilogue +
                         "' (none or bias)"};
    }
  }
  // cuBLAS leaves overlapping outputs of a batch undefined.
  if (op.batch > 1 && op.m > 0 && op.n > 0 &&
      op.c.stride < (op.n - 1) * op.c.ld + op.m)
    throw ProgramError{what + ": the batch's results overlap (c stride " +
                       std::to_string(op.c.stride) + ")"};
}

void parseOps(const json &root, GpuProgram &program) {
  const json &ops = array(root, "ops", "the program");
  for (size_t i = 0; i < ops.size(); ++i) {
    std::string what = "op " + std::to_string(i);
    const json &entry = ops[i];
    GpuStepOp op;
    op.source = string(entry, "source", what);
    what += " (" + op.source + ")";
    std::string kind = string(entry, "kind", what);
    if (kind == "kernel") {
      op.kind = GpuStepOp::Kind::Kernel;
      parseKernel(entry, what, program, op);
    } else if (kind == "gemm") {
      op.kind = GpuStepOp::Kind::Gemm;
      parseGemm(entry, what, program, op);
    } else {
      throw ProgramError{what + ": unknown kind '" + kind + "'"};
    }
    program.ops.push_back(std::move(op));
  }
}

} // namespace

int64_t GpuProgram::countOps(GpuStepOp::Kind kind) const {
  return std::count_if(ops.begin(), ops.end(),
                       [&](const GpuStepOp &op) { return op.kind == kind; });
}

int64_t GpuProgram::findArgument(const std::string &name) const {
  for (size_t i = 0; i < arguments.size(); ++i)
    if (arguments[i].name == name)
      return int64_t(i);
  return -1;
}

//===----------------------------------------------------------------------===//
// The program
//===----------------------------------------------------------------------===//

std::string mlir::mantissa::rt::describeGemm(const GpuStepOp &op) {
  std::string name = "gemm " + std::to_string(op.m) + "x" +
                     std::to_string(op.n) + "x" + std::to_string(op.k);
  if (op.batch > 1)
    name += " x" + std::to_string(op.batch);
  return name + " " + std::string(safeTensorsDTypeName(op.a.dtype)) + "->" +
         std::string(safeTensorsDTypeName(op.c.dtype));
}

std::string mlir::mantissa::rt::writeGpuProgram(const GpuProgram &program) {
  json arguments = json::array(), results = json::array();
  for (const StepTensor &tensor : program.arguments)
    arguments.push_back(detail::stepTensorJson(tensor));
  for (const StepTensor &tensor : program.results)
    results.push_back(detail::stepTensorJson(tensor));
  json buffers = json::array();
  for (const GpuStepBuffer &buffer : program.buffers) {
    const char *kind = "?";
    for (const auto &entry : kBufferKinds)
      if (entry.kind == buffer.kind)
        kind = entry.text;
    if (buffer.kind == GpuStepBuffer::Kind::Argument ||
        buffer.kind == GpuStepBuffer::Kind::Result)
      buffers.push_back({{"kind", kind}, {"index", buffer.index}});
    else
      buffers.push_back(
          {{"kind", kind}, {"offset", buffer.offset}, {"bytes", buffer.bytes}});
  }
  json ops = json::array();
  for (const GpuStepOp &op : program.ops) {
    if (op.kind == GpuStepOp::Kind::Kernel) {
      json kernel = {{"kind", "kernel"},
                     {"entry", op.entry},
                     {"grid", op.grid},
                     {"threads", op.threads},
                     {"serial_iterations", op.serialIterations},
                     {"buffers", op.buffers},
                     {"source", op.source}};
      if (op.opsPerIteration != 1)
        kernel["ops_per_iteration"] = op.opsPerIteration;
      if (op.tensorFlops != 0)
        kernel["tensor_flops"] = op.tensorFlops;
      // A launch that runs several ops: each one's share (for reports).
      // (One member alone when it runs on other threads than the first.)
      if (op.members.size() > 1 ||
          std::any_of(op.members.begin(), op.members.end(),
                      [](const GpuStepOp::Member &member) {
                        return member.threadStride != 1 ||
                               member.elementsPerThread != 1;
                      })) {
        json members = json::array();
        for (const GpuStepOp::Member &member : op.members) {
          json entry = {{"source", member.source},
                        {"threads", member.threads},
                        {"serial_iterations", member.serialIterations},
                        {"buffers", member.buffers}};
          if (member.threadStride != 1)
            entry["thread_stride"] = member.threadStride;
          if (member.elementsPerThread != 1)
            entry["elements_per_thread"] = member.elementsPerThread;
          if (member.rowColumns != 0)
            entry["row_columns"] = member.rowColumns;
          members.push_back(std::move(entry));
        }
        kernel["members"] = std::move(members);
      }
      ops.push_back(std::move(kernel));
      continue;
    }
    bool bias = op.epilogue == GemmEpilogue::Bias;
    json gemm = {{"kind", "gemm"},
                 {"source", op.source},
                 {"transa", op.transa},
                 {"transb", op.transb},
                 {"m", op.m},
                 {"n", op.n},
                 {"k", op.k},
                 {"batch", op.batch},
                 {"alpha", op.alpha},
                 {"beta", op.beta},
                 {"a", operandJson(op.a)},
                 {"b", operandJson(op.b)},
                 {"c", operandJson(op.c)},
                 {"epilogue", bias ? "bias" : "none"}};
    if (bias)
      gemm["bias"] = {{"buffer", op.bias.buffer},
                      {"offset", op.bias.offset},
                      {"dtype", dtypeText(op.bias.dtype)}};
    ops.push_back(std::move(gemm));
  }
  json root = {{"format", program.format},
               {"step", program.stepName},
               {"ptx", program.ptxFile},
               {"block_size", program.blockSize},
               {"arena_bytes", program.arenaBytes},
               {"arguments", std::move(arguments)},
               {"results", std::move(results)},
               {"buffers", std::move(buffers)},
               {"ops", std::move(ops)}};
  if (!program.constantsFile.empty())
    root["constants"] = program.constantsFile;
  if (!program.forwardFile.empty())
    root["forward"] = program.forwardFile;
  // Invalid UTF-8 in a name (an FQN from a model file) is replaced rather
  // than thrown: the file stays valid JSON.
  return root.dump(2, ' ', false, json::error_handler_t::replace);
}

bool mlir::mantissa::rt::parseGpuProgram(const std::string &text,
                                         GpuProgram &program,
                                         std::string &error) {
  program = GpuProgram();
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    error = "damaged GPU step program (not valid JSON)";
    return false;
  }
  try {
    program.format = integer(root, "format", "the program");
    if (program.format != 1 && program.format != 2)
      throw ProgramError{"unknown format " + std::to_string(program.format) +
                         " (this runtime reads 1 and 2)"};
    program.stepName = string(root, "step", "the program");
    program.blockSize = integer(root, "block_size", "the program", 1, 1024);
    program.arenaBytes = integer(root, "arena_bytes", "the program");
    parseTensors(root, program);
    parseBuffers(root, program);
    if (root.contains("forward"))
      program.forwardFile = fileName(root, "forward");
    if (!root.contains("ptx"))
      throw ProgramError{"the program: 'ptx' is missing or not a string"};
    program.ptxFile = fileName(root, "ptx");
    bool anyConstant =
        std::any_of(program.buffers.begin(), program.buffers.end(),
                    [](const GpuStepBuffer &buffer) {
                      return buffer.kind == GpuStepBuffer::Kind::Constant;
                    });
    if (anyConstant) {
      if (!root.contains("constants") || !root["constants"].is_string())
        throw ProgramError{"'constants' is missing, and some buffer is a "
                           "constant"};
      program.constantsFile = fileName(root, "constants");
    }
    parseOps(root, program);
  } catch (const ProgramError &e) {
    error = e.message;
    return false;
  } catch (const json::exception &e) {
    error = std::string("damaged GPU step program (") + e.what() + ")";
    return false;
  }
  return true;
}
