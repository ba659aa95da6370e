//===- RandomDraws.h - A random step argument's draw in IR ------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// A `random` argument of a train.step (a random operator's draw, which the
// runtime fills before each micro-batch: mantissa/Format/RandomDraw.h,
// docs/randomness.md) says what it draws in its `train.random` argument
// attribute, a dictionary {distribution = "normal", low = 0.0, high = 1.0,
// node = "randn_like", per_sample = true}. This is the one converter between
// that attribute and the runtime's RandomDraw.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DIALECT_TRAIN_IR_RANDOMDRAWS_H
#define MANTISSA_DIALECT_TRAIN_IR_RANDOMDRAWS_H

#include "mantissa/Format/RandomDraw.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace mlir::mantissa::train {

class StepOp;

/// The argument attribute's name.
inline constexpr llvm::StringLiteral kRandomDrawAttrName = "train.random";

/// `draw` as the argument attribute.
DictionaryAttr getRandomDrawAttr(MLIRContext *context,
                                 const rt::RandomDraw &draw);

/// The draw of argument `index` of `step`, or none (with `error` saying why)
/// when the argument has no well-formed `train.random` attribute.
std::optional<rt::RandomDraw> getRandomDraw(StepOp step, unsigned index,
                                            std::string &error);

} // namespace mlir::mantissa::train

#endif // MANTISSA_DIALECT_TRAIN_IR_RANDOMDRAWS_H
