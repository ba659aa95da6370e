//===- SymbolicExpression.cpp - torch.export's shape expressions ----------===//
//
// A recursive-descent evaluator for the sympy expressions torch.export
// writes (SymbolicExpression.h). Function calls are evaluated as they are
// parsed; there is no expression tree, since every symbol is bound.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Import/SymbolicExpression.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/MathExtras.h"
#include <cmath>
#include <optional>
#include <vector>

using namespace mlir::mantissa::pt2;
using llvm::StringRef;

namespace {

/// A parsed argument: a number, or a quoted string (Symbol's name, Float's
/// digits).
struct Value {
  SymbolicNumber number;
  std::optional<std::string> text;
};

class Evaluator {
public:
  Evaluator(StringRef expression, const std::map<std::string, int64_t> &symbols)
      : expression(expression), symbols(symbols) {}

  llvm::Expected<SymbolicNumber> run() {
    std::optional<Value> value = parseExpression();
    skipSpace();
    if (value && pos != expression.size())
      fail("unexpected '" + expression.substr(pos, 12).str() + "'");
    if (!error.empty())
      return llvm::createStringError("expression '" + expression.str() +
                                     "': " + error);
    if (value->text)
      return llvm::createStringError("expression '" + expression.str() +
                                     "' is a string, not a number");
    return value->number;
  }

private:
  std::optional<Value> fail(const llvm::Twine &message) {
    if (error.empty())
      error = message.str();
    return std::nullopt;
  }

  void skipSpace() {
    while (pos < expression.size() && std::isspace(expression[pos]))
      ++pos;
  }

  bool consume(StringRef token) {
    skipSpace();
    if (!expression.substr(pos).starts_with(token))
      return false;
    pos += token.size();
    return true;
  }

  /// The next token is `token` and not the start of a longer one
  /// ("*" against "**", "/" against "//").
  bool consumeOperator(StringRef token, StringRef longer = "") {
    skipSpace();
    if (!longer.empty() && expression.substr(pos).starts_with(longer))
      return false;
    return consume(token);
  }

  static std::optional<Value> integer(int64_t value) {
    return Value{SymbolicNumber::ofInteger(value), std::nullopt};
  }
  static std::optional<Value> real(double value) {
    return Value{SymbolicNumber::ofReal(value), std::nullopt};
  }

  /// Checked integer arithmetic; a float on either side makes a float.
  std::optional<Value> arithmetic(char op, const Value &a, const Value &b) {
    if (a.text || b.text)
      return fail("arithmetic on a string");
    if (a.number.isFloat || b.number.isFloat || op == '/') {
      double x = a.number.toDouble(), y = b.number.toDouble();
      switch (op) {
      case '+':
        return real(x + y);
      case '-':
        return real(x - y);
      case '*':
        return real(x * y);
      case '/':
        return real(x / y);
      }
    }
    int64_t x = a.number.integer, y = b.number.integer, result = 0;
    bool overflow = false;
    switch (op) {
    case '+':
      overflow = llvm::AddOverflow(x, y, result);
      break;
    case '-':
      overflow = llvm::SubOverflow(x, y, result);
      break;
    case '*':
      overflow = llvm::MulOverflow(x, y, result);
      break;
    }
    if (overflow)
      return fail("integer overflow in " + llvm::Twine(x) + " " +
                  llvm::Twine(op) + " " + llvm::Twine(y));
    return integer(result);
  }

  /// Python's // and % (floor division, the remainder takes the divisor's
  /// sign), as torch's FloorDiv and PythonMod.
  std::optional<Value> floorDivide(const Value &a, const Value &b,
                                   bool remainder) {
    if (a.number.isFloat || b.number.isFloat) {
      double x = a.number.toDouble(), y = b.number.toDouble();
      double quotient = std::floor(x / y);
      return real(remainder ? x - quotient * y : quotient);
    }
    int64_t x = a.number.integer, y = b.number.integer;
    if (y == 0)
      return fail("division by zero");
    if (x == INT64_MIN && y == -1)
      return fail("integer overflow in " + llvm::Twine(x) + " // -1");
    int64_t quotient = x / y, rest = x % y;
    if (rest != 0 && ((rest < 0) != (y < 0))) {
      --quotient;
      rest += y;
    }
    return integer(remainder ? rest : quotient);
  }

  std::optional<Value> power(const Value &a, const Value &b) {
    if (a.number.isFloat || b.number.isFloat || b.number.integer < 0)
      return real(std::pow(a.number.toDouble(), b.number.toDouble()));
    int64_t result = 1;
    for (int64_t i = 0; i < b.number.integer; ++i)
      if (llvm::MulOverflow(result, a.number.integer, result))
        return fail("integer overflow in " + llvm::Twine(a.number.integer) +
                    " ** " + llvm::Twine(b.number.integer));
    return integer(result);
  }

  std::optional<Value> compare(StringRef op, const Value &a, const Value &b) {
    double x = a.number.toDouble(), y = b.number.toDouble();
    if (!a.number.isFloat && !b.number.isFloat) {
      int64_t i = a.number.integer, j = b.number.integer;
      return integer(llvm::StringSwitch<bool>(op)
                         .Case("==", i == j)
                         .Case("!=", i != j)
                         .Case("<", i < j)
                         .Case("<=", i <= j)
                         .Case(">", i > j)
                         .Default(i >= j));
    }
    return integer(llvm::StringSwitch<bool>(op)
                       .Case("==", x == y)
                       .Case("!=", x != y)
                       .Case("<", x < y)
                       .Case("<=", x <= y)
                       .Case(">", x > y)
                       .Default(x >= y));
  }

  /// Rounds a float to an integer (floor, ceiling, truncation); integers
  /// pass through.
  std::optional<Value> round(const Value &a, double (*rounding)(double)) {
    if (!a.number.isFloat)
      return a;
    double rounded = rounding(a.number.real);
    if (!(rounded >= -9.2e18 && rounded <= 9.2e18))
      return fail("cannot round " + std::to_string(a.number.real) +
                  " to an integer");
    return integer(int64_t(rounded));
  }

  std::optional<Value> parseExpression() {
    std::optional<Value> left = parseAdditive();
    if (!left)
      return std::nullopt;
    for (StringRef op : {"==", "!=", "<=", ">=", "<", ">"})
      if (consume(op)) {
        std::optional<Value> right = parseAdditive();
        if (!right)
          return std::nullopt;
        return compare(op, *left, *right);
      }
    return left;
  }

  std::optional<Value> parseAdditive() {
    std::optional<Value> left = parseTerm();
    while (left) {
      char op = consume("+") ? '+' : consume("-") ? '-' : 0;
      if (!op)
        break;
      std::optional<Value> right = parseTerm();
      if (!right)
        return std::nullopt;
      left = arithmetic(op, *left, *right);
    }
    return left;
  }

  std::optional<Value> parseTerm() {
    std::optional<Value> left = parseUnary();
    while (left) {
      std::optional<Value> right;
      if (consume("//")) {
        if (!(right = parseUnary()))
          return std::nullopt;
        left = floorDivide(*left, *right, /*remainder=*/false);
      } else if (consumeOperator("*", "**")) {
        if (!(right = parseUnary()))
          return std::nullopt;
        left = arithmetic('*', *left, *right);
      } else if (consume("/")) {
        if (!(right = parseUnary()))
          return std::nullopt;
        left = arithmetic('/', *left, *right);
      } else if (consume("%")) {
        if (!(right = parseUnary()))
          return std::nullopt;
        left = floorDivide(*left, *right, /*remainder=*/true);
      } else {
        break;
      }
    }
    return left;
  }

  std::optional<Value> parseUnary() {
    if (consume("-")) {
      std::optional<Value> operand = parseUnary();
      if (!operand)
        return std::nullopt;
      return arithmetic('-', *integer(0), *operand);
    }
    if (consume("+"))
      return parseUnary();
    std::optional<Value> base = parsePrimary();
    if (base && consume("**")) {
      std::optional<Value> exponent = parseUnary();
      if (!exponent)
        return std::nullopt;
      return power(*base, *exponent);
    }
    return base;
  }

  std::optional<Value> parsePrimary() {
    skipSpace();
    if (pos >= expression.size())
      return fail("unexpected end");
    char c = expression[pos];
    if (consume("(")) {
      std::optional<Value> inner = parseExpression();
      if (inner && !consume(")"))
        return fail("missing ')'");
      return inner;
    }
    if (c == '\'' || c == '"') {
      size_t end = expression.find(c, pos + 1);
      if (end == StringRef::npos)
        return fail("unterminated string");
      Value value;
      value.text = expression.slice(pos + 1, end).str();
      pos = end + 1;
      return value;
    }
    if (std::isdigit(c) || c == '.') {
      size_t end = pos;
      while (end < expression.size() &&
             (std::isalnum(expression[end]) || expression[end] == '.' ||
              ((expression[end] == '+' || expression[end] == '-') &&
               (expression[end - 1] == 'e' || expression[end - 1] == 'E'))))
        ++end;
      StringRef digits = expression.slice(pos, end);
      pos = end;
      return parseNumber(digits);
    }
    if (std::isalpha(c) || c == '_') {
      size_t end = pos;
      while (end < expression.size() &&
             (std::isalnum(expression[end]) || expression[end] == '_'))
        ++end;
      StringRef name = expression.slice(pos, end);
      pos = end;
      if (consume("("))
        return parseCall(name);
      return lookUp(name);
    }
    return fail("unexpected '" + StringRef(&c, 1) + "'");
  }

  std::optional<Value> parseNumber(StringRef digits) {
    int64_t whole = 0;
    if (!digits.getAsInteger(10, whole))
      return integer(whole);
    double value = 0;
    if (!digits.getAsDouble(value))
      return real(value);
    return fail("bad number '" + digits + "'");
  }

  std::optional<Value> lookUp(StringRef name) {
    if (name == "True" || name == "true")
      return integer(1);
    if (name == "False" || name == "false")
      return integer(0);
    if (name == "oo" || name == "int_oo")
      return fail("infinity (" + name + ") has no value in a static step");
    auto bound = symbols.find(name.str());
    if (bound == symbols.end())
      return fail("symbol '" + name + "' is not bound (mantissa binds only " +
                  "the batch size)");
    return integer(bound->second);
  }

  /// Parses `name(arguments)` after its '(' and evaluates it. Keyword
  /// arguments (Symbol's assumptions, Float's precision) are skipped.
  std::optional<Value> parseCall(StringRef name) {
    std::vector<Value> arguments;
    if (!consume(")")) {
      do {
        skipSpace();
        size_t start = pos;
        while (pos < expression.size() &&
               (std::isalnum(expression[pos]) || expression[pos] == '_'))
          ++pos;
        if (pos > start && consume("=") && !consume("=")) {
          if (!parseExpression())
            return std::nullopt;
          continue;
        }
        pos = start;
        std::optional<Value> argument = parseExpression();
        if (!argument)
          return std::nullopt;
        arguments.push_back(std::move(*argument));
      } while (consume(","));
      if (!consume(")"))
        return fail("missing ')' after the arguments of " + name);
    }
    return call(name, arguments);
  }

  std::optional<Value> call(StringRef name, std::vector<Value> &arguments) {
    auto arity = [&](size_t count) {
      if (arguments.size() == count)
        return true;
      fail(name + " takes " + llvm::Twine(count) + " arguments, not " +
           llvm::Twine(arguments.size()));
      return false;
    };
    auto numbers = [&]() {
      if (llvm::any_of(arguments, [](const Value &v) { return v.text; })) {
        fail(name + " of a string");
        return false;
      }
      return true;
    };
    if (name == "Symbol") {
      if (arguments.size() != 1 || !arguments[0].text)
        return fail("Symbol takes its name as a string");
      return lookUp(*arguments[0].text);
    }
    if (name == "Float") {
      if (!arity(1))
        return std::nullopt;
      if (arguments[0].text) {
        double value = 0;
        if (StringRef(*arguments[0].text).getAsDouble(value))
          return fail("bad Float '" + *arguments[0].text + "'");
        return real(value);
      }
      return real(arguments[0].number.toDouble());
    }
    if (!numbers())
      return std::nullopt;
    if (name == "Integer") {
      if (!arity(1) || arguments[0].number.isFloat)
        return fail("Integer takes one integer");
      return arguments[0];
    }
    if (name == "Add" || name == "Mul" || name == "Max" || name == "Min" ||
        name == "And" || name == "Or") {
      if (arguments.empty())
        return fail(name + " of nothing");
      std::optional<Value> result = arguments[0];
      for (const Value &next : llvm::drop_begin(arguments)) {
        if (name == "Add")
          result = arithmetic('+', *result, next);
        else if (name == "Mul")
          result = arithmetic('*', *result, next);
        else if (name == "And" || name == "Or") {
          bool x = result->number.toDouble() != 0,
               y = next.number.toDouble() != 0;
          result = integer(name == "And" ? x && y : x || y);
        } else {
          bool less = compare("<", next, *result)->number.integer;
          if ((name == "Max") != less)
            result = next;
        }
        if (!result)
          return std::nullopt;
      }
      return result;
    }
    if (name == "Not") {
      if (!arity(1))
        return std::nullopt;
      return integer(arguments[0].number.toDouble() == 0);
    }
    if (name == "Abs") {
      if (!arity(1))
        return std::nullopt;
      if (arguments[0].number.isFloat)
        return real(std::fabs(arguments[0].number.real));
      if (arguments[0].number.integer < 0)
        return arithmetic('-', *integer(0), arguments[0]);
      return arguments[0];
    }
    if (name == "ToFloat" || name == "TruncToFloat") {
      if (!arity(1))
        return std::nullopt;
      double value = arguments[0].number.toDouble();
      return real(name == "ToFloat" ? value : std::trunc(value));
    }
    if (name == "TruncToInt" || name == "FloorToInt" || name == "floor" ||
        name == "CeilToInt" || name == "ceiling") {
      if (!arity(1))
        return std::nullopt;
      double (*rounding)(double) =
          name == "TruncToInt" ? static_cast<double (*)(double)>(std::trunc)
          : (name == "CeilToInt" || name == "ceiling")
              ? static_cast<double (*)(double)>(std::ceil)
              : static_cast<double (*)(double)>(std::floor);
      return round(arguments[0], rounding);
    }
    if (name == "Rational" || name == "IntTrueDiv" || name == "FloatTrueDiv") {
      if (!arity(2))
        return std::nullopt;
      return real(arguments[0].number.toDouble() /
                  arguments[1].number.toDouble());
    }
    if (name == "Pow" || name == "PowByNatural" || name == "FloatPow") {
      if (!arity(2))
        return std::nullopt;
      return power(arguments[0], arguments[1]);
    }
    if (name == "FloorDiv" || name == "Mod" || name == "PythonMod") {
      if (!arity(2))
        return std::nullopt;
      return floorDivide(arguments[0], arguments[1], name != "FloorDiv");
    }
    if (name == "CleanDiv") {
      if (!arity(2))
        return std::nullopt;
      std::optional<Value> rest =
          floorDivide(arguments[0], arguments[1], /*remainder=*/true);
      if (rest && rest->number.toDouble() != 0)
        return fail("CleanDiv of " + llvm::Twine(arguments[0].number.integer) +
                    " by " + llvm::Twine(arguments[1].number.integer) +
                    " leaves a remainder");
      return floorDivide(arguments[0], arguments[1], /*remainder=*/false);
    }
    std::optional<StringRef> relation =
        llvm::StringSwitch<std::optional<StringRef>>(name)
            .Cases("Eq", "Equality", StringRef("=="))
            .Cases("Ne", "Unequality", StringRef("!="))
            .Cases("Lt", "StrictLessThan", StringRef("<"))
            .Cases("Le", "LessThan", StringRef("<="))
            .Cases("Gt", "StrictGreaterThan", StringRef(">"))
            .Cases("Ge", "GreaterThan", StringRef(">="))
            .Default(std::nullopt);
    if (relation) {
      if (!arity(2))
        return std::nullopt;
      return compare(*relation, arguments[0], arguments[1]);
    }
    return fail("unsupported function '" + name + "'");
  }

  StringRef expression;
  const std::map<std::string, int64_t> &symbols;
  size_t pos = 0;
  std::string error;
};

} // namespace

llvm::Expected<SymbolicNumber> mlir::mantissa::pt2::evaluateSymbolicExpression(
    StringRef expression, const std::map<std::string, int64_t> &symbols) {
  return Evaluator(expression, symbols).run();
}
