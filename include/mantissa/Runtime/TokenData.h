//===- TokenData.h - Token shards, samples and their order ------*- C++ -*-===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// The trainer's token data: one or more token files (llm.c shards or
// nanoGPT's headerless uint16 .bin files) form one stream, the stream is cut
// into fixed-length samples, and a global sample index (which grows without
// bound across epochs) is mapped to a sample, optionally through a seeded
// per-epoch permutation. docs/data.md defines all of it exactly.
//
// Files are memory-mapped read-only, so a shard of many gigabytes costs
// address space, not memory, and only the pages a batch touches are read.
// Token files come from outside: every header field is checked against the
// file, and token ids are checked against the model's vocabularies before
// they reach an embedding or a loss. Errors are returned as messages naming
// the file (and, for a bad token, its byte offset); no exception escapes.
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_RUNTIME_TOKENDATA_H
#define MANTISSA_RUNTIME_TOKENDATA_H

#include "mantissa/Format/DType.h"
#include "mantissa/Format/IndexBound.h"
#include "mantissa/Runtime/BatchSource.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlir::mantissa::rt {

/// How the tokens of a file are stored.
enum class TokenFormat {
  /// llm.c's shard: a 1024-byte header of 256 little-endian int32 (magic
  /// 20240520 for uint16 tokens or 20240801 for uint32 tokens, version 1,
  /// token count), then the tokens.
  LlmC,
  /// nanoGPT's headerless little-endian uint16 tokens.
  RawU16,
};

/// Parses "llmc" or "raw-u16" (the command-line spelling); false with an
/// error listing the accepted names otherwise.
bool parseTokenFormat(const std::string &text, TokenFormat &out,
                      std::string &error);

/// The command-line spelling of `format` ("llmc" or "raw-u16").
const char *tokenFormatName(TokenFormat format);

/// Where a stream position lives, for messages.
struct TokenLocation {
  /// The file holding the token (owned by the stream).
  const std::string *path = nullptr;
  /// Byte offset of the token in that file (past the header for llm.c).
  int64_t byteOffset = 0;
  /// Index of the token among the file's tokens, from 0.
  int64_t indexInFile = 0;
};

/// The concatenation of token files, in the order given, as one read-only
/// stream of token ids. Not copyable: it owns the mappings, which the
/// destructor unmaps. All accessors are const and safe to call concurrently.
class TokenStream {
public:
  /// Maps and validates every file in `paths` (all in `format`). On failure
  /// returns nullptr and sets `error` to a message that starts with the
  /// offending file's path.
  static std::unique_ptr<TokenStream>
  open(const std::vector<std::string> &paths, TokenFormat format,
       std::string &error);

  ~TokenStream();
  TokenStream(const TokenStream &) = delete;
  TokenStream &operator=(const TokenStream &) = delete;

  /// Total number of tokens over all files (at least 1 per file).
  int64_t numTokens() const { return totalTokens; }

  /// The token at `position` of the concatenated stream; requires
  /// 0 <= position < numTokens().
  uint32_t token(int64_t position) const;

  /// Copies tokens [first, first + count) into `out`; requires the range to
  /// lie within [0, numTokens()). A range may span several files. This is
  /// the fast path: the file is looked up once per file crossed, not once
  /// per token.
  void read(int64_t first, int64_t count, uint32_t *out) const;

  /// The file and offset of stream position `position` (same requirement as
  /// token()).
  TokenLocation locate(int64_t position) const;

  /// The files, in stream order.
  const std::vector<std::string> &paths() const { return filePaths; }

  TokenFormat format() const { return tokenFormat; }

private:
  struct Shard;
  TokenStream();
  /// The index of the shard holding `position`.
  size_t shardOf(int64_t position) const;

  TokenFormat tokenFormat = TokenFormat::LlmC;
  std::vector<std::string> filePaths;
  std::vector<Shard> shards;
  int64_t totalTokens = 0;
};

/// The number of samples of sequence length `seqLen` in `stream`:
/// S = floor((numTokens - 1) / seqLen), since sample s is the window of
/// seqLen + 1 tokens starting at position s * seqLen. False with an error
/// when seqLen < 1 or S == 0 (the stream is shorter than one window).
bool countSamples(const TokenStream &stream, int64_t seqLen,
                  int64_t &numSamples, std::string &error);

/// SplitMix64 (Steele, Lea and Flood, 2014): the generator of the shuffle,
/// chosen because it is a few lines in any language, so that the order can
/// be reproduced outside the runtime (docs/data.md has a Python version).
class SplitMix64 {
public:
  explicit SplitMix64(uint64_t state) : state(state) {}
  uint64_t next() {
    state += 0x9E3779B97F4A7C15ULL;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

private:
  uint64_t state;
};

/// Maps a global sample index g >= 0 to a sample in [0, numSamples): epoch
/// e = g / S, position p = g % S. Without a seed the sample is p; with one,
/// it is perm_e[p], where perm_e is the Fisher-Yates shuffle of [0, S) driven
/// by SplitMix64(seed ^ (e * 0xD1B54A32D192ED03)) (docs/data.md). The order
/// therefore depends only on (S, seed, g), so a resumed or re-sharded run
/// sees exactly the samples an uninterrupted one would.
///
/// The current epoch's permutation is cached (4 bytes per sample while S <=
/// 2^32, 8 beyond), and rebuilt in O(S) when g enters another epoch. Not
/// safe to use from several threads at once.
class SampleOrder {
public:
  /// Requires numSamples >= 1 (countSamples guarantees it).
  SampleOrder(int64_t numSamples, std::optional<uint64_t> seed);

  /// The sample at global index `globalIndex` (requires globalIndex >= 0).
  int64_t sample(int64_t globalIndex);

  int64_t numSamples() const { return count; }
  const std::optional<uint64_t> &seed() const { return shuffleSeed; }

  /// The initial SplitMix64 state of epoch `epoch` for `seed`.
  static uint64_t epochState(uint64_t seed, uint64_t epoch) {
    return seed ^ (epoch * 0xD1B54A32D192ED03ULL);
  }

private:
  void buildEpoch(int64_t epoch);

  int64_t count;
  std::optional<uint64_t> shuffleSeed;
  /// The epoch whose permutation is cached, or -1.
  int64_t cachedEpoch = -1;
  /// Exactly one of these holds the permutation: the narrow one while the
  /// sample ids fit in 32 bits, which halves the memory of large streams.
  std::vector<uint32_t> permutation32;
  std::vector<int64_t> permutation64;
};

/// Fills tokens[b * seqLen + t] and targets[b * seqLen + t] (t < seqLen) for
/// the `batch` samples at global indices [firstGlobal, firstGlobal + batch):
/// with w the window of sample order.sample(firstGlobal + b), tokens are
/// w[0:seqLen] and targets are w[1:seqLen + 1].
///
/// Every token id must be < tokenVocab and every target id < targetVocab,
/// since an out-of-range id would index past an embedding table or a loss's
/// classes on the device; otherwise returns false with an error such as
///   FILE: token 70000 at byte offset 2048 (token 256 of the file) is outside
///   the vocabulary of 64 (the rows of embedding 'tok.weight')
/// where the parenthesis is `tokenVocabWhat` or `targetVocabWhat`. Also
/// false when the arguments are inconsistent (seqLen < 1, batch < 0,
/// firstGlobal < 0, a vocabulary < 1, or an order whose sample count is not
/// the stream's for seqLen). On failure the outputs are partly written.
bool loadSamples(const TokenStream &stream, SampleOrder &order,
                 int64_t firstGlobal, int64_t batch, int64_t seqLen,
                 int64_t tokenVocab, const std::string &tokenVocabWhat,
                 int64_t targetVocab, const std::string &targetVocabWhat,
                 int64_t *tokens, int64_t *targets, std::string &error);

/// Checks every token of `stream` against `vocab` in one pass, reporting the
/// first offending token like loadSamples. Meant for up-front validation of
/// streams small enough to scan before training; large ones are validated
/// batch by batch by loadSamples instead.
bool validateStream(const TokenStream &stream, int64_t vocab,
                    const std::string &what, std::string &error);

/// Checks `count` ids stored as `dtype` (I64 or I32) at `ids` against
/// `bound` (ids must lie in [0, bound.bound); nothing to check when the
/// bound is 0). On the first id outside, says which in `error`: "<what>:
/// id V at element E is outside [0, B) (<bound.what>)".
bool checkIndexIds(const uint8_t *ids, int64_t count, DType dtype,
                   const IndexBound &bound, const std::string &what,
                   std::string &error);

/// Writes `count` token ids into a step argument of dtype `dtype` (I64 or
/// I32) at `out`.
void storeTokenIds(const int64_t *ids, size_t count, DType dtype, uint8_t *out);

/// A run's token data (`--data`, `--val-data`) for a step whose tokens and
/// targets are [batch, seqLen] integer tensors, as a batch source
/// (BatchSource.h): micro-batch g of training is the `batch` samples from
/// global sample g * batch of the (shuffled) order; validation micro-batch m
/// the samples [m * batch, (m+1) * batch) of the validation stream, in order
/// (docs/data.md).
class TokenBatches : public BatchSource {
public:
  struct Options {
    std::vector<std::string> train, validation;
    std::string format = "llmc";
    std::optional<uint64_t> shuffleSeed;
    int64_t batch = 0, seqLen = 0;
    /// Validation micro-batches the run evaluates (checked to exist).
    int64_t evalBatches = 0;
    IndexBound tokens, targets;
    /// The step's user inputs the tokens and the targets fill: the names of
    /// loadMicroBatch's tensors.
    std::string tokensName = "tokens", targetsName = "targets";
  };
  /// Opens and checks the files; null with `error` (naming the flag and the
  /// file) on failure.
  static std::unique_ptr<TokenBatches> open(const Options &options,
                                            std::string &error);
  /// Fills `tokens` and `targets` (resized to batch * seqLen) with training
  /// micro-batch `index` (a global micro-batch count), or with validation
  /// micro-batch `index` when `validation`.
  bool load(bool validation, int64_t index, std::vector<int64_t> &tokens,
            std::vector<int64_t> &targets, std::string &error);
  /// Validation micro-batches the data holds (0 without --val-data).
  int64_t validationMicroBatches() const override;
  int64_t tokensPerMicroBatch() const override {
    return options.batch * options.seqLen;
  }
  int64_t samplesPerMicroBatch() const override { return options.batch; }
  /// Two I64 tensors of [batch, seqLen], the tokens and the targets, named
  /// Options::tokensName and Options::targetsName.
  bool loadMicroBatch(DataSplit split, int64_t firstSample,
                      std::vector<HostTensor> &inputs,
                      std::string &error) override;

private:
  /// Token and target ids of the samples from global index `firstSample`.
  bool loadIds(bool validation, int64_t firstSample,
               std::vector<int64_t> &tokens, std::vector<int64_t> &targets,
               std::string &error);

  Options options;
  std::unique_ptr<TokenStream> train, validation;
  std::unique_ptr<SampleOrder> order, validationOrder;
  int64_t validationSamples = 0;
};

} // namespace mlir::mantissa::rt

#endif // MANTISSA_RUNTIME_TOKENDATA_H
