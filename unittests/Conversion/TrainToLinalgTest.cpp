//===- TrainToLinalgTest.cpp - Compiled train ops against the interpreter -===//
//
// Each test builds a small train.step, runs the reference interpreter on
// random inputs, lowers the step through mantissa-lower-train-to-linalg and
// the CPU pipeline into the shared library mantissa-run loads
// (createCompiledEvaluator: clang, OpenMP), runs it and compares: fp32 within
// 1e-5 relative (the interpreter accumulates in double, the code in fp32), bf16
// within one bf16 ulp, booleans and integers exactly. Each step is also
// compiled for the GPU (TrainToGPU.h) and its program run on the host, the
// kernels emulated from the gpu.funcs that become the PTX and the GEMMs by
// cuBLAS's definition, and compared alike.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToLLVM.h"

#include "mantissa/Conversion/AdamWKernels.h"
#include "mantissa/Conversion/TrainToGPU.h"
#include "mantissa/Conversion/TrainToGPU/GpuHostEmulation.h"
#include "mantissa/Format/DType.h"

#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Driver/StepEvaluator.h"
#include "mantissa/Import/Pt2Archive.h"
#include "mantissa/Import/TorchImporter.h"
#include "mantissa/Reference/Interpreter.h"
#include "mantissa/Reference/Tensor.h"
#include "mlir/AsmParser/AsmParser.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include "gtest/gtest.h"

#include <cmath>
#include <cstdlib>
#include <dlfcn.h>
#include <random>

using namespace mlir;
using namespace mlir::mantissa;
using reference::Tensor;

namespace {

/// An address in this executable, for getMainExecutable.
void randomSeedAnchor() {}

/// A step argument: its name and type, e.g. {"x", "tensor<2x4xbf16>"}.
struct Arg {
  std::string name;
  std::string type;
};

class TrainToLinalgTest : public ::testing::Test {
protected:
  TrainToLinalgTest()
      : context(makeRegistry()),
        handler(&context, [this](Diagnostic &diagnostic) {
          diagnostics += diagnostic.str() + "\n";
          return success();
        }) {
    context.loadAllAvailableDialects();
    // Compiled steps are cached in the build tree, not the user's cache.
    setenv("MANTISSA_CACHE_DIR", MANTISSA_TEST_CACHE_DIR, /*overwrite=*/0);
  }

  static DialectRegistry makeRegistry() {
    DialectRegistry registry;
    registerTrainToGPUDialects(registry);
    return registry;
  }

  RankedTensorType parseTensorType(StringRef text) {
    return cast<RankedTensorType>(parseType(text, &context));
  }

  /// A step @test over `args` and a dummy 0-d loss (the last argument,
  /// returned first), returning `results` as user outputs.
  std::string buildStep(ArrayRef<Arg> userArgs, StringRef body,
                        ArrayRef<Arg> userResults) {
    SmallVector<Arg> args(userArgs), results{{"test_loss", "tensor<f32>"}};
    args.push_back({"test_loss", "tensor<f32>"});
    results.append(userResults.begin(), userResults.end());
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "train.step @test(";
    for (auto [i, arg] : llvm::enumerate(args)) {
      RankedTensorType type = parseTensorType(arg.type);
      os << (i ? ", " : "") << "%" << arg.name << ": " << type
         << " {train.tensor = #train.tensor<user_input, fqn = \"" << arg.name
         << "\", module = \"\", shape = [";
      llvm::interleaveComma(type.getShape(), os);
      os << "], dtype = " << type.getElementType() << ">}";
    }
    os << ") -> (";
    for (auto [i, result] : llvm::enumerate(results))
      os << (i ? ", " : "") << result.type << " {train.result = #train.result<"
         << (i ? "user_output" : "loss") << ">}";
    os << ") {\n" << body << "\n  train.return ";
    for (auto [i, result] : llvm::enumerate(results))
      os << (i ? ", " : "") << "%" << result.name;
    os << " : ";
    for (auto [i, result] : llvm::enumerate(results))
      os << (i ? ", " : "") << result.type;
    os << "\n}\n";
    return text;
  }

  /// Random values in [low, high], or 0/1 for i1 and small integers for i64.
  Tensor randomTensor(RankedTensorType type, float low, float high) {
    Type element = type.getElementType();
    int64_t count = type.getNumElements();
    if (isa<IntegerType>(element)) {
      std::vector<int64_t> values(count);
      std::uniform_int_distribution<int64_t> dist(0,
                                                  element.isInteger(1) ? 1 : 9);
      for (int64_t &v : values)
        v = dist(rng);
      return Tensor::fromIntegers(element, type.getShape(), values);
    }
    std::vector<float> values(count);
    std::uniform_real_distribution<float> dist(low, high);
    for (float &v : values)
      v = dist(rng);
    return Tensor::fromFloats(element, type.getShape(), values);
  }

  /// Interprets and compiles the step, runs both on the same random inputs
  /// and compares every result.
  /// The step of `body` compiled for the GPU (without host kernels); a
  /// failure leaves its messages in `diagnostics`.
  FailureOr<GpuStepProgram> compileForGpu(ArrayRef<Arg> args, StringRef body,
                                          ArrayRef<Arg> results) {
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(
        buildStep(args, body, results), ParserConfig(&context));
    if (!module)
      return failure();
    return compileTrainStepForGpu(*module->getOps<train::StepOp>().begin());
  }

  void check(ArrayRef<Arg> args, StringRef body, ArrayRef<Arg> results,
             float low = -2.0f, float high = 2.0f) {
    std::string source = buildStep(args, body, results);
    SCOPED_TRACE(source);
    SmallVector<Tensor> inputs;
    for (const Arg &arg : args)
      inputs.push_back(randomTensor(parseTensorType(arg.type), low, high));
    inputs.push_back(
        Tensor::fromFloats(FloatType::getF32(&context), {}, {0.5f}));

    OwningOpRef<ModuleOp> module =
        parseSourceString<ModuleOp>(source, ParserConfig(&context));
    ASSERT_TRUE(module) << diagnostics;
    SmallVector<std::string> names;
    for (const Arg &result : results)
      names.push_back(result.name);
    compileAndCompare(*module, inputs, /*skipResults=*/1, names);
  }

  /// Interprets the module's step on `inputs`, lowers and JIT-runs it, and
  /// compares the results after the first `skipResults` (named `names`, or
  /// by index). With `perTensor`, the error is measured as
  /// max|a-b| / (max|b| + 1e-12) over each tensor (the corpus metric).
  void compileAndCompare(ModuleOp module, ArrayRef<Tensor> inputs,
                         size_t skipResults, ArrayRef<std::string> names = {},
                         bool perTensor = false, double tolerance = 1e-5,
                         bool withGpuProgram = true) {
    auto step = *module.getOps<train::StepOp>().begin();
    FailureOr<SmallVector<Tensor>> expected =
        reference::interpretStep(step, inputs);
    ASSERT_TRUE(succeeded(expected)) << diagnostics;

    auto evaluator = createCompiledEvaluator(step);
    ASSERT_TRUE(bool(evaluator)) << llvm::toString(evaluator.takeError());

    std::vector<std::vector<uint8_t>> buffers;
    for (const Tensor &input : inputs)
      buffers.push_back(input.toBytes());
    for (const Tensor &result : *expected)
      buffers.push_back(std::vector<uint8_t>(
          std::max<int64_t>(
              1, result.getNumElements() *
                     Tensor::getStorageByteWidth(result.getElementType())),
          0xAB));
    SmallVector<void *> pointers;
    for (auto &buffer : buffers)
      pointers.push_back(buffer.data());
    (*evaluator)->evaluateRaw(pointers.data());
    // Arguments are read-only (the update path's parameters, the reused
    // batch).
    for (auto [i, input] : llvm::enumerate(inputs))
      EXPECT_EQ(buffers[i], input.toBytes()) << "argument " << i << " changed";
    compareResults(*expected, buffers, inputs.size(), skipResults, names,
                   perTensor, tolerance, "");

    if (!withGpuProgram)
      return;
    // The same step as the GPU program, on fresh result buffers.
    for (size_t i = inputs.size(); i < buffers.size(); ++i)
      std::fill(buffers[i].begin(), buffers[i].end(), 0xAB);
    runGpuProgramOnHost(step, buffers);
    for (auto [i, input] : llvm::enumerate(inputs))
      EXPECT_EQ(buffers[i], input.toBytes())
          << "GPU program: argument " << i << " changed";
    compareResults(*expected, buffers, inputs.size(), skipResults, names,
                   perTensor, tolerance, "GPU program: ");
  }

  void compareResults(ArrayRef<Tensor> expected,
                      const std::vector<std::vector<uint8_t>> &buffers,
                      size_t numInputs, size_t skipResults,
                      ArrayRef<std::string> names, bool perTensor,
                      double tolerance, StringRef prefix) {
    for (auto [i, want] : llvm::enumerate(expected)) {
      if (i < skipResults)
        continue;
      auto got = Tensor::fromBytes(want.getElementType(), want.getShape(),
                                   buffers[numInputs + i]);
      ASSERT_TRUE(bool(got)) << llvm::toString(got.takeError());
      std::string name = prefix.str() + (i - skipResults < names.size()
                                             ? names[i - skipResults]
                                             : "result " + std::to_string(i));
      if (perTensor)
        compareTensor(*got, want, name, tolerance);
      else
        compare(*got, want, name);
    }
  }

  /// Runs the step's GPU program (docs/gpu-step.md) on the host: every
  /// kernel as its host emulation, compiled from the very gpu.func that
  /// became the PTX (each thread of the launch in turn), every GEMM by the
  /// column-major definition cuBLAS documents, on `buffers` (the arguments,
  /// then the results).
  void runGpuProgramOnHost(train::StepOp step,
                           std::vector<std::vector<uint8_t>> &buffers) {
    OwningOpRef<ModuleOp> hostKernels = ModuleOp::create(step.getLoc());
    FailureOr<GpuStepProgram> program =
        compileTrainStepForGpu(step, [&](gpu::GPUModuleOp gpuModule) {
          return emulateGpuKernels(gpuModule, *hostKernels);
        });
    ASSERT_TRUE(succeeded(program)) << diagnostics;
    ASSERT_TRUE(succeeded(lowerEmulatedKernelsToLLVM(*hostKernels)))
        << diagnostics;
    FailureOr<std::string> llvmIR = translateToLLVMIRText(*hostKernels);
    ASSERT_TRUE(succeeded(llvmIR)) << diagnostics;
    SmallString<256> library;
    ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("gpu-host", "so", library));
    std::string error;
    ASSERT_TRUE(succeeded(compileLLVMIRToSharedLibrary(*llvmIR, library, error,
                                                       /*optLevel=*/1)))
        << error;
    void *handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    llvm::sys::fs::remove(library);
    ASSERT_NE(handle, nullptr) << dlerror();

    std::vector<uint8_t> arena(std::max<int64_t>(1, program->arenaBytes));
    std::vector<uint8_t> constants = program->constants;
    size_t numArguments = program->arguments.size();
    std::vector<uint8_t *> addresses;
    for (const GpuStepBuffer &buffer : program->buffers) {
      switch (buffer.kind) {
      case GpuStepBuffer::Kind::Argument:
        addresses.push_back(buffers[buffer.index].data());
        break;
      case GpuStepBuffer::Kind::Result:
        addresses.push_back(buffers[numArguments + buffer.index].data());
        break;
      case GpuStepBuffer::Kind::Temporary:
        addresses.push_back(arena.data() + buffer.offset);
        break;
      case GpuStepBuffer::Kind::Constant:
        addresses.push_back(constants.data() + buffer.offset);
        break;
      }
    }
    for (const GpuStepOp &op : program->ops) {
      if (op.kind == GpuStepOp::Kind::Kernel) {
        using Host = void (*)(void **, int64_t, int64_t);
        auto host =
            reinterpret_cast<Host>(dlsym(handle, (op.entry + "_host").c_str()));
        ASSERT_NE(host, nullptr) << op.entry;
        std::vector<void *> values, params;
        for (int64_t id : op.buffers)
          values.push_back(addresses[id]);
        for (void *&value : values)
          params.push_back(&value);
        host(params.data(), op.grid, program->blockSize);
        continue;
      }
      runGemmOnHost(op, addresses);
    }
    dlclose(handle);
  }

  /// C = alpha * op(A) op(B) + beta * C (+ bias) for each batch,
  /// column-major with leading dimensions (cuBLAS's definition),
  /// accumulating in fp32 and rounding once into C's dtype.
  static void runGemmOnHost(const GpuStepOp &op,
                            ArrayRef<uint8_t *> addresses) {
    auto dtypeOf = [](const GpuGemmOperand &operand) { return operand.dtype; };
    // Element (row, col) of an operand's stored matrix in batch b.
    auto at = [](const GpuGemmOperand &operand, int64_t b, int64_t row,
                 int64_t col) {
      return operand.offset + b * operand.stride + row + col * operand.ld;
    };
    for (int64_t b = 0; b < op.batch; ++b)
      for (int64_t i = 0; i < op.m; ++i)
        for (int64_t j = 0; j < op.n; ++j) {
          float sum = 0;
          for (int64_t p = 0; p < op.k; ++p) {
            int64_t x = op.transa ? at(op.a, b, p, i) : at(op.a, b, i, p);
            int64_t y = op.transb ? at(op.b, b, j, p) : at(op.b, b, p, j);
            float product =
                rt::loadFloatElement(addresses[op.a.buffer], x, dtypeOf(op.a)) *
                rt::loadFloatElement(addresses[op.b.buffer], y, dtypeOf(op.b));
            sum += product;
          }
          int64_t z = at(op.c, b, i, j);
          float value = float(op.alpha) * sum;
          if (op.beta != 0)
            value +=
                float(op.beta) *
                rt::loadFloatElement(addresses[op.c.buffer], z, dtypeOf(op.c));
          // The bias epilogue: bias[i] (C's dtype), before the one rounding.
          if (op.epilogue == rt::GemmEpilogue::Bias)
            value += rt::loadFloatElement(addresses[op.bias.buffer],
                                          op.bias.offset + i, dtypeOf(op.bias));
          rt::storeFloatElement(addresses[op.c.buffer], z, dtypeOf(op.c),
                                value);
        }
  }

  void checkCorpus(StringRef model, double tolerance = 1e-5,
                   bool withGpuProgram = true) {
    checkArchive((MANTISSA_CORPUS_DIR "/" + model + ".pt2").str(), tolerance,
                 /*maxInteger=*/9, withGpuProgram);
  }

  /// Imports a .pt2 archive and checks its whole training step on random
  /// inputs (integer inputs in [0, maxInteger]).
  void checkArchive(const std::string &path, double tolerance = 1e-5,
                    int64_t maxInteger = 9, bool withGpuProgram = true) {
    auto program = pt2::readPt2Archive(path);
    ASSERT_TRUE(bool(program)) << llvm::toString(program.takeError());
    auto module = importTrainingStep(context, *program, path);
    ASSERT_TRUE(bool(module)) << llvm::toString(module.takeError());
    auto step = *(*module)->getOps<train::StepOp>().begin();
    SmallVector<Tensor> inputs;
    for (Type type : step.getArgumentTypes()) {
      auto tensorType = cast<RankedTensorType>(type);
      Tensor input = randomTensor(tensorType, -1.0f, 1.0f);
      if (isa<IntegerType>(tensorType.getElementType()) &&
          !tensorType.getElementType().isInteger(1)) {
        std::vector<int64_t> values(tensorType.getNumElements());
        std::uniform_int_distribution<int64_t> dist(0, maxInteger);
        for (int64_t &v : values)
          v = dist(rng);
        input = Tensor::fromIntegers(tensorType.getElementType(),
                                     tensorType.getShape(), values);
      }
      inputs.push_back(std::move(input));
    }
    compileAndCompare((*module).get(), inputs, /*skipResults=*/0, {"loss"},
                      /*perTensor=*/true, tolerance, withGpuProgram);
  }

  void compareTensor(const Tensor &got, const Tensor &want, StringRef name,
                     double tolerance) {
    double maxDiff = 0, maxWant = 0;
    for (int64_t i = 0, e = want.getNumElements(); i < e; ++i) {
      maxDiff = std::max(maxDiff,
                         std::fabs(got.getAsDouble(i) - want.getAsDouble(i)));
      maxWant = std::max(maxWant, std::fabs(want.getAsDouble(i)));
    }
    EXPECT_LE(maxDiff / (maxWant + 1e-12), tolerance) << name.str();
  }

  void compare(const Tensor &got, const Tensor &want, StringRef name) {
    Type element = want.getElementType();
    int mismatches = 0;
    for (int64_t i = 0, e = want.getNumElements(); i < e; ++i) {
      double a = got.getAsDouble(i), b = want.getAsDouble(i);
      if (std::isnan(a) && std::isnan(b))
        continue;
      double tolerance = 0;
      if (element.isF32())
        tolerance = 1e-5 * std::max(1.0, std::fabs(b));
      else if (element.isBF16())
        // One bf16 ulp at b (8 significant bits), with a floor near zero.
        tolerance =
            std::ldexp(1.0, std::ilogb(std::max(std::fabs(b), 1e-6)) - 7);
      if (!(std::fabs(a - b) <= tolerance) && mismatches++ < 5)
        ADD_FAILURE() << name.str() << "[" << i << "]: got " << a << ", want "
                      << b;
    }
  }

  MLIRContext context;
  ScopedDiagnosticHandler handler;
  std::string diagnostics;
  std::mt19937 rng{1234};
};

/// Element types the tests run in.
const char *const kFloatTypes[] = {"f32", "bf16"};

std::string t(StringRef shape, StringRef element) {
  return ("tensor<" + shape + (shape.empty() ? "" : "x") + element + ">").str();
}

TEST_F(TrainToLinalgTest, BinaryWithBroadcasting) {
  for (StringRef e : kFloatTypes) {
    for (StringRef op : {"add", "sub", "mul", "div", "maximum", "minimum"}) {
      std::string body = ("  %r = train." + op + " %a, %b : " + t("3x4", e) +
                          ", " + t("4", e) + " -> " + t("3x4", e))
                             .str();
      check({{"a", t("3x4", e)}, {"b", t("4", e)}}, body, {{"r", t("3x4", e)}});
    }
    // pow on positive bases; a 0-d operand; column broadcasting.
    check({{"a", t("3x4", e)}, {"b", t("3x1", e)}},
          "  %r = train.pow %a, %b : " + t("3x4", e) + ", " + t("3x1", e) +
              " -> " + t("3x4", e),
          {{"r", t("3x4", e)}}, 0.5f, 2.0f);
    check({{"a", t("3x4", e)}, {"b", t("", e)}},
          "  %r = train.mul %a, %b : " + t("3x4", e) + ", " + t("", e) +
              " -> " + t("3x4", e),
          {{"r", t("3x4", e)}});
  }
  // Mixed precision promotes to f32.
  check({{"a", t("3x4", "f32")}, {"b", t("4", "bf16")}},
        "  %r = train.add %a, %b : tensor<3x4xf32>, tensor<4xbf16> -> "
        "tensor<3x4xf32>",
        {{"r", t("3x4", "f32")}});
}

TEST_F(TrainToLinalgTest, CompareAndWhere) {
  for (StringRef e : kFloatTypes) {
    for (StringRef op : {"eq", "ne", "lt", "le", "gt", "ge"}) {
      check({{"a", t("3x4", e)}, {"b", t("3x4", e)}},
            ("  %r = train." + op + " %a, %b : " + t("3x4", e) + ", " +
             t("3x4", e) + " -> tensor<3x4xi1>")
                .str(),
            {{"r", "tensor<3x4xi1>"}}, -1.0f, 1.0f);
      check({{"a", t("3x4", e)}},
            ("  %r = train." + op + "_scalar %a {scalar = 0.25 : f64} : " +
             t("3x4", e) + " -> tensor<3x4xi1>")
                .str(),
            {{"r", "tensor<3x4xi1>"}}, -1.0f, 1.0f);
    }
    check({{"c", "tensor<3x1xi1>"}, {"a", t("3x4", e)}, {"b", t("4", e)}},
          "  %r = train.where %c, %a, %b : tensor<3x1xi1>, " + t("3x4", e) +
              ", " + t("4", e) + " -> " + t("3x4", e),
          {{"r", t("3x4", e)}});
    check({{"a", t("3x4", e)}, {"m", "tensor<4xi1>"}},
          "  %r = train.masked_fill %a, %m {value = -1.5 : f64} : " +
              t("3x4", e) + ", tensor<4xi1> -> " + t("3x4", e),
          {{"r", t("3x4", e)}});
  }
}

TEST_F(TrainToLinalgTest, ScalarOps) {
  for (StringRef e : kFloatTypes)
    for (StringRef op : {"add_scalar", "sub_scalar", "rsub_scalar",
                         "mul_scalar", "div_scalar", "pow_scalar"})
      check({{"a", t("3x4", e)}},
            ("  %r = train." + op +
             " %a {scalar = 1.7 : f64} : " + t("3x4", e) + " -> " + t("3x4", e))
                .str(),
            {{"r", t("3x4", e)}}, 0.5f, 2.0f);
  // An integer scalar.
  check({{"a", t("3x4", "bf16")}},
        "  %r = train.mul_scalar %a {scalar = 3 : i64} : tensor<3x4xbf16> -> "
        "tensor<3x4xbf16>",
        {{"r", t("3x4", "bf16")}});
}

TEST_F(TrainToLinalgTest, UnaryOps) {
  for (StringRef e : kFloatTypes) {
    for (StringRef op : {"neg", "abs", "exp", "tanh", "erf", "sigmoid", "sin",
                         "cos", "relu", "silu", "reciprocal"})
      check(
          {{"a", t("4x8", e)}},
          ("  %r = train." + op + " %a : " + t("4x8", e) + " -> " + t("4x8", e))
              .str(),
          {{"r", t("4x8", e)}}, -3.0f, 3.0f);
    for (StringRef op : {"log", "sqrt", "rsqrt"})
      check(
          {{"a", t("4x8", e)}},
          ("  %r = train." + op + " %a : " + t("4x8", e) + " -> " + t("4x8", e))
              .str(),
          {{"r", t("4x8", e)}}, 0.1f, 4.0f);
    for (StringRef mode : {"none", "tanh"})
      check({{"a", t("4x8", e)}},
            ("  %r = train.gelu %a {approximate = \"" + mode +
             "\"} : " + t("4x8", e) + " -> " + t("4x8", e))
                .str(),
            {{"r", t("4x8", e)}}, -3.0f, 3.0f);
  }
}

TEST_F(TrainToLinalgTest, CastAndFull) {
  check({{"a", t("3x4", "f32")}},
        "  %r = train.cast %a : tensor<3x4xf32> to tensor<3x4xbf16>\n"
        "  %s = train.cast %r : tensor<3x4xbf16> to tensor<3x4xf32>",
        {{"r", t("3x4", "bf16")}, {"s", t("3x4", "f32")}});
  check({{"a", t("3x4", "f32")}},
        "  %f = train.full {value = 0.3 : f64} : tensor<3x4xbf16>\n"
        "  %r = train.add %a, %f : tensor<3x4xf32>, tensor<3x4xbf16> -> "
        "tensor<3x4xf32>",
        {{"r", t("3x4", "f32")}, {"f", t("3x4", "bf16")}});
}

TEST_F(TrainToLinalgTest, ShapeOps) {
  for (StringRef e : kFloatTypes) {
    check({{"a", t("2x6", e)}},
          "  %v = train.view %a : " + t("2x6", e) + " -> " + t("3x4", e) +
              "\n  %p = train.permute %v {dims = array<i64: 1, 0>} : " +
              t("3x4", e) + " -> " + t("4x3", e) +
              "\n  %x = train.expand %a : " + t("2x6", e) + " -> " +
              t("5x2x6", e),
          {{"p", t("4x3", e)}, {"v", t("3x4", e)}, {"x", t("5x2x6", e)}});
    check({{"a", t("4x6", e)}, {"s", t("4x2", e)}},
          "  %l = train.slice %a {dim = 1 : i64, start = 1 : i64, end = 5 : "
          "i64, step = 2 : i64} : " +
              t("4x6", e) + " -> " + t("4x2", e) +
              "\n  %u = train.slice_scatter %a, %s {dim = 1 : i64, start = 1 "
              ": i64, end = 5 : i64, step = 2 : i64} : " +
              t("4x6", e) + ", " + t("4x2", e) + " -> " + t("4x6", e) +
              "\n  %c = train.cat %a, %s {dim = 1 : i64} : " + t("4x6", e) +
              ", " + t("4x2", e) + " -> " + t("4x8", e),
          {{"l", t("4x2", e)}, {"u", t("4x6", e)}, {"c", t("4x8", e)}});
  }
}

/// Ops that read an input transposed (mantissa-tile-transposed-reads): on
/// an AVX2 CPU (every CPU these tests run on), 8x8 blocks transposed in
/// registers, with an input read along the rows (the add), a 0-d one (the
/// mul) and a 3-d permutation, in f32 and, where the innermost size is a
/// multiple of 32 (the 24x64 transpose), in bf16; otherwise, and where it
/// is no multiple of 16 (the 24x40 transpose), strips with a narrower last
/// one.
TEST_F(TrainToLinalgTest, TransposedReads) {
  for (StringRef e : kFloatTypes) {
    check({{"a", t("48x32", e)},
           {"b", t("32x48", e)},
           {"s", t("", e)},
           {"c", t("4x32x40", e)},
           {"d", t("40x24", e)},
           {"f", t("64x24", e)}},
          "  %p = train.permute %a {dims = array<i64: 1, 0>} : " +
              t("48x32", e) + " -> " + t("32x48", e) +
              "\n  %q = train.add %p, %b : " + t("32x48", e) + ", " +
              t("32x48", e) + " -> " + t("32x48", e) +
              "\n  %r = train.mul %p, %s : " + t("32x48", e) + ", " + t("", e) +
              " -> " + t("32x48", e) +
              "\n  %u = train.permute %c {dims = array<i64: 2, 0, 1>} : " +
              t("4x32x40", e) + " -> " + t("40x4x32", e) +
              "\n  %v = train.permute %d {dims = array<i64: 1, 0>} : " +
              t("40x24", e) + " -> " + t("24x40", e) +
              "\n  %w = train.permute %f {dims = array<i64: 1, 0>} : " +
              t("64x24", e) + " -> " + t("24x64", e),
          {{"q", t("32x48", e)},
           {"r", t("32x48", e)},
           {"u", t("40x4x32", e)},
           {"v", t("24x40", e)},
           {"w", t("24x64", e)}});
  }
}

TEST_F(TrainToLinalgTest, Reductions) {
  for (StringRef e : kFloatTypes) {
    for (StringRef op : {"sum", "mean", "amax"}) {
      check({{"a", t("3x4x5", e)}},
            ("  %r = train." + op + " %a {dims = array<i64: 0, 2>} : " +
             t("3x4x5", e) + " -> " + t("4", e) + "\n  %k = train." + op +
             " %a {dims = array<i64: 1>, keepdim} : " + t("3x4x5", e) + " -> " +
             t("3x1x5", e) + "\n  %l = train." + op +
             " %a {dims = array<i64>} : " + t("3x4x5", e) + " -> " + t("", e))
                .str(),
            {{"l", t("", e)}, {"r", t("4", e)}, {"k", t("3x1x5", e)}});
    }
    for (StringRef op : {"softmax", "log_softmax"})
      check({{"a", t("3x4x5", e)}},
            ("  %r = train." + op + " %a {dim = 1 : i64} : " + t("3x4x5", e) +
             " -> " + t("3x4x5", e) + "\n  %s = train." + op +
             " %a {dim = 2 : i64} : " + t("3x4x5", e) + " -> " + t("3x4x5", e))
                .str(),
            {{"r", t("3x4x5", e)}, {"s", t("3x4x5", e)}}, -4.0f, 4.0f);
  }
}

/// Reductions long enough to be split (mantissa-split-reductions): rows,
/// columns, a part count other than a warp's, softmax and log-softmax. On
/// the GPU each fold of partials joins its partials' launch, each lane
/// loading the partial it computed, and folds them in a tree of warp
/// shuffles; the host emulation runs the block's threads up to each
/// shuffle before any goes on, so the numbers are the GPU's order, checked
/// against the interpreter's.
TEST_F(TrainToLinalgTest, LongReductionsFoldInTheLaunchOfTheirPartials) {
  for (StringRef e : kFloatTypes) {
    check({{"a", t("6x512", e)}, {"b", t("512x6", e)}, {"c", t("4x300", e)}},
          ("  %r = train.sum %a {dims = array<i64: 1>} : " + t("6x512", e) +
           " -> " + t("6", e) +
           "\n  %m = train.amax %a {dims = array<i64: 1>, "
           "keepdim} : " +
           t("6x512", e) + " -> " + t("6x1", e) +
           "\n  %s = train.softmax %a {dim = 1 : i64} : " + t("6x512", e) +
           " -> " + t("6x512", e) +
           "\n  %l = train.log_softmax %a {dim = 1 : i64} : " + t("6x512", e) +
           " -> " + t("6x512", e) +
           "\n  %k = train.sum %b {dims = array<i64: 0>} : " + t("512x6", e) +
           " -> " + t("6", e) +
           "\n  %n = train.mean %c {dims = array<i64: 1>} : " + t("4x300", e) +
           " -> " + t("4", e)),
          {{"r", t("6", e)},
           {"m", t("6x1", e)},
           {"s", t("6x512", e)},
           {"l", t("6x512", e)},
           {"k", t("6", e)},
           {"n", t("4", e)}});
  }
  // The program: the fold in its partials' launch, output u on the threads
  // from u * parts, after its output's zero fill, which moved behind the
  // partials onto the fold's threads; no launch of its own.
  FailureOr<GpuStepProgram> program =
      compileForGpu({{"a", t("6x512", "f32")}},
                    "  %x = train.exp %a : " + t("6x512", "f32") + " -> " +
                        t("6x512", "f32") +
                        "\n  %r = train.sum %x {dims = array<i64: 1>} : " +
                        t("6x512", "f32") + " -> " + t("6", "f32"),
                    {{"r", t("6", "f32")}});
  ASSERT_TRUE(succeeded(program)) << diagnostics;
  int folds = 0;
  for (const GpuStepOp &op : program->ops) {
    if (llvm::none_of(op.members, [](const GpuStepOp::Member &member) {
          return member.threadStride > 1;
        }))
      continue;
    ++folds;
    // The partials' fill and the partials on their 6 x 32 threads, then
    // the output's fill and the fold, one output every 32 threads (and the
    // loss's copy, independent of them).
    SmallVector<const GpuStepOp::Member *> first, second;
    for (const GpuStepOp::Member &member : op.members)
      (member.threadStride == 1 ? first : second).push_back(&member);
    EXPECT_EQ(llvm::count_if(first,
                             [](const GpuStepOp::Member *member) {
                               return member->threads == 6 * 32 &&
                                      member->threadStride == 1;
                             }),
              2);
    ASSERT_EQ(second.size(), 2u);
    for (const GpuStepOp::Member *member : second) {
      EXPECT_EQ(member->threads, 6);
      EXPECT_EQ(member->threadStride, 32);
    }
    EXPECT_EQ(op.threads, 6 * 32);
  }
  EXPECT_EQ(folds, 1);
  EXPECT_NE(program->ptx.find("shfl.sync.bfly.b32"), std::string::npos);
}

/// An RMSNorm (row mean of squares, rsqrt, the row scaled by it and by a
/// gain) and a row-sum backward (rows times their sum): on the GPU, the
/// elementwise op that reads each row's fold runs by rows in the fold's
/// launch, row r on the fold's 32 lanes after a barrier, each lane a
/// strided share of the 512 columns. The host emulation runs each phase's
/// threads from the last to the first, so reading a row's sum before the
/// barrier (or without one) would read the stale value. Against the
/// interpreter, f32 and bf16.
TEST_F(TrainToLinalgTest, RowOpsRunInTheLaunchOfTheirFold) {
  auto norm = [&](StringRef e) {
    return "  %q = train.mul %a, %a : " + t("6x512", e) + ", " + t("6x512", e) +
           " -> " + t("6x512", e) + "\n  %m = train.mean %q {dims = " +
           "array<i64: 1>, keepdim} : " + t("6x512", e) + " -> " + t("6x1", e) +
           "\n  %v = train.add_scalar %m {scalar = 1.0e-05 : f64} : " +
           t("6x1", e) + " -> " + t("6x1", e) +
           "\n  %r = train.rsqrt %v : " + t("6x1", e) + " -> " + t("6x1", e) +
           "\n  %n = train.mul %a, %r : " + t("6x512", e) + ", " + t("6x1", e) +
           " -> " + t("6x512", e) +
           "\n  %y = train.mul %n, %w : " + t("6x512", e) + ", " + t("512", e) +
           " -> " + t("6x512", e) + "\n  %s = train.sum %y {dims = " +
           "array<i64: 1>, keepdim} : " + t("6x512", e) + " -> " + t("6x1", e) +
           "\n  %g = train.mul %a, %s : " + t("6x512", e) + ", " + t("6x1", e) +
           " -> " + t("6x512", e);
  };
  for (StringRef e : kFloatTypes)
    check({{"a", t("6x512", e)}, {"w", t("512", e)}}, norm(e),
          {{"y", t("6x512", e)}, {"g", t("6x512", e)}});

  FailureOr<GpuStepProgram> program = compileForGpu(
      {{"a", t("6x512", "f32")}, {"w", t("512", "f32")}}, norm("f32"),
      {{"y", t("6x512", "f32")}, {"g", t("6x512", "f32")}});
  ASSERT_TRUE(succeeded(program)) << diagnostics;
  // Both row ops run by rows of 512 on the 32 lanes of their fold, in the
  // fold's launch.
  int byRows = 0;
  for (const GpuStepOp &op : program->ops)
    for (const GpuStepOp::Member &member : op.members) {
      if (member.rowColumns == 0)
        continue;
      ++byRows;
      EXPECT_EQ(member.rowColumns, 512);
      EXPECT_EQ(member.threadStride, 32);
      EXPECT_EQ(member.threads, 6);
      EXPECT_EQ(member.serialIterations, 512 / 32);
      EXPECT_TRUE(llvm::any_of(op.members, [](const GpuStepOp::Member &fold) {
        return fold.rowColumns == 0 && fold.threadStride == 32;
      }));
      EXPECT_EQ(op.threads, 6 * 32);
    }
  EXPECT_EQ(byRows, 2);
  EXPECT_NE(program->ptx.find("bar.sync"), std::string::npos);
}

/// LayerNorm forward and backward over rows of 512 (long enough to split):
/// against the interpreter, and on the GPU each row op runs in the launch
/// of the fold it reads.
TEST_F(TrainToLinalgTest, LayerNormsRunByRows) {
  auto body = [&](StringRef e) {
    return "  %r, %m, %s = train.layer_norm %x weight %w : " + t("512", e) +
           " bias %b : " + t("512", e) +
           " {normalized_rank = 1 : i64, eps = 1.0e-05 : f64} : " +
           t("6x512", e) + " -> " + t("6x512", e) + ", " + t("6x1", e) + ", " +
           t("6x1", e) +
           "\n  %gi, %gw, %gb = train.layer_norm_backward %g, %x, %m, %s "
           "weight %w : " +
           t("512", e) + " bias %b : " + t("512", e) +
           " {normalized_rank = 1 : i64} : " + t("6x512", e) + ", " +
           t("6x512", e) + ", " + t("6x1", e) + ", " + t("6x1", e) + " -> " +
           t("6x512", e) + ", " + t("512", e) + ", " + t("512", e);
  };
  auto args = [&](StringRef e) {
    return SmallVector<Arg>{{"g", t("6x512", e)},
                            {"x", t("6x512", e)},
                            {"w", t("512", e)},
                            {"b", t("512", e)}};
  };
  auto results = [&](StringRef e) {
    return SmallVector<Arg>{{"r", t("6x512", e)},
                            {"gi", t("6x512", e)},
                            {"gw", t("512", e)},
                            {"gb", t("512", e)}};
  };
  for (StringRef e : kFloatTypes)
    check(args(e), body(e), results(e));
  FailureOr<GpuStepProgram> program =
      compileForGpu(args("f32"), body("f32"), results("f32"));
  ASSERT_TRUE(succeeded(program)) << diagnostics;
  // The output and the input gradient by rows of 512, each in the launch
  // of the fold it reads; the variance's partials by rows of 32 (one
  // column per lane) in the launch of the mean's fold, so that the
  // variance's fold joins them there. Three launches in all: the mean's
  // partials (with the fills), the rest by rows, the gain and bias
  // gradients' column sums (a launch holds at most 16 ops).
  int kernels = 0, wide = 0, narrow = 0;
  for (const GpuStepOp &op : program->ops) {
    if (op.kind != GpuStepOp::Kind::Kernel)
      continue;
    ++kernels;
    for (const GpuStepOp::Member &member : op.members) {
      if (member.rowColumns == 0)
        continue;
      EXPECT_EQ(member.threadStride, 32);
      EXPECT_EQ(member.threads, 6);
      if (member.rowColumns == 512)
        ++wide;
      else if (member.rowColumns == 32)
        ++narrow;
      else
        ADD_FAILURE() << "by rows of " << member.rowColumns;
    }
  }
  EXPECT_EQ(wide, 2);
  EXPECT_GE(narrow, 1);
  EXPECT_EQ(kernels, 3);
}

/// Launches of large elementwise ops (a million threads or more) run four
/// iterations per thread, t, t + T', t + 2T', t + 3T' (T' a quarter of the
/// iterations, rounded up; the last threads run fewer): an elementwise
/// chain over 1025 x 1025 elements (not a multiple of four), whose results
/// the step returns, checked against the interpreter.
TEST_F(TrainToLinalgTest, LargeElementwiseOpsRunSeveralIterationsPerThread) {
  std::string big = t("1025x1025", "f32");
  std::string body = "  %x = train.mul %a, %b : " + big + ", " + big + " -> " +
                     big + "\n  %y = train.exp %x : " + big + " -> " + big +
                     "\n  %z = train.add %y, %a : " + big + ", " + big +
                     " -> " + big;
  check({{"a", big}, {"b", big}}, body, {{"x", big}, {"y", big}, {"z", big}},
        -1.0f, 1.0f);

  FailureOr<GpuStepProgram> program = compileForGpu(
      {{"a", big}, {"b", big}}, body, {{"x", big}, {"y", big}, {"z", big}});
  ASSERT_TRUE(succeeded(program)) << diagnostics;
  int64_t elements = 1025 * 1025, coarse = 0;
  for (const GpuStepOp &op : program->ops)
    for (const GpuStepOp::Member &member : op.members)
      if (member.elementsPerThread > 1) {
        ++coarse;
        EXPECT_EQ(member.elementsPerThread, 4);
        EXPECT_EQ(member.threads, (elements + 3) / 4);
        EXPECT_EQ(op.threads, (elements + 3) / 4);
      }
  EXPECT_GT(coarse, 0);
  // Where all four iterations exist, their loads come before the first
  // store (the loads of the 2 x 4 elements of a and b read-only, hoisted),
  // so that they are in flight together.
  StringRef ptx = program->ptx;
  size_t entry = ptx.find(".entry");
  ASSERT_NE(entry, StringRef::npos);
  StringRef kernel = ptx.substr(entry);
  size_t firstStore = kernel.find("st.global");
  ASSERT_NE(firstStore, StringRef::npos);
  EXPECT_GE(kernel.substr(0, firstStore).count("ld.global.nc.f32"), 8u)
      << kernel.substr(0, firstStore + 200).str();
}

/// A launch of elementwise ops gives each thread consecutive elements of
/// its operands, so that a thread loads and stores each operand that is
/// contiguous along the innermost loop 16 bytes at a time (8 bf16 elements
/// in one ld.global.nc.v4.u32; fp32 in two ld.global.nc.v4.f32): bf16 and
/// fp32 operands, a broadcast row, a transpose read through a transposed
/// view (contiguous along the view's first dimension, which the vectors
/// read as one dimension of the buffer), checked against the interpreter
/// on the host emulation of the same kernels. An inner dimension that 2
/// does not divide keeps one element per thread.
TEST_F(TrainToLinalgTest, ElementwiseOpsLoadAndStoreSixteenBytesAtOnce) {
  auto body = [&](StringRef n) {
    std::string m = "24x" + n.str(), mt = n.str() + "x24";
    return "  %x = train.mul %a, %w : " + t(m, "bf16") + ", " + t(n, "bf16") +
           " -> " + t(m, "bf16") +
           "\n  %y = train.add %b, %x : " + t(m, "f32") + ", " + t(m, "bf16") +
           " -> " + t(m, "f32") +
           "\n  %q = train.permute %b {dims = array<i64: 1, 0>} : " +
           t(m, "f32") + " -> " + t(mt, "f32") +
           "\n  %s = train.neg %q : " + t(mt, "f32") + " -> " + t(mt, "f32") +
           "\n  %p = train.permute %q {dims = array<i64: 1, 0>} : " +
           t(mt, "f32") + " -> " + t(m, "f32");
  };
  auto args = [&](StringRef n) {
    std::string m = "24x" + n.str();
    return SmallVector<Arg>{
        {"a", t(m, "bf16")}, {"w", t(n, "bf16")}, {"b", t(m, "f32")}};
  };
  auto results = [&](StringRef n) {
    std::string m = "24x" + n.str(), mt = n.str() + "x24";
    return SmallVector<Arg>{{"x", t(m, "bf16")},
                            {"y", t(m, "f32")},
                            {"p", t(m, "f32")},
                            {"s", t(mt, "f32")}};
  };
  for (StringRef n : {"64", "7"})
    check(args(n), body(n), results(n));

  FailureOr<GpuStepProgram> program =
      compileForGpu(args("64"), body("64"), results("64"));
  ASSERT_TRUE(succeeded(program)) << diagnostics;
  int vectors = 0;
  for (const GpuStepOp &op : program->ops)
    for (const GpuStepOp::Member &member : op.members) {
      if (member.threads == 1)
        continue; // the loss
      // 24 x 64 elements, 8 per thread (the narrowest operand is bf16).
      EXPECT_EQ(member.elementsPerThread, 8) << member.source;
      EXPECT_EQ(member.threads, 24 * 64 / 8);
      ++vectors;
    }
  EXPECT_GE(vectors, 3);
  StringRef ptx = program->ptx;
  EXPECT_GE(ptx.count("ld.global.nc.v4.u32"), 2u) << ptx.str();
  EXPECT_GE(ptx.count("ld.global.nc.v4.f32"), 2u);
  EXPECT_GE(ptx.count("st.global.v4.f32"), 2u);
  EXPECT_GE(ptx.count("st.global.v4.b32"), 1u);

  program = compileForGpu(args("7"), body("7"), results("7"));
  ASSERT_TRUE(succeeded(program)) << diagnostics;
  for (const GpuStepOp &op : program->ops)
    for (const GpuStepOp::Member &member : op.members)
      EXPECT_EQ(member.elementsPerThread, 1);
  EXPECT_EQ(StringRef(program->ptx).count(".v4."), 0u);
}

TEST_F(TrainToLinalgTest, MatrixProducts) {
  for (StringRef e : kFloatTypes) {
    check({{"a", t("5x7", e)}, {"b", t("7x3", e)}},
          "  %r = train.mm %a, %b : " + t("5x7", e) + ", " + t("7x3", e) +
              " -> " + t("5x3", e),
          {{"r", t("5x3", e)}});
    check({{"a", t("2x5x7", e)}, {"b", t("2x7x3", e)}},
          "  %r = train.bmm %a, %b : " + t("2x5x7", e) + ", " + t("2x7x3", e) +
              " -> " + t("2x5x3", e),
          {{"r", t("2x5x3", e)}});
    check({{"c", t("3", e)}, {"a", t("5x7", e)}, {"b", t("7x3", e)}},
          "  %r = train.addmm %c, %a, %b : " + t("3", e) + ", " + t("5x7", e) +
              ", " + t("7x3", e) + " -> " + t("5x3", e) +
              "\n  %s = train.addmm %c, %a, %b {beta = 0.5 : f64, alpha = 2.0 "
              ": f64} : " +
              t("3", e) + ", " + t("5x7", e) + ", " + t("7x3", e) + " -> " +
              t("5x3", e),
          {{"r", t("5x3", e)}, {"s", t("5x3", e)}});
  }
}

/// bf16 products as the GPU program records them: the rounding of the fp32
/// sums into the bf16 result, and addmm's bias, taken into the GEMM (format
/// 2's fused output dtype and bias epilogue), so no kernel follows them;
/// addmm with alpha or beta other than 1 keeps its elementwise kernel. The
/// numbers are checked against the interpreter by MatrixProducts.
TEST_F(TrainToLinalgTest, GpuProgramFusesBf16GemmOutputsAndBias) {
  std::string bf = "bf16";
  std::string source = buildStep(
      {{"c", t("3", bf)}, {"a", t("5x7", bf)}, {"b", t("7x3", bf)}},
      "  %r = train.mm %a, %b : " + t("5x7", bf) + ", " + t("7x3", bf) +
          " -> " + t("5x3", bf) +
          "\n  %s = train.addmm %c, %a, %b : " + t("3", bf) + ", " +
          t("5x7", bf) + ", " + t("7x3", bf) + " -> " + t("5x3", bf) +
          "\n  %u = train.addmm %c, %a, %b {alpha = 2.0 : f64} : " +
          t("3", bf) + ", " + t("5x7", bf) + ", " + t("7x3", bf) + " -> " +
          t("5x3", bf),
      {{"r", t("5x3", bf)}, {"s", t("5x3", bf)}, {"u", t("5x3", bf)}});
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(source, ParserConfig(&context));
  ASSERT_TRUE(module) << diagnostics;
  auto step = *module->getOps<train::StepOp>().begin();
  FailureOr<GpuStepProgram> program = compileTrainStepForGpu(step);
  ASSERT_TRUE(succeeded(program)) << diagnostics;
  SmallVector<const GpuStepOp *> gemms;
  for (const GpuStepOp &op : program->ops)
    if (op.kind == GpuStepOp::Kind::Gemm)
      gemms.push_back(&op);
  ASSERT_EQ(gemms.size(), 3u);
  // mm: bf16 operands, the bf16 result written by the GEMM.
  EXPECT_EQ(gemms[0]->a.dtype, rt::DType::BF16);
  EXPECT_EQ(gemms[0]->c.dtype, rt::DType::BF16);
  EXPECT_EQ(gemms[0]->epilogue, rt::GemmEpilogue::None);
  EXPECT_EQ(gemms[0]->beta, 0.0);
  // addmm: the bias vector (3 elements, one per output column of the
  // row-major 5x3 result, i.e. per row m of the column-major GEMM).
  EXPECT_EQ(gemms[1]->c.dtype, rt::DType::BF16);
  EXPECT_EQ(gemms[1]->epilogue, rt::GemmEpilogue::Bias);
  EXPECT_EQ(gemms[1]->m, 3);
  EXPECT_EQ(gemms[1]->bias.dtype, rt::DType::BF16);
  const GpuStepBuffer &bias = program->buffers[gemms[1]->bias.buffer];
  EXPECT_EQ(bias.kind, GpuStepBuffer::Kind::Argument);
  EXPECT_EQ(bias.index, 0) << "the bias is argument c";
  EXPECT_EQ(gemms[1]->bias.offset, 0);
  // alpha = 2: the GEMM keeps its fp32 temporary and a kernel follows.
  EXPECT_EQ(gemms[2]->c.dtype, rt::DType::F32);
  EXPECT_EQ(gemms[2]->epilogue, rt::GemmEpilogue::None);
  EXPECT_EQ(program->fusedEpilogues, 2);
}

TEST_F(TrainToLinalgTest, Gathers) {
  // Random indices are in [0, 9]: every indexed dimension has 10 entries.
  for (StringRef e : kFloatTypes) {
    check({{"w", t("10x4", e)}, {"i", "tensor<2x3xi64>"}},
          "  %r = train.embedding %w, %i : " + t("10x4", e) +
              ", tensor<2x3xi64> -> " + t("2x3x4", e),
          {{"r", t("2x3x4", e)}});
    check({{"a", t("10x4", e)}, {"i", "tensor<3x4xi64>"}},
          "  %r = train.gather %a, %i {dim = 0 : i64} : " + t("10x4", e) +
              ", tensor<3x4xi64> -> " + t("3x4", e),
          {{"r", t("3x4", e)}});
    check({{"a", t("3x10", e)}, {"i", "tensor<5xi64>"}},
          "  %r = train.index_select %a, %i {dim = 1 : i64} : " + t("3x10", e) +
              ", tensor<5xi64> -> " + t("3x5", e),
          {{"r", t("3x5", e)}});
  }
}

TEST_F(TrainToLinalgTest, Scatters) {
  // Random indices in [0, 9] repeat, so accumulation order matters.
  for (StringRef e : kFloatTypes) {
    check({{"a", t("10x4", e)}, {"i", "tensor<3x4xi64>"}, {"s", t("3x4", e)}},
          "  %r = train.scatter %a, %i, %s {dim = 0 : i64} : " + t("10x4", e) +
              ", tensor<3x4xi64>, " + t("3x4", e) + " -> " + t("10x4", e) +
              "\n  %q = train.scatter %a, %i, %s {dim = 0 : i64, reduce = "
              "\"add\"} : " +
              t("10x4", e) + ", tensor<3x4xi64>, " + t("3x4", e) + " -> " +
              t("10x4", e) +
              "\n  %v = train.scatter_value %a, %i {dim = 0 : i64, value = "
              "0.5 : f64} : " +
              t("10x4", e) + ", tensor<3x4xi64> -> " + t("10x4", e),
          {{"r", t("10x4", e)}, {"q", t("10x4", e)}, {"v", t("10x4", e)}});
    // One position per row (a cross-entropy backward's one-hot), which the
    // GPU program computes as a comparison
    // (mantissa-scatters-as-comparisons).
    check({{"a", t("6x10", e)}, {"i", "tensor<6x1xi64>"}},
          "  %v = train.scatter_value %a, %i {dim = 1 : i64, value = "
          "-1.0 : f64} : " +
              t("6x10", e) + ", tensor<6x1xi64> -> " + t("6x10", e),
          {{"v", t("6x10", e)}});
    check({{"a", t("10x4", e)},
           {"i", "tensor<6xi64>"},
           {"v", t("6x4", e)},
           {"w", t("4", e)}},
          "  %r = train.index_put %a[%i], %v {accumulate} : " + t("10x4", e) +
              ", tensor<6xi64>, " + t("6x4", e) + " -> " + t("10x4", e) +
              "\n  %s = train.index_put %a[%i], %w : " + t("10x4", e) +
              ", tensor<6xi64>, " + t("4", e) + " -> " + t("10x4", e),
          {{"r", t("10x4", e)}, {"s", t("10x4", e)}});
    check({{"g", t("2x3x4", e)}, {"i", "tensor<2x3xi64>"}},
          "  %r = train.embedding_backward %g, %i {num_weights = 10 : i64} : " +
              t("2x3x4", e) + ", tensor<2x3xi64> -> " + t("10x4", e) +
              "\n  %p = train.embedding_backward %g, %i {num_weights = 10 : "
              "i64, padding_idx = 3 : i64} : " +
              t("2x3x4", e) + ", tensor<2x3xi64> -> " + t("10x4", e),
          {{"r", t("10x4", e)}, {"p", t("10x4", e)}});
  }
}

TEST_F(TrainToLinalgTest, SoftmaxBackward) {
  for (StringRef e : kFloatTypes)
    for (StringRef op : {"softmax_backward", "log_softmax_backward"})
      check({{"g", t("3x4x5", e)}, {"y", t("3x4x5", e)}},
            ("  %r = train." + op +
             " %g, %y {dim = 1 : i64} : " + t("3x4x5", e) + ", " +
             t("3x4x5", e) + " -> " + t("3x4x5", e) + "\n  %s = train." + op +
             " %g, %y {dim = 2 : i64} : " + t("3x4x5", e) + ", " +
             t("3x4x5", e) + " -> " + t("3x4x5", e))
                .str(),
            {{"r", t("3x4x5", e)}, {"s", t("3x4x5", e)}});
}

TEST_F(TrainToLinalgTest, GeluBackward) {
  for (StringRef e : kFloatTypes)
    for (StringRef mode : {"none", "tanh"})
      check({{"g", t("4x8", e)}, {"a", t("4x8", e)}},
            ("  %r = train.gelu_backward %g, %a {approximate = \"" + mode +
             "\"} : " + t("4x8", e) + ", " + t("4x8", e) + " -> " + t("4x8", e))
                .str(),
            {{"r", t("4x8", e)}}, -3.0f, 3.0f);
}

TEST_F(TrainToLinalgTest, SiluBackward) {
  for (StringRef e : kFloatTypes)
    check({{"g", t("4x8", e)}, {"a", t("4x8", e)}},
          "  %r = train.silu_backward %g, %a : " + t("4x8", e) + ", " +
              t("4x8", e) + " -> " + t("4x8", e),
          {{"r", t("4x8", e)}}, -6.0f, 6.0f);
}

TEST_F(TrainToLinalgTest, LayerNorm) {
  for (StringRef e : kFloatTypes) {
    check({{"x", t("2x3x8", e)}, {"w", t("8", e)}, {"b", t("8", e)}},
          "  %r, %m, %s = train.layer_norm %x weight %w : " + t("8", e) +
              " bias %b : " + t("8", e) +
              " {normalized_rank = 1 : i64, eps = 1.0e-05 : f64} : " +
              t("2x3x8", e) + " -> " + t("2x3x8", e) + ", " + t("2x3x1", e) +
              ", " + t("2x3x1", e) +
              "\n  %q, %m2, %s2 = train.layer_norm %x {normalized_rank = 2 : "
              "i64, eps = 1.0e-05 : f64} : " +
              t("2x3x8", e) + " -> " + t("2x3x8", e) + ", " + t("2x1x1", e) +
              ", " + t("2x1x1", e),
          {{"r", t("2x3x8", e)},
           {"m", t("2x3x1", e)},
           {"s", t("2x3x1", e)},
           {"q", t("2x3x8", e)},
           {"m2", t("2x1x1", e)},
           {"s2", t("2x1x1", e)}});
    check({{"g", t("2x3x8", e)},
           {"x", t("2x3x8", e)},
           {"w", t("8", e)},
           {"b", t("8", e)}},
          "  %r, %m, %s = train.layer_norm %x weight %w : " + t("8", e) +
              " bias %b : " + t("8", e) +
              " {normalized_rank = 1 : i64, eps = 1.0e-05 : f64} : " +
              t("2x3x8", e) + " -> " + t("2x3x8", e) + ", " + t("2x3x1", e) +
              ", " + t("2x3x1", e) +
              "\n  %gi, %gw, %gb = train.layer_norm_backward %g, %x, %m, %s "
              "weight %w : " +
              t("8", e) + " bias %b : " + t("8", e) +
              " {normalized_rank = 1 : i64} : " + t("2x3x8", e) + ", " +
              t("2x3x8", e) + ", " + t("2x3x1", e) + ", " + t("2x3x1", e) +
              " -> " + t("2x3x8", e) + ", " + t("8", e) + ", " + t("8", e),
          {{"gi", t("2x3x8", e)}, {"gw", t("8", e)}, {"gb", t("8", e)}});
  }
}

TEST_F(TrainToLinalgTest, RmsNorm) {
  // rstd is fp32 for bf16 inputs (torch's opmath type).
  for (StringRef e : kFloatTypes) {
    std::string r1 = t("2x3x1", "f32"), r2 = t("2x1x1", "f32");
    check({{"g", t("2x3x8", e)}, {"x", t("2x3x8", e)}, {"w", t("8", e)}},
          "  %r, %s = train.rms_norm %x weight %w : " + t("8", e) +
              " {normalized_rank = 1 : i64, eps = 1.0e-06 : f64} : " +
              t("2x3x8", e) + " -> " + t("2x3x8", e) + ", " + r1 +
              "\n  %q, %s2 = train.rms_norm %x {normalized_rank = 2 : i64} : " +
              t("2x3x8", e) + " -> " + t("2x3x8", e) + ", " + r2 +
              "\n  %gi, %gw = train.rms_norm_backward %g, %x, %s weight %w : " +
              t("8", e) + " {normalized_rank = 1 : i64} : " + t("2x3x8", e) +
              ", " + t("2x3x8", e) + ", " + r1 + " -> " + t("2x3x8", e) + ", " +
              t("8", e),
          {{"r", t("2x3x8", e)},
           {"s", r1},
           {"q", t("2x3x8", e)},
           {"s2", r2},
           {"gi", t("2x3x8", e)},
           {"gw", t("8", e)}});
  }
}

TEST_F(TrainToLinalgTest, ClampAndArange) {
  for (StringRef e : kFloatTypes)
    check({{"a", t("4x8", e)}},
          "  %r = train.clamp %a {min = -0.5 : f64, max = 1.25 : f64} : " +
              t("4x8", e) + " -> " + t("4x8", e) +
              "\n  %l = train.clamp %a {min = 0 : i64} : " + t("4x8", e) +
              " -> " + t("4x8", e) +
              "\n  %h = train.clamp %a {max = 0.3 : "
              "f64} : " +
              t("4x8", e) + " -> " + t("4x8", e),
          {{"r", t("4x8", e)}, {"l", t("4x8", e)}, {"h", t("4x8", e)}});
  check({{"a", "tensor<3x4xi64>"}},
        "  %r = train.clamp %a {min = 2 : i64, max = 7 : i64} : "
        "tensor<3x4xi64> -> tensor<3x4xi64>",
        {{"r", "tensor<3x4xi64>"}});
  check({},
        "  %i = train.arange {start = 2 : i64, end = 14 : i64, step = 3 : "
        "i64} : tensor<4xi64>\n"
        "  %f = train.arange {start = 0.5 : f64, end = 2.0 : f64, step = 0.25 "
        ": f64} : tensor<6xf32>\n"
        "  %b = train.arange {start = 0 : i64, end = 7 : i64, step = 1 : i64} "
        ": tensor<7xbf16>",
        {{"i", "tensor<4xi64>"},
         {"f", "tensor<6xf32>"},
         {"b", "tensor<7xbf16>"}});
}

/// Imports a corpus model and checks its whole training step (forward, loss
/// and backward), compiled, against the interpreter on random parameters and
/// batch (integer inputs in [0, 9]: valid token ids and labels).
TEST_F(TrainToLinalgTest, CorpusMlpStep) { checkCorpus("mlp"); }

/// llama: embedding, rsqrt, softmax, bmm, cat/slice for rotary embeddings,
/// log_softmax + gather/scatter for the loss, index_put in the backward.
TEST_F(TrainToLinalgTest, CorpusLlamaStep) { checkCorpus("llama"); }

/// The GPT-2-style block of test/Import/Inputs/make_gpt2_block.py
/// (layer_norm, gelu(tanh), log_softmax and their backwards), generated at
/// test time; 8 classes, so the targets are in [0, 7]. Skipped when the
/// script or python3 is not at hand.
TEST_F(TrainToLinalgTest, Gpt2BlockStep) {
  std::string source = __FILE__;
  if (!llvm::sys::path::is_absolute(source)) {
    // Relative to the build directory, two levels above this executable.
    std::string exe = llvm::sys::fs::getMainExecutable(
        nullptr, reinterpret_cast<void *>(&randomSeedAnchor));
    SmallString<256> root(
        llvm::sys::path::parent_path(llvm::sys::path::parent_path(exe)));
    llvm::sys::path::append(root, source);
    source = std::string(root);
  }
  SmallString<256> script(llvm::sys::path::parent_path(
      llvm::sys::path::parent_path(llvm::sys::path::parent_path(source))));
  llvm::sys::path::append(script, "test", "Import", "Inputs",
                          "make_gpt2_block.py");
  if (!llvm::sys::fs::exists(script))
    GTEST_SKIP() << "no " << script.str().str();
  SmallString<256> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("gpt2-block", dir));
  SmallString<256> archive(dir);
  llvm::sys::path::append(archive, "gpt2.pt2");
  std::string command = "python3 '" + script.str().str() + "' '" +
                        archive.str().str() + "' '" + dir.str().str() +
                        "' > /dev/null 2>&1";
  if (std::system(command.c_str()) != 0) {
    llvm::sys::fs::remove_directories(dir);
    GTEST_SKIP() << "could not run " << command;
  }
  checkArchive(archive.str().str(), /*tolerance=*/1e-5, /*maxInteger=*/7);
  llvm::sys::fs::remove_directories(dir);
}

/// Longer dot products: the compiled code accumulates in fp32 as torch
/// does, the interpreter in double; the gradients then differ by up to
/// ~4e-5 of their largest entry (below 1e-5 with f64 accumulation, checked
/// by hand), within the 1e-4 fidelity to torch. (Its GPU program
/// is checked by test/e2e/train-gpu-medium.test, 40 steps against torch;
/// emulating it here too would take most of a minute.)
TEST_F(TrainToLinalgTest, CorpusLlamaMediumStep) {
  checkCorpus("llama_medium", /*tolerance=*/1e-4, /*withGpuProgram=*/false);
}

} // namespace
