//===- ImportShapes.cpp - Views, slices, joins and copies -----------------===//
//
// torch.export functionalised the program, so with value semantics every
// view is a reshaped copy (`train.view`, `train.permute`, `train.expand`,
// `train.slice`), the scatters of views write into a copy, cat and split
// join and cut along a dimension, constant padding joins filled blocks, and
// aliases and copies carry the value they alias (converted to the recorded
// dtype for `_to_copy` and `copy`).
//
//===----------------------------------------------------------------------===//

#include "StepImporter.h"
#include "TensorBuilder.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Import/TorchImporter.h"
#include "llvm/Support/FormatVariadic.h"
#include <limits>

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::train;
using namespace mlir::mantissa::importer;
using llvm::StringRef;

static LogicalResult importIdentity(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  if (failed(self))
    return failure();
  return s.setOutput(0, *self);
}

/// `_assert_tensor_metadata` guards the dtype torch traced with; the
/// imported value must have it, otherwise the import went wrong.
static LogicalResult importAssertMetadata(StepImporter &s) {
  FailureOr<Value> tensor = s.tensorArgument("a");
  if (failed(tensor))
    return failure();
  const pt2::Argument *dtype = s.findArgument("dtype");
  if (!dtype || dtype->kind != pt2::ArgumentKind::ScalarType)
    return success();
  Type expected = mlir::mantissa::getElementType(s.context, dtype->scalarType);
  Type actual = getElementTypeOrSelf(tensor->getType());
  if (expected && expected != actual)
    return s.fail(
        llvm::formatv("the graph asserts dtype {0} but the tensor is {1}",
                      pt2::stringifyScalarType(dtype->scalarType), actual)
            .str());
  return success();
}

/// `copy(self, src)`: src's values, broadcast to and converted into self's
/// shape and dtype.
static LogicalResult importCopy(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<Value> source = s.tensorArgument("src");
  FailureOr<RankedTensorType> type = s.outputType();
  if (failed(self) || failed(source) || failed(type))
    return failure();
  Value value = *source;
  auto sourceType = cast<RankedTensorType>(value.getType());
  if (sourceType.getElementType() != type->getElementType())
    value = s.builder.create<CastOp>(
        s.location,
        RankedTensorType::get(sourceType.getShape(), type->getElementType()),
        value);
  if (sourceType.getShape() != type->getShape())
    value = s.builder.create<ExpandOp>(s.location, *type, value);
  return s.setOutput(0, value);
}

/// `self` as torch's result type through `OpT`, or `self` itself when it has
/// that type already: every reshaping view becomes `train.view` to torch's
/// result shape (which has `-1` and squeezed or inserted dimensions already
/// resolved), and `_to_copy` a `train.cast` to its dtype.
template <typename OpT>
static LogicalResult importAsResultType(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<RankedTensorType> type = s.outputType();
  if (failed(self) || failed(type))
    return failure();
  if (self->getType() == *type)
    return s.setOutput(0, *self);
  return s.setOutput(0, s.builder.create<OpT>(s.location, *type, *self));
}

static LogicalResult importPermute(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<SmallVector<int64_t>> dims = s.intsArgument("dims");
  if (failed(self) || failed(dims))
    return failure();
  int64_t rank = s.rankOf(*self);
  for (int64_t &dim : *dims)
    if (dim < 0)
      dim += rank;
  return s.emitSingle<PermuteOp>(*self, s.builder.getDenseI64ArrayAttr(*dims));
}

static LogicalResult importTranspose(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  if (failed(self))
    return failure();
  int64_t rank = s.rankOf(*self);
  FailureOr<int64_t> dim0 = s.dimArgument("dim0", rank);
  FailureOr<int64_t> dim1 = s.dimArgument("dim1", rank);
  if (failed(dim0) || failed(dim1))
    return failure();
  SmallVector<int64_t> dims = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  if (rank > 0)
    std::swap(dims[*dim0], dims[*dim1]);
  return s.emitSingle<PermuteOp>(*self, s.builder.getDenseI64ArrayAttr(dims));
}

static LogicalResult importTranspose2D(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  if (failed(self))
    return failure();
  if (s.rankOf(*self) < 2)
    return importIdentity(s);
  return s.emitSingle<PermuteOp>(*self, s.builder.getDenseI64ArrayAttr({1, 0}));
}

static LogicalResult importExpand(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<RankedTensorType> type = s.outputType();
  if (failed(self) || failed(type))
    return failure();
  if (self->getType() == *type)
    return s.setOutput(0, *self);
  return s.setOutput(0, s.builder.create<ExpandOp>(s.location, *type, *self));
}

/// repeat(self, repeats): `self` tiled `repeats[d]` times along each
/// dimension (leading repeats beyond its rank add dimensions), as a view
/// that puts a size-1 dimension before each one, an expand of those to the
/// repeat counts and a view that merges each count with its dimension
/// (count outer: the whole tensor repeats, not each element).
static LogicalResult importRepeat(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<SmallVector<int64_t>> repeats = s.intsArgument("repeats");
  FailureOr<RankedTensorType> type = s.outputType();
  if (failed(self) || failed(repeats) || failed(type))
    return failure();
  ArrayRef<int64_t> shape = TensorBuilder::shapeOf(*self);
  if (repeats->size() < shape.size())
    return s.fail(llvm::formatv("{0} repeats for a tensor of rank {1}",
                                repeats->size(), shape.size())
                      .str());
  if (llvm::any_of(*repeats, [](int64_t r) { return r < 0; }))
    return s.fail("negative repeat count");
  SmallVector<int64_t> padded(repeats->size() - shape.size(), 1);
  llvm::append_range(padded, shape);
  SmallVector<int64_t> split, tiled, result;
  for (auto [count, size] : llvm::zip_equal(*repeats, padded)) {
    split.append({1, size});
    tiled.append({count, size});
    result.push_back(count * size);
  }
  TensorBuilder b(s.builder, s.location);
  return s.setOutput(0, b.view(b.expand(b.view(*self, split), tiled), result));
}

static LogicalResult importSlice(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  if (failed(self))
    return failure();
  FailureOr<int64_t> dim = s.dimArgument("dim", s.rankOf(*self), 0);
  FailureOr<int64_t> start = s.intArgument("start", 0);
  FailureOr<int64_t> end =
      s.intArgument("end", std::numeric_limits<int64_t>::max());
  FailureOr<int64_t> step = s.intArgument("step", 1);
  if (failed(dim) || failed(start) || failed(end) || failed(step))
    return failure();
  return s.emitSingle<SliceOp>(*self, *dim, *start, *end, *step);
}

static LogicalResult importSliceScatter(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<Value> source = s.tensorArgument("src");
  if (failed(self) || failed(source))
    return failure();
  FailureOr<int64_t> dim = s.dimArgument("dim", s.rankOf(*self), 0);
  FailureOr<int64_t> start = s.intArgument("start", 0);
  FailureOr<int64_t> end =
      s.intArgument("end", std::numeric_limits<int64_t>::max());
  FailureOr<int64_t> step = s.intArgument("step", 1);
  if (failed(dim) || failed(start) || failed(end) || failed(step))
    return failure();
  return s.emitSingle<SliceScatterOp>(*self, *source, *dim, *start, *end,
                                      *step);
}

/// `select(dim, index)`: a one-element slice, then a view without `dim`.
static LogicalResult importSelect(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  if (failed(self))
    return failure();
  auto type = cast<RankedTensorType>(self->getType());
  FailureOr<int64_t> dim = s.dimArgument("dim", type.getRank());
  FailureOr<int64_t> start =
      succeeded(dim) ? s.indexArgument("index", type.getDimSize(*dim))
                     : FailureOr<int64_t>();
  FailureOr<RankedTensorType> resultType = s.outputType();
  if (failed(dim) || failed(start) || failed(resultType))
    return failure();
  Value slice =
      s.builder.create<SliceOp>(s.location, *self, *dim, *start, *start + 1, 1);
  return s.setOutput(0,
                     s.builder.create<ViewOp>(s.location, *resultType, slice));
}

/// `select_scatter(self, src, dim, index)`: self with `src` (self's shape
/// without `dim`) written at `index` along `dim`.
static LogicalResult importSelectScatter(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<Value> source =
      succeeded(self) ? s.tensorArgument("src") : FailureOr<Value>();
  if (failed(self) || failed(source))
    return failure();
  auto type = cast<RankedTensorType>(self->getType());
  FailureOr<int64_t> dim = s.dimArgument("dim", type.getRank());
  FailureOr<int64_t> start =
      succeeded(dim) ? s.indexArgument("index", type.getDimSize(*dim))
                     : FailureOr<int64_t>();
  if (failed(dim) || failed(start))
    return failure();
  SmallVector<int64_t> shape(type.getShape());
  shape[*dim] = 1;
  auto sourceType = cast<RankedTensorType>(source->getType());
  Value unsqueezed = s.builder.create<ViewOp>(
      s.location, RankedTensorType::get(shape, sourceType.getElementType()),
      *source);
  return s.emitSingle<SliceScatterOp>(*self, unsqueezed, *dim, *start,
                                      *start + 1, 1);
}

static LogicalResult importCat(StepImporter &s) {
  FailureOr<SmallVector<Value>> tensors = s.tensorListArgument("tensors");
  if (failed(tensors))
    return failure();
  if (tensors->empty())
    return s.fail("cannot concatenate an empty list");
  FailureOr<int64_t> dim = s.dimArgument("dim", s.rankOf(tensors->front()), 0);
  if (failed(dim))
    return failure();
  return s.emitSingle<ConcatOp>(*tensors, *dim);
}

/// constant_pad_nd(self, pad, value): `pad` holds (before, after) pairs
/// from the last dimension backwards; a negative amount crops. Each padded
/// dimension is cropped by a slice, then joined with `value`-filled blocks
/// on either side (Hugging Face pads the labels of its causal-LM loss with
/// -100 this way).
static LogicalResult importConstantPad(StepImporter &s) {
  FailureOr<Value> self = s.tensorArgument("self");
  FailureOr<SmallVector<int64_t>> pad = s.intsArgument("pad");
  FailureOr<double> value = s.floatArgument("value", 0.0);
  FailureOr<RankedTensorType> type = s.outputType();
  if (failed(self) || failed(pad) || failed(value) || failed(type))
    return failure();
  int64_t rank = s.rankOf(*self);
  if (pad->size() % 2 != 0 || static_cast<int64_t>(pad->size()) > 2 * rank)
    return s.fail(llvm::formatv("pad has {0} entries: expected pairs for at "
                                "most the {1} dimensions of the input",
                                pad->size(), rank));
  TensorBuilder b(s.builder, s.location);
  Value result = *self;
  for (size_t pair = 0; 2 * pair < pad->size(); ++pair) {
    int64_t dim = rank - 1 - static_cast<int64_t>(pair);
    int64_t before = (*pad)[2 * pair], after = (*pad)[2 * pair + 1];
    int64_t size = TensorBuilder::shapeOf(result)[dim];
    if (size + before + after < 0)
      return s.fail(llvm::formatv(
          "pad ({0}, {1}) leaves dimension {2} of size {3} negative", before,
          after, dim, size));
    result = b.slice(result, dim, std::max<int64_t>(0, -before),
                     size + std::min<int64_t>(0, after));
    SmallVector<Value, 3> pieces;
    Type element = TensorBuilder::typeOf(result).getElementType();
    auto filler = [&](int64_t amount) {
      SmallVector<int64_t> shape(TensorBuilder::shapeOf(result));
      shape[dim] = amount;
      return b.full(shape, element, *value);
    };
    if (before > 0)
      pieces.push_back(filler(before));
    pieces.push_back(result);
    if (after > 0)
      pieces.push_back(filler(after));
    result = b.concat(pieces, dim);
  }
  if (result.getType() != *type)
    return s.fail("the padded tensor's type differs from torch's");
  return s.setOutput(0, result);
}

/// split / split_with_sizes: consecutive slices along `dim`.
static LogicalResult importSplit(StepImporter &s, bool withSizes) {
  FailureOr<Value> self = s.tensorArgument("self");
  if (failed(self))
    return failure();
  auto type = cast<RankedTensorType>(self->getType());
  FailureOr<int64_t> dim = s.dimArgument("dim", type.getRank(), 0);
  if (failed(dim))
    return failure();
  int64_t size = type.getDimSize(*dim);
  SmallVector<int64_t> sizes;
  if (withSizes) {
    FailureOr<SmallVector<int64_t>> given = s.intsArgument("split_sizes");
    if (failed(given))
      return failure();
    sizes = *given;
  } else {
    FailureOr<int64_t> chunk = s.intArgument("split_size");
    if (failed(chunk))
      return failure();
    if (*chunk <= 0)
      return s.fail("split_size must be positive");
    for (int64_t start = 0; start < size || (size == 0 && start == 0);
         start += *chunk) {
      sizes.push_back(std::min(*chunk, size - start));
      if (size == 0)
        break;
    }
  }
  int64_t start = 0;
  SmallVector<Value> pieces;
  for (int64_t piece : sizes) {
    pieces.push_back(s.builder.create<SliceOp>(s.location, *self, *dim, start,
                                               start + piece, 1));
    start += piece;
  }
  if (start != size)
    return s.fail(
        llvm::formatv("split sizes add up to {0}, not {1}", start, size).str());
  return s.setOutputs(pieces);
}

void mlir::mantissa::importer::addShapeHandlers(HandlerTable &table) {
  auto add = [&](StringRef overload, Handler handler) {
    addAtenHandler(table, overload, std::move(handler));
  };
  // Shapes. With value semantics every view is a reshaped copy.
  for (StringRef name :
       {"view.default", "_unsafe_view.default", "reshape.default",
        "unsqueeze.default", "squeeze.dims", "squeeze.dim", "squeeze.default",
        "flatten.using_ints"})
    add(name, importAsResultType<ViewOp>);
  add("permute.default", importPermute);
  add("transpose.int", importTranspose);
  add("t.default", importTranspose2D);
  add("expand.default", importExpand);
  add("repeat.default", importRepeat);
  add("slice.Tensor", importSlice);
  add("slice_scatter.default", importSliceScatter);
  add("select.int", importSelect);
  add("select_scatter.default", importSelectScatter);
  add("cat.default", importCat);
  add("constant_pad_nd.default", importConstantPad);
  add("split.Tensor", [](StepImporter &s) { return importSplit(s, false); });
  add("split_with_sizes.default",
      [](StepImporter &s) { return importSplit(s, true); });
  // torch.export functionalised the program: aliases and copies carry the
  // same value, so they are dropped.
  for (StringRef name : {"alias.default", "clone.default", "contiguous.default",
                         "detach.default", "lift_fresh_copy.default"})
    add(name, importIdentity);
  add("_assert_tensor_metadata.default", importAssertMetadata);
  add("_to_copy.default", importAsResultType<CastOp>);
  add("copy.default", importCopy);
}
