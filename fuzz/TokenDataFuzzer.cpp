//===- TokenDataFuzzer.cpp - libFuzzer entry for token shards -------------===//
//
// Writes each input to a file and reads it as a run's token data would be
// (TokenBatches, --data and --val-data) in both formats, llm.c shards and
// raw uint16: the header checks, the mapping, samples crossing from one
// shard into the next, the shuffled order over several epochs, and the
// vocabulary checks with their messages. Any crash, sanitizer report or
// leak is a bug; errors are the expected outcome, and what loads must obey
// the bounds it was loaded with. Use the seeds in corpus/token_data.
//
//===----------------------------------------------------------------------===//

#include "FuzzScratch.h"

#include "mantissa/Runtime/TokenData.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace mlir::mantissa::rt;

// Small shapes, so that a short input holds several samples.
constexpr int64_t kBatch = 2, kSeqLen = 3;
// GPT-2's vocabulary for tokens, so that uint16 ids can be refused too.
constexpr int64_t kTokenVocab = 50257, kTargetVocab = int64_t(1) << 16;

/// Checks a micro-batch that loaded: in the vocabularies, and each row's
/// targets its tokens shifted by one.
void checkBatch(const std::vector<int64_t> &tokens,
                const std::vector<int64_t> &targets) {
  if (tokens.size() != size_t(kBatch * kSeqLen) ||
      targets.size() != tokens.size())
    std::abort();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= kTokenVocab || targets[i] < 0 ||
        targets[i] >= kTargetVocab)
      std::abort();
    if ((i + 1) % size_t(kSeqLen) != 0 && targets[i] != tokens[i + 1])
      std::abort();
  }
}

void readBatches(const std::string &path, const char *format,
                 std::optional<uint64_t> seed) {
  TokenBatches::Options options;
  // The file twice: the second shard's first sample starts in the first.
  options.train = {path, path};
  options.validation = {path};
  options.format = format;
  options.shuffleSeed = seed;
  options.batch = kBatch;
  options.seqLen = kSeqLen;
  options.evalBatches = 1;
  options.tokens.bound = kTokenVocab;
  options.tokens.what = "the fuzzer's token vocabulary";
  options.targets.bound = kTargetVocab;
  options.targets.what = "the fuzzer's target vocabulary";
  std::string error;
  std::unique_ptr<TokenBatches> batches = TokenBatches::open(options, error);
  if (!batches) {
    mantissa_fuzz::noteError(error);
    if (error.empty())
      std::abort();
    return;
  }
  std::vector<int64_t> tokens, targets;
  // The first micro-batches, then one many epochs later (another order).
  for (int64_t index : {0, 1, 2, 3, 100003}) {
    error.clear();
    if (batches->load(/*validation=*/false, index, tokens, targets, error))
      checkBatch(tokens, targets);
    else if (error.empty())
      std::abort();
    else
      mantissa_fuzz::noteError(error);
  }
  int64_t validation = std::min<int64_t>(batches->validationMicroBatches(), 3);
  if (validation < 1)
    std::abort(); // open checked that one evaluation batch exists
  for (int64_t index = 0; index < validation; ++index) {
    error.clear();
    if (batches->load(/*validation=*/true, index, tokens, targets, error))
      checkBatch(tokens, targets);
    else if (error.empty())
      std::abort();
    else
      mantissa_fuzz::noteError(error);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path = mantissa_fuzz::scratchDirectory() + "/tokens.bin";
  mantissa_fuzz::writeFileOrDie(path, data, size);
  readBatches(path, "llmc", uint64_t(20240520));
  readBatches(path, "raw-u16", std::nullopt);

  // The up-front validation of a whole stream, as for a small data set.
  std::string error;
  if (std::unique_ptr<TokenStream> stream =
          TokenStream::open({path}, TokenFormat::LlmC, error)) {
    if (!validateStream(*stream, kTokenVocab, "the fuzzer's vocabulary",
                        error) &&
        error.empty())
      std::abort();
  } else if (error.empty()) {
    std::abort();
  }
  return 0;
}
