//===- CpuProgram.cpp - The schema of step.cpu.json -----------------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Format/CpuProgram.h"
#include "JsonFields.h"
#include "mantissa/Format/StepTensorJson.h"

#include <nlohmann/json.hpp>

using namespace mlir::mantissa::rt;
using detail::ProgramError;
using json = nlohmann::json;

namespace {

json tensorsJson(const std::vector<StepTensor> &list) {
  json out = json::array();
  for (const StepTensor &tensor : list)
    out.push_back(detail::stepTensorJson(tensor));
  return out;
}

json libraryJson(const CpuProgramLibrary &library) {
  return json{{"library", library.library},
              {"entry", library.entry},
              {"results", tensorsJson(library.results)}};
}

/// One library of the program; `what` names it in messages.
CpuProgramLibrary parseLibrary(const json &object, const std::string &what) {
  CpuProgramLibrary library;
  library.library = detail::string(object, "library", what);
  library.entry = detail::string(object, "entry", what);
  const json &results = detail::array(object, "results", what);
  for (size_t i = 0; i < results.size(); ++i)
    library.results.push_back(detail::parseStepTensor(
        results[i], /*isArgument=*/false, i, what + " result"));
  int losses = 0;
  for (const StepTensor &result : library.results)
    losses += result.role == StepTensor::Role::Loss;
  if (losses != 1)
    throw ProgramError{what + ": has " + std::to_string(losses) +
                       " loss results; training needs one"};
  return library;
}

void parseProgram(const json &root, CpuProgram &out) {
  if (root.is_discarded() || !root.is_object())
    throw ProgramError{"not a JSON object"};
  out.version = root.value("version", 0);
  if (root.value("format", "") != "mantissa-cpu-step" ||
      (out.version != 1 && out.version != 2))
    throw ProgramError{"not a version 1 or 2 mantissa-cpu-step program"};
  if (out.version == 2) {
    if (!root.contains("cpu_gemm_abi") ||
        !root["cpu_gemm_abi"].is_number_integer())
      throw ProgramError{"'cpu_gemm_abi' is missing or not an integer"};
    out.cpuGemmAbi = root["cpu_gemm_abi"].get<int64_t>();
  }
  out.targetCpu = root.value("target_cpu", "");
  out.targetFeatures = detail::targetFeatures(root, "");
  if (root.contains("widened_bf16_products")) {
    if (!root["widened_bf16_products"].is_string())
      throw ProgramError{"'widened_bf16_products' is not a string"};
    out.widenedBf16Products = root["widened_bf16_products"].get<std::string>();
  }
  const json &arguments = detail::array(root, "arguments", "the program");
  for (size_t i = 0; i < arguments.size(); ++i)
    out.arguments.push_back(detail::parseStepTensor(
        arguments[i], /*isArgument=*/true, i, "argument"));
  if (!root.contains("step"))
    throw ProgramError{"'step' is missing"};
  out.step = parseLibrary(root["step"], "the step");
  if (root.contains("forward"))
    out.forward = parseLibrary(root["forward"], "the forward-only step");
}

} // namespace

std::string mlir::mantissa::rt::writeCpuProgram(const CpuProgram &program) {
  json root{{"format", "mantissa-cpu-step"},
            {"version", program.version},
            {"target_cpu", program.targetCpu},
            {"arguments", tensorsJson(program.arguments)},
            {"step", libraryJson(program.step)}};
  if (program.version >= 2)
    root["cpu_gemm_abi"] = program.cpuGemmAbi;
  if (program.targetFeatures)
    root["target_features"] = *program.targetFeatures;
  if (!program.widenedBf16Products.empty())
    root["widened_bf16_products"] = program.widenedBf16Products;
  if (program.forward)
    root["forward"] = libraryJson(*program.forward);
  return root.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

bool mlir::mantissa::rt::parseCpuProgram(const std::string &text,
                                         CpuProgram &out, std::string &error) {
  out = CpuProgram();
  try {
    parseProgram(json::parse(text, nullptr, /*allow_exceptions=*/false), out);
  } catch (const ProgramError &problem) {
    error = problem.message;
    return false;
  } catch (const json::exception &problem) {
    // A field of the wrong type ({"format": 1}, a number for
    // index_bound_what): json::value throws, and nothing above may escape.
    error = std::string("damaged CPU step program (") + problem.what() + ")";
    return false;
  }
  return true;
}
