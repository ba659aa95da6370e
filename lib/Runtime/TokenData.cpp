//===- TokenData.cpp - Token shards, samples and their order --------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// Each file is mapped whole with mmap(PROT_READ, MAP_SHARED) and its header
// checked against its size before any token is read; a shard is then just a
// pointer, a width and a count, and the stream a sorted list of shard start
// positions. Sizes from the file are checked in uint64_t before they become
// int64_t positions, because they come from outside.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/TokenData.h"
#include "mantissa/Format/InputFile.h"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <numeric>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "token files are little-endian and the runtime reads their "
              "integers as they are");

namespace mlir::mantissa::rt {

namespace {

constexpr int64_t kLlmCHeaderBytes = 1024;
constexpr int32_t kLlmCMagicU16 = 20240520;
constexpr int32_t kLlmCMagicU32 = 20240801;
constexpr int32_t kLlmCVersion = 1;

std::string errnoText() { return std::strerror(errno); }

template <typename IntT> IntT loadLittleEndian(const uint8_t *bytes) {
  IntT value;
  std::memcpy(&value, bytes, sizeof(IntT));
  return value;
}

} // namespace

/// One mapped file. `data` points at its first token (past any header).
struct TokenStream::Shard {
  void *mapping = nullptr;
  size_t mappingSize = 0;
  const uint8_t *data = nullptr;
  /// Bytes per token: 2 or 4.
  int width = 2;
  int64_t headerBytes = 0;
  int64_t numTokens = 0;
  /// Stream position of the shard's first token.
  int64_t first = 0;

  /// Opens, maps and validates `path`. The shard owns the mapping from the
  /// moment mmap succeeds, even if validation then fails. `error` is without
  /// the path prefix.
  bool map(const std::string &path, TokenFormat format, std::string &error);

  uint32_t at(int64_t index) const {
    const uint8_t *bytes = data + index * width;
    return width == 2 ? loadLittleEndian<uint16_t>(bytes)
                      : loadLittleEndian<uint32_t>(bytes);
  }
};

namespace {

/// Checks an llm.c header against the file size; sets the token width and
/// count. `error` is without the path prefix.
bool parseLlmCHeader(const uint8_t *image, uint64_t fileSize, int &width,
                     int64_t &numTokens, std::string &error) {
  int32_t magic = loadLittleEndian<int32_t>(image);
  int32_t version = loadLittleEndian<int32_t>(image + 4);
  int32_t declared = loadLittleEndian<int32_t>(image + 8);
  if (magic == kLlmCMagicU16) {
    width = 2;
  } else if (magic == kLlmCMagicU32) {
    width = 4;
  } else {
    error = "not an llm.c token shard: magic number " + std::to_string(magic) +
            " (expected " + std::to_string(kLlmCMagicU16) +
            " for uint16 tokens or " + std::to_string(kLlmCMagicU32) +
            " for uint32 tokens; a headerless file of uint16 tokens needs "
            "--data-format raw-u16)";
    return false;
  }
  if (version != kLlmCVersion) {
    error = "llm.c token shard version " + std::to_string(version) +
            " is not supported (expected " + std::to_string(kLlmCVersion) + ")";
    return false;
  }
  if (declared <= 0) {
    error = "the llm.c header declares " + std::to_string(declared) +
            " tokens; a shard must hold at least one";
    return false;
  }
  // At most 1024 + (2^31 - 1) * 4 bytes: no overflow in uint64_t.
  uint64_t expected = static_cast<uint64_t>(kLlmCHeaderBytes) +
                      static_cast<uint64_t>(declared) * width;
  if (fileSize != expected) {
    error = "file is " + std::to_string(fileSize) +
            " bytes, but its llm.c header declares " +
            std::to_string(declared) + (width == 2 ? " uint16" : " uint32") +
            " tokens, which need 1024 + " + std::to_string(declared) + " * " +
            std::to_string(width) + " = " + std::to_string(expected) +
            " bytes (" +
            (fileSize < expected
                 ? "the file is truncated"
                 : "the file has " + std::to_string(fileSize - expected) +
                       " bytes too many") +
            ")";
    return false;
  }
  numTokens = declared;
  return true;
}

} // namespace

bool parseTokenFormat(const std::string &text, TokenFormat &out,
                      std::string &error) {
  if (text == "llmc") {
    out = TokenFormat::LlmC;
    return true;
  }
  if (text == "raw-u16") {
    out = TokenFormat::RawU16;
    return true;
  }
  error = "unknown token format '" + text +
          "' (expected 'llmc' for llm.c shards or 'raw-u16' for headerless "
          "uint16 files)";
  return false;
}

const char *tokenFormatName(TokenFormat format) {
  switch (format) {
  case TokenFormat::LlmC:
    return "llmc";
  case TokenFormat::RawU16:
    return "raw-u16";
  }
  return "unknown";
}

//===----------------------------------------------------------------------===//
// TokenStream
//===----------------------------------------------------------------------===//

bool TokenStream::Shard::map(const std::string &path, TokenFormat format,
                             std::string &error) {
  int fd = openRegularFile(path, error);
  if (fd < 0)
    return false;
  struct stat status;
  if (::fstat(fd, &status) != 0) {
    error = "cannot stat: " + errnoText();
    ::close(fd);
    return false;
  }
  uint64_t fileSize = static_cast<uint64_t>(status.st_size);
  if (fileSize == 0) {
    error = "file is empty, so it holds no tokens";
    ::close(fd);
    return false;
  }
  if (format == TokenFormat::LlmC &&
      fileSize < static_cast<uint64_t>(kLlmCHeaderBytes)) {
    error = "file is " + std::to_string(fileSize) +
            " bytes, shorter than the 1024-byte header of an llm.c token "
            "shard";
    ::close(fd);
    return false;
  }
  if (format == TokenFormat::RawU16 && fileSize % 2 != 0) {
    error = "raw-u16 file is " + std::to_string(fileSize) +
            " bytes, an odd size, so not a whole number of uint16 tokens";
    ::close(fd);
    return false;
  }
  void *address = ::mmap(nullptr, static_cast<size_t>(fileSize), PROT_READ,
                         MAP_SHARED, fd, 0);
  int mapErrno = errno;
  // The mapping keeps the file open; the descriptor is no longer needed.
  ::close(fd);
  if (address == MAP_FAILED) {
    error = std::string("cannot map: ") + std::strerror(mapErrno);
    return false;
  }
  mapping = address;
  mappingSize = static_cast<size_t>(fileSize);
  const uint8_t *image = static_cast<const uint8_t *>(address);

  if (format == TokenFormat::RawU16) {
    width = 2;
    headerBytes = 0;
    numTokens = static_cast<int64_t>(fileSize / 2);
  } else {
    headerBytes = kLlmCHeaderBytes;
    if (!parseLlmCHeader(image, fileSize, width, numTokens, error))
      return false;
  }
  data = image + headerBytes;
  return true;
}

TokenStream::TokenStream() = default;

TokenStream::~TokenStream() {
  for (Shard &shard : shards)
    if (shard.mapping)
      ::munmap(shard.mapping, shard.mappingSize);
}

std::unique_ptr<TokenStream>
TokenStream::open(const std::vector<std::string> &paths, TokenFormat format,
                  std::string &error) {
  if (paths.empty()) {
    error = "no token files given";
    return nullptr;
  }
  std::unique_ptr<TokenStream> stream(new TokenStream());
  stream->tokenFormat = format;
  stream->filePaths = paths;
  stream->shards.reserve(paths.size());
  for (const std::string &path : paths) {
    // Added before mapping so that the destructor unmaps it on any failure.
    stream->shards.emplace_back();
    Shard &shard = stream->shards.back();
    if (!shard.map(path, format, error)) {
      error = path + ": " + error;
      return nullptr;
    }
    shard.first = stream->totalTokens;
    if (__builtin_add_overflow(stream->totalTokens, shard.numTokens,
                               &stream->totalTokens)) {
      error = path + ": the token files hold more than 2^63 tokens in all";
      return nullptr;
    }
  }
  return stream;
}

size_t TokenStream::shardOf(int64_t position) const {
  assert(position >= 0 && position < totalTokens && "position out of range");
  // The last shard whose first position is <= position.
  auto it = std::upper_bound(
      shards.begin(), shards.end(), position,
      [](int64_t value, const Shard &shard) { return value < shard.first; });
  return static_cast<size_t>(it - shards.begin()) - 1;
}

uint32_t TokenStream::token(int64_t position) const {
  const Shard &shard = shards[shardOf(position)];
  return shard.at(position - shard.first);
}

void TokenStream::read(int64_t first, int64_t count, uint32_t *out) const {
  if (count <= 0)
    return;
  assert(first >= 0 && count <= totalTokens - first && "range out of range");
  size_t index = shardOf(first);
  while (count > 0) {
    const Shard &shard = shards[index++];
    int64_t begin = first - shard.first;
    int64_t length = std::min(count, shard.numTokens - begin);
    if (shard.width == 2) {
      const uint8_t *bytes = shard.data + begin * 2;
      for (int64_t i = 0; i < length; ++i)
        out[i] = loadLittleEndian<uint16_t>(bytes + i * 2);
    } else {
      std::memcpy(out, shard.data + begin * 4, static_cast<size_t>(length) * 4);
    }
    out += length;
    first += length;
    count -= length;
  }
}

TokenLocation TokenStream::locate(int64_t position) const {
  size_t index = shardOf(position);
  const Shard &shard = shards[index];
  TokenLocation location;
  location.path = &filePaths[index];
  location.indexInFile = position - shard.first;
  location.byteOffset = shard.headerBytes + location.indexInFile * shard.width;
  return location;
}

bool countSamples(const TokenStream &stream, int64_t seqLen,
                  int64_t &numSamples, std::string &error) {
  if (seqLen < 1) {
    error = "sequence length " + std::to_string(seqLen) + " is not positive";
    return false;
  }
  numSamples = (stream.numTokens() - 1) / seqLen;
  if (numSamples == 0) {
    error = "the token stream has " + std::to_string(stream.numTokens()) +
            " tokens, fewer than the " + std::to_string(seqLen) +
            " + 1 = " + std::to_string(seqLen + 1) +
            " that one sample of sequence length " + std::to_string(seqLen) +
            " needs";
    return false;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// SampleOrder
//===----------------------------------------------------------------------===//

namespace {

/// Fisher-Yates from the top, exactly as docs/data.md specifies (including
/// the modulo, whose bias is negligible for S << 2^64 and which keeps the
/// definition easy to reproduce).
template <typename IdT>
void shuffleEpoch(std::vector<IdT> &permutation, int64_t count,
                  uint64_t state) {
  permutation.resize(static_cast<size_t>(count));
  std::iota(permutation.begin(), permutation.end(), IdT(0));
  SplitMix64 rng(state);
  for (int64_t i = count - 1; i >= 1; --i) {
    uint64_t j = rng.next() % static_cast<uint64_t>(i + 1);
    std::swap(permutation[static_cast<size_t>(i)],
              permutation[static_cast<size_t>(j)]);
  }
}

} // namespace

SampleOrder::SampleOrder(int64_t numSamples, std::optional<uint64_t> seed)
    : count(numSamples), shuffleSeed(seed) {
  assert(numSamples >= 1 && "a sample order needs at least one sample");
}

void SampleOrder::buildEpoch(int64_t epoch) {
  uint64_t state = epochState(*shuffleSeed, static_cast<uint64_t>(epoch));
  if (static_cast<uint64_t>(count) <= (uint64_t(1) << 32)) {
    permutation64 = {};
    shuffleEpoch(permutation32, count, state);
  } else {
    permutation32 = {};
    shuffleEpoch(permutation64, count, state);
  }
  cachedEpoch = epoch;
}

int64_t SampleOrder::sample(int64_t globalIndex) {
  assert(globalIndex >= 0 && "global sample index is negative");
  int64_t position = globalIndex % count;
  if (!shuffleSeed)
    return position;
  int64_t epoch = globalIndex / count;
  if (epoch != cachedEpoch)
    buildEpoch(epoch);
  size_t index = static_cast<size_t>(position);
  return permutation64.empty() ? static_cast<int64_t>(permutation32[index])
                               : permutation64[index];
}

//===----------------------------------------------------------------------===//
// Loading and validation
//===----------------------------------------------------------------------===//

namespace {

std::string outOfVocabulary(const TokenStream &stream, int64_t position,
                            uint32_t id, int64_t vocab,
                            const std::string &what) {
  TokenLocation location = stream.locate(position);
  return *location.path + ": token " + std::to_string(id) + " at byte offset " +
         std::to_string(location.byteOffset) + " (token " +
         std::to_string(location.indexInFile) +
         " of the file) is outside the vocabulary of " + std::to_string(vocab) +
         " (" + what + ")";
}

bool checkVocabulary(int64_t vocab, const std::string &what,
                     std::string &error) {
  if (vocab >= 1)
    return true;
  error = "vocabulary size " + std::to_string(vocab) + " (" + what +
          ") is not positive";
  return false;
}

} // namespace

bool loadSamples(const TokenStream &stream, SampleOrder &order,
                 int64_t firstGlobal, int64_t batch, int64_t seqLen,
                 int64_t tokenVocab, const std::string &tokenVocabWhat,
                 int64_t targetVocab, const std::string &targetVocabWhat,
                 int64_t *tokens, int64_t *targets, std::string &error) {
  int64_t numSamples = 0;
  if (!countSamples(stream, seqLen, numSamples, error) ||
      !checkVocabulary(tokenVocab, tokenVocabWhat, error) ||
      !checkVocabulary(targetVocab, targetVocabWhat, error))
    return false;
  if (order.numSamples() != numSamples) {
    error = "the sample order has " + std::to_string(order.numSamples()) +
            " samples, but the token stream has " + std::to_string(numSamples) +
            " of sequence length " + std::to_string(seqLen);
    return false;
  }
  int64_t endGlobal = 0;
  if (firstGlobal < 0 || batch < 0 ||
      __builtin_add_overflow(firstGlobal, batch, &endGlobal)) {
    error = "invalid sample range: first global sample " +
            std::to_string(firstGlobal) + ", batch " + std::to_string(batch);
    return false;
  }

  // seqLen + 1 <= numTokens here, since there is at least one sample.
  std::vector<uint32_t> window(static_cast<size_t>(seqLen + 1));
  for (int64_t b = 0; b < batch; ++b) {
    int64_t start = order.sample(firstGlobal + b) * seqLen;
    stream.read(start, seqLen + 1, window.data());
    int64_t *tokenRow = tokens + b * seqLen;
    int64_t *targetRow = targets + b * seqLen;
    // Window position i is a token for i < seqLen and a target for i >= 1.
    // Checked in stream order, the token role first, so that the message
    // names the first offending position.
    for (int64_t i = 0; i <= seqLen; ++i) {
      uint32_t id = window[static_cast<size_t>(i)];
      if (i < seqLen && static_cast<int64_t>(id) >= tokenVocab) {
        error =
            outOfVocabulary(stream, start + i, id, tokenVocab, tokenVocabWhat);
        return false;
      }
      if (i >= 1 && static_cast<int64_t>(id) >= targetVocab) {
        error = outOfVocabulary(stream, start + i, id, targetVocab,
                                targetVocabWhat);
        return false;
      }
      if (i < seqLen)
        tokenRow[i] = id;
      if (i >= 1)
        targetRow[i - 1] = id;
    }
  }
  return true;
}

bool validateStream(const TokenStream &stream, int64_t vocab,
                    const std::string &what, std::string &error) {
  if (!checkVocabulary(vocab, what, error))
    return false;
  constexpr int64_t kChunk = 1 << 16;
  std::vector<uint32_t> buffer(kChunk);
  for (int64_t first = 0; first < stream.numTokens(); first += kChunk) {
    int64_t count = std::min(kChunk, stream.numTokens() - first);
    stream.read(first, count, buffer.data());
    for (int64_t i = 0; i < count; ++i) {
      uint32_t id = buffer[static_cast<size_t>(i)];
      if (static_cast<int64_t>(id) >= vocab) {
        error = outOfVocabulary(stream, first + i, id, vocab, what);
        return false;
      }
    }
  }
  return true;
}

//===----------------------------------------------------------------------===//
// A run's batches
//===----------------------------------------------------------------------===//

std::unique_ptr<TokenBatches> TokenBatches::open(const Options &options,
                                                 std::string &error) {
  auto batches = std::unique_ptr<TokenBatches>(new TokenBatches());
  batches->options = options;
  TokenFormat format;
  if (!parseTokenFormat(options.format, format, error)) {
    error = "--data-format: " + error;
    return nullptr;
  }
  int64_t samples = 0;
  batches->train = TokenStream::open(options.train, format, error);
  if (!batches->train ||
      !countSamples(*batches->train, options.seqLen, samples, error)) {
    error = "--data: " + error;
    return nullptr;
  }
  batches->order = std::make_unique<SampleOrder>(samples, options.shuffleSeed);
  if (!options.validation.empty()) {
    batches->validation = TokenStream::open(options.validation, format, error);
    if (!batches->validation ||
        !countSamples(*batches->validation, options.seqLen,
                      batches->validationSamples, error)) {
      error = "--val-data: " + error;
      return nullptr;
    }
    if (batches->validationSamples < options.evalBatches * options.batch) {
      error = "--eval-batches " + std::to_string(options.evalBatches) +
              ": the validation data holds " +
              std::to_string(batches->validationSamples) + " samples of " +
              std::to_string(options.seqLen) + " tokens, fewer than " +
              std::to_string(options.evalBatches) + " micro-batches of " +
              std::to_string(options.batch);
      return nullptr;
    }
    batches->validationOrder =
        std::make_unique<SampleOrder>(batches->validationSamples, std::nullopt);
  }
  return batches;
}

bool TokenBatches::load(bool validating, int64_t index,
                        std::vector<int64_t> &tokens,
                        std::vector<int64_t> &targets, std::string &error) {
  return loadIds(validating, firstSample(index), tokens, targets, error);
}

bool TokenBatches::loadIds(bool validating, int64_t firstSample,
                           std::vector<int64_t> &tokens,
                           std::vector<int64_t> &targets, std::string &error) {
  if (validating && !validation) {
    error = "no validation data (--val-data)";
    return false;
  }
  tokens.resize(size_t(tokensPerMicroBatch()));
  targets.resize(tokens.size());
  return loadSamples(
      validating ? *validation : *train, validating ? *validationOrder : *order,
      firstSample, options.batch, options.seqLen, options.tokens.bound,
      options.tokens.what, options.targets.bound, options.targets.what,
      tokens.data(), targets.data(), error);
}

bool TokenBatches::loadMicroBatch(DataSplit split, int64_t firstSample,
                                  std::vector<HostTensor> &inputs,
                                  std::string &error) {
  std::vector<int64_t> tokens, targets;
  if (!loadIds(split == DataSplit::Validation, firstSample, tokens, targets,
               error))
    return false;
  inputs.clear();
  for (auto [name, ids] :
       {std::pair<const std::string *, std::vector<int64_t> *>{
            &options.tokensName, &tokens},
        {&options.targetsName, &targets}}) {
    HostTensor tensor;
    tensor.name = *name;
    tensor.dtype = DType::I64;
    tensor.shape = {options.batch, options.seqLen};
    tensor.bytes.resize(ids->size() * sizeof(int64_t));
    std::memcpy(tensor.bytes.data(), ids->data(), tensor.bytes.size());
    inputs.push_back(std::move(tensor));
  }
  return true;
}

int64_t TokenBatches::validationMicroBatches() const {
  return validation ? validationSamples / options.batch : 0;
}

bool checkIndexIds(const uint8_t *ids, int64_t count, DType dtype,
                   const IndexBound &bound, const std::string &what,
                   std::string &error) {
  if (bound.bound < 1 || (dtype != DType::I64 && dtype != DType::I32))
    return true;
  for (int64_t i = 0; i < count; ++i) {
    int64_t id = 0;
    if (dtype == DType::I64) {
      std::memcpy(&id, ids + 8 * i, 8);
    } else {
      int32_t narrow = 0;
      std::memcpy(&narrow, ids + 4 * i, 4);
      id = narrow;
    }
    if ((id < 0 || id >= bound.bound) && id != bound.ignored) {
      error = what + ": id " + std::to_string(id) + " at element " +
              std::to_string(i) + " is outside [0, " +
              std::to_string(bound.bound) + ")" +
              (bound.what.empty() ? "" : " (" + bound.what + ")");
      return false;
    }
  }
  return true;
}

void storeTokenIds(const int64_t *ids, size_t count, DType dtype,
                   uint8_t *out) {
  if (dtype == DType::I64) {
    std::memcpy(out, ids, count * 8);
    return;
  }
  for (size_t i = 0; i < count; ++i) {
    int32_t narrow = int32_t(ids[i]);
    std::memcpy(out + 4 * i, &narrow, 4);
  }
}

} // namespace mlir::mantissa::rt
