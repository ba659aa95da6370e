//===- StepImporter.h - The importer's state and handler API ----*- C++ -*-===//
//
// The state of one import (TorchImporter.cpp) and what the handlers of ATen
// operators use: typed access to a node's arguments, torch's output types,
// and the values of the tensors imported so far. The handlers of each
// operator family live in a file of their own (ImportElementwise.cpp,
// ImportReductions.cpp, ImportLinear.cpp, ImportShapes.cpp,
// ImportIndexing.cpp, ImportCreation.cpp, ImportConvolution.cpp,
// ImportNormalization.cpp, ImportPooling.cpp, ImportAttention.cpp,
// ImportLosses.cpp) as free functions of a StepImporter, and that file's
// add<Family>Handlers adds them to the one handler table by overload name
// (addAtenHandler). Supporting an operator of a family touches only that
// family's file; a new family also declares its add<Family>Handlers below,
// calls it in StepImporter::handlers() and lists its file in CMakeLists.txt.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_LIB_IMPORT_STEPIMPORTER_H
#define MANTISSA_LIB_IMPORT_STEPIMPORTER_H

#include "mantissa/Format/RandomDraw.h"
#include "mantissa/Import/Pt2Archive.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/ErrorHandling.h"
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mlir::mantissa::importer {

class StepImporter;
/// Imports the current node; fails (through StepImporter::fail) with a
/// message naming what is wrong.
using Handler = std::function<LogicalResult(StepImporter &)>;
/// Handlers by operator overload ("torch.ops.aten.convolution.default").
using HandlerTable = llvm::StringMap<Handler>;

/// Adds the handler of "torch.ops.aten.<overload>" to `table`. An overload
/// has one handler: a second is a bug, reported in every build type (the
/// table is built on the first import).
inline void addAtenHandler(HandlerTable &table, StringRef overload,
                           Handler handler) {
  std::string name = ("torch.ops.aten." + overload).str();
  if (!table.try_emplace(name, std::move(handler)).second)
    llvm::report_fatal_error(llvm::Twine("two handlers for ") + name);
}

/// The handlers of each operator family, kept in a file of its own
/// (Import<Family>.cpp); TorchImporter.cpp builds the one table from them.
void addElementwiseHandlers(HandlerTable &table);
void addReductionHandlers(HandlerTable &table);
void addLinearHandlers(HandlerTable &table);
void addShapeHandlers(HandlerTable &table);
void addIndexingHandlers(HandlerTable &table);
void addCreationHandlers(HandlerTable &table);
void addConvolutionHandlers(HandlerTable &table);
void addAttentionHandlers(HandlerTable &table);
void addLossHandlers(HandlerTable &table);
void addPoolingHandlers(HandlerTable &table);
void addNormalizationHandlers(HandlerTable &table);
void addRandomHandlers(HandlerTable &table);

/// Imports one program. Problems are collected rather than returned one at a
/// time, so that a user sees every unsupported operator in one run.
class StepImporter {
public:
  StepImporter(MLIRContext &context, const pt2::Program &program,
               StringRef fileName)
      : context(context), program(program), fileName(fileName),
        builder(&context) {}

  llvm::Expected<OwningOpRef<ModuleOp>> run();

  //===--------------------------------------------------------------------===//
  // The interface of the handlers (one per ATen operator, by family)
  //===--------------------------------------------------------------------===//

  /// "torch.ops.aten.mul.Tensor (node 'mul_3', module 'layers.0.mlp')".
  std::string describeNode(const pt2::Node &node) const;
  /// Fails the node being imported with `message` (the first one counts).
  LogicalResult fail(const Twine &message);

  const pt2::Argument *findArgument(StringRef name) const;
  FailureOr<Value> tensorArgument(StringRef name);
  /// The value of the tensor named `tensorName` in the graph, or null if
  /// it has none (yet).
  Value findTensor(StringRef tensorName) const;
  FailureOr<Value> optionalTensorArgument(StringRef name);
  FailureOr<SmallVector<Value>> tensorListArgument(StringRef name);
  FailureOr<int64_t> intArgument(StringRef name,
                                 std::optional<int64_t> defaultValue = {});
  FailureOr<SmallVector<int64_t>> intsArgument(StringRef name);
  FailureOr<double> floatArgument(StringRef name,
                                  std::optional<double> defaultValue = {});
  bool boolArgument(StringRef name, bool defaultValue);
  /// A Python number argument as an attribute (I64, F64 or Bool).
  FailureOr<Attribute> scalarArgument(StringRef name,
                                      std::optional<double> defaultValue = {});
  /// A per-dimension parameter of a window (kernel_size, stride, padding,
  /// dilation of convolutions and pooling): torch accepts one value for every
  /// spatial dimension, and an absent or empty list means `defaults` (whose
  /// size is the number of spatial dimensions).
  FailureOr<SmallVector<int64_t>> spatialArgument(StringRef name,
                                                  ArrayRef<int64_t> defaults);
  /// A list of dimensions of a tensor of `rank` (one or several), made
  /// non-negative, sorted and without repeats; empty when absent.
  FailureOr<SmallVector<int64_t>> dimsArgument(StringRef name, int64_t rank);
  /// An index into a dimension of `size`, made non-negative.
  FailureOr<int64_t> indexArgument(StringRef name, int64_t size);
  /// A dimension argument, made non-negative for a tensor of `rank`.
  FailureOr<int64_t> dimArgument(StringRef name, int64_t rank,
                                 std::optional<int64_t> defaultValue = {});

  /// An operand that torch accepts either as a tensor or as a Python number
  /// in a tensor position (`aten.sub.Tensor(1, x)`): torch wraps the number
  /// as a zero-dimensional "wrapped number" tensor, which takes part in type
  /// promotion below every tensor, zero-dimensional ones included.
  struct Operand {
    Value tensor;
    Attribute number;
    bool isNumber() const { return !tensor; }
  };
  FailureOr<Operand> operandArgument(StringRef name);
  /// torch's common dtype of `operands` (TensorIterator's, with wrapped
  /// numbers as scalars).
  Type commonType(ArrayRef<Operand> operands) const;
  /// The operand as a tensor of element type `elementType`: a number
  /// becomes a zero-dimensional `train.full`, converted to `elementType` as
  /// TensorIterator converts a wrapped number to the common dtype; a tensor
  /// is cast when its type differs.
  Value materialize(const Operand &operand, Type elementType);
  /// The operand as a tensor: a number becomes a zero-dimensional tensor of
  /// `numberType`, a tensor keeps its own dtype (the operation promotes it).
  Value asTensor(const Operand &operand, Type numberType);
  /// `value` converted to `elementType` (itself if it already is).
  Value convert(Value value, Type elementType);

  /// The names of the node's output tensors ("" for None outputs).
  SmallVector<std::string> outputNames() const;
  /// torch's type for output `index`.
  FailureOr<RankedTensorType> outputType(unsigned index = 0);
  LogicalResult setOutput(unsigned index, Value value);
  /// Sets output `index` to `value` converted to torch's recorded dtype.
  LogicalResult setConvertedOutput(unsigned index, Value value);
  /// Whether the node has a tensor output `index` (outputs a backward's
  /// output_mask turned off are None).
  bool hasOutput(unsigned index) const;
  /// A backward's `output_mask`: three bools, all true when absent.
  FailureOr<SmallVector<bool, 3>> outputMaskArgument();
  LogicalResult setOutputs(ValueRange values);

  static int64_t rankOf(Value value) {
    return cast<RankedTensorType>(value.getType()).getRank();
  }

  /// Builds `OpTy` on the given operands with torch's output type(s).
  template <typename OpTy, typename... Args>
  LogicalResult emitSingle(Args &&...args) {
    FailureOr<RankedTensorType> type = outputType(0);
    if (failed(type))
      return failure();
    auto op =
        builder.create<OpTy>(location, *type, std::forward<Args>(args)...);
    return setOutput(0, op.getResult());
  }

  /// A new `random` step argument of `type` holding `draw` for the current
  /// node (ImportRandom.cpp; the runtime fills it before each micro-batch,
  /// mantissa/Format/RandomDraw.h), named after the node; null after
  /// failing the node when the draw cannot be generated in that type.
  Value addRandomArgument(RankedTensorType type, rt::RandomDraw draw);
  /// B: the leading dimension every user input shares (the micro-batch's
  /// samples), or 0 when they do not share one. A draw whose leading
  /// dimension is B is drawn per sample.
  int64_t microBatchSamples() const { return samples; }

  /// Every handler, by overload: the one table the families' files
  /// (Import<Family>.cpp) fill, built on first use.
  static const HandlerTable &handlers();

  MLIRContext &context;
  const pt2::Program &program;
  StringRef fileName;
  OpBuilder builder;
  /// The location of the node being imported.
  Location location = UnknownLoc::get(&context);

private:
  /// The step's body, and the random arguments added to it after the
  /// signature's (their types and attributes), in order.
  Block *body = nullptr;
  SmallVector<Type> randomTypes;
  SmallVector<DictionaryAttr> randomAttrs;
  int64_t samples = 0;
  /// The SSA value of each torch tensor name imported so far.
  llvm::StringMap<Value> values;
  const pt2::Node *currentNode = nullptr;
  /// Problems of the signature and of the step as a whole.
  std::vector<std::string> problems;

  /// A node that could not be imported: an unsupported operator or a
  /// handler's error. Nodes that depend on it are skipped, not reported
  /// again: one message per cause, with a count of what it cost.
  struct NodeFailure {
    std::string message;
    bool unsupportedOperator = false;
    unsigned skippedDependents = 0;
  };
  std::vector<NodeFailure> nodeFailures;
  RankedTensorType getTensorType(StringRef tensorName, StringRef what);
  void importSignature(SmallVectorImpl<Type> &argumentTypes,
                       SmallVectorImpl<DictionaryAttr> &argumentAttrs,
                       SmallVectorImpl<Type> &resultTypes,
                       SmallVectorImpl<DictionaryAttr> &resultAttrs);
  void importNode(const pt2::Node &node);

  /// For each tensor a failed or skipped node left undefined, the index in
  /// `nodeFailures` of its cause.
  llvm::StringMap<unsigned> failedTensors;
  /// Set by fail() while a handler runs: its message.
  std::optional<std::string> currentFailure;

  /// The cause of the first input of `node` left undefined by a failure.
  std::optional<unsigned> failedInputCause(const pt2::Node &node) const;
  void recordNodeFailure(const pt2::Node &node, NodeFailure failure);
  /// Leaves the current node's outputs undefined, failed by `cause`.
  void markOutputsFailed(unsigned cause);
  /// Every problem found, one per cause, as one message.
  std::string describeProblems() const;
};

} // namespace mlir::mantissa::importer

#endif // MANTISSA_LIB_IMPORT_STEPIMPORTER_H
