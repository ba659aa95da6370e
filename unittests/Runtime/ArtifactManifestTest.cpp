//===- ArtifactManifestTest.cpp - manifest.json written and read back -----===//
//
// The compiler writes an artifact's manifest with writeArtifactManifest and
// the runtime reads it with parseArtifactManifest (ArtifactManifest.h): every
// field must survive the trip, the text must be the one readers since
// version 1 have seen (keys sorted, two-space indentation), and a layout the
// kernel was not compiled for must be refused with the member it is in.
// (FuzzRegressionTest.cpp checks loading hostile manifests with files.)
//
//===----------------------------------------------------------------------===//

#include "mantissa/Format/ArtifactManifest.h"

#include <gtest/gtest.h>

using namespace mlir::mantissa::rt;

namespace {

ArtifactManifest sampleManifest() {
  ArtifactManifest manifest;
  manifest.step = "train_step";
  manifest.tileSize = 4;
  manifest.files = {{"kernels.0.ptx", 10, "ab"},
                    {"kernels.so", 20, "cd"},
                    {"step.mlir", 30, "ef"},
                    {"weights.safetensors", 40, "12"}};
  ArtifactTensor weight;
  weight.fqn = "w";
  weight.shape = {2, 3};
  weight.exported = DType::BF16;
  weight.master = DType::F32;
  weight.gather = DType::BF16;
  weight.reduce = DType::F32;
  weight.moments = DType::F32;
  weight.group = "root.bf16";
  weight.masterSplit = true;
  ArtifactTensor mask;
  mask.fqn = "mask";
  mask.isParameter = false;
  mask.shape = {4};
  manifest.tensors = {weight, mask};
  manifest.buffers = {"mask", "positions"};

  ManifestGroup group;
  group.name = "root.bf16";
  group.unit = "";
  group.gather = DType::BF16;
  group.nestedIn = "root";
  group.reshardAfterForward = false;
  group.kernelSymbol = "mantissa_adamw_0";
  group.gpuKernelSymbol = "mantissa_adamw_0_kernel";
  group.numTiles = 2;
  group.bufferBytes = {24, 12, 12, 24, 24, 0};
  ArtifactMember member;
  member.fqn = "w";
  member.shape = {2, 3};
  member.count = 6;
  member.numTiles = 2;
  member.grad = DType::F32;
  member.param = DType::BF16;
  member.moments = DType::F32;
  member.master = MasterKind::Remainder;
  group.members = {member};
  manifest.groups = {group};

  ManifestKernels &kernels = manifest.kernels.emplace();
  kernels.cpuLibrary = "kernels.so";
  kernels.tileSize = 4;
  kernels.targetCpu = "sapphirerapids";
  kernels.targetFeatures = std::vector<std::string>{"avx2", "fma"};
  kernels.gpu = "kernels.<group index>.ptx (sm_90)";
  kernels.gpuStepNote = "no GPU step: an unsupported op";
  kernels.cpuStep = ManifestKernels::CpuStep{"step.cpu.json", "sapphirerapids"};
  return manifest;
}

TEST(ArtifactManifestTest, EveryFieldSurvivesTheTrip) {
  ArtifactManifest written = sampleManifest();
  std::string text = writeArtifactManifest(written);
  ArtifactManifest read;
  std::string error;
  ASSERT_TRUE(parseArtifactManifest(text, read, error)) << error;
  EXPECT_EQ(read.step, "train_step");
  EXPECT_EQ(read.tileSize, 4);
  ASSERT_EQ(read.files.size(), 4u);
  EXPECT_EQ(read.files[3].name, "weights.safetensors");
  EXPECT_EQ(read.files[3].bytes, 40);
  EXPECT_EQ(read.files[3].checksum, "12");
  EXPECT_TRUE(read.hasPtx());
  ASSERT_EQ(read.tensors.size(), 2u);
  EXPECT_TRUE(read.tensors[0].masterSplit);
  EXPECT_EQ(read.tensors[0].master, DType::F32);
  EXPECT_EQ(read.tensors[0].exported, DType::BF16);
  EXPECT_EQ(read.tensors[0].group, "root.bf16");
  EXPECT_FALSE(read.tensors[1].isParameter);
  EXPECT_EQ(read.buffers, (std::vector<std::string>{"mask", "positions"}));
  ASSERT_EQ(read.groups.size(), 1u);
  const ManifestGroup &group = read.groups[0];
  EXPECT_EQ(group.nestedIn, "root");
  EXPECT_FALSE(group.reshardAfterForward);
  EXPECT_EQ(group.gpuKernelSymbol, "mantissa_adamw_0_kernel");
  EXPECT_EQ(group.bufferBytes[unsigned(Role::ExpAvgSq)], 24);
  ASSERT_EQ(group.members.size(), 1u);
  EXPECT_EQ(group.members[0].master, MasterKind::Remainder);
  EXPECT_EQ(group.members[0].param, DType::BF16);
  ASSERT_TRUE(read.kernels);
  EXPECT_EQ(read.kernels->targetFeatures,
            (std::vector<std::string>{"avx2", "fma"}));
  EXPECT_EQ(read.kernels->gpuStepNote, "no GPU step: an unsupported op");
  ASSERT_TRUE(read.kernels->cpuStep);
  EXPECT_EQ(read.kernels->cpuStep->program, "step.cpu.json");
  EXPECT_FALSE(read.kernels->gpuStep);
  // Written again, the text is the same.
  EXPECT_EQ(writeArtifactManifest(read), text);
}

TEST(ArtifactManifestTest, KeysAreSortedAndIndentedAsReadersSawThem) {
  std::string text = writeArtifactManifest(sampleManifest());
  EXPECT_EQ(text.rfind("{\n  \"buffers\": [\n    \"mask\",", 0), 0u) << text;
  EXPECT_LT(text.find("\"files\""), text.find("\"format\""));
  EXPECT_LT(text.find("\"format\""), text.find("\"groups\""));
  EXPECT_NE(text.find("\"nested_in\": \"root\""), std::string::npos);
  EXPECT_NE(text.find("\"master\": \"fp32_split\""), std::string::npos);
  EXPECT_EQ(text.back(), '\n');
  EXPECT_TRUE(isArtifactManifestText(text));
  EXPECT_FALSE(isArtifactManifestText("{\"format\": \"mantissa-cpu-step\"}"));
  EXPECT_FALSE(isArtifactManifestText("not json"));
}

TEST(ArtifactManifestTest, LayoutsTheKernelWasNotCompiledForAreRefused) {
  ArtifactManifest manifest = sampleManifest();
  manifest.groups[0].members[0].numTiles = 1; // 6 elements need 2 tiles of 4
  std::string error;
  ArtifactManifest read;
  EXPECT_FALSE(
      parseArtifactManifest(writeArtifactManifest(manifest), read, error));
  EXPECT_EQ(error, "group 'root.bf16' member 'w': inconsistent layout");

  manifest = sampleManifest();
  manifest.groups[0].bufferBytes[unsigned(Role::Param)] = 11;
  EXPECT_FALSE(
      parseArtifactManifest(writeArtifactManifest(manifest), read, error));
  EXPECT_EQ(error, "group 'root.bf16' member 'w': lies outside the param "
                   "buffer");

  manifest = sampleManifest();
  manifest.tensors[0].group = "elsewhere";
  manifest.groups[0].members[0].fqn = "v";
  EXPECT_FALSE(
      parseArtifactManifest(writeArtifactManifest(manifest), read, error));
  EXPECT_EQ(error, "parameter 'w' is in no group");

  EXPECT_FALSE(parseArtifactManifest("[1, 2]", read, error));
  EXPECT_EQ(error, "damaged manifest (not valid JSON)");
}

TEST(ArtifactManifestTest, ShardsSplitTilesAsTheKernelDoes) {
  ManifestGroup group = sampleManifest().groups[0];
  group.numTiles = 5;
  EXPECT_EQ(shardTiles(group, 0, 2), (std::pair<int64_t, int64_t>{0, 2}));
  EXPECT_EQ(shardTiles(group, 1, 2), (std::pair<int64_t, int64_t>{2, 5}));
  // Tile 1 of the member (elements 4 and 5) in the bf16 param buffer.
  ByteRange range =
      tileRangeBytes(sampleManifest().groups[0], 4, Role::Param, 1, 2);
  EXPECT_EQ(range.begin, 8);
  EXPECT_EQ(range.end, 12);
}

} // namespace
