//===- TrainKernelOps.cpp - Ops the GPU path forms from the graph ---------===//
//
// train.attention_kernel: its verifier, its memory effects on buffers, and
// its bufferization (destination passing: each output bufferizes in place
// into its result).
//
//===----------------------------------------------------------------------===//

#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"

using namespace mlir;
using namespace mlir::mantissa::train;

bool AttentionKernelOp::isMaskShape(ArrayRef<int64_t> mask,
                                    ArrayRef<int64_t> query) {
  if (query.size() != 4)
    return false;
  int64_t sequence = query[2];
  if (mask.size() == 2)
    return mask[0] == sequence && mask[1] == sequence;
  if (mask.size() != 4 || mask[3] != sequence)
    return false;
  int64_t scores[3] = {query[0], query[1], sequence};
  for (int64_t i = 0; i < 3; ++i)
    if (mask[i] != 1 && mask[i] != scores[i])
      return false;
  return true;
}

LogicalResult AttentionKernelOp::verify() {
  bool backward = getBackward();
  if (getRoundedGradient() && !backward)
    return emitOpError() << "rounds the scores' gradient (rounded_gradient) "
                            "but is not the backward";
  if (getRoundedGradient() && getFp32Scores())
    return emitOpError() << "keeps its scores in fp32 (fp32_scores) but "
                            "rounds their gradient as a graph in bf16 "
                            "(rounded_gradient)";
  bool masked = !getUnmasked();
  size_t inputs = (backward ? 6 : 3) + masked, outputs = backward ? 4 : 2;
  if (getInputs().size() != inputs || getOutputs().size() != outputs)
    return emitOpError() << "takes " << inputs << " inputs and " << outputs
                         << " outputs " << (backward ? "backward" : "forward")
                         << (masked ? "" : " unmasked");
  auto shapeOf = [](Value value) { return cast<ShapedType>(value.getType()); };
  ShapedType query = shapeOf(getInputs()[0]);
  if (!query.hasStaticShape() || query.getRank() != 4)
    return emitOpError() << "needs a static [batch, heads, sequence, "
                            "head_dim] query";
  ArrayRef<int64_t> shape = query.getShape();
  Type bf16 = BFloat16Type::get(getContext());
  SmallVector<int64_t> rows(shape.take_front(3));
  auto expect = [&](Value value, ArrayRef<int64_t> expected, Type element,
                    StringRef what) -> LogicalResult {
    ShapedType type = shapeOf(value);
    if (type.getShape() != expected || type.getElementType() != element)
      return emitOpError() << what << " is " << type << "; expected "
                           << (expected.empty() ? "" : "a ") << "["
                           << llvm::make_range(expected.begin(), expected.end())
                           << "] of " << element;
    return success();
  };
  Type f32 = Float32Type::get(getContext());
  SmallVector<std::tuple<Value, ArrayRef<int64_t>, Type, StringRef>> checks = {
      {getInputs()[1], shape, bf16, "the key"},
      {getInputs()[2], shape, bf16, "the value"}};
  if (Value mask = getMask()) {
    ShapedType maskType = shapeOf(mask);
    Type element = maskType.getElementType();
    if (!maskType.hasStaticShape() ||
        !(element.isInteger(1) || element.isF32()) ||
        !isMaskShape(maskType.getShape(), shape))
      return emitOpError() << "the mask is " << maskType
                           << "; expected an i1 or f32 [" << shape[2] << ", "
                           << shape[2] << "] or [" << shape[0] << " or 1, "
                           << shape[1] << " or 1, " << shape[2] << " or 1, "
                           << shape[2] << "]";
  }
  if (backward) {
    ValueRange saved = getInputs().drop_front(3 + masked);
    checks.push_back({saved[0], shape, bf16, "the output"});
    checks.push_back({saved[1], rows, f32, "the log-sum-exp"});
    checks.push_back({saved[2], shape, bf16, "the output's gradient"});
    for (int64_t i = 0; i < 3; ++i)
      checks.push_back({getOutputs()[i], shape, bf16, "a gradient"});
    checks.push_back({getOutputs()[3], rows, f32, "delta"});
  } else {
    checks.push_back({getOutputs()[0], shape, bf16, "the output"});
    checks.push_back({getOutputs()[1], rows, f32, "the log-sum-exp"});
  }
  if (query.getElementType() != bf16)
    return emitOpError() << "the query is " << query << "; expected bf16";
  for (auto [value, expected, element, what] : checks)
    if (failed(expect(value, expected, element, what)))
      return failure();
  bool onTensors = isa<RankedTensorType>(getOutputs()[0].getType());
  if (llvm::any_of(getOperandTypes(), [&](Type type) {
        return isa<RankedTensorType>(type) != onTensors;
      }))
    return emitOpError() << "mixes tensors and memrefs";
  if (onTensors ? getResultTypes() != getOutputs().getTypes()
                : getNumResults() != 0)
    return emitOpError() << "has results other than its outputs' tensors";
  return success();
}

void AttentionKernelOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>>
        &effects) {
  for (OpOperand &input : getInputsMutable())
    if (isa<MemRefType>(input.get().getType()))
      effects.emplace_back(MemoryEffects::Read::get(), &input,
                           SideEffects::DefaultResource::get());
  for (OpOperand &output : getOutputsMutable())
    if (isa<MemRefType>(output.get().getType()))
      effects.emplace_back(MemoryEffects::Write::get(), &output,
                           SideEffects::DefaultResource::get());
}

bool AttentionKernelOp::bufferizesToMemoryRead(
    OpOperand &operand, const bufferization::AnalysisState &) {
  return !isDpsInit(&operand);
}

bool AttentionKernelOp::bufferizesToMemoryWrite(
    OpOperand &operand, const bufferization::AnalysisState &) {
  return isDpsInit(&operand);
}

bufferization::AliasingValueList
AttentionKernelOp::getAliasingValues(OpOperand &operand,
                                     const bufferization::AnalysisState &) {
  if (!isDpsInit(&operand))
    return {};
  return {
      {getTiedOpResult(&operand), bufferization::BufferRelation::Equivalent}};
}

LogicalResult AttentionKernelOp::bufferize(
    RewriterBase &rewriter,
    const bufferization::BufferizationOptions &options) {
  SmallVector<Value> inputs, outputs;
  for (auto [values, buffers] :
       {std::pair{getInputs(), &inputs}, std::pair{getOutputs(), &outputs}})
    for (Value value : values) {
      FailureOr<Value> buffer =
          bufferization::getBuffer(rewriter, value, options);
      if (failed(buffer))
        return failure();
      buffers->push_back(*buffer);
    }
  rewriter.create<AttentionKernelOp>(
      getLoc(), TypeRange{}, inputs, outputs, getBackwardAttr(), getScaleAttr(),
      getRoundedGradientAttr(), getUnmaskedAttr(), getFp32ScoresAttr());
  bufferization::replaceOpWithBufferizedValues(rewriter, *this, outputs);
  return success();
}
