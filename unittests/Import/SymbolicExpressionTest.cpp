//===- SymbolicExpressionTest.cpp - torch.export's shape expressions ------===//

#include "mantissa/Import/SymbolicExpression.h"

#include "gtest/gtest.h"

using namespace mlir::mantissa::pt2;

namespace {

const std::map<std::string, int64_t> kBatch = {{"s17", 6}};

int64_t integerOf(llvm::StringRef expression,
                  const std::map<std::string, int64_t> &symbols = kBatch) {
  llvm::Expected<SymbolicNumber> value =
      evaluateSymbolicExpression(expression, symbols);
  EXPECT_TRUE(bool(value)) << (value ? "" : llvm::toString(value.takeError()));
  if (!value)
    return -12345;
  EXPECT_FALSE(value->isFloat) << expression.str();
  return value->integer;
}

double realOf(llvm::StringRef expression) {
  llvm::Expected<SymbolicNumber> value =
      evaluateSymbolicExpression(expression, kBatch);
  EXPECT_TRUE(bool(value)) << (value ? "" : llvm::toString(value.takeError()));
  if (!value)
    return -12345;
  EXPECT_TRUE(value->isFloat) << expression.str();
  return value->real;
}

std::string errorOf(llvm::StringRef expression) {
  llvm::Expected<SymbolicNumber> value =
      evaluateSymbolicExpression(expression, kBatch);
  if (value)
    return "no error";
  return llvm::toString(value.takeError());
}

/// What torch 2.11 writes (sympy's srepr), from the MLP and LM fixtures.
TEST(SymbolicExpressionTest, TorchSrepr) {
  EXPECT_EQ(integerOf("Symbol('s17', positive=True, integer=True)"), 6);
  EXPECT_EQ(
      integerOf("Mul(Integer(8), Symbol('s17', positive=True, integer=True))"),
      48);
  EXPECT_EQ(realOf("ToFloat(Mul(Integer(8), Symbol('s17', positive=True, "
                   "integer=True)))"),
            48.0);
  EXPECT_DOUBLE_EQ(realOf("FloatTrueDiv(Float('2.0', precision=53), "
                          "ToFloat(Mul(Integer(8), Symbol('s17', "
                          "positive=True, integer=True))))"),
                   2.0 / 48.0);
  EXPECT_EQ(integerOf("Add(Integer(-1), Mul(Integer(6), Symbol('s17')))"), 35);
  EXPECT_EQ(integerOf("Max(Integer(1), Symbol('s17'))"), 6);
  EXPECT_EQ(integerOf("Min(Integer(4), Symbol('s17'))"), 4);
  EXPECT_EQ(integerOf("FloorDiv(Symbol('s17'), Integer(4))"), 1);
  EXPECT_EQ(integerOf("PythonMod(Symbol('s17'), Integer(4))"), 2);
  EXPECT_EQ(integerOf("CleanDiv(Symbol('s17'), Integer(3))"), 2);
  EXPECT_EQ(integerOf("Pow(Symbol('s17'), Integer(2))"), 36);
  EXPECT_EQ(integerOf("CeilToInt(IntTrueDiv(Symbol('s17'), Integer(4)))"), 2);
  EXPECT_EQ(integerOf("Eq(PythonMod(Symbol('s17'), Integer(2)), Integer(0))"),
            1);
  EXPECT_EQ(integerOf("StrictLessThan(Symbol('s17'), Integer(6))"), 0);
}

/// The printed form older torch writes, with Python's operators.
TEST(SymbolicExpressionTest, PrintedForm) {
  EXPECT_EQ(integerOf("8*s17"), 48);
  EXPECT_EQ(integerOf("s17 + 2*(s17 - 1)"), 16);
  EXPECT_EQ(integerOf("s17**2 // 5"), 7);
  EXPECT_EQ(integerOf("-7 // 2"), -4);
  EXPECT_EQ(integerOf("-7 % 3"), 2);
  EXPECT_EQ(integerOf("7 % -3"), -2);
  EXPECT_EQ(integerOf("2**3**2"), 512);
  EXPECT_EQ(integerOf("Max(s17, 10) - Min(s17, 10)"), 4);
  EXPECT_EQ(integerOf("floor(s17/4) + ceiling(s17/4)"), 3);
  EXPECT_DOUBLE_EQ(realOf("2.0/(8*s17)"), 2.0 / 48.0);
  EXPECT_DOUBLE_EQ(realOf("1.5e2 + s17"), 156.0);
}

TEST(SymbolicExpressionTest, Errors) {
  EXPECT_NE(errorOf("Symbol('s3', positive=True, integer=True)")
                .find("symbol 's3' is not bound"),
            std::string::npos);
  EXPECT_NE(errorOf("Foo(s17)").find("unsupported function 'Foo'"),
            std::string::npos);
  EXPECT_NE(errorOf("s17 // 0").find("division by zero"), std::string::npos);
  EXPECT_NE(errorOf("Mul(Integer(9223372036854775807), s17)")
                .find("integer overflow"),
            std::string::npos);
  EXPECT_NE(errorOf("(s17 + 1").find("missing ')'"), std::string::npos);
  EXPECT_NE(errorOf("s17 s17").find("unexpected"), std::string::npos);
  EXPECT_NE(errorOf("CleanDiv(s17, 4)").find("leaves a remainder"),
            std::string::npos);
  // The error names the expression.
  EXPECT_NE(errorOf("Foo(s17)").find("expression 'Foo(s17)'"),
            std::string::npos);
}

} // namespace
