//===- PrecisionReport.cpp - Reports of a precision plan ------------------===//
//
// The table and the JSON that `mantissa-compile --precision-report` prints.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Transforms/PrecisionReport.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir::mantissa;
using namespace mlir::mantissa::precision;
using llvm::StringRef;

static std::string formatShape(llvm::ArrayRef<int64_t> shape) {
  std::string text = "[";
  llvm::raw_string_ostream os(text);
  llvm::interleaveComma(shape, os);
  os << "]";
  return text;
}

/// Prints rows as columns two spaces apart, without trailing blanks.
static void printColumns(llvm::ArrayRef<std::vector<std::string>> rows,
                         llvm::raw_ostream &os) {
  std::vector<size_t> widths;
  for (const std::vector<std::string> &row : rows)
    for (auto [column, cell] : llvm::enumerate(row)) {
      if (widths.size() <= column)
        widths.push_back(0);
      widths[column] = std::max(widths[column], cell.size());
    }
  for (const std::vector<std::string> &row : rows) {
    std::string line;
    for (auto [column, cell] : llvm::enumerate(row)) {
      line += cell;
      if (column + 1 < row.size())
        line += std::string(widths[column] - cell.size() + 2, ' ');
    }
    os << StringRef(line).rtrim() << "\n";
  }
}

/// Products per operand element type, in first-seen order: `129 in bf16`.
static std::vector<std::pair<std::string, int64_t>>
countProductsByType(const StepPlan &plan) {
  std::vector<std::pair<std::string, int64_t>> counts;
  for (const MatrixProduct &product : plan.matrixProducts) {
    auto it = llvm::find_if(counts, [&](const auto &entry) {
      return entry.first == product.operandType;
    });
    if (it == counts.end())
      counts.emplace_back(product.operandType, 1);
    else
      ++it->second;
  }
  return counts;
}

/// Products per CPU path, in first-seen order (`111 fp32 GEMM on widened
/// bf16`), or nothing when the paths were not asked.
static std::vector<std::pair<std::string, int64_t>>
countProductsByCpuPath(const StepPlan &plan) {
  std::vector<std::pair<std::string, int64_t>> counts;
  for (const MatrixProduct &product : plan.matrixProducts) {
    if (product.cpuPath.empty())
      continue;
    auto it = llvm::find_if(counts, [&](const auto &entry) {
      return entry.first == product.cpuPath;
    });
    if (it == counts.end())
      counts.emplace_back(product.cpuPath, 1);
    else
      ++it->second;
  }
  return counts;
}

static std::string formatProductCounts(const StepPlan &plan) {
  std::vector<std::string> parts;
  for (const auto &[type, count] : countProductsByType(plan))
    parts.push_back(llvm::formatv("{0} in {1}", count, type).str());
  return parts.empty() ? "none" : llvm::join(parts, ", ");
}

void precision::printReportTable(const StepPlan &plan, llvm::raw_ostream &os) {
  os << "Precision plan of step @" << plan.stepName << " (lr "
     << llvm::format("%g", plan.learningRate) << ")\n\n";

  std::vector<std::vector<std::string>> rows = {
      {"FQN", "kind", "shape", "master", "gather", "reduce", "moments", "group",
       "master by", "gather by", "reduce by", "moments by"}};
  for (const TensorPlan &tensor : plan.tensors) {
    std::vector<std::string> row = {
        tensor.tensor.fqn, tensor.isParameter() ? "parameter" : "buffer",
        formatShape(tensor.tensor.shape)};
    bool parameter = tensor.isParameter();
    for (Axis axis : kAllAxes)
      row.push_back(parameter || axis == Axis::Master || axis == Axis::Gather
                        ? tensor.getName(axis).str()
                        : "-");
    row.push_back(parameter ? tensor.group : "-");
    for (Axis axis : kAllAxes)
      row.push_back(parameter || axis == Axis::Master || axis == Axis::Gather
                        ? tensor.getDecidedBy(axis).str()
                        : "-");
    rows.push_back(std::move(row));
  }
  printColumns(rows, os);

  os << "\nShard groups\n";
  rows = {{"group", "unit", "gather", "nested in", "reshard after forward",
           "members"}};
  for (const ShardGroup &group : plan.groups)
    rows.push_back({group.name, group.unit.empty() ? "(root)" : group.unit,
                    train::stringifyDType(group.gather).str(),
                    group.nestedIn ? *group.nestedIn : "-",
                    group.reshardAfterForward ? "yes" : "no",
                    llvm::join(group.members, ", ")});
  printColumns(rows, os);

  os << "\nMatrix products: " << plan.matrixProducts.size() << " ("
     << formatProductCounts(plan) << "), compute "
     << (plan.compute ? train::stringifyDType(*plan.compute)
                      : StringRef("as exported"))
     << "\n";
  std::vector<std::pair<std::string, int64_t>> paths =
      countProductsByCpuPath(plan);
  rows = {{"node", "op", "lhs", "rhs", "operands", "result", "MFLOP"}};
  if (!paths.empty())
    rows[0].push_back("on this CPU");
  for (const MatrixProduct &product : plan.matrixProducts) {
    rows.push_back(
        {product.node, product.op, formatShape(product.lhsShape),
         formatShape(product.rhsShape), product.operandType, product.resultType,
         llvm::formatv("{0}", llvm::format("%.3f", product.flops / 1e6))
             .str()});
    if (!paths.empty())
      rows.back().push_back(product.cpuPath);
  }
  printColumns(rows, os);
  if (!paths.empty()) {
    std::vector<std::string> parts;
    for (const auto &[path, count] : paths)
      parts.push_back(llvm::formatv("{0} {1}", count, path).str());
    os << "On this CPU (" << plan.cpuGemmLibrary
       << "): " << llvm::join(parts, ", ") << "\n";
  }

  Totals totals = computeTotals(plan);
  os << "\nTotals (whole tensors; each of N ranks holds 1/N)\n";
  rows = {
      {"parameters", llvm::formatv("{0} ({1} elements)", totals.parameters,
                                   totals.parameterElements)
                         .str()},
      {"resident bytes",
       llvm::formatv("{0} (parameter copies {1} + masters {2} + moments {3})",
                     totals.residentBytes, totals.parameterBytes,
                     totals.masterBytes, totals.momentsBytes)
           .str()},
      {"resident bytes per parameter",
       llvm::formatv(
           "{0}", llvm::format("%.2f", totals.getResidentBytesPerParameter()))
           .str()},
      {"buffer bytes", std::to_string(totals.bufferBytes)},
      {"bytes gathered per step", std::to_string(totals.gatheredBytes)},
      {"bytes reduced per step", std::to_string(totals.reducedBytes)},
      {"collectives per step",
       llvm::formatv("{0} ({1} all-gathers, {2} reduce-scatters)",
                     totals.getCollectives(), totals.allGathers,
                     totals.reduceScatters)
           .str()}};
  printColumns(rows, os);

  os << "\nWarnings: " << plan.warnings.size() << "\n";
  for (const Problem &warning : plan.warnings)
    os << "  warning: " << warning.message << "\n";
}

void precision::printReportJson(const StepPlan &plan, llvm::raw_ostream &os) {
  llvm::json::OStream json(os, /*IndentSize=*/2);
  auto dtypeOrNull = [&](const TensorPlan &tensor, Axis axis) {
    if (!tensor.isParameter() && axis != Axis::Master && axis != Axis::Gather)
      return llvm::json::Value(nullptr);
    return llvm::json::Value(tensor.getName(axis));
  };
  auto originOrNull = [&](const TensorPlan &tensor, Axis axis) {
    if (!tensor.isParameter() && axis != Axis::Master && axis != Axis::Gather)
      return llvm::json::Value(nullptr);
    return llvm::json::Value(tensor.getDecidedBy(axis));
  };
  Totals totals = computeTotals(plan);

  json.object([&] {
    json.attributeArray("tensors", [&] {
      for (const TensorPlan &tensor : plan.tensors)
        json.object([&] {
          json.attribute("fqn", tensor.tensor.fqn);
          json.attribute("kind", tensor.isParameter() ? "parameter" : "buffer");
          json.attributeArray("shape", [&] {
            for (int64_t size : tensor.tensor.shape)
              json.value(size);
          });
          for (Axis axis : kAllAxes)
            json.attribute(stringifyAxis(axis), dtypeOrNull(tensor, axis));
          json.attribute("group", tensor.isParameter()
                                      ? llvm::json::Value(tensor.group)
                                      : llvm::json::Value(nullptr));
          json.attributeObject("decided_by", [&] {
            for (Axis axis : kAllAxes)
              json.attribute(stringifyAxis(axis), originOrNull(tensor, axis));
          });
        });
    });
    json.attributeArray("groups", [&] {
      for (const ShardGroup &group : plan.groups)
        json.object([&] {
          json.attribute("name", group.name);
          json.attribute("unit", group.unit);
          json.attribute("gather", train::stringifyDType(group.gather));
          json.attribute("nested_in", group.nestedIn
                                          ? llvm::json::Value(*group.nestedIn)
                                          : llvm::json::Value(nullptr));
          json.attribute("reshard_after_forward", group.reshardAfterForward);
          json.attributeArray("members", [&] {
            for (const std::string &member : group.members)
              json.value(member);
          });
        });
    });
    json.attribute("compute",
                   plan.compute
                       ? llvm::json::Value(train::stringifyDType(*plan.compute))
                       : llvm::json::Value(nullptr));
    json.attributeArray("matrix_products", [&] {
      for (const MatrixProduct &product : plan.matrixProducts)
        json.object([&] {
          json.attribute("node", product.node);
          json.attribute("op", product.op);
          json.attributeArray("lhs_shape", [&] {
            for (int64_t size : product.lhsShape)
              json.value(size);
          });
          json.attributeArray("rhs_shape", [&] {
            for (int64_t size : product.rhsShape)
              json.value(size);
          });
          json.attribute("operand_type", product.operandType);
          json.attribute("result_type", product.resultType);
          json.attribute("flops", product.flops);
          if (!product.cpuPath.empty())
            json.attribute("cpu_path", product.cpuPath);
        });
    });
    if (!plan.cpuGemmLibrary.empty())
      json.attribute("cpu_gemm_library", plan.cpuGemmLibrary);
    json.attributeObject("matrix_product_counts", [&] {
      for (const auto &[type, count] : countProductsByType(plan))
        json.attribute(type, count);
    });
    json.attributeObject("totals", [&] {
      json.attribute("parameters", totals.parameters);
      json.attribute("parameter_elements", totals.parameterElements);
      json.attribute("parameter_bytes", totals.parameterBytes);
      json.attribute("master_bytes", totals.masterBytes);
      json.attribute("moments_bytes", totals.momentsBytes);
      json.attribute("resident_bytes", totals.residentBytes);
      json.attribute("resident_bytes_per_parameter",
                     totals.getResidentBytesPerParameter());
      json.attribute("buffer_bytes", totals.bufferBytes);
      json.attribute("gathered_bytes_per_step", totals.gatheredBytes);
      json.attribute("reduced_bytes_per_step", totals.reducedBytes);
      json.attribute("all_gathers_per_step", totals.allGathers);
      json.attribute("reduce_scatters_per_step", totals.reduceScatters);
      json.attribute("collectives_per_step", totals.getCollectives());
    });
    json.attributeArray("warnings", [&] {
      for (const Problem &warning : plan.warnings)
        json.value(warning.message);
    });
  });
  os << "\n";
}
