//===- Pt2Specialization.cpp - A dynamic batch bound to the micro-batch ---===//
//
// torch.export marks the batch dimension dynamic (mantissa.export gives all
// batched inputs one shared Dim), so the program names the batch size with
// one shape symbol and writes every size that depends on it as a sympy
// expression. The reader binds the symbol to the micro-batch before it reads
// the graph (bindBatchSymbol), evaluates each size as it reads it, and then
// evaluates the symbolic scalars, the arguments naming them and the graph's
// size checks (specializeProgram): the importer sees a static program.
//
//===----------------------------------------------------------------------===//

#include "Pt2Json.h"
#include "Pt2Schema.h"

#include "mantissa/Import/SymbolicExpression.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir::mantissa::pt2;
using namespace mlir::mantissa::pt2::detail;
using llvm::StringRef;
using llvm::Twine;
namespace json = llvm::json;

llvm::ArrayRef<StringRef> mlir::mantissa::pt2::getSymbolicShapeOperators() {
  static const StringRef operators[] = {
      "_operator.add",
      "_operator.and_",
      "_operator.eq",
      "_operator.floordiv",
      "_operator.ge",
      "_operator.gt",
      "_operator.le",
      "_operator.lt",
      "_operator.mod",
      "_operator.mul",
      "_operator.ne",
      "_operator.neg",
      "_operator.or_",
      "_operator.pow",
      "_operator.sub",
      "_operator.truediv",
      "math.ceil",
      "math.floor",
      "torch.ops.aten._assert_scalar.default",
      "torch.ops.aten.sym_constrain_range.default",
      "torch.ops.aten.sym_constrain_range_for_size.default",
      "torch.ops.aten.sym_numel.default",
      "torch.ops.aten.sym_size.int",
      "torch.ops.aten.sym_storage_offset.default",
      "torch.ops.aten.sym_stride.int",
      "torch.sym_float",
      "torch.sym_int",
      "torch.sym_max",
      "torch.sym_min",
      "torch.sym_not",
  };
  return operators;
}

/// torch writes a symbol as "Symbol('s17', positive=True, integer=True)"
/// (srepr) or as "s17" (older torch).
static bool isBareSymbol(StringRef expression, StringRef symbol) {
  expression = expression.trim();
  if (expression == symbol)
    return true;
  return expression.consume_front("Symbol(") &&
         (expression.consume_front("'" + symbol.str() + "'") ||
          expression.consume_front("\"" + symbol.str() + "\"")) &&
         !expression.contains('(');
}

/// The hint (example value) of the first user input size that is `symbol`.
static std::optional<int64_t> findExportedSize(const json::Object &module,
                                               StringRef symbol) {
  const json::Object *signature = module.getObject("signature");
  const json::Object *graph = module.getObject("graph");
  const json::Array *specs =
      signature ? signature->getArray("input_specs") : nullptr;
  const json::Object *tensors =
      graph ? graph->getObject("tensor_values") : nullptr;
  if (!specs || !tensors)
    return std::nullopt;
  for (const json::Value &spec : *specs) {
    const json::Object *specObject = spec.getAsObject();
    const json::Object *userInput =
        specObject ? specObject->getObject("user_input") : nullptr;
    const json::Object *arg = userInput ? userInput->getObject("arg") : nullptr;
    const json::Object *tensor = arg ? arg->getObject("as_tensor") : nullptr;
    std::optional<StringRef> name =
        tensor ? tensor->getString("name") : std::nullopt;
    const json::Object *meta = name ? tensors->getObject(*name) : nullptr;
    const json::Array *sizes = meta ? meta->getArray("sizes") : nullptr;
    if (!sizes)
      continue;
    for (const json::Value &size : *sizes) {
      const json::Object *sizeObject = size.getAsObject();
      const json::Object *expr =
          sizeObject ? sizeObject->getObject("as_expr") : nullptr;
      std::optional<StringRef> text =
          expr ? expr->getString("expr_str") : std::nullopt;
      const json::Object *hint = expr ? expr->getObject("hint") : nullptr;
      std::optional<int64_t> value =
          hint ? hint->getInteger("as_int") : std::nullopt;
      if (text && value && isBareSymbol(*text, symbol))
        return value;
    }
  }
  return std::nullopt;
}

static std::string describeRange(int64_t low, std::optional<int64_t> high) {
  return "[" + std::to_string(low) + ", " +
         (high ? std::to_string(*high) : std::string("unbounded")) + "]";
}

bool mlir::mantissa::pt2::detail::bindBatchSymbol(JsonReader &reader,
                                                  const json::Object &top,
                                                  const json::Object &module,
                                                  BatchBinding &batch) {
  const json::Value *constraints =
      JsonReader::getOptionalField(top, "range_constraints");
  if (!constraints)
    return true;
  JsonPath path = JsonPath().field("range_constraints");
  const json::Object *table = reader.getObject(*constraints, path);
  if (!table)
    return false;
  if (table->empty())
    return true;
  if (table->size() > 1) {
    std::vector<std::string> names;
    for (const auto &entry : *table)
      names.push_back(entry.first.str());
    llvm::sort(names);
    return reader.failPlain(
        "the program has " + Twine(names.size()) + " shape symbols (" +
        llvm::join(names, ", ") +
        "); Mantissa binds one, the batch size: export with one shared "
        "batch Dim (mantissa.export does)");
  }
  const auto &[symbolKey, range] = *table->begin();
  StringRef symbol = symbolKey;
  JsonPath rangePath = path.field(symbol);
  const json::Object *rangeObject = reader.getObject(range, rangePath);
  if (!rangeObject)
    return false;
  // torch writes an unbounded end (int_oo) as null.
  batch.minSize = 0;
  if (JsonReader::getOptionalField(*rangeObject, "min_val") &&
      !reader.readField(*rangeObject, "min_val", rangePath, batch.minSize))
    return false;
  if (JsonReader::getOptionalField(*rangeObject, "max_val")) {
    int64_t high = 0;
    if (!reader.readField(*rangeObject, "max_val", rangePath, high))
      return false;
    batch.maxSize = high;
  }
  std::optional<int64_t> exported = findExportedSize(module, symbol);
  if (!exported)
    return reader.failPlain("the shape symbol " + symbol +
                            " is not the size of any user input's "
                            "dimension; Mantissa binds only the batch size");
  batch.symbol = symbol.str();
  batch.exportedSize = *exported;
  batch.size = reader.getOptions().microBatch.value_or(*exported);
  if (batch.size < batch.minSize ||
      (batch.maxSize && batch.size > *batch.maxSize))
    return reader.failPlain(
        "--micro-batch " + Twine(batch.size) + " is outside the range " +
        describeRange(batch.minSize, batch.maxSize) +
        " the graph's batch size (" + symbol + ") was exported for");
  reader.symbols[batch.symbol] = batch.size;
  return true;
}

/// The batch size of a static program: the commonest size of dimension 0
/// among the user inputs, as mantissa.export's batch_dims decides it; 0
/// when no user input has a dimension.
static int64_t staticBatchSize(const Program &program) {
  std::map<int64_t, int> counts;
  for (const InputSpec &spec : program.signature.inputSpecs)
    if (spec.kind == InputSpec::Kind::UserInput && spec.arg.isTensor())
      if (const TensorMeta *meta = program.graph.findTensor(spec.argName))
        if (!meta->sizes.empty())
          ++counts[meta->sizes[0]];
  int64_t size = 0;
  int best = 0;
  for (auto [candidate, count] : counts)
    if (count > best) {
      size = candidate;
      best = count;
    }
  return size;
}

namespace {

/// Evaluates the graph's symbolic values and substitutes them.
class Specializer {
public:
  Specializer(JsonReader &reader, Graph &graph)
      : reader(reader), graph(graph) {}

  bool run() {
    if (!evaluateValues(graph.symIntValues, "integer") ||
        !evaluateValues(graph.symFloatValues, "float") ||
        !evaluateValues(graph.symBoolValues, "boolean"))
      return false;
    llvm::ArrayRef<StringRef> symbolic = getSymbolicShapeOperators();
    std::vector<Node> kept;
    for (Node &node : graph.nodes) {
      for (NamedArgument &input : node.inputs)
        if (!resolve(input.arg, node))
          return false;
      if (!llvm::is_contained(symbolic, node.target)) {
        kept.push_back(std::move(node));
        continue;
      }
      if (node.target == "torch.ops.aten._assert_scalar.default" &&
          !checkAssertion(node))
        return false;
    }
    graph.nodes = std::move(kept);
    for (Argument &output : graph.outputs)
      if (!resolve(output, std::nullopt))
        return false;
    return true;
  }

private:
  template <typename ValueT>
  bool evaluateValues(std::map<std::string, SymbolicValue<ValueT>> &values,
                      StringRef kind) {
    for (auto &[name, value] : values) {
      if (value.expression.empty())
        continue;
      llvm::Expected<SymbolicNumber> number =
          evaluateSymbolicExpression(value.expression, reader.symbols);
      if (!number)
        return reader.failPlain("symbolic " + kind + " '" + name + "' (node '" +
                                name + "'): " + toString(number.takeError()));
      if constexpr (std::is_same_v<ValueT, double>) {
        value.value = number->toDouble();
      } else {
        if (number->isFloat)
          return reader.failPlain("symbolic " + kind + " '" + name + "' (" +
                                  value.expression + ") is not an integer");
        value.value = ValueT(number->integer);
      }
      value.expression.clear();
    }
    return true;
  }

  template <typename ValueT>
  bool lookUp(const std::map<std::string, SymbolicValue<ValueT>> &values,
              SymArgument<ValueT> &argument,
              const std::optional<std::reference_wrapper<const Node>> &node) {
    if (!argument.isSymbolic())
      return true;
    auto found = values.find(*argument.symbolName);
    if (found == values.end() || !found->second.value)
      return reader.failPlain(
          (node ? "node '" + node->get().name + "' (" + node->get().target + ")"
                : std::string("a graph output")) +
          " uses the symbolic value '" + *argument.symbolName +
          "', which the graph does not define");
    argument.value = *found->second.value;
    argument.symbolName.reset();
    return true;
  }

  /// Turns a symbolic argument into the plain one of its value, which is
  /// what the importer reads.
  bool resolve(Argument &arg,
               std::optional<std::reference_wrapper<const Node>> node) {
    switch (arg.kind) {
    case ArgumentKind::SymInt:
      if (!lookUp(graph.symIntValues, arg.symInt, node))
        return false;
      arg.kind = ArgumentKind::Int;
      arg.intValue = arg.symInt.value;
      return true;
    case ArgumentKind::SymInts:
      arg.intValues.clear();
      for (SymIntArgument &value : arg.symInts) {
        if (!lookUp(graph.symIntValues, value, node))
          return false;
        arg.intValues.push_back(value.value);
      }
      arg.kind = ArgumentKind::Ints;
      return true;
    case ArgumentKind::SymFloat:
      if (!lookUp(graph.symFloatValues, arg.symFloat, node))
        return false;
      arg.kind = ArgumentKind::Float;
      arg.floatValue = arg.symFloat.value;
      return true;
    case ArgumentKind::SymFloats:
      arg.floatValues.clear();
      for (SymFloatArgument &value : arg.symFloats) {
        if (!lookUp(graph.symFloatValues, value, node))
          return false;
        arg.floatValues.push_back(value.value);
      }
      arg.kind = ArgumentKind::Floats;
      return true;
    case ArgumentKind::SymBool:
      if (!lookUp(graph.symBoolValues, arg.symBool, node))
        return false;
      arg.kind = ArgumentKind::Bool;
      arg.boolValue = arg.symBool.value;
      return true;
    case ArgumentKind::SymBools:
      arg.boolValues.clear();
      for (SymBoolArgument &value : arg.symBools) {
        if (!lookUp(graph.symBoolValues, value, node))
          return false;
        arg.boolValues.push_back(value.value);
      }
      arg.kind = ArgumentKind::Bools;
      return true;
    default:
      return true;
    }
  }

  /// torch's runtime checks on sizes (a reshape that needs the batch to be
  /// even): a micro-batch that breaks one is refused here, not miscompiled.
  bool checkAssertion(const Node &node) {
    const NamedArgument *condition = node.findInput("a");
    if (!condition)
      condition = node.findInput("self");
    if (!condition || (condition->arg.kind != ArgumentKind::Bool &&
                       condition->arg.kind != ArgumentKind::Int))
      return true;
    bool holds = condition->arg.kind == ArgumentKind::Bool
                     ? condition->arg.boolValue
                     : condition->arg.intValue != 0;
    if (holds)
      return true;
    std::string message;
    if (const NamedArgument *text = node.findInput("assert_msg"))
      message = text->arg.stringValue;
    return reader.failPlain("--micro-batch " +
                            Twine(reader.symbols.begin()->second) +
                            " breaks the graph's check at node '" + node.name +
                            "'" + (message.empty() ? "" : ": " + message));
  }

  JsonReader &reader;
  Graph &graph;
};

} // namespace

bool mlir::mantissa::pt2::detail::specializeProgram(JsonReader &reader,
                                                    Program &program) {
  BatchBinding &batch = program.batch;
  if (!batch.isDynamic()) {
    batch.size = batch.exportedSize = batch.minSize = staticBatchSize(program);
    batch.maxSize = batch.size;
    std::optional<int64_t> wanted = reader.getOptions().microBatch;
    if (wanted && *wanted != batch.size)
      return reader.failPlain(
          "--micro-batch " + Twine(*wanted) + ": the graph was exported for " +
          "micro-batch " + Twine(batch.size) +
          " only; re-export it with a dynamic batch (mantissa.export marks "
          "the batch dimension dynamic unless torch refuses; its "
          "mantissa.json says why)");
  }
  return Specializer(reader, program.graph).run();
}
