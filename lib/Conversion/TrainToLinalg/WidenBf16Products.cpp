//===- WidenBf16Products.cpp - bf16 products as fp32 products -------------===//
//
// mantissa-widen-bf16-products: on a CPU where oneDNN has no bf16 matmul,
// each bf16 matrix product of the step becomes the fp32 product of its
// operands' exact widenings, made by the ops that make the operands
// (Passes.td). The runtime would otherwise widen the bf16 ones itself, in
// a packing pass per call (lib/Runtime/CpuGemm.cpp); the fp32 values the
// library multiplies are the same either way. So does each f16 product on
// any CPU, which the runtime's GEMM would otherwise leave to the generated
// loops.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToLLVM.h"
#include "mantissa/Conversion/TrainToLinalg/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/IR/LinalgInterfaces.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/X86TargetParser.h"

using namespace mlir;

namespace mlir::mantissa {
#define GEN_PASS_DEF_WIDENBF16PRODUCTSPASS
#include "mantissa/Conversion/TrainToLinalg/Passes.h.inc"
} // namespace mlir::mantissa

bool mlir::mantissa::cpuHasFeatures(StringRef cpu,
                                    ArrayRef<StringRef> features) {
  llvm::StringMap<bool> available;
  if (cpu == "native") {
    available = llvm::sys::getHostCPUFeatures();
  } else {
    SmallVector<StringRef> enabled;
    llvm::X86::getFeaturesForCPU(cpu, enabled);
    for (StringRef feature : enabled)
      available[feature] = true;
  }
  return llvm::all_of(
      features, [&](StringRef feature) { return available.lookup(feature); });
}

bool mlir::mantissa::cpuHasBf16Matmul(StringRef cpu) {
  // oneDNN's avx512_core, the least ISA its bf16 matmul takes (2.x
  // emulates bf16 arithmetic there without AVX512-BF16).
  return cpuHasFeatures(cpu, {"avx512f", "avx512bw", "avx512vl", "avx512dq"});
}

namespace {

/// How a product reads one input: the 16-bit float type (bf16 or f16) it
/// widens. An input of that type is widened; an f32 input is rounded to it
/// first (so whether a reading rounds follows from the input's type).
using Reading = Type;

/// Whether `type` is a 16-bit float type whose widening to f32 is exact,
/// with every product of two of them exact in f32 (8 and 11 significant
/// bits: at most 22 in a product), so that the fp32 product of widened
/// operands is the narrow product with fp32 accumulation.
bool isNarrowFloat(Type type) { return type.isBF16() || type.isF16(); }

/// A bf16 or f16 product: a contraction on tensors whose body is
/// `out + ext(a) * ext(b)` in f32 (in either order of each operation), and
/// how it reads each input.
struct Product {
  linalg::LinalgOp op;
  std::array<Reading, 2> readings;
  /// The input (0 or 1) the multiplication's left operand reads.
  unsigned leftInput = 0;
  /// Whether the addition's left operand is the output.
  bool outputLeft = true;
};

/// How `value` reads a block argument of `block`: `ext(arg)` of a bf16 (f16)
/// argument, or `ext(trunc(arg))` of an f32 one rounded to bf16 (f16); the
/// reading is that 16-bit type. Counts the conversions in `ops`.
std::optional<std::pair<unsigned, Reading>> readingOf(Value value, Block *block,
                                                      int &ops) {
  auto extension = value.getDefiningOp<arith::ExtFOp>();
  if (!extension || !extension.getType().isF32() ||
      !isNarrowFloat(extension.getIn().getType()))
    return std::nullopt;
  ++ops;
  Value in = extension.getIn();
  Reading reading = in.getType();
  if (auto rounding = in.getDefiningOp<arith::TruncFOp>()) {
    if (!rounding.getIn().getType().isF32())
      return std::nullopt;
    in = rounding.getIn();
    ++ops;
  }
  auto argument = dyn_cast<BlockArgument>(in);
  if (!argument || argument.getOwner() != block || !argument.hasOneUse())
    return std::nullopt;
  return std::make_pair(argument.getArgNumber(), reading);
}

/// `op` as a bf16 or f16 product, if it is one the runtime's GEMM may compute
/// (not a dot product, which the loops keep) and one to widen: an f16 one
/// always (the runtime's GEMM has no f16 kernel), a bf16 one when
/// `widenBf16`.
std::optional<Product> matchProduct(linalg::LinalgOp op, bool widenBf16) {
  if (!op.hasPureTensorSemantics() || op.getNumDpsInputs() != 2 ||
      op.getNumDpsInits() != 1 || op->getNumResults() != 1 ||
      !linalg::isaContractionOpInterface(op))
    return std::nullopt;
  Block *body = op.getBlock();
  if (body->getNumArguments() != 3 || !body->getArgument(2).getType().isF32())
    return std::nullopt;
  auto yield = dyn_cast<linalg::YieldOp>(body->getTerminator());
  if (!yield || yield.getNumOperands() != 1)
    return std::nullopt;
  auto add = yield.getOperand(0).getDefiningOp<arith::AddFOp>();
  if (!add || !add.getType().isF32())
    return std::nullopt;
  Value out = body->getArgument(2);
  Product product{op, {}, 0, add.getLhs() == out};
  Value multiplied = product.outputLeft    ? add.getRhs()
                     : add.getRhs() == out ? add.getLhs()
                                           : Value();
  auto multiply =
      multiplied ? multiplied.getDefiningOp<arith::MulFOp>() : nullptr;
  if (!multiply)
    return std::nullopt;
  int conversions = 0;
  auto left = readingOf(multiply.getLhs(), body, conversions);
  auto right = readingOf(multiply.getRhs(), body, conversions);
  if (!left || !right || left->first == right->first || left->first > 1 ||
      right->first > 1)
    return std::nullopt;
  if (body->getOperations().size() != size_t(3 + conversions))
    return std::nullopt;
  product.leftInput = left->first;
  product.readings[left->first] = left->second;
  product.readings[right->first] = right->second;
  if (!widenBf16 && llvm::any_of(product.readings, [](Reading reading) {
        return reading.isBF16();
      }))
    return std::nullopt;
  FailureOr<linalg::ContractionDimensions> dims =
      linalg::inferContractionDims(op);
  if (failed(dims) || dims->k.empty())
    return std::nullopt;
  SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  auto size = [&](ArrayRef<unsigned> loops) {
    int64_t total = 1;
    for (unsigned loop : loops)
      total = ShapedType::isDynamic(ranges[loop]) || total < 0
                  ? -1
                  : total * ranges[loop];
    return total;
  };
  if (size(dims->m) == 1 && size(dims->n) == 1)
    return std::nullopt;
  return product;
}

/// A product's input seen through the reshapes between it and the value
/// it is made from: `root`, reshaped by `reshapes` (innermost first).
struct Operand {
  Value root;
  SmallVector<Operation *> reshapes;
};

Operand traceOperand(Value value) {
  Operand operand;
  while (Operation *op = value.getDefiningOp()) {
    if (!isa<tensor::CollapseShapeOp, tensor::ExpandShapeOp>(op))
      break;
    operand.reshapes.push_back(op);
    value = op->getOperand(0);
  }
  std::reverse(operand.reshapes.begin(), operand.reshapes.end());
  operand.root = value;
  return operand;
}

/// Whether the values of `op`'s results can be widened in its body: an
/// all-parallel generic on static tensors.
bool isWidenableProducer(Operation *op) {
  auto generic = dyn_cast_or_null<linalg::GenericOp>(op);
  return generic && generic.hasPureTensorSemantics() &&
         generic.getNumParallelLoops() == generic.getNumLoops() &&
         llvm::all_of(generic->getResultTypes(), [](Type type) {
           return cast<RankedTensorType>(type).hasStaticShape();
         });
}

/// The f32 value of `value` rounded to `reading` (bf16 or f16) when it is
/// f32, or of the bf16 or f16 `value`, widened to f32.
Value widenScalar(OpBuilder &b, Location loc, Value value, Reading reading) {
  if (value.getType().isF32())
    value = b.create<arith::TruncFOp>(loc, reading, value);
  return b.create<arith::ExtFOp>(loc, b.getF32Type(), value);
}

/// `value`'s tensor type with f32 elements.
RankedTensorType f32TypeOf(Value value) {
  return cast<RankedTensorType>(value.getType())
      .clone(Float32Type::get(value.getContext()));
}

/// The rounding to bf16 or f16 that `value` widens, when it is one:
/// `extf(truncf(v))` of an f32 `v` in f32.
arith::TruncFOp roundedFrom(Value value) {
  auto extension = value.getDefiningOp<arith::ExtFOp>();
  if (!extension || !extension.getType().isF32())
    return {};
  auto rounding = extension.getIn().getDefiningOp<arith::TruncFOp>();
  if (!rounding || !isNarrowFloat(rounding.getType()) ||
      !rounding.getIn().getType().isF32())
    return {};
  return rounding;
}

/// Makes the ops that round a result of `producer` to bf16 (f16), where
/// `producer` also yields that result rounded and widened (the result the
/// widening gave it for a product), read the rounded result instead:
/// rounding it again gives the same bf16 (f16) value (NaN included, as the
/// quiet NaN), and where the op widens that value back it is the rounded
/// result itself. The unrounded result, when nothing else reads it, is then no
/// longer written (a SiLU's gradient in llama_medium: the product of the
/// input's gradient reads it rounded, the transposed copy for the weight's
/// gradient rounded it again, so the SiLU wrote both). Returns the ops it
/// changed.
SmallVector<Operation *> readRoundedResults(linalg::GenericOp producer) {
  SmallVector<Operation *> changed;
  auto yield = cast<linalg::YieldOp>(producer.getBody()->getTerminator());
  for (OpOperand &roundedOperand : yield->getOpOperands()) {
    arith::TruncFOp roundedBy = roundedFrom(roundedOperand.get());
    if (!roundedBy)
      continue;
    Value unrounded = roundedBy.getIn();
    Type narrow = roundedBy.getType();
    OpResult rounded = producer->getResult(roundedOperand.getOperandNumber());
    for (OpOperand &plainOperand : yield->getOpOperands()) {
      if (plainOperand.get() != unrounded)
        continue;
      OpResult plain = producer->getResult(plainOperand.getOperandNumber());
      if (producer.getIndexingMapMatchingResult(plain) !=
          producer.getIndexingMapMatchingResult(rounded))
        continue;
      for (OpOperand &use : llvm::make_early_inc_range(plain.getUses())) {
        auto consumer = dyn_cast<linalg::GenericOp>(use.getOwner());
        if (!consumer || !consumer.isDpsInput(&use))
          continue;
        BlockArgument argument = consumer.getMatchingBlockArgument(&use);
        if (argument.use_empty() ||
            !llvm::all_of(argument.getUsers(), [&](Operation *user) {
              auto rounding = dyn_cast<arith::TruncFOp>(user);
              return rounding && rounding.getType() == narrow;
            }))
          continue;
        use.set(rounded);
        for (Operation *rounding :
             llvm::make_early_inc_range(argument.getUsers())) {
          for (Operation *user :
               llvm::make_early_inc_range(rounding->getUsers()))
            if (auto extension = dyn_cast<arith::ExtFOp>(user);
                extension && extension.getType().isF32()) {
              extension.replaceAllUsesWith(argument);
              extension.erase();
            }
          if (rounding->use_empty())
            rounding->erase();
        }
        changed.push_back(consumer);
      }
    }
  }
  if (!changed.empty())
    changed.push_back(producer);
  return changed;
}

struct WidenBf16ProductsPass
    : mantissa::impl::WidenBf16ProductsPassBase<WidenBf16ProductsPass> {
  using WidenBf16ProductsPassBase::WidenBf16ProductsPassBase;

  void runOnOperation() override {
    bool widenBf16 = mantissa::widensBf16Products(cpu, libraryBf16);
    func::FuncOp function = getOperation();
    SmallVector<Product> products;
    function.walk([&](linalg::LinalgOp op) {
      if (std::optional<Product> product = matchProduct(op, widenBf16))
        products.push_back(*product);
    });
    if (products.empty())
      return;

    // Every value a product reads widened, with how it reads it, and the
    // results of each producer to widen, in a deterministic order.
    using Key = std::pair<Value, Reading>;
    llvm::MapVector<Operation *, SmallVector<Key>> producerResults;
    /// Values without a widenable producer, each with the first product
    /// that reads it.
    SmallVector<std::pair<Key, Operation *>> loneValues;
    llvm::DenseSet<Key> seen;
    for (Product &product : products)
      for (unsigned index = 0; index < 2; ++index) {
        Value root =
            traceOperand(product.op.getDpsInputOperand(index)->get()).root;
        Key key{root, product.readings[index]};
        if (!seen.insert(key).second)
          continue;
        Operation *producer = root.getDefiningOp();
        if (isWidenableProducer(producer))
          producerResults[producer].push_back(key);
        else
          loneValues.push_back({key, product.op});
      }

    DenseMap<Key, Value> widened;
    // A producer gets one more result per value: the same element,
    // widened, in an f32 tensor laid out as the value's.
    SmallVector<Operation *> rebuilt;
    for (auto &[op, keys] : producerResults) {
      auto producer = cast<linalg::GenericOp>(op);
      OpBuilder b(producer);
      Location loc = producer.getLoc();
      SmallVector<Value> inits(producer.getDpsInits());
      SmallVector<AffineMap> maps = producer.getIndexingMapsArray();
      for (const Key &key : keys) {
        auto result = cast<OpResult>(key.first);
        inits.push_back(b.create<tensor::EmptyOp>(
            loc, f32TypeOf(result).getShape(), b.getF32Type()));
        maps.push_back(producer.getIndexingMapMatchingResult(result));
      }
      auto replacement = b.create<linalg::GenericOp>(
          loc, TypeRange(ValueRange(inits)), producer.getDpsInputs(), inits,
          maps, producer.getIteratorTypesArray());
      replacement->setDiscardableAttrs(
          producer->getDiscardableAttrDictionary());
      Region &region = replacement.getRegion();
      region.takeBody(producer.getRegion());
      Block &block = region.front();
      for (size_t i = 0; i < keys.size(); ++i)
        block.addArgument(b.getF32Type(), loc);
      auto yield = cast<linalg::YieldOp>(block.getTerminator());
      OpBuilder body(yield);
      SmallVector<Value> yielded(yield.getOperands());
      for (const Key &key : keys)
        yielded.push_back(widenScalar(
            body, loc,
            yield.getOperand(cast<OpResult>(key.first).getResultNumber()),
            key.second));
      body.create<linalg::YieldOp>(loc, yielded);
      yield.erase();
      producer->replaceAllUsesWith(
          replacement->getResults().take_front(producer->getNumResults()));
      // Under the values that replace the producer's, which the products
      // read now.
      for (auto [index, key] : llvm::enumerate(keys))
        widened[{
            replacement->getResult(cast<OpResult>(key.first).getResultNumber()),
            key.second}] =
            replacement->getResult(producer->getNumResults() + index);
      producer->erase();
      rebuilt.push_back(replacement);
    }
    // Values without such a producer: an elementwise op of their own, where
    // the value is defined; an argument's (a weight's, every step) just
    // before the first product that reads it (the op of the argument's block
    // that holds it): made at the function's start, all of them together
    // (3.4 MB in llama_medium) left L2 before their products read them;
    // made there, the first product reads the copy from cache.
    for (const auto &[key, firstReader] : loneValues) {
      Value value = key.first;
      OpBuilder b(function.getContext());
      if (Operation *op = value.getDefiningOp())
        b.setInsertionPointAfter(op);
      else if (Operation *reader =
                   cast<BlockArgument>(value).getOwner()->findAncestorOpInBlock(
                       *firstReader))
        b.setInsertionPoint(reader);
      else
        b.setInsertionPointToStart(cast<BlockArgument>(value).getOwner());
      Location loc = value.getLoc();
      RankedTensorType type = f32TypeOf(value);
      if (!type.hasStaticShape())
        continue;
      Value init =
          b.create<tensor::EmptyOp>(loc, type.getShape(), b.getF32Type());
      AffineMap identity = b.getMultiDimIdentityMap(type.getRank());
      Reading reading = key.second;
      widened[key] =
          b.create<linalg::GenericOp>(
               loc, TypeRange{type}, ValueRange{value}, ValueRange{init},
               ArrayRef<AffineMap>{identity, identity},
               SmallVector<utils::IteratorType>(type.getRank(),
                                                utils::IteratorType::parallel),
               [&](OpBuilder &nb, Location l, ValueRange args) {
                 nb.create<linalg::YieldOp>(
                     l, widenScalar(nb, l, args[0], reading));
               })
              ->getResult(0);
    }

    // Each product: the fp32 product of the widened values, reshaped as
    // it reshaped the bf16 ones.
    llvm::SetVector<Operation *> reshapes;
    for (Product &product : products) {
      linalg::LinalgOp op = product.op;
      OpBuilder b(op);
      Location loc = op.getLoc();
      SmallVector<Value> inputs;
      for (unsigned index = 0; index < 2; ++index) {
        Operand operand = traceOperand(op.getDpsInputOperand(index)->get());
        auto it = widened.find({operand.root, product.readings[index]});
        if (it == widened.end())
          break;
        Value value = it->second;
        reshapes.insert(operand.reshapes.begin(), operand.reshapes.end());
        for (Operation *reshape : operand.reshapes) {
          auto type = f32TypeOf(reshape->getResult(0));
          if (auto collapse = dyn_cast<tensor::CollapseShapeOp>(reshape))
            value = b.create<tensor::CollapseShapeOp>(
                loc, type, value, collapse.getReassociationIndices());
          else
            value = b.create<tensor::ExpandShapeOp>(
                loc, type, value,
                cast<tensor::ExpandShapeOp>(reshape).getReassociationIndices());
        }
        inputs.push_back(value);
      }
      if (inputs.size() != 2)
        continue; // an operand of dynamic shape: left to the runtime
      unsigned leftInput = product.leftInput;
      bool outputLeft = product.outputLeft;
      auto fp32 = b.create<linalg::GenericOp>(
          loc, op->getResultTypes(), inputs, op.getDpsInits(),
          op.getIndexingMapsArray(), op.getIteratorTypesArray(),
          [&](OpBuilder &nb, Location l, ValueRange args) {
            Value multiplied = nb.create<arith::MulFOp>(l, args[leftInput],
                                                        args[1 - leftInput]);
            Value sum = outputLeft
                            ? nb.create<arith::AddFOp>(l, args[2], multiplied)
                            : nb.create<arith::AddFOp>(l, multiplied, args[2]);
            nb.create<linalg::YieldOp>(l, sum);
          });
      // A later product that rounds this one's result reads it from the
      // new op.
      for (Reading reading :
           {Reading(b.getBF16Type()), Reading(b.getF16Type())})
        if (auto it = widened.find({op->getResult(0), reading});
            it != widened.end())
          widened[{fp32->getResult(0), reading}] = it->second;
      op->replaceAllUsesWith(fp32->getResults());
      op->erase();
    }

    // The bf16 results nothing reads any more are no longer written, nor
    // are the reshapes of them kept (the outer ones go first).
    for (bool erased = true; erased;) {
      erased = false;
      for (Operation *reshape : reshapes.takeVector()) {
        if (reshape->use_empty()) {
          reshape->erase();
          erased = true;
        } else {
          reshapes.insert(reshape);
        }
      }
    }
    llvm::SetVector<Operation *> cleaned(rebuilt.begin(), rebuilt.end());
    for (Operation *op : rebuilt) {
      SmallVector<Operation *> changed =
          readRoundedResults(cast<linalg::GenericOp>(op));
      cleaned.insert(changed.begin(), changed.end());
    }
    RewritePatternSet patterns(&getContext());
    linalg::populateEraseUnusedOperandsAndResultsPatterns(patterns);
    GreedyRewriteConfig config;
    config.strictMode = GreedyRewriteStrictness::ExistingAndNewOps;
    (void)applyOpPatternsAndFold(cleaned.getArrayRef(), std::move(patterns),
                                 config);
  }
};

} // namespace
