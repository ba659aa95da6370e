//===- BatchSource.h - Where a step's micro-batches come from ---*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The interface of the trainer's data: a source holds samples in a global
// order (which may be shuffled per epoch and grows without bound across
// epochs, docs/data.md) and gives the step's user inputs for B consecutive
// samples of it. A training micro-batch is addressed by the global sample
// index of its first sample, which the micro-batch schedule computes
// (MicroBatchSchedule.h: global micro-batch g starts at sample g * B), so any
// (W, K) split, a resume at any world size and evaluation read the same
// samples. Anything a sample determines (the noise or dropout mask of issue
// 40's random state, keyed by the global sample index) can be derived from
// that same index.
//
// Two sources implement it: token data (TokenData.h: TokenBatches, tokens
// and targets of [B, T]) and tensor datasets (TensorDataset.h: safetensors
// files with one leading sample dimension, named after the step's inputs);
// openBatchSource (TensorDataset.h) opens the one a run's flags name.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_BATCHSOURCE_H
#define MANTISSA_RUNTIME_BATCHSOURCE_H

#include "mantissa/Runtime/SafeTensors.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

/// Which of a source's data a micro-batch is read from.
enum class DataSplit { Training, Validation };

class BatchSource {
public:
  virtual ~BatchSource() = default;

  /// B: the samples of one micro-batch.
  virtual int64_t samplesPerMicroBatch() const = 0;
  /// Tokens one micro-batch holds (0 when its inputs are not token ids).
  virtual int64_t tokensPerMicroBatch() const { return 0; }
  /// Validation micro-batches the source holds (0: no validation data).
  virtual int64_t validationMicroBatches() const = 0;

  /// The global sample index of the first sample of micro-batch `index`:
  /// the training data's global micro-batch count, or the validation data's
  /// micro-batch (whose samples are read in order).
  int64_t firstSample(int64_t index) const {
    return index * samplesPerMicroBatch();
  }

  /// Fills `inputs` with the step's user inputs for the B samples from
  /// global sample index `firstSample` of `split`: one tensor per input,
  /// named for it, with the leading sample dimension B. False with `error`
  /// (naming the file) when the data cannot be read or fails its checks.
  virtual bool loadMicroBatch(DataSplit split, int64_t firstSample,
                              std::vector<HostTensor> &inputs,
                              std::string &error) = 0;
};

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_BATCHSOURCE_H
