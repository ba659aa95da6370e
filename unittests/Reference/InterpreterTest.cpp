//===- InterpreterTest.cpp - Tests of the reference interpreter -----------===//
//
// Each test parses a small train.step and checks its results against values
// worked out by hand or by a formula evaluated here in double precision,
// never by calling the interpreter's own helpers. Gradients of the norms are
// also checked against central finite differences of their forward ops in
// fp64.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Reference/Interpreter.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"
#include "gtest/gtest.h"
#include <cmath>
#include <functional>
#include <limits>

using namespace mlir;
using namespace mlir::mantissa;
using namespace mlir::mantissa::reference;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename T> std::string str(T printable) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << printable;
  return text;
}

/// A named step argument.
struct Input {
  std::string name;
  Tensor value;
};

/// A value the step returns, with its type.
struct Output {
  std::string name;
  std::string type;
};

class InterpreterTest : public ::testing::Test {
protected:
  InterpreterTest()
      : handler(&context, [this](Diagnostic &diagnostic) {
          diagnostics += diagnostic.str() + "\n";
          return success();
        }) {
    context.loadDialect<train::TrainDialect>();
    context.allowUnregisteredDialects();
  }

  Tensor tensor(Type type, ArrayRef<int64_t> shape, ArrayRef<double> values) {
    return Tensor::fromDoubles(type, shape, values);
  }

  /// A step `@test` taking `inputs` as user inputs and returning a dummy
  /// loss followed by `outputs`, around `body`.
  std::string buildStep(ArrayRef<Input> inputs, StringRef body,
                        ArrayRef<Output> outputs) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "train.step @test(";
    auto declare = [&](StringRef name, RankedTensorType type) {
      os << "%" << name << ": " << type << " {train.tensor = "
         << "#train.tensor<user_input, fqn = \"" << name
         << "\", module = \"\", shape = [";
      llvm::interleaveComma(type.getShape(), os);
      os << "], dtype = " << type.getElementType() << ">}, ";
    };
    for (const Input &input : inputs)
      declare(input.name, input.value.getType());
    declare("test_loss", RankedTensorType::get({}, f32));
    text.resize(text.size() - 2); // the last ", "
    os << ") -> (tensor<f32> {train.result = #train.result<loss>}";
    for (const Output &output : outputs)
      os << ", " << output.type
         << " {train.result = #train.result<user_output>}";
    os << ") {\n" << body << "\n  train.return %test_loss";
    for (const Output &output : outputs)
      os << ", " << output.name;
    os << " : tensor<f32>";
    for (const Output &output : outputs)
      os << ", " << output.type;
    os << "\n}\n";
    return text;
  }

  /// Parses `source` and interprets its first step on `arguments`.
  FailureOr<SmallVector<Tensor>> interpret(StringRef source,
                                           ArrayRef<Tensor> arguments) {
    module = parseSourceString<ModuleOp>(source, ParserConfig(&context));
    if (!module)
      return failure();
    auto steps = module->getOps<train::StepOp>();
    if (steps.empty())
      return failure();
    return interpretStep(*steps.begin(), arguments);
  }

  /// Builds and interprets a step (see buildStep); the dummy loss is
  /// dropped from the results.
  FailureOr<SmallVector<Tensor>> tryRun(ArrayRef<Input> inputs, StringRef body,
                                        ArrayRef<Output> outputs) {
    SmallVector<Tensor> arguments;
    for (const Input &input : inputs)
      arguments.push_back(input.value);
    arguments.push_back(tensor(f32, {}, {0.0}));
    auto results = interpret(buildStep(inputs, body, outputs), arguments);
    if (failed(results))
      return failure();
    return SmallVector<Tensor>(llvm::drop_begin(*results));
  }

  /// As tryRun, failing the test (with the diagnostics) on an error.
  SmallVector<Tensor> run(ArrayRef<Input> inputs, StringRef body,
                          ArrayRef<Output> outputs) {
    auto results = tryRun(inputs, body, outputs);
    if (failed(results)) {
      ADD_FAILURE() << "interpretation failed:\n" << diagnostics;
      return {};
    }
    return std::move(*results);
  }

  /// Runs a step that must fail and returns the diagnostics it emitted.
  std::string runExpectingError(ArrayRef<Input> inputs, StringRef body,
                                ArrayRef<Output> outputs) {
    EXPECT_TRUE(failed(tryRun(inputs, body, outputs)));
    return diagnostics;
  }

  /// Checks the type, shape and elements of `actual`; a positive
  /// `tolerance` is relative to max(1, |expected|).
  void expectTensor(const Tensor &actual, Type type, ArrayRef<int64_t> shape,
                    ArrayRef<double> expected, double tolerance = 0) {
    ASSERT_EQ(str(actual.getType()), str(RankedTensorType::get(shape, type)));
    ASSERT_EQ(actual.getNumElements(), static_cast<int64_t>(expected.size()));
    for (auto [index, value] : llvm::enumerate(expected)) {
      double got = actual.getAsDouble(index);
      if (std::isnan(value))
        EXPECT_TRUE(std::isnan(got)) << "element " << index << " is " << got;
      else if (tolerance == 0)
        EXPECT_EQ(got, value) << "element " << index;
      else
        EXPECT_NEAR(got, value, tolerance * std::max(1.0, std::abs(value)))
            << "element " << index;
    }
  }

  MLIRContext context;
  ScopedDiagnosticHandler handler;
  OwningOpRef<ModuleOp> module;
  std::string diagnostics;
  Type f64 = Float64Type::get(&context);
  Type f32 = Float32Type::get(&context);
  Type bf16 = BFloat16Type::get(&context);
  Type f16 = Float16Type::get(&context);
  Type i64 = IntegerType::get(&context, 64);
  Type i32 = IntegerType::get(&context, 32);
  Type i1 = IntegerType::get(&context, 1);
};

//===----------------------------------------------------------------------===//
// A whole step
//===----------------------------------------------------------------------===//

// A linear layer with an MSE loss and its weight gradient, written as the
// importer writes a joint graph, with a shard group that must be ignored.
// x = [[1,2,3],[4,5,6]], w = [[1,0,0],[0,1,0]], y = 0: pred = [[1,2],[4,5]],
// loss = (1 + 4 + 16 + 25) / 4 = 11.5, dpred = 2 * pred / 4,
// grad_w = dpred^T x = [[8.5, 11, 13.5], [11, 14.5, 18]].
TEST_F(InterpreterTest, LinearMseStepWithShardGroup) {
  const char *source = R"(
train.step @linear(
    %w: tensor<2x3xf32> {train.tensor = #train.tensor<parameter, fqn = "fc.weight", module = "fc", shape = [2, 3], dtype = f32>},
    %x: tensor<2x3xf32> {train.tensor = #train.tensor<user_input, fqn = "x", module = "", shape = [2, 3], dtype = f32>},
    %y: tensor<2x2xf32> {train.tensor = #train.tensor<user_input, fqn = "y", module = "", shape = [2, 2], dtype = f32>})
    -> (tensor<f32> {train.result = #train.result<loss>},
        tensor<2x3xf32> {train.result = #train.result<gradient, fqn = "fc.weight">}) {
  train.shard_group "root" unit "" gather fp32 members ["fc.weight"]
  %wt = train.permute %w {dims = array<i64: 1, 0>} : tensor<2x3xf32> -> tensor<3x2xf32>
  %pred = train.mm %x, %wt : tensor<2x3xf32>, tensor<3x2xf32> -> tensor<2x2xf32>
  %diff = train.sub %pred, %y : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
  %sq = train.pow_scalar %diff {scalar = 2 : i64} : tensor<2x2xf32> -> tensor<2x2xf32>
  %loss = train.mean %sq {dims = array<i64>} : tensor<2x2xf32> -> tensor<f32>
  %dpred = train.mul_scalar %diff {scalar = 5.000000e-01 : f64} : tensor<2x2xf32> -> tensor<2x2xf32>
  %dpredt = train.permute %dpred {dims = array<i64: 1, 0>} : tensor<2x2xf32> -> tensor<2x2xf32>
  %grad = train.mm %dpredt, %x : tensor<2x2xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  train.return %loss, %grad : tensor<f32>, tensor<2x3xf32>
}
)";
  auto results = interpret(source, {tensor(f32, {2, 3}, {1, 0, 0, 0, 1, 0}),
                                    tensor(f32, {2, 3}, {1, 2, 3, 4, 5, 6}),
                                    tensor(f32, {2, 2}, {0, 0, 0, 0})});
  ASSERT_TRUE(succeeded(results)) << diagnostics;
  ASSERT_EQ(results->size(), 2u);
  expectTensor((*results)[0], f32, {}, {11.5});
  expectTensor((*results)[1], f32, {2, 3}, {8.5, 11, 13.5, 11, 14.5, 18});
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

TEST_F(InterpreterTest, RejectsWrongArgumentCount) {
  std::string source = buildStep({{"x", tensor(f32, {2}, {1, 2})}}, "", {});
  EXPECT_TRUE(failed(interpret(source, {tensor(f32, {2}, {1, 2})})));
  EXPECT_NE(diagnostics.find("step @test takes 2 arguments, got 1"),
            std::string::npos)
      << diagnostics;
}

TEST_F(InterpreterTest, RejectsWrongArgumentTypeAndShape) {
  std::string source = buildStep({{"x", tensor(f32, {2}, {1, 2})}}, "", {});
  Tensor loss = tensor(f32, {}, {0});
  EXPECT_TRUE(failed(interpret(source, {tensor(f64, {2}, {1, 2}), loss})));
  EXPECT_NE(diagnostics.find("argument #0 ('x') must be 'tensor<2xf32>', got "
                             "'tensor<2xf64>'"),
            std::string::npos)
      << diagnostics;
  diagnostics.clear();
  EXPECT_TRUE(failed(interpret(source, {tensor(f32, {3}, {1, 2, 3}), loss})));
  EXPECT_NE(diagnostics.find("must be 'tensor<2xf32>', got 'tensor<3xf32>'"),
            std::string::npos)
      << diagnostics;
}

TEST_F(InterpreterTest, NamesAnUnknownOperation) {
  std::string errors = runExpectingError(
      {{"x", tensor(f32, {2}, {1, 2})}},
      R"(%r = "test.mystery"(%x) : (tensor<2xf32>) -> tensor<2xf32>)",
      {{"%r", "tensor<2xf32>"}});
  EXPECT_NE(errors.find("'test.mystery' op is not supported by the reference "
                        "interpreter"),
            std::string::npos)
      << errors;
}

TEST_F(InterpreterTest, EmbeddingIndexOutOfRangeIsAnError) {
  std::string errors = runExpectingError(
      {{"w", tensor(f32, {3, 2}, {0, 1, 10, 11, 20, 21})},
       {"i", tensor(i64, {2}, {1, 5})}},
      R"(%r = train.embedding %w, %i : tensor<3x2xf32>, tensor<2xi64> -> tensor<2x2xf32>)",
      {{"%r", "tensor<2x2xf32>"}});
  EXPECT_NE(errors.find("'train.embedding' op index 5 (element 1 of the "
                        "indices) is out of range for an embedding table of 3 "
                        "rows"),
            std::string::npos)
      << errors;
}

TEST_F(InterpreterTest, GatherIndexOutOfRangeIsAnError) {
  std::string errors = runExpectingError(
      {{"x", tensor(f32, {2, 3}, {1, 2, 3, 4, 5, 6})},
       {"i", tensor(i64, {2, 1}, {0, -1})}},
      R"(%r = train.gather %x, %i {dim = 1 : i64} : tensor<2x3xf32>, tensor<2x1xi64> -> tensor<2x1xf32>)",
      {{"%r", "tensor<2x1xf32>"}});
  EXPECT_NE(
      errors.find("'train.gather' op index -1 (element 1 of the "
                  "indices) is out of bounds for dimension 1 with size 3"),
      std::string::npos)
      << errors;
}

TEST_F(InterpreterTest, ScatterSourceSmallerThanIndexIsAnError) {
  std::string errors = runExpectingError(
      {{"x", tensor(f32, {2, 3}, {1, 2, 3, 4, 5, 6})},
       {"i", tensor(i64, {2, 2}, {0, 1, 2, 0})},
       {"s", tensor(f32, {2, 1}, {7, 8})}},
      R"(%r = train.scatter %x, %i, %s {dim = 1 : i64} : tensor<2x3xf32>, tensor<2x2xi64>, tensor<2x1xf32> -> tensor<2x3xf32>)",
      {{"%r", "tensor<2x3xf32>"}});
  EXPECT_NE(errors.find("'train.scatter' op index 'tensor<2x2xi64>' is larger "
                        "than the source 'tensor<2x1xf32>' in dimension 1"),
            std::string::npos)
      << errors;
}

TEST_F(InterpreterTest, IntegerToNegativeScalarPowerIsAnError) {
  std::string errors = runExpectingError(
      {{"x", tensor(i64, {2}, {1, 2})}},
      R"(%r = train.pow_scalar %x {scalar = -1 : i64} : tensor<2xi64> -> tensor<2xi64>)",
      {{"%r", "tensor<2xi64>"}});
  EXPECT_NE(errors.find("integers cannot be raised to the negative integer "
                        "power -1"),
            std::string::npos)
      << errors;
}

//===----------------------------------------------------------------------===//
// Elementwise arithmetic, promotion and rounding
//===----------------------------------------------------------------------===//

TEST_F(InterpreterTest, BinaryOpsBroadcast) {
  auto results = run({{"x", tensor(f32, {2, 3}, {1, 2, 3, 4, 5, 6})},
                      {"y", tensor(f32, {3}, {10, 20, 30})},
                      {"a", tensor(f32, {2, 1}, {1, 2})},
                      {"b", tensor(f32, {1, 3}, {3, 4, 5})}},
                     R"(
  %sum = train.add %x, %y : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
  %outer = train.mul %a, %b : tensor<2x1xf32>, tensor<1x3xf32> -> tensor<2x3xf32>
  %quot = train.div %y, %x : tensor<3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  %max = train.maximum %x, %b : tensor<2x3xf32>, tensor<1x3xf32> -> tensor<2x3xf32>
  %lt = train.lt %x, %b : tensor<2x3xf32>, tensor<1x3xf32> -> tensor<2x3xi1>)",
                     {{"%sum", "tensor<2x3xf32>"},
                      {"%outer", "tensor<2x3xf32>"},
                      {"%quot", "tensor<2x3xf32>"},
                      {"%max", "tensor<2x3xf32>"},
                      {"%lt", "tensor<2x3xi1>"}});
  ASSERT_EQ(results.size(), 5u);
  expectTensor(results[0], f32, {2, 3}, {11, 22, 33, 14, 25, 36});
  expectTensor(results[1], f32, {2, 3}, {3, 4, 5, 6, 8, 10});
  expectTensor(results[2], f32, {2, 3}, {10, 10, 10, 2.5, 4, 5});
  expectTensor(results[3], f32, {2, 3}, {3, 4, 5, 4, 5, 6});
  expectTensor(results[4], i1, {2, 3}, {1, 1, 1, 0, 0, 0});
}

// Comparisons happen in the promoted operand type (i64 vs f32 compares as
// f32) and follow IEEE for NaN: only `ne` holds.
TEST_F(InterpreterTest, ComparisonsPromoteAndHandleNaN) {
  auto results = run({{"x", tensor(f32, {4}, {1, 2, 3, kNaN})},
                      {"n", tensor(i64, {4}, {2, 2, 2, 2})}},
                     R"(
  %eq = train.eq %x, %n : tensor<4xf32>, tensor<4xi64> -> tensor<4xi1>
  %ne = train.ne %x, %n : tensor<4xf32>, tensor<4xi64> -> tensor<4xi1>
  %le = train.le %x, %n : tensor<4xf32>, tensor<4xi64> -> tensor<4xi1>
  %gt = train.gt %x, %n : tensor<4xf32>, tensor<4xi64> -> tensor<4xi1>
  %ge = train.ge %x, %n : tensor<4xf32>, tensor<4xi64> -> tensor<4xi1>
  %lts = train.lt_scalar %x {scalar = 2.5 : f64} : tensor<4xf32> -> tensor<4xi1>
  %les = train.le_scalar %n {scalar = 2 : i64} : tensor<4xi64> -> tensor<4xi1>
  %gts = train.gt_scalar %x {scalar = 1 : i64} : tensor<4xf32> -> tensor<4xi1>)",
                     {{"%eq", "tensor<4xi1>"},
                      {"%ne", "tensor<4xi1>"},
                      {"%le", "tensor<4xi1>"},
                      {"%gt", "tensor<4xi1>"},
                      {"%ge", "tensor<4xi1>"},
                      {"%lts", "tensor<4xi1>"},
                      {"%les", "tensor<4xi1>"},
                      {"%gts", "tensor<4xi1>"}});
  ASSERT_EQ(results.size(), 8u);
  expectTensor(results[0], i1, {4}, {0, 1, 0, 0});
  expectTensor(results[1], i1, {4}, {1, 0, 1, 1});
  expectTensor(results[2], i1, {4}, {1, 1, 0, 0});
  expectTensor(results[3], i1, {4}, {0, 0, 1, 0});
  expectTensor(results[4], i1, {4}, {0, 1, 1, 0});
  expectTensor(results[5], i1, {4}, {1, 1, 0, 0});
  expectTensor(results[6], i1, {4}, {1, 1, 1, 1});
  expectTensor(results[7], i1, {4}, {0, 1, 1, 0});
}

TEST_F(InterpreterTest, MaximumPropagatesNaN) {
  auto results = run(
      {{"x", tensor(f32, {2}, {kNaN, 1})}, {"y", tensor(f32, {2}, {0, kNaN})}},
      R"(%r = train.minimum %x, %y : tensor<2xf32>, tensor<2xf32> -> tensor<2xf32>)",
      {{"%r", "tensor<2xf32>"}});
  ASSERT_EQ(results.size(), 1u);
  expectTensor(results[0], f32, {2}, {kNaN, kNaN});
}

TEST_F(InterpreterTest, IntegerArithmeticPromotesAndDividesTruly) {
  auto results = run({{"x", tensor(i64, {3}, {1, -2, 7})},
                      {"y", tensor(i32, {3}, {10, 20, 2})}},
                     R"(
  %sum = train.add %x, %y : tensor<3xi64>, tensor<3xi32> -> tensor<3xi64>
  %quot = train.div %x, %y : tensor<3xi64>, tensor<3xi32> -> tensor<3xf32>
  %pow = train.pow %x, %y : tensor<3xi64>, tensor<3xi32> -> tensor<3xi64>)",
                     {{"%sum", "tensor<3xi64>"},
                      {"%quot", "tensor<3xf32>"},
                      {"%pow", "tensor<3xi64>"}});
  ASSERT_EQ(results.size(), 3u);
  expectTensor(results[0], i64, {3}, {11, 18, 9});
  expectTensor(results[1], f32, {3},
               {static_cast<float>(0.1), static_cast<float>(-0.1), 3.5});
  expectTensor(results[2], i64, {3}, {1, 1048576, 49});
}

// 1 + 2^-8 lies halfway between the bf16 neighbours 1 and 1 + 2^-7: the
// even one (1) wins. 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and
// 1 + 2^-6 (even): it rounds up. fp32 keeps both exactly.
TEST_F(InterpreterTest, Bf16AddRoundsTiesToEven) {
  auto results =
      run({{"x", tensor(bf16, {3}, {1, 1.0078125, -1})},
           {"y", tensor(bf16, {3}, {0.00390625, 0.00390625, -0.00390625})},
           {"xf", tensor(f32, {3}, {1, 1.0078125, -1})},
           {"yf", tensor(f32, {3}, {0.00390625, 0.00390625, -0.00390625})}},
          R"(
  %r = train.add %x, %y : tensor<3xbf16>, tensor<3xbf16> -> tensor<3xbf16>
  %rf = train.add %xf, %yf : tensor<3xf32>, tensor<3xf32> -> tensor<3xf32>)",
          {{"%r", "tensor<3xbf16>"}, {"%rf", "tensor<3xf32>"}});
  ASSERT_EQ(results.size(), 2u);
  expectTensor(results[0], bf16, {3}, {1, 1.015625, -1});
  expectTensor(results[1], f32, {3}, {1.00390625, 1.01171875, -1.00390625});
}

// (1 + 2^-7)^2 = 1 + 2^-6 + 2^-14: bf16 rounds the product to 1 + 2^-6
// before the subtraction, so the difference is 0; fp32 keeps 2^-14.
TEST_F(InterpreterTest, Bf16RoundsAfterEveryOp) {
  auto results = run({{"x", tensor(bf16, {1}, {1.0078125})},
                      {"c", tensor(bf16, {1}, {1.015625})},
                      {"xf", tensor(f32, {1}, {1.0078125})},
                      {"cf", tensor(f32, {1}, {1.015625})}},
                     R"(
  %p = train.mul %x, %x : tensor<1xbf16>, tensor<1xbf16> -> tensor<1xbf16>
  %d = train.sub %p, %c : tensor<1xbf16>, tensor<1xbf16> -> tensor<1xbf16>
  %pf = train.mul %xf, %xf : tensor<1xf32>, tensor<1xf32> -> tensor<1xf32>
  %df = train.sub %pf, %cf : tensor<1xf32>, tensor<1xf32> -> tensor<1xf32>)",
                     {{"%d", "tensor<1xbf16>"}, {"%df", "tensor<1xf32>"}});
  ASSERT_EQ(results.size(), 2u);
  expectTensor(results[0], bf16, {1}, {0});
  expectTensor(results[1], f32, {1}, {std::ldexp(1.0, -14)});
}

// A zero-dimensional fp32 tensor does not raise a bf16 tensor's type. ATen
// converts it to bf16 for add (2^-8 + 2^-20 becomes 2^-8, and 1 + 2^-8 ties
// down to 1) but reads it in fp32 for mul (1 * (1 + 2^-8 + 2^-20) is just
// above the tie and rounds up to 1 + 2^-7).
TEST_F(InterpreterTest, Bf16WithFp32ZeroDimTensorStaysBf16) {
  double small = std::ldexp(1.0, -8) + std::ldexp(1.0, -20);
  auto results = run({{"x", tensor(bf16, {3}, {1, 2, 3})},
                      {"half", tensor(f32, {}, {0.5})},
                      {"small", tensor(f32, {}, {small})},
                      {"near_one", tensor(f32, {}, {1 + small})}},
                     R"(
  %a = train.add %x, %half : tensor<3xbf16>, tensor<f32> -> tensor<3xbf16>
  %b = train.add %x, %small : tensor<3xbf16>, tensor<f32> -> tensor<3xbf16>
  %c = train.mul %x, %near_one : tensor<3xbf16>, tensor<f32> -> tensor<3xbf16>)",
                     {{"%a", "tensor<3xbf16>"},
                      {"%b", "tensor<3xbf16>"},
                      {"%c", "tensor<3xbf16>"}});
  ASSERT_EQ(results.size(), 3u);
  expectTensor(results[0], bf16, {3}, {1.5, 2.5, 3.5});
  expectTensor(results[1], bf16, {3}, {1, 2, 3});
  expectTensor(results[2], bf16, {3}, {1.0078125, 2.015625, 3.015625});
}

TEST_F(InterpreterTest, ScalarOpsOnIntegerTensors) {
  auto results = run({{"x", tensor(i64, {3}, {0, 3, 5})}},
                     R"(
  %ne = train.ne_scalar %x {scalar = 3 : i64} : tensor<3xi64> -> tensor<3xi1>
  %ge = train.ge_scalar %x {scalar = 2.5 : f64} : tensor<3xi64> -> tensor<3xi1>
  %add = train.add_scalar %x {scalar = 2 : i64} : tensor<3xi64> -> tensor<3xi64>
  %half = train.mul_scalar %x {scalar = 5.000000e-01 : f64} : tensor<3xi64> -> tensor<3xf32>
  %rsub = train.rsub_scalar %x {scalar = 1 : i64} : tensor<3xi64> -> tensor<3xi64>
  %div = train.div_scalar %x {scalar = 2 : i64} : tensor<3xi64> -> tensor<3xf32>
  %sq = train.pow_scalar %x {scalar = 2 : i64} : tensor<3xi64> -> tensor<3xi64>)",
                     {{"%ne", "tensor<3xi1>"},
                      {"%ge", "tensor<3xi1>"},
                      {"%add", "tensor<3xi64>"},
                      {"%half", "tensor<3xf32>"},
                      {"%rsub", "tensor<3xi64>"},
                      {"%div", "tensor<3xf32>"},
                      {"%sq", "tensor<3xi64>"}});
  ASSERT_EQ(results.size(), 7u);
  expectTensor(results[0], i1, {3}, {1, 0, 1});
  expectTensor(results[1], i1, {3}, {0, 1, 1});
  expectTensor(results[2], i64, {3}, {2, 5, 7});
  expectTensor(results[3], f32, {3}, {0, 1.5, 2.5});
  expectTensor(results[4], i64, {3}, {1, -2, -4});
  expectTensor(results[5], f32, {3}, {0, 1.5, 2.5});
  expectTensor(results[6], i64, {3}, {0, 9, 25});
}

TEST_F(InterpreterTest, ScalarOpsOnFloatTensors) {
  auto results =
      run({{"x", tensor(f32, {3}, {1, 2, 4})}, {"b", tensor(bf16, {1}, {100})}},
          R"(
  %sub = train.sub_scalar %x {scalar = 1 : i64} : tensor<3xf32> -> tensor<3xf32>
  %div = train.div_scalar %x {scalar = 3.0 : f64} : tensor<3xf32> -> tensor<3xf32>
  %eq = train.eq_scalar %x {scalar = 2.0 : f64} : tensor<3xf32> -> tensor<3xi1>
  %bmul = train.mul_scalar %b {scalar = 3.000000e-01 : f64} : tensor<1xbf16> -> tensor<1xbf16>)",
          {{"%sub", "tensor<3xf32>"},
           {"%div", "tensor<3xf32>"},
           {"%eq", "tensor<3xi1>"},
           {"%bmul", "tensor<1xbf16>"}});
  ASSERT_EQ(results.size(), 4u);
  expectTensor(results[0], f32, {3}, {0, 1, 3});
  expectTensor(results[1], f32, {3}, {1.0f / 3.0f, 2.0f / 3.0f, 4.0f / 3.0f});
  expectTensor(results[2], i1, {3}, {0, 1, 0});
  // 100 * 0.3f = 30.0000012 -> bf16 30 (with 0.3 rounded to bf16 first,
  // 0.30078125 * 100 would round to 30.125).
  expectTensor(results[3], bf16, {1}, {30});
}

// torch's pow(Tensor, Scalar) special cases, and pow in double otherwise.
TEST_F(InterpreterTest, PowScalar) {
  std::vector<double> x = {1.5, 2, 4, 0.25};
  auto results = run({{"x", tensor(f32, {4}, x)}},
                     R"(
  %p2 = train.pow_scalar %x {scalar = 2 : i64} : tensor<4xf32> -> tensor<4xf32>
  %p3 = train.pow_scalar %x {scalar = 3.0 : f64} : tensor<4xf32> -> tensor<4xf32>
  %ph = train.pow_scalar %x {scalar = 0.5 : f64} : tensor<4xf32> -> tensor<4xf32>
  %pmh = train.pow_scalar %x {scalar = -0.5 : f64} : tensor<4xf32> -> tensor<4xf32>
  %pm1 = train.pow_scalar %x {scalar = -1 : i64} : tensor<4xf32> -> tensor<4xf32>
  %pm2 = train.pow_scalar %x {scalar = -2.0 : f64} : tensor<4xf32> -> tensor<4xf32>
  %p15 = train.pow_scalar %x {scalar = 1.5 : f64} : tensor<4xf32> -> tensor<4xf32>)",
                     {{"%p2", "tensor<4xf32>"},
                      {"%p3", "tensor<4xf32>"},
                      {"%ph", "tensor<4xf32>"},
                      {"%pmh", "tensor<4xf32>"},
                      {"%pm1", "tensor<4xf32>"},
                      {"%pm2", "tensor<4xf32>"},
                      {"%p15", "tensor<4xf32>"}});
  ASSERT_EQ(results.size(), 7u);
  expectTensor(results[0], f32, {4}, {2.25, 4, 16, 0.0625});
  expectTensor(results[1], f32, {4}, {3.375, 8, 64, 0.015625});
  expectTensor(results[2], f32, {4},
               {static_cast<float>(std::sqrt(1.5)), std::sqrt(2.0f), 2, 0.5});
  expectTensor(results[3], f32, {4},
               {1.0f / std::sqrt(1.5f), 1.0f / std::sqrt(2.0f), 0.5, 2});
  expectTensor(results[4], f32, {4}, {1.0f / 1.5f, 0.5, 0.25, 4});
  expectTensor(results[5], f32, {4}, {1.0f / 2.25f, 0.25, 0.0625, 16});
  expectTensor(results[6], f32, {4},
               {static_cast<float>(std::pow(1.5, 1.5)),
                static_cast<float>(std::pow(2.0, 1.5)), 8, 0.125});
}

TEST_F(InterpreterTest, UnaryMathMatchesFormulas) {
  std::vector<double> x = {-1.5, -0.25, 0.5, 2};
  std::vector<double> positive = {0.25, 1, 2.5, 9};
  auto results = run({{"x", tensor(f32, {4}, x)},
                      {"p", tensor(f32, {4}, positive)},
                      {"n", tensor(i64, {4}, {0, 1, -2, 3})}},
                     R"(
  %neg = train.neg %x : tensor<4xf32> -> tensor<4xf32>
  %abs = train.abs %x : tensor<4xf32> -> tensor<4xf32>
  %exp = train.exp %x : tensor<4xf32> -> tensor<4xf32>
  %log = train.log %p : tensor<4xf32> -> tensor<4xf32>
  %sqrt = train.sqrt %p : tensor<4xf32> -> tensor<4xf32>
  %rsqrt = train.rsqrt %p : tensor<4xf32> -> tensor<4xf32>
  %rec = train.reciprocal %x : tensor<4xf32> -> tensor<4xf32>
  %sig = train.sigmoid %x : tensor<4xf32> -> tensor<4xf32>
  %tanh = train.tanh %x : tensor<4xf32> -> tensor<4xf32>
  %erf = train.erf %x : tensor<4xf32> -> tensor<4xf32>
  %sin = train.sin %x : tensor<4xf32> -> tensor<4xf32>
  %cos = train.cos %x : tensor<4xf32> -> tensor<4xf32>
  %relu = train.relu %x : tensor<4xf32> -> tensor<4xf32>
  %silu = train.silu %x : tensor<4xf32> -> tensor<4xf32>
  %iexp = train.exp %n : tensor<4xi64> -> tensor<4xf32>
  %inot = train.logical_not %n : tensor<4xi64> -> tensor<4xi1>
  %iabs = train.abs %n : tensor<4xi64> -> tensor<4xi64>)",
                     {{"%neg", "tensor<4xf32>"},
                      {"%abs", "tensor<4xf32>"},
                      {"%exp", "tensor<4xf32>"},
                      {"%log", "tensor<4xf32>"},
                      {"%sqrt", "tensor<4xf32>"},
                      {"%rsqrt", "tensor<4xf32>"},
                      {"%rec", "tensor<4xf32>"},
                      {"%sig", "tensor<4xf32>"},
                      {"%tanh", "tensor<4xf32>"},
                      {"%erf", "tensor<4xf32>"},
                      {"%sin", "tensor<4xf32>"},
                      {"%cos", "tensor<4xf32>"},
                      {"%relu", "tensor<4xf32>"},
                      {"%silu", "tensor<4xf32>"},
                      {"%iexp", "tensor<4xf32>"},
                      {"%inot", "tensor<4xi1>"},
                      {"%iabs", "tensor<4xi64>"}});
  ASSERT_EQ(results.size(), 17u);
  auto expectMap = [&](const Tensor &actual, ArrayRef<double> inputs,
                       std::function<double(double)> fn) {
    SmallVector<double> expected;
    for (double value : inputs)
      expected.push_back(fn(value));
    expectTensor(actual, f32, {4}, expected, 1e-6);
  };
  expectMap(results[0], x, [](double v) { return -v; });
  expectMap(results[1], x, [](double v) { return std::abs(v); });
  expectMap(results[2], x, [](double v) { return std::exp(v); });
  expectMap(results[3], positive, [](double v) { return std::log(v); });
  expectMap(results[4], positive, [](double v) { return std::sqrt(v); });
  expectMap(results[5], positive, [](double v) { return 1 / std::sqrt(v); });
  expectMap(results[6], x, [](double v) { return 1 / v; });
  expectMap(results[7], x, [](double v) { return 1 / (1 + std::exp(-v)); });
  expectMap(results[8], x, [](double v) { return std::tanh(v); });
  expectMap(results[9], x, [](double v) { return std::erf(v); });
  expectMap(results[10], x, [](double v) { return std::sin(v); });
  expectMap(results[11], x, [](double v) { return std::cos(v); });
  expectMap(results[12], x, [](double v) { return v > 0 ? v : 0; });
  expectMap(results[13], x, [](double v) { return v / (1 + std::exp(-v)); });
  expectMap(results[14], {0, 1, -2, 3}, [](double v) { return std::exp(v); });
  expectTensor(results[15], i1, {4}, {1, 0, 0, 0});
  expectTensor(results[16], i64, {4}, {0, 1, 2, 3});
}

static double geluReference(double x, bool tanhForm) {
  if (!tanhForm)
    return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  double inner = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1 + std::tanh(inner));
}

// GELU against its definitions, and its gradient against central finite
// differences of those definitions.
TEST_F(InterpreterTest, GeluAndItsGradient) {
  std::vector<double> x = {-3, -0.75, 0, 0.5, 2.25};
  std::vector<double> grad = {1, -2, 0.5, 3, 1};
  auto results =
      run({{"x", tensor(f32, {5}, x)}, {"g", tensor(f32, {5}, grad)}},
          R"(
  %erf = train.gelu %x : tensor<5xf32> -> tensor<5xf32>
  %tanh = train.gelu %x {approximate = "tanh"} : tensor<5xf32> -> tensor<5xf32>
  %derf = train.gelu_backward %g, %x : tensor<5xf32>, tensor<5xf32> -> tensor<5xf32>
  %dtanh = train.gelu_backward %g, %x {approximate = "tanh"} : tensor<5xf32>, tensor<5xf32> -> tensor<5xf32>)",
          {{"%erf", "tensor<5xf32>"},
           {"%tanh", "tensor<5xf32>"},
           {"%derf", "tensor<5xf32>"},
           {"%dtanh", "tensor<5xf32>"}});
  ASSERT_EQ(results.size(), 4u);
  for (bool tanhForm : {false, true}) {
    SmallVector<double> forward, backward;
    for (auto [value, g] : llvm::zip(x, grad)) {
      forward.push_back(geluReference(value, tanhForm));
      double h = 1e-5;
      backward.push_back(g *
                         (geluReference(value + h, tanhForm) -
                          geluReference(value - h, tanhForm)) /
                         (2 * h));
    }
    expectTensor(results[tanhForm ? 1 : 0], f32, {5}, forward, 1e-6);
    expectTensor(results[tanhForm ? 3 : 2], f32, {5}, backward, 1e-5);
  }
}

// SiLU's gradient against central finite differences of x * sigmoid(x).
TEST_F(InterpreterTest, SiluGradient) {
  std::vector<double> x = {-6, -0.75, 0, 0.5, 2.25};
  std::vector<double> grad = {1, -2, 0.5, 3, 1};
  auto results =
      run({{"x", tensor(f32, {5}, x)}, {"g", tensor(f32, {5}, grad)}},
          R"(
  %d = train.silu_backward %g, %x : tensor<5xf32>, tensor<5xf32> -> tensor<5xf32>)",
          {{"%d", "tensor<5xf32>"}});
  ASSERT_EQ(results.size(), 1u);
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  SmallVector<double> backward;
  for (auto [value, g] : llvm::zip(x, grad)) {
    double h = 1e-5;
    backward.push_back(g * (silu(value + h) - silu(value - h)) / (2 * h));
  }
  expectTensor(results[0], f32, {5}, backward, 1e-5);
}

TEST_F(InterpreterTest, WhereMaskedFillAndClamp) {
  auto results = run({{"mask", tensor(i1, {2, 2}, {0, 1, 1, 0})},
                      {"scores", tensor(bf16, {2, 2}, {1, 2, 3, 4})},
                      {"row", tensor(i1, {2}, {1, 0})},
                      {"x", tensor(f32, {4}, {-1, 0.5, 2, kNaN})},
                      {"n", tensor(i64, {3}, {-5, 3, 9})}},
                     R"(
  %ninf = train.full {value = 0xFFF0000000000000 : f64} : tensor<bf16>
  %w = train.where %mask, %ninf, %scores : tensor<2x2xi1>, tensor<bf16>, tensor<2x2xbf16> -> tensor<2x2xbf16>
  %m = train.masked_fill %scores, %row {value = 0.0 : f64} : tensor<2x2xbf16>, tensor<2xi1> -> tensor<2x2xbf16>
  %c = train.clamp %x {min = 0.0 : f64, max = 1 : i64} : tensor<4xf32> -> tensor<4xf32>
  %lo = train.clamp %x {min = 0.0 : f64} : tensor<4xf32> -> tensor<4xf32>
  %ci = train.clamp %n {min = 0 : i64, max = 4 : i64} : tensor<3xi64> -> tensor<3xi64>)",
                     {{"%w", "tensor<2x2xbf16>"},
                      {"%m", "tensor<2x2xbf16>"},
                      {"%c", "tensor<4xf32>"},
                      {"%lo", "tensor<4xf32>"},
                      {"%ci", "tensor<3xi64>"}});
  ASSERT_EQ(results.size(), 5u);
  expectTensor(results[0], bf16, {2, 2}, {1, -kInf, -kInf, 4});
  expectTensor(results[1], bf16, {2, 2}, {0, 2, 0, 4});
  expectTensor(results[2], f32, {4}, {0, 0.5, 1, kNaN});
  expectTensor(results[3], f32, {4}, {0, 0.5, 2, kNaN});
  expectTensor(results[4], i64, {3}, {0, 3, 4});
}

TEST_F(InterpreterTest, CastsRoundTruncateAndTestNonZero) {
  auto results =
      run({{"x", tensor(f32, {4}, {1.00390625, 1.01171875, -2.7, kNaN})},
           {"y", tensor(f32, {4}, {0, -0.0, 0.5, 2.7})},
           {"n", Tensor::fromIntegers(i64, {2},
                                      {(int64_t{1} << 32) + 5, 16777217})}},
          R"(
  %b = train.cast %x : tensor<4xf32> to tensor<4xbf16>
  %i = train.cast %y : tensor<4xf32> to tensor<4xi64>
  %neg = train.cast %x : tensor<4xf32> to tensor<4xi32>
  %z = train.cast %y : tensor<4xf32> to tensor<4xi1>
  %w = train.cast %n : tensor<2xi64> to tensor<2xi32>
  %f = train.cast %n : tensor<2xi64> to tensor<2xf32>)",
          {{"%b", "tensor<4xbf16>"},
           {"%i", "tensor<4xi64>"},
           {"%neg", "tensor<4xi32>"},
           {"%z", "tensor<4xi1>"},
           {"%w", "tensor<2xi32>"},
           {"%f", "tensor<2xf32>"}});
  ASSERT_EQ(results.size(), 6u);
  expectTensor(results[0], bf16, {4}, {1, 1.015625, -2.703125, kNaN});
  expectTensor(results[1], i64, {4}, {0, 0, 0, 2});
  EXPECT_EQ(results[2].getIntegers()[2], -2);
  expectTensor(results[3], i1, {4}, {0, 0, 1, 1});
  expectTensor(results[4], i32, {2}, {5, 16777217});
  // 2^24 + 1 is not an fp32: it rounds to the even 2^24.
  expectTensor(results[5], f32, {2}, {4294967296.0, 16777216});
}

//===----------------------------------------------------------------------===//
// Reductions and softmax
//===----------------------------------------------------------------------===//

TEST_F(InterpreterTest, SumOfBoolsIsInt64) {
  auto results = run({{"b", tensor(i1, {2, 3}, {1, 0, 1, 1, 1, 0})}},
                     R"(
  %rows = train.sum %b {dims = array<i64: 1>} : tensor<2x3xi1> -> tensor<2xi64>
  %all = train.sum %b {dims = array<i64>} : tensor<2x3xi1> -> tensor<i64>)",
                     {{"%rows", "tensor<2xi64>"}, {"%all", "tensor<i64>"}});
  ASSERT_EQ(results.size(), 2u);
  expectTensor(results[0], i64, {2}, {2, 2});
  expectTensor(results[1], i64, {}, {4});
}

TEST_F(InterpreterTest, SumMeanAmaxOverDims) {
  auto results = run({{"x", tensor(f32, {2, 3}, {1, 2, 3, 4, 5, 6})},
                      {"b", tensor(bf16, {3}, {1, 0.00390625, 0.00390625})}},
                     R"(
  %mean = train.mean %x {dims = array<i64: 1>, keepdim} : tensor<2x3xf32> -> tensor<2x1xf32>
  %amax = train.amax %x {dims = array<i64: 0>} : tensor<2x3xf32> -> tensor<3xf32>
  %sum = train.sum %x {dims = array<i64: 0, 1>, keepdim} : tensor<2x3xf32> -> tensor<1x1xf32>
  %bsum = train.sum %b {dims = array<i64: 0>} : tensor<3xbf16> -> tensor<bf16>
  %wide = train.sum %b {dims = array<i64: 0>, dtype = f32} : tensor<3xbf16> -> tensor<f32>)",
                     {{"%mean", "tensor<2x1xf32>"},
                      {"%amax", "tensor<3xf32>"},
                      {"%sum", "tensor<1x1xf32>"},
                      {"%bsum", "tensor<bf16>"},
                      {"%wide", "tensor<f32>"}});
  ASSERT_EQ(results.size(), 5u);
  expectTensor(results[0], f32, {2, 1}, {2, 5});
  expectTensor(results[1], f32, {3}, {4, 5, 6});
  expectTensor(results[2], f32, {1, 1}, {21});
  // One rounding of the exact sum 1 + 2^-7, which bf16 holds.
  expectTensor(results[3], bf16, {}, {1.0078125});
  expectTensor(results[4], f32, {}, {1.0078125});
}

// Rows of [0, ln 2, ln 3] have exponentials 1, 2, 3: softmax is
// [1/6, 1/3, 1/2]. A row of large equal values is uniform (the maximum is
// subtracted first).
TEST_F(InterpreterTest, SoftmaxAndLogSoftmax) {
  auto results =
      run({{"x", tensor(f32, {2, 3},
                        {0, std::log(2.0), std::log(3.0), 1000, 1000, 1000})}},
          R"(
  %s = train.softmax %x {dim = 1 : i64} : tensor<2x3xf32> -> tensor<2x3xf32>
  %l = train.log_softmax %x {dim = 1 : i64} : tensor<2x3xf32> -> tensor<2x3xf32>
  %c = train.softmax %x {dim = 0 : i64} : tensor<2x3xf32> -> tensor<2x3xf32>)",
          {{"%s", "tensor<2x3xf32>"},
           {"%l", "tensor<2x3xf32>"},
           {"%c", "tensor<2x3xf32>"}});
  ASSERT_EQ(results.size(), 3u);
  expectTensor(results[0], f32, {2, 3},
               {1.0 / 6, 1.0 / 3, 0.5, 1.0 / 3, 1.0 / 3, 1.0 / 3}, 1e-6);
  for (int row = 0; row < 2; ++row) {
    double total = 0;
    for (int column = 0; column < 3; ++column)
      total += results[0].getFloats()[row * 3 + column];
    EXPECT_NEAR(total, 1.0, 1e-6);
  }
  expectTensor(results[1], f32, {2, 3},
               {-std::log(6.0), -std::log(3.0), -std::log(2.0), -std::log(3.0),
                -std::log(3.0), -std::log(3.0)},
               1e-6);
  // Along dim 0 every column is dominated by the 1000s.
  expectTensor(results[2], f32, {2, 3}, {0, 0, 0, 1, 1, 1}, 1e-6);
}

TEST_F(InterpreterTest, SoftmaxGradients) {
  std::vector<double> y = {0.2, 0.3, 0.5, 0.1, 0.1, 0.8};
  std::vector<double> logY;
  for (double v : y)
    logY.push_back(std::log(v));
  std::vector<double> g = {1, -2, 0.5, 3, 0, -1};
  auto results = run({{"y", tensor(f64, {2, 3}, y)},
                      {"logy", tensor(f64, {2, 3}, logY)},
                      {"g", tensor(f64, {2, 3}, g)}},
                     R"(
  %s = train.softmax_backward %g, %y {dim = 1 : i64} : tensor<2x3xf64>, tensor<2x3xf64> -> tensor<2x3xf64>
  %l = train.log_softmax_backward %g, %logy {dim = 1 : i64} : tensor<2x3xf64>, tensor<2x3xf64> -> tensor<2x3xf64>)",
                     {{"%s", "tensor<2x3xf64>"}, {"%l", "tensor<2x3xf64>"}});
  ASSERT_EQ(results.size(), 2u);
  // Rows: sum(g * y) = 0.2 - 0.6 + 0.25 = -0.15 and 0.3 - 0.8 = -0.5;
  // sum(g) = -0.5 and 2.
  std::vector<double> dots = {-0.15, -0.5}, sums = {-0.5, 2};
  SmallVector<double> softmaxGrad, logSoftmaxGrad;
  for (int i = 0; i < 6; ++i) {
    softmaxGrad.push_back(y[i] * (g[i] - dots[i / 3]));
    logSoftmaxGrad.push_back(g[i] - y[i] * sums[i / 3]);
  }
  expectTensor(results[0], f64, {2, 3}, softmaxGrad, 1e-12);
  expectTensor(results[1], f64, {2, 3}, logSoftmaxGrad, 1e-12);
}

//===----------------------------------------------------------------------===//
// Matrix products and norms
//===----------------------------------------------------------------------===//

TEST_F(InterpreterTest, MatrixProducts) {
  auto results =
      run({{"a", tensor(f32, {2, 3}, {1, 2, 3, 4, 5, 6})},
           {"b", tensor(f32, {3, 2}, {7, 8, 9, 10, 11, 12})},
           {"bias", tensor(f32, {2}, {1, -1})},
           {"ba", tensor(f32, {2, 2, 3}, {1, 2, 3, 4, 5, 6, 1, 0, 0, 0, 1, 0})},
           {"bb", tensor(f32, {2, 3, 2},
                         {7, 8, 9, 10, 11, 12, 7, 8, 9, 10, 11, 12})}},
          R"(
  %mm = train.mm %a, %b : tensor<2x3xf32>, tensor<3x2xf32> -> tensor<2x2xf32>
  %addmm = train.addmm %bias, %a, %b {alpha = 5.000000e-01 : f64, beta = 2.000000e+00 : f64} : tensor<2xf32>, tensor<2x3xf32>, tensor<3x2xf32> -> tensor<2x2xf32>
  %plain = train.addmm %bias, %a, %b : tensor<2xf32>, tensor<2x3xf32>, tensor<3x2xf32> -> tensor<2x2xf32>
  %bmm = train.bmm %ba, %bb : tensor<2x2x3xf32>, tensor<2x3x2xf32> -> tensor<2x2x2xf32>)",
          {{"%mm", "tensor<2x2xf32>"},
           {"%addmm", "tensor<2x2xf32>"},
           {"%plain", "tensor<2x2xf32>"},
           {"%bmm", "tensor<2x2x2xf32>"}});
  ASSERT_EQ(results.size(), 4u);
  expectTensor(results[0], f32, {2, 2}, {58, 64, 139, 154});
  expectTensor(results[1], f32, {2, 2}, {31, 30, 71.5, 75});
  expectTensor(results[2], f32, {2, 2}, {59, 63, 140, 153});
  expectTensor(results[3], f32, {2, 2, 2}, {58, 64, 139, 154, 7, 8, 9, 10});
}

// [1, 2^-8, 2^-8] . [1, 1, 1] = 1 + 2^-7 exactly: a bf16 product
// accumulates at full precision and rounds once (rounding after each
// addition would give 1).
TEST_F(InterpreterTest, Bf16MatmulRoundsOnce) {
  auto results = run(
      {{"a", tensor(bf16, {1, 3}, {1, 0.00390625, 0.00390625})},
       {"b", tensor(bf16, {3, 1}, {1, 1, 1})}},
      R"(%r = train.mm %a, %b : tensor<1x3xbf16>, tensor<3x1xbf16> -> tensor<1x1xbf16>)",
      {{"%r", "tensor<1x1xbf16>"}});
  ASSERT_EQ(results.size(), 1u);
  expectTensor(results[0], bf16, {1, 1}, {1.0078125});
}

/// Central finite differences of `loss` at `point`.
static std::vector<double>
finiteDifferences(const std::function<double(ArrayRef<double>)> &loss,
                  ArrayRef<double> point, double step = 1e-6) {
  std::vector<double> gradient;
  std::vector<double> shifted(point.begin(), point.end());
  for (size_t i = 0; i < point.size(); ++i) {
    shifted[i] = point[i] + step;
    double up = loss(shifted);
    shifted[i] = point[i] - step;
    double down = loss(shifted);
    shifted[i] = point[i];
    gradient.push_back((up - down) / (2 * step));
  }
  return gradient;
}

static double dot(ArrayRef<double> lhs, ArrayRef<double> rhs) {
  double total = 0;
  for (auto [l, r] : llvm::zip(lhs, rhs))
    total += l * r;
  return total;
}

// Row [1, 2, 3, 4]: mean 2.5, biased variance 1.25. A constant row has
// variance 0, so it normalises to 0 and the result is the bias.
TEST_F(InterpreterTest, LayerNormForwardIsClosedForm) {
  std::vector<double> x = {1, 2, 3, 4, 2, 2, 2, 2};
  std::vector<double> w = {1, 2, 1, 2}, b = {0, 0, 1, 1};
  auto results = run({{"x", tensor(f32, {2, 4}, x)},
                      {"w", tensor(f32, {4}, w)},
                      {"b", tensor(f32, {4}, b)}},
                     R"(
  %y, %mean, %rstd = train.layer_norm %x weight %w : tensor<4xf32> bias %b : tensor<4xf32> {normalized_rank = 1 : i64, eps = 1.000000e-05 : f64} : tensor<2x4xf32> -> tensor<2x4xf32>, tensor<2x1xf32>, tensor<2x1xf32>
  %plain, %m2, %r2 = train.layer_norm %x {normalized_rank = 2 : i64, eps = 0.0 : f64} : tensor<2x4xf32> -> tensor<2x4xf32>, tensor<1x1xf32>, tensor<1x1xf32>)",
                     {{"%y", "tensor<2x4xf32>"},
                      {"%mean", "tensor<2x1xf32>"},
                      {"%rstd", "tensor<2x1xf32>"},
                      {"%plain", "tensor<2x4xf32>"}});
  ASSERT_EQ(results.size(), 4u);
  double rstd0 = 1 / std::sqrt(1.25 + 1e-5), rstd1 = 1 / std::sqrt(1e-5);
  SmallVector<double> expected;
  for (int j = 0; j < 4; ++j)
    expected.push_back((x[j] - 2.5) * rstd0 * w[j] + b[j]);
  for (int j = 0; j < 4; ++j)
    expected.push_back(b[j]);
  expectTensor(results[0], f32, {2, 4}, expected, 1e-6);
  expectTensor(results[1], f32, {2, 1}, {2.5, 2}, 1e-7);
  expectTensor(results[2], f32, {2, 1}, {rstd0, rstd1}, 1e-6);
  // Over both dimensions: mean 18 / 8 = 2.25, E[x^2] = (30 + 16) / 8 = 5.75,
  // biased variance 5.75 - 2.25^2.
  double var = 5.75 - 2.25 * 2.25;
  SmallVector<double> whole;
  for (double value : x)
    whole.push_back((value - 2.25) / std::sqrt(var));
  expectTensor(results[3], f32, {2, 4}, whole, 1e-6);
}

// layer_norm_backward against finite differences of L = sum(g * y) through
// layer_norm, in fp64.
TEST_F(InterpreterTest, LayerNormBackwardMatchesFiniteDifferences) {
  std::vector<double> x = {0.5, -1, 2, 0.25, 1.5, 3, -2, 0.75};
  std::vector<double> w = {1.5, -0.5, 2, 1}, b = {0.1, 0.2, -0.3, 0.4};
  std::vector<double> g = {1, -2, 0.5, 3, -1, 0.25, 2, -0.5};
  const char *forward = R"(
  %y, %mean, %rstd = train.layer_norm %x weight %w : tensor<4xf64> bias %b : tensor<4xf64> {normalized_rank = 1 : i64, eps = 1.000000e-05 : f64} : tensor<2x4xf64> -> tensor<2x4xf64>, tensor<2x1xf64>, tensor<2x1xf64>)";
  auto loss = [&](ArrayRef<double> xs, ArrayRef<double> ws,
                  ArrayRef<double> bs) {
    auto results = run({{"x", tensor(f64, {2, 4}, xs)},
                        {"w", tensor(f64, {4}, ws)},
                        {"b", tensor(f64, {4}, bs)}},
                       forward, {{"%y", "tensor<2x4xf64>"}});
    return results.empty() ? kNaN : dot(results[0].getFloats(), g);
  };
  auto results = run({{"x", tensor(f64, {2, 4}, x)},
                      {"w", tensor(f64, {4}, w)},
                      {"b", tensor(f64, {4}, b)},
                      {"g", tensor(f64, {2, 4}, g)}},
                     std::string(forward) + R"(
  %gx, %gw, %gb = train.layer_norm_backward %g, %x, %mean, %rstd weight %w : tensor<4xf64> bias %b : tensor<4xf64> {normalized_rank = 1 : i64} : tensor<2x4xf64>, tensor<2x4xf64>, tensor<2x1xf64>, tensor<2x1xf64> -> tensor<2x4xf64>, tensor<4xf64>, tensor<4xf64>)",
                     {{"%gx", "tensor<2x4xf64>"},
                      {"%gw", "tensor<4xf64>"},
                      {"%gb", "tensor<4xf64>"}});
  ASSERT_EQ(results.size(), 3u);
  expectTensor(
      results[0], f64, {2, 4},
      finiteDifferences([&](ArrayRef<double> xs) { return loss(xs, w, b); }, x),
      1e-6);
  expectTensor(
      results[1], f64, {4},
      finiteDifferences([&](ArrayRef<double> ws) { return loss(x, ws, b); }, w),
      1e-6);
  expectTensor(
      results[2], f64, {4},
      finiteDifferences([&](ArrayRef<double> bs) { return loss(x, w, bs); }, b),
      1e-6);
}

// Row [1, 2, 3, 4]: mean of squares 7.5. Without eps torch uses the machine
// epsilon of the compute type (fp32 for fp32, bf16 and fp16 inputs), which
// a zero row exposes: rstd = 1 / sqrt(2^-23).
TEST_F(InterpreterTest, RmsNormForwardIsClosedForm) {
  std::vector<double> x = {1, 2, 3, 4, 0, 0, 0, 0};
  std::vector<double> w = {1, 2, 0.5, -1};
  auto results = run({{"x", tensor(f32, {2, 4}, x)},
                      {"w", tensor(f32, {4}, w)},
                      {"xb", tensor(bf16, {2, 4}, x)}},
                     R"(
  %y, %rstd = train.rms_norm %x weight %w : tensor<4xf32> {normalized_rank = 1 : i64, eps = 1.000000e-05 : f64} : tensor<2x4xf32> -> tensor<2x4xf32>, tensor<2x1xf32>
  %y2, %rstd2 = train.rms_norm %x {normalized_rank = 1 : i64} : tensor<2x4xf32> -> tensor<2x4xf32>, tensor<2x1xf32>
  %y3, %rstd3 = train.rms_norm %xb {normalized_rank = 1 : i64} : tensor<2x4xbf16> -> tensor<2x4xbf16>, tensor<2x1xf32>)",
                     {{"%y", "tensor<2x4xf32>"},
                      {"%rstd", "tensor<2x1xf32>"},
                      {"%rstd2", "tensor<2x1xf32>"},
                      {"%y3", "tensor<2x4xbf16>"},
                      {"%rstd3", "tensor<2x1xf32>"}});
  ASSERT_EQ(results.size(), 5u);
  double rstd = 1 / std::sqrt(7.5 + 1e-5);
  SmallVector<double> expected;
  for (int j = 0; j < 4; ++j)
    expected.push_back(x[j] * rstd * w[j]);
  for (int j = 0; j < 4; ++j)
    expected.push_back(0);
  expectTensor(results[0], f32, {2, 4}, expected, 1e-6);
  expectTensor(results[1], f32, {2, 1}, {rstd, 1 / std::sqrt(1e-5)}, 1e-6);
  double epsRstd = 1 / std::sqrt(std::ldexp(1.0, -23));
  expectTensor(results[2], f32, {2, 1}, {1 / std::sqrt(7.5), epsRstd}, 1e-6);
  // bf16: x * rstd rounded once to bf16; 1/sqrt(7.5) = 0.36514837...
  // -> bf16 0.365234375; 2 * 0.36514837 = 0.7302967 -> 0.73046875; ...
  expectTensor(results[3], bf16, {2, 4},
               {0.365234375, 0.73046875, 1.09375, 1.4609375, 0, 0, 0, 0});
  expectTensor(results[4], f32, {2, 1}, {1 / std::sqrt(7.5), epsRstd}, 1e-6);
}

TEST_F(InterpreterTest, RmsNormBackwardMatchesFiniteDifferences) {
  std::vector<double> x = {0.5, -1, 2, 0.25, 1.5, 3, -2, 0.75};
  std::vector<double> w = {1.5, -0.5, 2, 1};
  std::vector<double> g = {1, -2, 0.5, 3, -1, 0.25, 2, -0.5};
  const char *forward = R"(
  %y, %rstd = train.rms_norm %x weight %w : tensor<4xf64> {normalized_rank = 1 : i64, eps = 1.000000e-06 : f64} : tensor<2x4xf64> -> tensor<2x4xf64>, tensor<2x1xf64>)";
  auto loss = [&](ArrayRef<double> xs, ArrayRef<double> ws) {
    auto results =
        run({{"x", tensor(f64, {2, 4}, xs)}, {"w", tensor(f64, {4}, ws)}},
            forward, {{"%y", "tensor<2x4xf64>"}});
    return results.empty() ? kNaN : dot(results[0].getFloats(), g);
  };
  auto results = run({{"x", tensor(f64, {2, 4}, x)},
                      {"w", tensor(f64, {4}, w)},
                      {"g", tensor(f64, {2, 4}, g)}},
                     std::string(forward) + R"(
  %gx, %gw = train.rms_norm_backward %g, %x, %rstd weight %w : tensor<4xf64> {normalized_rank = 1 : i64} : tensor<2x4xf64>, tensor<2x4xf64>, tensor<2x1xf64> -> tensor<2x4xf64>, tensor<4xf64>)",
                     {{"%gx", "tensor<2x4xf64>"}, {"%gw", "tensor<4xf64>"}});
  ASSERT_EQ(results.size(), 2u);
  expectTensor(
      results[0], f64, {2, 4},
      finiteDifferences([&](ArrayRef<double> xs) { return loss(xs, w); }, x),
      1e-6);
  expectTensor(
      results[1], f64, {4},
      finiteDifferences([&](ArrayRef<double> ws) { return loss(x, ws); }, w),
      1e-6);
}

//===----------------------------------------------------------------------===//
// Shapes
//===----------------------------------------------------------------------===//

TEST_F(InterpreterTest, ViewPermuteExpandCat) {
  auto results = run(
      {{"x", tensor(f32, {2, 3}, {1, 2, 3, 4, 5, 6})},
       {"row", tensor(f32, {1, 3}, {7, 8, 9})},
       {"a", tensor(f32, {2, 1}, {1, 2})},
       {"b", tensor(bf16, {2, 2}, {3, 4, 5, 6})},
       {"t", tensor(f32, {2, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})}},
      R"(
  %v = train.view %x : tensor<2x3xf32> -> tensor<3x2xf32>
  %p = train.permute %x {dims = array<i64: 1, 0>} : tensor<2x3xf32> -> tensor<3x2xf32>
  %p3 = train.permute %t {dims = array<i64: 2, 0, 1>} : tensor<2x3x2xf32> -> tensor<2x2x3xf32>
  %e = train.expand %row : tensor<1x3xf32> -> tensor<2x2x3xf32>
  %c = train.cat %a, %b {dim = 1 : i64} : tensor<2x1xf32>, tensor<2x2xbf16> -> tensor<2x3xf32>
  %c0 = train.cat %x, %row {dim = 0 : i64} : tensor<2x3xf32>, tensor<1x3xf32> -> tensor<3x3xf32>)",
      {{"%v", "tensor<3x2xf32>"},
       {"%p", "tensor<3x2xf32>"},
       {"%p3", "tensor<2x2x3xf32>"},
       {"%e", "tensor<2x2x3xf32>"},
       {"%c", "tensor<2x3xf32>"},
       {"%c0", "tensor<3x3xf32>"}});
  ASSERT_EQ(results.size(), 6u);
  expectTensor(results[0], f32, {3, 2}, {1, 2, 3, 4, 5, 6});
  expectTensor(results[1], f32, {3, 2}, {1, 4, 2, 5, 3, 6});
  // result[k][i][j] = t[i][j][k]
  expectTensor(results[2], f32, {2, 2, 3},
               {0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11});
  expectTensor(results[3], f32, {2, 2, 3},
               {7, 8, 9, 7, 8, 9, 7, 8, 9, 7, 8, 9});
  expectTensor(results[4], f32, {2, 3}, {1, 3, 4, 2, 5, 6});
  expectTensor(results[5], f32, {3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
}

// torch's slice clamps: end = INT64_MAX means "to the end", a negative start
// counts from the end, and an end before the start selects nothing.
TEST_F(InterpreterTest, SliceClampsItsBounds) {
  auto results =
      run({{"x", tensor(f32, {2, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9})},
           {"z", tensor(f32, {2, 4}, {0, 0, 0, 0, 0, 0, 0, 0})},
           {"s", tensor(f32, {2, 2}, {1, 2, 3, 4})}},
          R"(
  %a = train.slice %x {dim = 1 : i64, start = 1 : i64, end = 9223372036854775807 : i64, step = 2 : i64} : tensor<2x5xf32> -> tensor<2x2xf32>
  %b = train.slice %x {dim = 1 : i64, start = -2 : i64, end = 9223372036854775807 : i64} : tensor<2x5xf32> -> tensor<2x2xf32>
  %c = train.slice %x {dim = 1 : i64, start = 0 : i64, end = -1 : i64} : tensor<2x5xf32> -> tensor<2x4xf32>
  %d = train.slice %x {dim = 0 : i64, start = 1 : i64, end = 0 : i64} : tensor<2x5xf32> -> tensor<0x5xf32>
  %e = train.slice %x {dim = 1 : i64, start = -100 : i64, end = 2 : i64} : tensor<2x5xf32> -> tensor<2x2xf32>
  %f = train.slice_scatter %z, %s {dim = 1 : i64, start = 1 : i64, end = 9223372036854775807 : i64, step = 2 : i64} : tensor<2x4xf32>, tensor<2x2xf32> -> tensor<2x4xf32>)",
          {{"%a", "tensor<2x2xf32>"},
           {"%b", "tensor<2x2xf32>"},
           {"%c", "tensor<2x4xf32>"},
           {"%d", "tensor<0x5xf32>"},
           {"%e", "tensor<2x2xf32>"},
           {"%f", "tensor<2x4xf32>"}});
  ASSERT_EQ(results.size(), 6u);
  expectTensor(results[0], f32, {2, 2}, {1, 3, 6, 8});
  expectTensor(results[1], f32, {2, 2}, {3, 4, 8, 9});
  expectTensor(results[2], f32, {2, 4}, {0, 1, 2, 3, 5, 6, 7, 8});
  expectTensor(results[3], f32, {0, 5}, {});
  expectTensor(results[4], f32, {2, 2}, {0, 1, 5, 6});
  expectTensor(results[5], f32, {2, 4}, {0, 1, 0, 2, 0, 3, 0, 4});
}

//===----------------------------------------------------------------------===//
// Indexing
//===----------------------------------------------------------------------===//

TEST_F(InterpreterTest, EmbeddingAndItsGradient) {
  auto results = run({{"w", tensor(f32, {3, 2}, {0, 1, 10, 11, 20, 21})},
                      {"i", tensor(i64, {2, 2}, {2, 0, 1, 2})},
                      {"g", tensor(f32, {3, 2}, {1, 2, 3, 4, 5, 6})},
                      {"j", tensor(i32, {3}, {1, 0, 1})}},
                     R"(
  %e = train.embedding %w, %i : tensor<3x2xf32>, tensor<2x2xi64> -> tensor<2x2x2xf32>
  %d = train.embedding_backward %g, %j {num_weights = 3 : i64, padding_idx = 0 : i64} : tensor<3x2xf32>, tensor<3xi32> -> tensor<3x2xf32>
  %n = train.embedding_backward %g, %j {num_weights = 3 : i64} : tensor<3x2xf32>, tensor<3xi32> -> tensor<3x2xf32>)",
                     {{"%e", "tensor<2x2x2xf32>"},
                      {"%d", "tensor<3x2xf32>"},
                      {"%n", "tensor<3x2xf32>"}});
  ASSERT_EQ(results.size(), 3u);
  expectTensor(results[0], f32, {2, 2, 2}, {20, 21, 0, 1, 10, 11, 20, 21});
  // Rows 0 and 2 of grad go to embedding row 1; row 0 is padding.
  expectTensor(results[1], f32, {3, 2}, {0, 0, 6, 8, 0, 0});
  expectTensor(results[2], f32, {3, 2}, {3, 4, 6, 8, 0, 0});
}

TEST_F(InterpreterTest, IndexPutAccumulatesRepeatedIndices) {
  auto results = run({{"x", tensor(f32, {4, 2}, {1, 1, 1, 1, 1, 1, 1, 1})},
                      {"i", tensor(i64, {3}, {1, 3, 1})},
                      {"neg", tensor(i64, {1}, {-1})},
                      {"v", tensor(f32, {3, 2}, {1, 2, 10, 20, 100, 200})},
                      {"row", tensor(f32, {2}, {7, 8})},
                      {"bz", tensor(bf16, {1}, {0})},
                      {"bi", tensor(i64, {3}, {0, 0, 0})},
                      {"bv", tensor(bf16, {3}, {1, 0.00390625, 0.00390625})}},
                     R"(
  %acc = train.index_put %x[%i], %v {accumulate} : tensor<4x2xf32>, tensor<3xi64>, tensor<3x2xf32> -> tensor<4x2xf32>
  %put = train.index_put %x[%i], %v : tensor<4x2xf32>, tensor<3xi64>, tensor<3x2xf32> -> tensor<4x2xf32>
  %last = train.index_put %x[%neg], %row : tensor<4x2xf32>, tensor<1xi64>, tensor<2xf32> -> tensor<4x2xf32>
  %b = train.index_put %bz[%bi], %bv {accumulate} : tensor<1xbf16>, tensor<3xi64>, tensor<3xbf16> -> tensor<1xbf16>)",
                     {{"%acc", "tensor<4x2xf32>"},
                      {"%put", "tensor<4x2xf32>"},
                      {"%last", "tensor<4x2xf32>"},
                      {"%b", "tensor<1xbf16>"}});
  ASSERT_EQ(results.size(), 4u);
  expectTensor(results[0], f32, {4, 2}, {1, 1, 102, 203, 1, 1, 11, 21});
  expectTensor(results[1], f32, {4, 2}, {1, 1, 100, 200, 1, 1, 10, 20});
  expectTensor(results[2], f32, {4, 2}, {1, 1, 1, 1, 1, 1, 7, 8});
  // In index order, rounding each addition: 1 + 2^-8 ties to 1, twice.
  expectTensor(results[3], bf16, {1}, {1});
}

TEST_F(InterpreterTest, GatherScatterAlongDim1) {
  auto results = run({{"x", tensor(f32, {2, 3}, {1, 2, 3, 4, 5, 6})},
                      {"z", tensor(f32, {2, 3}, {0, 0, 0, 0, 0, 0})},
                      {"i", tensor(i64, {2, 2}, {2, 0, 1, 1})},
                      {"s", tensor(f32, {2, 2}, {10, 20, 30, 40})},
                      {"k", tensor(i64, {2}, {2, 0})},
                      {"k0", tensor(i64, {1, 3}, {1, 0, 1})}},
                     R"(
  %g = train.gather %x, %i {dim = 1 : i64} : tensor<2x3xf32>, tensor<2x2xi64> -> tensor<2x2xf32>
  %put = train.scatter %z, %i, %s {dim = 1 : i64} : tensor<2x3xf32>, tensor<2x2xi64>, tensor<2x2xf32> -> tensor<2x3xf32>
  %add = train.scatter %z, %i, %s {dim = 1 : i64, reduce = "add"} : tensor<2x3xf32>, tensor<2x2xi64>, tensor<2x2xf32> -> tensor<2x3xf32>
  %val = train.scatter_value %z, %i {dim = 1 : i64, value = -1.0 : f64} : tensor<2x3xf32>, tensor<2x2xi64> -> tensor<2x3xf32>
  %sel = train.index_select %x, %k {dim = 1 : i64} : tensor<2x3xf32>, tensor<2xi64> -> tensor<2x2xf32>
  %g0 = train.gather %x, %k0 {dim = 0 : i64} : tensor<2x3xf32>, tensor<1x3xi64> -> tensor<1x3xf32>)",
                     {{"%g", "tensor<2x2xf32>"},
                      {"%put", "tensor<2x3xf32>"},
                      {"%add", "tensor<2x3xf32>"},
                      {"%val", "tensor<2x3xf32>"},
                      {"%sel", "tensor<2x2xf32>"},
                      {"%g0", "tensor<1x3xf32>"}});
  ASSERT_EQ(results.size(), 6u);
  // result[i][j] = x[i][index[i][j]]
  expectTensor(results[0], f32, {2, 2}, {3, 1, 5, 5});
  // Row 1 writes column 1 twice: the last write wins, or both add up.
  expectTensor(results[1], f32, {2, 3}, {20, 0, 10, 0, 40, 0});
  expectTensor(results[2], f32, {2, 3}, {20, 0, 10, 0, 70, 0});
  expectTensor(results[3], f32, {2, 3}, {-1, 0, -1, 0, -1, 0});
  expectTensor(results[4], f32, {2, 2}, {3, 1, 6, 4});
  // result[0][j] = x[index[0][j]][j]
  expectTensor(results[5], f32, {1, 3}, {4, 2, 6});
}

TEST_F(InterpreterTest, FullAndArange) {
  auto results = run({},
                     R"(
  %seven = train.full {value = 7 : i64} : tensor<2xi64>
  %tenth = train.full {value = 1.000000e-01 : f64} : tensor<2xf32>
  %ninf = train.full {value = 0xFFF0000000000000 : f64} : tensor<1xbf16>
  %yes = train.full {value = true} : tensor<1xi1>
  %quarter = train.arange {start = 0 : i64, end = 1 : i64, step = 2.500000e-01 : f64} : tensor<4xf32>
  %evens = train.arange {start = 0 : i64, end = 5 : i64, step = 2 : i64} : tensor<3xi64>
  %down = train.arange {start = 3 : i64, end = 0 : i64, step = -1 : i64} : tensor<3xf32>)",
                     {{"%seven", "tensor<2xi64>"},
                      {"%tenth", "tensor<2xf32>"},
                      {"%ninf", "tensor<1xbf16>"},
                      {"%yes", "tensor<1xi1>"},
                      {"%quarter", "tensor<4xf32>"},
                      {"%evens", "tensor<3xi64>"},
                      {"%down", "tensor<3xf32>"}});
  ASSERT_EQ(results.size(), 7u);
  expectTensor(results[0], i64, {2}, {7, 7});
  expectTensor(results[1], f32, {2},
               {static_cast<float>(0.1), static_cast<float>(0.1)});
  expectTensor(results[2], bf16, {1}, {-kInf});
  expectTensor(results[3], i1, {1}, {1});
  expectTensor(results[4], f32, {4}, {0, 0.25, 0.5, 0.75});
  expectTensor(results[5], i64, {3}, {0, 2, 4});
  expectTensor(results[6], f32, {3}, {3, 2, 1});
}

} // namespace
