//===- PrecisionReport.h - Reports of a precision plan ----------*- C++ -*-===//
//
// What `mantissa-compile --precision-report` prints: a table for people and
// JSON for tools, both from a resolved StepPlan.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_TRANSFORMS_PRECISIONREPORT_H
#define MANTISSA_TRANSFORMS_PRECISIONREPORT_H

#include "mantissa/Transforms/PrecisionSpec.h"

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace mlir::mantissa::precision {

/// Prints the plan as aligned columns (FQN, kind, shape, the four dtypes,
/// the group and the origin of each axis), then the shard groups, the totals
/// and the warnings.
void printReportTable(const StepPlan &plan, llvm::raw_ostream &os);

/// Prints the plan as JSON:
/// `{"tensors": [{"fqn", "kind", "shape", "master", "gather", "reduce",
/// "moments", "group", "decided_by": {axis: origin}}], "groups": [{"name",
/// "unit", "gather", "nested_in", "reshard_after_forward", "members"}],
/// "totals": {...}, "warnings": ["..."]}`. Buffers have null reduce,
/// moments and group.
void printReportJson(const StepPlan &plan, llvm::raw_ostream &os);

} // namespace mlir::mantissa::precision

#endif // MANTISSA_TRANSFORMS_PRECISIONREPORT_H
