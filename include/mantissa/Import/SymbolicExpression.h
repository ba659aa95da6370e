//===- SymbolicExpression.h - torch.export's shape expressions -*- C++ -*-===//
//
// torch.export writes every symbolic size and scalar as a sympy expression
// over its shape symbols ("Mul(Integer(8), Symbol('s17', positive=True,
// integer=True))", sympy's srepr; older torch writes the printed form
// "8*s17"). mantissa-compile binds the batch symbol to --micro-batch and
// evaluates them into the constants of a static step.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_IMPORT_SYMBOLICEXPRESSION_H
#define MANTISSA_IMPORT_SYMBOLICEXPRESSION_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include <cstdint>
#include <map>
#include <string>

namespace mlir::mantissa::pt2 {

/// The value of an expression: an integer (also a boolean, 0 or 1) or a
/// floating-point number, as torch's SymInt, SymBool and SymFloat.
struct SymbolicNumber {
  bool isFloat = false;
  int64_t integer = 0;
  double real = 0;

  static SymbolicNumber ofInteger(int64_t value) { return {false, value, 0}; }
  static SymbolicNumber ofReal(double value) { return {true, 0, value}; }
  double toDouble() const { return isFloat ? real : double(integer); }
};

/// Evaluates `expression` with each symbol bound as `symbols` says. Accepts
/// integers, decimal numbers, symbols, + - * / // % ** and parentheses, and
/// sympy's and torch's functions: Integer, Float, Rational, Symbol, Add,
/// Mul, Pow, Max, Min, Abs, FloorDiv, CleanDiv, Mod, PythonMod, IntTrueDiv,
/// FloatTrueDiv, ToFloat, TruncToInt, FloorToInt, CeilToInt, floor,
/// ceiling, the comparisons (Eq, Ne, Lt, Le, Gt, Ge and sympy's relational
/// class names), And, Or, Not, True and False. Integer arithmetic is exact
/// and refuses overflow and division by zero. The error names the
/// expression and what in it is unsupported (an unknown function or an
/// unbound symbol).
llvm::Expected<SymbolicNumber>
evaluateSymbolicExpression(llvm::StringRef expression,
                           const std::map<std::string, int64_t> &symbols);

} // namespace mlir::mantissa::pt2

#endif // MANTISSA_IMPORT_SYMBOLICEXPRESSION_H
