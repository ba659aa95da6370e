//===- Evaluation.cpp - The validation loss during training ---------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// Evaluation.h: each rank's share of the validation micro-batches, their
// losses gathered and averaged in micro-batch order.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#include "Evaluation.h"

using namespace mlir::mantissa::rt;
using namespace mlir::mantissa::rt::detail;

bool mlir::mantissa::rt::detail::evaluateValidationLoss(
    GradientSource &source, const std::vector<GradientSource::Member> &members,
    bool ready, const MicroBatchSchedule &schedule, int64_t batches,
    Communicator &comm, RunError &errors, double &loss) {
  std::vector<double> values(size_t(batches), 0.0);
  std::vector<SumNode> parts = schedule.partition(batches);
  SumNode mine = parts[size_t(comm.rank())];
  bool ok = ready;
  std::string sourceError;
  for (int64_t m = mine.begin; ok && m < mine.end; ++m)
    ok =
        source.evaluateValidation(m, members, values[size_t(m)], sourceError) ||
        errors.fail("evaluation: " + sourceError);
  if (!comm.allAgree(ok))
    return errors.empty() ? errors.fail("another rank failed") : false;
  std::string collectiveError;
  if (!allGatherValues(comm, values, parts, collectiveError))
    return errors.fail("evaluation: " + collectiveError);
  double sum = 0;
  for (double value : values)
    sum += value;
  loss = sum / double(batches);
  return true;
}
