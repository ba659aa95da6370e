//===- TokenDataTest.cpp - Tests for token shards, samples and order ------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/TokenData.h"
#include "RuntimeTestUtils.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <set>

#include <sys/stat.h>
#include <unistd.h>

using namespace mlir::mantissa::rt;

namespace {

void writeBytes(const std::string &path, const std::vector<uint8_t> &bytes) {
  std::ofstream stream(path, std::ios::binary);
  stream.write(reinterpret_cast<const char *>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
}

void appendLittleEndian(std::vector<uint8_t> &bytes, uint64_t value,
                        int width) {
  for (int i = 0; i < width; ++i)
    bytes.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

/// How to corrupt an llm.c shard; the defaults write a valid one.
struct ShardOptions {
  std::optional<int32_t> magic;
  int32_t version = 1;
  std::optional<int32_t> declaredCount;
  /// Bytes removed from (negative) or appended to (positive) the end.
  int sizeChange = 0;
};

/// Writes an llm.c shard of `tokens` with `width`-byte tokens (2 or 4).
std::string writeLlmC(const ScratchDir &dir, const std::string &name,
                      const std::vector<uint32_t> &tokens, int width,
                      const ShardOptions &options = {}) {
  std::vector<uint8_t> bytes;
  int32_t magic = options.magic.value_or(width == 2 ? 20240520 : 20240801);
  int32_t count =
      options.declaredCount.value_or(static_cast<int32_t>(tokens.size()));
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = options.version;
  header[2] = count;
  for (int32_t field : header)
    appendLittleEndian(bytes, static_cast<uint32_t>(field), 4);
  for (uint32_t token : tokens)
    appendLittleEndian(bytes, token, width);
  if (options.sizeChange < 0)
    bytes.resize(bytes.size() - static_cast<size_t>(-options.sizeChange));
  for (int i = 0; i < options.sizeChange; ++i)
    bytes.push_back(0);
  std::string path = dir.file(name);
  writeBytes(path, bytes);
  return path;
}

std::string writeRawU16(const ScratchDir &dir, const std::string &name,
                        const std::vector<uint32_t> &tokens) {
  std::vector<uint8_t> bytes;
  for (uint32_t token : tokens)
    appendLittleEndian(bytes, token, 2);
  std::string path = dir.file(name);
  writeBytes(path, bytes);
  return path;
}

/// Tokens a, a+1, ..., a+count-1.
std::vector<uint32_t> counting(uint32_t first, size_t count) {
  std::vector<uint32_t> tokens(count);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

std::unique_ptr<TokenStream> openOrFail(const std::vector<std::string> &paths,
                                        TokenFormat format) {
  std::string error;
  std::unique_ptr<TokenStream> stream = TokenStream::open(paths, format, error);
  EXPECT_TRUE(stream) << error;
  return stream;
}

/// Opens `paths` expecting failure; returns the error.
std::string openError(const std::vector<std::string> &paths,
                      TokenFormat format) {
  std::string error;
  std::unique_ptr<TokenStream> stream = TokenStream::open(paths, format, error);
  EXPECT_FALSE(stream) << "opened unexpectedly";
  EXPECT_FALSE(error.empty());
  return error;
}

/// The permutation of epoch `epoch` as SampleOrder produces it.
std::vector<int64_t> epochOrder(SampleOrder &order, int64_t epoch) {
  std::vector<int64_t> result;
  for (int64_t p = 0; p < order.numSamples(); ++p)
    result.push_back(order.sample(epoch * order.numSamples() + p));
  return result;
}

//===----------------------------------------------------------------------===//
// Formats
//===----------------------------------------------------------------------===//

TEST(TokenDataTest, ParseTokenFormat) {
  TokenFormat format = TokenFormat::RawU16;
  std::string error;
  EXPECT_TRUE(parseTokenFormat("llmc", format, error));
  EXPECT_EQ(format, TokenFormat::LlmC);
  EXPECT_TRUE(parseTokenFormat("raw-u16", format, error));
  EXPECT_EQ(format, TokenFormat::RawU16);
  EXPECT_FALSE(parseTokenFormat("u16", format, error));
  EXPECT_CONTAINS(error, "unknown token format 'u16'");
  EXPECT_CONTAINS(error, "'llmc'");
  EXPECT_CONTAINS(error, "'raw-u16'");
  EXPECT_STREQ(tokenFormatName(TokenFormat::LlmC), "llmc");
  EXPECT_STREQ(tokenFormatName(TokenFormat::RawU16), "raw-u16");
}

TEST(TokenDataTest, LlmCUint16) {
  ScratchDir dir;
  std::vector<uint32_t> tokens = {0, 1, 255, 256, 65535, 42, 7};
  std::string path = writeLlmC(dir, "a.bin", tokens, 2);
  auto stream = openOrFail({path}, TokenFormat::LlmC);
  ASSERT_TRUE(stream);
  ASSERT_EQ(stream->numTokens(), 7);
  for (size_t i = 0; i < tokens.size(); ++i)
    EXPECT_EQ(stream->token(static_cast<int64_t>(i)), tokens[i]) << i;
  TokenLocation location = stream->locate(4);
  EXPECT_EQ(*location.path, path);
  EXPECT_EQ(location.byteOffset, 1024 + 4 * 2);
  EXPECT_EQ(location.indexInFile, 4);
  EXPECT_EQ(stream->paths(), std::vector<std::string>{path});
  EXPECT_EQ(stream->format(), TokenFormat::LlmC);
}

TEST(TokenDataTest, LlmCUint32) {
  ScratchDir dir;
  std::vector<uint32_t> tokens = {70000, 0, 128255, 4000000000u, 65536};
  std::string path = writeLlmC(dir, "a.bin", tokens, 4);
  auto stream = openOrFail({path}, TokenFormat::LlmC);
  ASSERT_TRUE(stream);
  ASSERT_EQ(stream->numTokens(), 5);
  std::vector<uint32_t> read(5);
  stream->read(0, 5, read.data());
  EXPECT_EQ(read, tokens);
  EXPECT_EQ(stream->token(3), 4000000000u);
  EXPECT_EQ(stream->locate(3).byteOffset, 1024 + 3 * 4);
}

TEST(TokenDataTest, RawU16) {
  ScratchDir dir;
  std::vector<uint32_t> tokens = {5, 65535, 0, 1000};
  std::string path = writeRawU16(dir, "train.bin", tokens);
  auto stream = openOrFail({path}, TokenFormat::RawU16);
  ASSERT_TRUE(stream);
  ASSERT_EQ(stream->numTokens(), 4);
  std::vector<uint32_t> read(4);
  stream->read(0, 4, read.data());
  EXPECT_EQ(read, tokens);
  EXPECT_EQ(stream->locate(3).byteOffset, 6);
  EXPECT_EQ(stream->locate(3).indexInFile, 3);
}

TEST(TokenDataTest, ShardsConcatenate) {
  ScratchDir dir;
  // 10 uint16 tokens then 7 more: positions 0..16 hold 100..116.
  std::string first = writeLlmC(dir, "s0.bin", counting(100, 10), 2);
  std::string second = writeLlmC(dir, "s1.bin", counting(110, 7), 2);
  auto stream = openOrFail({first, second}, TokenFormat::LlmC);
  ASSERT_TRUE(stream);
  ASSERT_EQ(stream->numTokens(), 17);
  for (int64_t i = 0; i < 17; ++i)
    EXPECT_EQ(stream->token(i), 100 + i) << i;
  std::vector<uint32_t> read(9);
  stream->read(6, 9, read.data());
  EXPECT_EQ(read, counting(106, 9));

  TokenLocation location = stream->locate(12);
  EXPECT_EQ(*location.path, second);
  EXPECT_EQ(location.indexInFile, 2);
  EXPECT_EQ(location.byteOffset, 1024 + 2 * 2);
  EXPECT_EQ(*stream->locate(9).path, first);

  // T = 4: S = floor(16 / 4) = 4; sample 2 is positions 8..12, across the
  // boundary between the files at position 10.
  std::string error;
  int64_t numSamples = 0;
  ASSERT_TRUE(countSamples(*stream, 4, numSamples, error)) << error;
  EXPECT_EQ(numSamples, 4);
  SampleOrder order(numSamples, std::nullopt);
  std::vector<int64_t> tokens(4), targets(4);
  ASSERT_TRUE(loadSamples(*stream, order, 2, 1, 4, 1000, "tokens", 1000,
                          "targets", tokens.data(), targets.data(), error))
      << error;
  EXPECT_EQ(tokens, (std::vector<int64_t>{108, 109, 110, 111}));
  EXPECT_EQ(targets, (std::vector<int64_t>{109, 110, 111, 112}));
}

TEST(TokenDataTest, ShardsOfDifferentWidthsConcatenate) {
  ScratchDir dir;
  std::string narrow = writeLlmC(dir, "u16.bin", {1, 2, 3}, 2);
  std::string wide = writeLlmC(dir, "u32.bin", {70000, 70001}, 4);
  auto stream = openOrFail({narrow, wide}, TokenFormat::LlmC);
  ASSERT_TRUE(stream);
  std::vector<uint32_t> read(5);
  stream->read(0, 5, read.data());
  EXPECT_EQ(read, (std::vector<uint32_t>{1, 2, 3, 70000, 70001}));
  EXPECT_EQ(stream->locate(4).byteOffset, 1024 + 4);
}

//===----------------------------------------------------------------------===//
// Samples and order
//===----------------------------------------------------------------------===//

TEST(TokenDataTest, SampleCount) {
  ScratchDir dir;
  struct Case {
    size_t numTokens;
    int64_t seqLen;
    int64_t expected;
  };
  for (Case c : {Case{17, 4, 4}, Case{16, 4, 3}, Case{16, 5, 3}, Case{6, 5, 1},
                 Case{2, 1, 1}, Case{1000, 1, 999}}) {
    std::string path = writeRawU16(dir, "t.bin", counting(0, c.numTokens));
    auto stream = openOrFail({path}, TokenFormat::RawU16);
    ASSERT_TRUE(stream);
    std::string error;
    int64_t numSamples = -1;
    EXPECT_TRUE(countSamples(*stream, c.seqLen, numSamples, error)) << error;
    EXPECT_EQ(numSamples, c.expected)
        << c.numTokens << " tokens, T = " << c.seqLen;
  }
}

TEST(TokenDataTest, TooFewTokens) {
  ScratchDir dir;
  std::string path = writeRawU16(dir, "t.bin", counting(0, 8));
  auto stream = openOrFail({path}, TokenFormat::RawU16);
  ASSERT_TRUE(stream);
  std::string error;
  int64_t numSamples = 0;
  EXPECT_FALSE(countSamples(*stream, 8, numSamples, error));
  EXPECT_CONTAINS(error, "the token stream has 8 tokens, fewer than the "
                         "8 + 1 = 9 that one sample of sequence length 8");
  EXPECT_TRUE(countSamples(*stream, 7, numSamples, error));
  EXPECT_EQ(numSamples, 1);
  EXPECT_FALSE(countSamples(*stream, 0, numSamples, error));
  EXPECT_CONTAINS(error, "sequence length 0 is not positive");
}

TEST(TokenDataTest, WrapsIntoTheNextEpoch) {
  ScratchDir dir;
  // 13 tokens, T = 3: S = 4 samples, starting at 0, 3, 6, 9.
  std::string path = writeRawU16(dir, "t.bin", counting(0, 13));
  auto stream = openOrFail({path}, TokenFormat::RawU16);
  ASSERT_TRUE(stream);
  SampleOrder order(4, std::nullopt);
  EXPECT_EQ(order.sample(0), 0);
  EXPECT_EQ(order.sample(3), 3);
  EXPECT_EQ(order.sample(4), 0);
  EXPECT_EQ(order.sample(9), 1);
  EXPECT_EQ(order.sample(4000000000003LL), 3);

  // Global samples 3, 4, 5 are samples 3, 0, 1.
  std::vector<int64_t> tokens(9), targets(9);
  std::string error;
  ASSERT_TRUE(loadSamples(*stream, order, 3, 3, 3, 100, "tokens", 100,
                          "targets", tokens.data(), targets.data(), error))
      << error;
  EXPECT_EQ(tokens, (std::vector<int64_t>{9, 10, 11, 0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(targets, (std::vector<int64_t>{10, 11, 12, 1, 2, 3, 4, 5, 6}));
}

TEST(TokenDataTest, SplitMix64MatchesReference) {
  // The published SplitMix64 outputs for state 0 (also what the Python
  // script in docs/data.md prints).
  SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(rng.next(), 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(rng.next(), 0x06C45D188009454FULL);
}

TEST(TokenDataTest, ShuffleMatchesPython) {
  // Every expected value below was printed by the Python script of
  // docs/data.md (permutation(S, seed, epoch)), run with python3.
  SampleOrder order(10, 42);
  EXPECT_EQ(epochOrder(order, 0),
            (std::vector<int64_t>{0, 9, 5, 8, 6, 4, 7, 2, 1, 3}));
  EXPECT_EQ(epochOrder(order, 1),
            (std::vector<int64_t>{7, 5, 8, 0, 9, 6, 2, 1, 4, 3}));
  EXPECT_EQ(epochOrder(order, 7),
            (std::vector<int64_t>{6, 0, 9, 7, 4, 1, 3, 8, 5, 2}));
  // sample(12, 10, 42) and sample(25, 10, 42).
  EXPECT_EQ(order.sample(12), 8);
  EXPECT_EQ(order.sample(25), 2);

  SampleOrder small(5, 0);
  EXPECT_EQ(epochOrder(small, 0), (std::vector<int64_t>{2, 3, 1, 4, 0}));

  SampleOrder wide(1000, UINT64_MAX);
  std::vector<int64_t> epoch3 = epochOrder(wide, 3);
  EXPECT_EQ(std::vector<int64_t>(epoch3.begin(), epoch3.begin() + 8),
            (std::vector<int64_t>{195, 157, 106, 898, 55, 465, 879, 913}));
  EXPECT_EQ(epoch3[999], 93);

  SampleOrder large(100000, 1234567890123ULL);
  EXPECT_EQ(large.sample(0), 45674);
  EXPECT_EQ(large.sample(1), 67260);
  EXPECT_EQ(large.sample(50000), 15156);
  EXPECT_EQ(large.sample(99999), 45016);
}

TEST(TokenDataTest, ShuffleIsAPermutation) {
  SampleOrder order(1000, 7);
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  for (int64_t epoch : {0, 1, 2, 1000000}) {
    std::vector<int64_t> samples = epochOrder(order, epoch);
    EXPECT_NE(samples, identity) << "epoch " << epoch;
    std::sort(samples.begin(), samples.end());
    EXPECT_EQ(samples, identity) << "epoch " << epoch;
  }
  SampleOrder one(1, 7);
  EXPECT_EQ(one.sample(0), 0);
  EXPECT_EQ(one.sample(5), 0);
}

TEST(TokenDataTest, EpochsGetDifferentPermutations) {
  SampleOrder order(1000, 123);
  std::set<std::vector<int64_t>> seen;
  for (int64_t epoch = 0; epoch < 5; ++epoch)
    seen.insert(epochOrder(order, epoch));
  EXPECT_EQ(seen.size(), 5u);
  // A different seed gives a different order too.
  SampleOrder other(1000, 124);
  EXPECT_NE(epochOrder(other, 0), epochOrder(order, 0));
}

TEST(TokenDataTest, SameSeedSameOrder) {
  SampleOrder first(500, 99), second(500, 99);
  std::vector<int64_t> reference;
  for (int64_t g = 0; g < 2000; ++g)
    reference.push_back(first.sample(g));
  // Visiting the indices out of order (epochs back and forth) must not
  // depend on what the cache held.
  for (int64_t g = 1999; g >= 0; g -= 7)
    EXPECT_EQ(second.sample(g), reference[static_cast<size_t>(g)]) << g;
  for (int64_t g : {0, 1500, 3, 1999, 501})
    EXPECT_EQ(second.sample(g), reference[static_cast<size_t>(g)]) << g;
}

TEST(TokenDataTest, ShuffledBatchesReadTheRightWindows) {
  ScratchDir dir;
  // Token value == stream position, over two shards; T = 8, S = 124.
  std::string first = writeLlmC(dir, "s0.bin", counting(0, 600), 2);
  std::string second = writeLlmC(dir, "s1.bin", counting(600, 400), 4);
  auto stream = openOrFail({first, second}, TokenFormat::LlmC);
  ASSERT_TRUE(stream);
  std::string error;
  int64_t numSamples = 0;
  ASSERT_TRUE(countSamples(*stream, 8, numSamples, error)) << error;
  ASSERT_EQ(numSamples, 124);
  SampleOrder order(numSamples, 2024), check(numSamples, 2024);
  const int64_t batch = 16, seqLen = 8;
  std::vector<int64_t> tokens(batch * seqLen), targets(batch * seqLen);
  ASSERT_TRUE(loadSamples(*stream, order, 120, batch, seqLen, 1000, "tokens",
                          1000, "targets", tokens.data(), targets.data(),
                          error))
      << error;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t start = check.sample(120 + b) * seqLen;
    for (int64_t t = 0; t < seqLen; ++t) {
      EXPECT_EQ(tokens[b * seqLen + t], start + t);
      EXPECT_EQ(targets[b * seqLen + t], start + t + 1);
    }
  }
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

TEST(TokenDataTest, BadMagic) {
  ScratchDir dir;
  ShardOptions options;
  options.magic = 12345;
  std::string path = writeLlmC(dir, "bad.bin", {1, 2}, 2, options);
  std::string error = openError({path}, TokenFormat::LlmC);
  EXPECT_EQ(error.rfind(path + ": ", 0), 0u) << error;
  EXPECT_CONTAINS(error, "magic number 12345");
  EXPECT_CONTAINS(error, "20240520");
  EXPECT_CONTAINS(error, "20240801");
}

TEST(TokenDataTest, RawFileAsLlmCIsBadMagic) {
  ScratchDir dir;
  std::string path = writeRawU16(dir, "raw.bin", counting(1, 600));
  std::string error = openError({path}, TokenFormat::LlmC);
  EXPECT_CONTAINS(error, "not an llm.c token shard");
  EXPECT_CONTAINS(error, "raw-u16");
}

TEST(TokenDataTest, BadVersion) {
  ScratchDir dir;
  ShardOptions options;
  options.version = 2;
  std::string path = writeLlmC(dir, "v2.bin", {1, 2}, 2, options);
  std::string error = openError({path}, TokenFormat::LlmC);
  EXPECT_EQ(error, path + ": llm.c token shard version 2 is not supported "
                          "(expected 1)");
}

TEST(TokenDataTest, Truncated) {
  ScratchDir dir;
  ShardOptions options;
  options.sizeChange = -3;
  std::string path = writeLlmC(dir, "cut.bin", counting(0, 10), 4, options);
  std::string error = openError({path}, TokenFormat::LlmC);
  EXPECT_EQ(error, path + ": file is 1061 bytes, but its llm.c header "
                          "declares 10 uint32 tokens, which need 1024 + 10 * "
                          "4 = 1064 bytes (the file is truncated)");

  // A header claiming more tokens than the file holds is truncation too.
  ShardOptions more;
  more.declaredCount = 11;
  path = writeLlmC(dir, "short.bin", counting(0, 10), 2, more);
  error = openError({path}, TokenFormat::LlmC);
  EXPECT_CONTAINS(error, "file is 1044 bytes");
  EXPECT_CONTAINS(error, "1046 bytes (the file is truncated)");
}

TEST(TokenDataTest, TrailingBytes) {
  ScratchDir dir;
  ShardOptions options;
  options.sizeChange = 2;
  std::string path = writeLlmC(dir, "long.bin", counting(0, 10), 2, options);
  std::string error = openError({path}, TokenFormat::LlmC);
  EXPECT_CONTAINS(error, "file is 1046 bytes");
  EXPECT_CONTAINS(error, "need 1024 + 10 * 2 = 1044 bytes");
  EXPECT_CONTAINS(error, "the file has 2 bytes too many");
}

TEST(TokenDataTest, ShorterThanHeader) {
  ScratchDir dir;
  std::string path = writeRawU16(dir, "tiny.bin", counting(0, 10));
  std::string error = openError({path}, TokenFormat::LlmC);
  EXPECT_EQ(error, path + ": file is 20 bytes, shorter than the 1024-byte "
                          "header of an llm.c token shard");
}

TEST(TokenDataTest, ZeroOrNegativeTokenCount) {
  ScratchDir dir;
  std::string path = writeLlmC(dir, "zero.bin", {}, 2);
  std::string error = openError({path}, TokenFormat::LlmC);
  EXPECT_CONTAINS(error, "declares 0 tokens");
  ShardOptions negative;
  negative.declaredCount = -1;
  path = writeLlmC(dir, "negative.bin", {}, 2, negative);
  error = openError({path}, TokenFormat::LlmC);
  EXPECT_CONTAINS(error, "declares -1 tokens");
}

TEST(TokenDataTest, OddRawSize) {
  ScratchDir dir;
  std::string path = dir.file("odd.bin");
  writeBytes(path, {1, 0, 2, 0, 3});
  std::string error = openError({path}, TokenFormat::RawU16);
  EXPECT_EQ(error, path + ": raw-u16 file is 5 bytes, an odd size, so not a "
                          "whole number of uint16 tokens");
}

TEST(TokenDataTest, EmptyFile) {
  ScratchDir dir;
  std::string path = dir.file("empty.bin");
  writeBytes(path, {});
  for (TokenFormat format : {TokenFormat::RawU16, TokenFormat::LlmC}) {
    std::string error = openError({path}, format);
    EXPECT_EQ(error, path + ": file is empty, so it holds no tokens");
  }
}

TEST(TokenDataTest, MissingFile) {
  ScratchDir dir;
  std::string good = writeRawU16(dir, "good.bin", counting(0, 4));
  std::string path = dir.file("missing.bin");
  std::string error = openError({good, path}, TokenFormat::RawU16);
  EXPECT_EQ(error, path + ": cannot open: No such file or directory");
}

TEST(TokenDataTest, NotARegularFileOrNoFiles) {
  ScratchDir dir;
  std::string error = openError({dir.path}, TokenFormat::RawU16);
  EXPECT_EQ(error, dir.path + ": is a directory, not a regular file");
  error = openError({}, TokenFormat::RawU16);
  EXPECT_EQ(error, "no token files given");
}

TEST(TokenDataTest, TokenOutsideVocabulary) {
  ScratchDir dir;
  // uint32 shard; token 256 of the file (byte offset 1024 + 256 * 4) is bad.
  std::vector<uint32_t> tokens(300, 5);
  tokens[256] = 70000;
  std::string path = writeLlmC(dir, "s.bin", tokens, 4);
  auto stream = openOrFail({path}, TokenFormat::LlmC);
  ASSERT_TRUE(stream);
  SampleOrder order(299 / 10, std::nullopt);
  std::vector<int64_t> out(10 * 29), targets(10 * 29);
  std::string error;
  // Sample 25 covers positions 250..260.
  EXPECT_FALSE(loadSamples(
      *stream, order, 25, 1, 10, 64, "the rows of embedding 'tok.weight'", 64,
      "the classes of the loss", out.data(), targets.data(), error));
  EXPECT_EQ(error, path + ": token 70000 at byte offset 2048 (token 256 of "
                          "the file) is outside the vocabulary of 64 (the "
                          "rows of embedding 'tok.weight')");
  // The samples before it load.
  EXPECT_TRUE(loadSamples(*stream, order, 0, 25, 10, 64, "tokens", 64,
                          "targets", out.data(), targets.data(), error))
      << error;

  EXPECT_FALSE(validateStream(*stream, 64, "the rows of 'tok.weight'", error));
  EXPECT_EQ(error, path + ": token 70000 at byte offset 2048 (token 256 of "
                          "the file) is outside the vocabulary of 64 (the "
                          "rows of 'tok.weight')");
  EXPECT_TRUE(validateStream(*stream, 70001, "ok", error)) << error;
}

TEST(TokenDataTest, TargetOutsideVocabulary) {
  ScratchDir dir;
  // In the second shard, token 512 (byte offset 2048) is a valid input token
  // but not a valid target class.
  std::string first = writeRawU16(dir, "a.bin", std::vector<uint32_t>(20, 1));
  std::vector<uint32_t> tokens(600, 2);
  tokens[512] = 60000;
  std::string second = writeRawU16(dir, "b.bin", tokens);
  auto stream = openOrFail({first, second}, TokenFormat::RawU16);
  ASSERT_TRUE(stream);
  // T = 4: position 20 + 512 = 532 is the last token (target only) of
  // sample 132 (positions 528..532).
  int64_t numSamples = 0;
  std::string error;
  ASSERT_TRUE(countSamples(*stream, 4, numSamples, error));
  SampleOrder order(numSamples, std::nullopt);
  std::vector<int64_t> out(4), targets(4);
  EXPECT_FALSE(loadSamples(*stream, order, 132, 1, 4, 65536, "tokens", 100,
                           "the classes of the loss", out.data(),
                           targets.data(), error));
  EXPECT_EQ(error, second + ": token 60000 at byte offset 1024 (token 512 "
                            "of the file) is outside the vocabulary of 100 "
                            "(the classes of the loss)");
  // As an input token (sample 133 starts at it) it only needs tokenVocab.
  EXPECT_TRUE(loadSamples(*stream, order, 133, 1, 4, 65536, "tokens", 100,
                          "targets", out.data(), targets.data(), error))
      << error;
  EXPECT_EQ(out[0], 60000);
  EXPECT_FALSE(validateStream(*stream, 60000, "the vocabulary", error));
  EXPECT_CONTAINS(error, second + ": token 60000 at byte offset 1024");
}

TEST(TokenDataTest, InconsistentLoadArguments) {
  ScratchDir dir;
  std::string path = writeRawU16(dir, "t.bin", counting(0, 21));
  auto stream = openOrFail({path}, TokenFormat::RawU16);
  ASSERT_TRUE(stream);
  std::vector<int64_t> out(40), targets(40);
  std::string error;
  SampleOrder wrong(3, std::nullopt);
  EXPECT_FALSE(loadSamples(*stream, wrong, 0, 1, 4, 100, "t", 100, "c",
                           out.data(), targets.data(), error));
  EXPECT_EQ(error, "the sample order has 3 samples, but the token stream has "
                   "5 of sequence length 4");
  SampleOrder order(5, std::nullopt);
  EXPECT_FALSE(loadSamples(*stream, order, -1, 1, 4, 100, "t", 100, "c",
                           out.data(), targets.data(), error));
  EXPECT_CONTAINS(error, "invalid sample range");
  EXPECT_FALSE(loadSamples(*stream, order, 0, 1, 4, 0, "the rows of 'e'", 100,
                           "c", out.data(), targets.data(), error));
  EXPECT_EQ(error, "vocabulary size 0 (the rows of 'e') is not positive");
  EXPECT_FALSE(loadSamples(*stream, order, 0, 1, 0, 100, "t", 100, "c",
                           out.data(), targets.data(), error));
  EXPECT_CONTAINS(error, "sequence length 0 is not positive");
  EXPECT_TRUE(loadSamples(*stream, order, 0, 0, 4, 100, "t", 100, "c",
                          out.data(), targets.data(), error));
}

} // namespace
