//===- TrainAttrs.cpp - Attributes of the train dialect -------------------===//
//
// Dtype helpers, attribute verifiers and the precision plan's syntax.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Dialect/Train/IR/TrainAttrs.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::mantissa::train;

#include "mantissa/Dialect/Train/IR/TrainEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "mantissa/Dialect/Train/IR/TrainAttrs.cpp.inc"

void TrainDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "mantissa/Dialect/Train/IR/TrainAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Dtype helpers
//===----------------------------------------------------------------------===//

std::optional<DType> mlir::mantissa::train::parseDTypeName(StringRef name) {
  return llvm::StringSwitch<std::optional<DType>>(name)
      .Cases("fp32", "float32", DType::fp32)
      .Cases("bf16", "bfloat16", DType::bf16)
      .Cases("fp16", "float16", DType::fp16)
      .Default(std::nullopt);
}

Type mlir::mantissa::train::getElementType(MLIRContext *context, DType dtype) {
  switch (dtype) {
  case DType::fp32:
    return Float32Type::get(context);
  case DType::bf16:
    return BFloat16Type::get(context);
  case DType::fp16:
    return Float16Type::get(context);
  }
  llvm_unreachable("unknown dtype");
}

std::optional<DType> mlir::mantissa::train::getDTypeOf(Type type) {
  if (type.isF32())
    return DType::fp32;
  if (type.isBF16())
    return DType::bf16;
  if (type.isF16())
    return DType::fp16;
  return std::nullopt;
}

unsigned mlir::mantissa::train::getByteWidth(DType dtype) {
  return dtype == DType::fp32 ? 4 : 2;
}

ParseResult mlir::mantissa::train::parseDTypeKeyword(AsmParser &parser,
                                                     DType &dtype) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseKeyword(&keyword))
    return failure();
  std::optional<DType> parsed = symbolizeDType(keyword);
  if (!parsed)
    return parser.emitError(loc)
           << "unknown dtype '" << keyword << "' (expected fp32, bf16 or fp16)";
  dtype = *parsed;
  return success();
}

void mlir::mantissa::train::printDTypeKeyword(AsmPrinter &printer,
                                              DType dtype) {
  printer << stringifyDType(dtype);
}

//===----------------------------------------------------------------------===//
// TensorInfoAttr
//===----------------------------------------------------------------------===//

LogicalResult
TensorInfoAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                       TensorKind kind, StringAttr fqn, StringAttr module,
                       DenseI64ArrayAttr shape, Type dtype, bool persistent) {
  if (!shape)
    return emitError() << "tensor metadata needs a shape";
  if (!fqn || fqn.getValue().empty())
    return emitError() << "tensor metadata needs a non-empty fqn";
  if (!module)
    return emitError() << "tensor '" << fqn.getValue()
                       << "' needs a module path (empty for the root)";
  for (int64_t size : shape.asArrayRef())
    if (size < 0)
      return emitError() << "tensor '" << fqn.getValue()
                         << "' has a negative or dynamic dimension";
  if (!persistent && kind != TensorKind::buffer)
    return emitError() << "tensor '" << fqn.getValue()
                       << "' is marked non-persistent but is a "
                       << stringifyTensorKind(kind)
                       << "; only buffers can be non-persistent";
  if (kind == TensorKind::parameter && !llvm::isa<FloatType>(dtype))
    return emitError() << "parameter '" << fqn.getValue()
                       << "' has non-floating-point dtype " << dtype;
  return success();
}

//===----------------------------------------------------------------------===//
// ResultInfoAttr
//===----------------------------------------------------------------------===//

LogicalResult
ResultInfoAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                       ResultKind kind, StringAttr fqn) {
  bool namesTensor =
      kind == ResultKind::gradient || kind == ResultKind::buffer_mutation;
  if (namesTensor && (!fqn || fqn.getValue().empty()))
    return emitError() << stringifyResultKind(kind)
                       << " result must name its tensor with an fqn";
  if (kind == ResultKind::loss && fqn)
    return emitError() << "loss result takes no fqn";
  return success();
}

//===----------------------------------------------------------------------===//
// PrecisionPlanAttr
//===----------------------------------------------------------------------===//

LogicalResult
PrecisionPlanAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                          DType master, DType gather,
                          std::optional<DType> reduce,
                          std::optional<DType> moments, bool masterSplit) {
  if (reduce.has_value() != moments.has_value())
    return emitError() << "a plan sets both reduce and moments (a parameter) "
                          "or neither (a buffer)";
  if (masterSplit && !reduce)
    return emitError() << "master fp32_split is a parameter's (a buffer has "
                          "no optimizer state)";
  if (masterSplit && (master != DType::fp32 || gather != DType::bf16))
    return emitError() << "master fp32_split needs a bf16 gather dtype (the "
                          "remainder completes a bf16 parameter), got gather "
                       << stringifyDType(gather);
  return success();
}

/// `<master = fp32, gather = bf16[, reduce = bf16, moments = fp32]>`, in any
/// order; `master = fp32_split` for a remainder master.
Attribute PrecisionPlanAttr::parse(AsmParser &parser, Type) {
  std::optional<DType> master, gather, reduce, moments;
  bool masterSplit = false;
  auto parseAxis = [&]() -> ParseResult {
    SMLoc loc = parser.getCurrentLocation();
    StringRef axis;
    DType dtype;
    if (parser.parseKeyword(&axis) || parser.parseEqual())
      return failure();
    if (axis == "master" &&
        succeeded(parser.parseOptionalKeyword("fp32_split"))) {
      if (master)
        return parser.emitError(loc) << "precision axis 'master' given twice";
      master = DType::fp32;
      masterSplit = true;
      return success();
    }
    if (parseDTypeKeyword(parser, dtype))
      return failure();
    std::optional<DType> *slot =
        llvm::StringSwitch<std::optional<DType> *>(axis)
            .Case("master", &master)
            .Case("gather", &gather)
            .Case("reduce", &reduce)
            .Case("moments", &moments)
            .Default(nullptr);
    if (!slot)
      return parser.emitError(loc)
             << "unknown precision axis '" << axis
             << "' (expected master, gather, reduce or moments)";
    if (slot->has_value())
      return parser.emitError(loc)
             << "precision axis '" << axis << "' given twice";
    *slot = dtype;
    return success();
  };
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::LessGreater,
                                     parseAxis))
    return {};
  if (!master || !gather) {
    parser.emitError(loc) << "a plan needs at least master and gather";
    return {};
  }
  return parser.getChecked<PrecisionPlanAttr>(
      loc, parser.getContext(), *master, *gather, reduce, moments, masterSplit);
}

void PrecisionPlanAttr::print(AsmPrinter &printer) const {
  printer << "<master = "
          << (getMasterSplit() ? StringRef("fp32_split")
                               : stringifyDType(getMaster()))
          << ", gather = " << stringifyDType(getGather());
  if (getReduce())
    printer << ", reduce = " << stringifyDType(*getReduce());
  if (getMoments())
    printer << ", moments = " << stringifyDType(*getMoments());
  printer << ">";
}

bool mlir::mantissa::train::holdsExactly(Type wide, Type narrow) {
  if (wide == narrow)
    return true;
  auto wideFloat = dyn_cast<FloatType>(wide);
  if (auto narrowFloat = dyn_cast<FloatType>(narrow)) {
    if (!wideFloat)
      return false;
    const llvm::fltSemantics &w = wideFloat.getFloatSemantics();
    const llvm::fltSemantics &n = narrowFloat.getFloatSemantics();
    return llvm::APFloat::semanticsPrecision(w) >=
               llvm::APFloat::semanticsPrecision(n) &&
           llvm::APFloat::semanticsMaxExponent(w) >=
               llvm::APFloat::semanticsMaxExponent(n) &&
           llvm::APFloat::semanticsMinExponent(w) <=
               llvm::APFloat::semanticsMinExponent(n);
  }
  auto narrowInt = dyn_cast<IntegerType>(narrow);
  if (!narrowInt)
    return false;
  // Booleans are 0 or 1 in every type.
  if (narrowInt.getWidth() == 1)
    return true;
  if (wideFloat)
    return llvm::APFloat::semanticsPrecision(wideFloat.getFloatSemantics()) >
           narrowInt.getWidth();
  auto wideInt = dyn_cast<IntegerType>(wide);
  return wideInt && wideInt.getWidth() > narrowInt.getWidth();
}
