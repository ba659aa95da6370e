//===- TensorDataset.h - Safetensors files as a step's samples --*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// A tensor dataset (`--dataset`, `--val-dataset`; docs/data.md): safetensors
// files whose tensors all have a leading sample dimension and are named
// after the step's user inputs, so that any objective trains from data, not
// only a language model from token ids. Sample s of the dataset is row s of
// every tensor; micro-batch g is the B samples from global sample index
// g * B of the same order token data uses (TokenData.h's SampleOrder:
// epochs, --shuffle), so (W, K) splits, resumes and evaluation behave as
// they do with token data.
//
// Files are memory-mapped read-only and checked against the step before it
// is compiled: names, dtypes, per-sample shapes, sample counts, and the ids
// of integer inputs that index a table (IndexBound.h). Every message names
// the file and the tensor.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_TENSORDATASET_H
#define MANTISSA_RUNTIME_TENSORDATASET_H

#include "mantissa/Format/StepTensor.h"
#include "mantissa/Runtime/BatchSource.h"
#include "mantissa/Runtime/TokenData.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

/// The files of one dataset (the training or the validation data) as named
/// columns of N samples each. Files holding the same tensor names form a
/// group and concatenate along the sample dimension in the order given; a
/// dataset may hold several groups (e.g. latents in one file, labels in
/// another, or HF's sharded layout, where an index JSON's `weight_map`
/// sends each tensor to its file), which must then hold the same N. Not
/// copyable: it owns the mappings.
class TensorColumns {
public:
  /// One tensor name's samples over the files that hold it.
  struct Column {
    std::string name;
    DType dtype = DType::F32;
    /// The shape of one sample (the tensor's shape less its first
    /// dimension).
    std::vector<int64_t> sampleShape;
    int64_t sampleBytes = 0;
    /// The files holding it: the global index of each file's first sample,
    /// ascending, and where its data starts in the mapping.
    struct Piece {
      int64_t firstSample = 0, samples = 0;
      const uint8_t *data = nullptr;
      const std::string *path = nullptr;
    };
    std::vector<Piece> pieces;
    /// The piece holding sample `sample` (0 <= sample < the dataset's N).
    const Piece &pieceOf(int64_t sample) const;
  };

  /// Maps and checks `paths` (safetensors files, or index JSON files whose
  /// `weight_map` names the shards beside them). `flag` (e.g. "--dataset")
  /// starts every message. Null with `error` on failure.
  static std::unique_ptr<TensorColumns>
  open(const std::vector<std::string> &paths, const std::string &flag,
       std::string &error);

  ~TensorColumns();
  TensorColumns(const TensorColumns &) = delete;
  TensorColumns &operator=(const TensorColumns &) = delete;

  /// N: the samples every column holds (at least 1).
  int64_t numSamples() const { return samples; }
  /// The column called `name`, or null.
  const Column *find(const std::string &name) const;
  const std::vector<Column> &columns() const { return columnList; }
  /// The safetensors files, in the order they were given (index files
  /// expanded to their shards).
  const std::vector<std::string> &files() const { return filePaths; }

private:
  struct Mapping;
  TensorColumns() = default;

  std::vector<std::string> filePaths;
  std::vector<Mapping> mappings;
  std::vector<Column> columnList;
  int64_t samples = 0;
};

/// A run's tensor dataset as a batch source (BatchSource.h) for a step
/// whose user inputs all have the leading batch dimension B: the micro-batch
/// of global sample index g holds, for each user input, the rows of samples
/// order(g), ..., order(g + B - 1) (shuffled as --shuffle says, TokenData.h);
/// validation micro-batch m holds samples [m * B, (m + 1) * B) in order.
class TensorDataset : public BatchSource {
public:
  struct Options {
    std::vector<std::string> train, validation;
    std::optional<uint64_t> shuffleSeed;
    /// `--dataset-map INPUT=TENSOR,...`: the tensor that fills a user input
    /// whose name differs from it.
    std::map<std::string, std::string> tensorOfInput;
    /// Validation micro-batches the run evaluates (checked to exist).
    int64_t evalBatches = 0;
    /// User inputs the step fills itself, which the dataset neither needs nor
    /// gives (the hook for issue 40's random state, item 2: noise or
    /// timesteps made from the run's seed and the global sample index).
    /// loadMicroBatch leaves them out of its tensors; whoever binds the step's
    /// inputs fills them.
    std::set<std::string> generatedInputs;
  };

  /// Opens the files and checks them against `arguments` (the step's
  /// signature; its user inputs are what the dataset must give): every user
  /// input not in `generatedInputs` has a tensor of its name (or the one
  /// `tensorOfInput` names) of its dtype (I32 and I64 ids convert to each
  /// other) whose samples have the input's shape less its first dimension;
  /// every tensor fills an input; every integer id that indexes a table
  /// lies in its bound and every id fits the input's type. Null with `error`
  /// naming the flag, the file, the tensor and what differs.
  static std::unique_ptr<TensorDataset>
  open(const std::vector<StepTensor> &arguments, const Options &options,
       std::string &error);

  int64_t samplesPerMicroBatch() const override { return batch; }
  int64_t validationMicroBatches() const override;
  /// One tensor per provided user input, named for it, of its dtype and its
  /// shape [B, ...].
  bool loadMicroBatch(DataSplit split, int64_t firstSample,
                      std::vector<HostTensor> &inputs,
                      std::string &error) override;

  /// The training (or validation) data's columns.
  const TensorColumns &columns(DataSplit split) const {
    return split == DataSplit::Validation ? *validation : *train;
  }

private:
  /// A user input the dataset fills, and the column it reads.
  struct Binding {
    StepTensor input;
    std::string tensor;
  };
  TensorDataset() = default;

  int64_t batch = 0;
  std::vector<Binding> bindings;
  std::unique_ptr<TensorColumns> train, validation;
  std::unique_ptr<SampleOrder> order;
};

/// The batch source of a run over a step with `arguments`: token data for
/// --data (CpuStepGradients::openTokenData's rules), a tensor dataset for
/// --dataset, null with `error` when the data does not fit the step.
std::unique_ptr<BatchSource>
openBatchSource(const std::vector<StepTensor> &arguments,
                const struct TrainerOptions &options, std::string &error);

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_TENSORDATASET_H
