//===- GpuAttentionKernelsTest.cpp - Fused attention kernels on the host --===//
//
// The fused attention's three kernels (GpuAttentionKernels.h) run through
// their host emulation (the very gpu.funcs that become the PTX, a warp at a
// time, mma.sync multiplied as the PTX ISA lays out its fragments) and are
// compared with attention computed in double precision from the same bf16
// inputs; their PTX goes through ptxas where it is installed.
//
//===----------------------------------------------------------------------===//

#include "../../lib/Conversion/TrainToGPU/Codegen/GpuAttentionKernels.h"
#include "../../lib/Conversion/TrainToGPU/Codegen/GpuKernels.h"
#include "GpuEmulationTestSupport.h"
#include "mantissa/Conversion/TrainToGPU.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"
#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <random>

using namespace mlir;
using namespace mlir::mantissa;

namespace {

uint16_t toBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  bits += 0x7fff + ((bits >> 16) & 1);
  return uint16_t(bits >> 16);
}
float fromBf16(uint16_t half) {
  uint32_t bits = uint32_t(half) << 16;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}
double roundBf16(double value) { return fromBf16(toBf16(float(value))); }

/// One attention problem: the layout of each operand, its bytes, and the
/// double-precision answer.
struct Problem {
  int64_t batch, heads, sequence, headDim;
  double scale;
  /// Operand layouts: [batch, sequence, heads, dim] (as the projections
  /// leave q, k, v before the permute), dense [batch, heads, sequence,
  /// dim], or that transposed ([batch, heads, dim, sequence], as autograd
  /// leaves the keys' gradient of q k^T).
  enum class Layout { Interleaved, Dense, Transposed };

  AttentionOperand operand(Type type, Layout layout) const {
    AttentionOperand result;
    result.elementType = type;
    result.elements = batch * heads * sequence * headDim;
    switch (layout) {
    case Layout::Interleaved:
      result.strides = {sequence * heads * headDim, headDim, heads * headDim,
                        1};
      break;
    case Layout::Dense:
      result.strides = {heads * sequence * headDim, sequence * headDim, headDim,
                        1};
      break;
    case Layout::Transposed:
      result.strides = {heads * sequence * headDim, sequence * headDim, 1,
                        sequence};
      break;
    }
    return result;
  }
  int64_t position(const AttentionOperand &operand, int64_t b, int64_t h,
                   int64_t row, int64_t column) const {
    return operand.offset + b * operand.strides[0] + h * operand.strides[1] +
           row * operand.strides[2] + column * operand.strides[3];
  }
};

class GpuAttentionKernelsTest : public GpuEmulationTest {
protected:
  /// Whether the kernels keep the scores in fp32 (AttentionKernelSpec's
  /// fp32Scores, torch's SDPA numerics) rather than rounding them as the
  /// bf16 bmm and its scaling do.
  bool fp32Scores = false;

  /// Runs forward and backward of `problem` with `closed(query, key)` as
  /// the mask (none where `closed` is empty: every key open) and checks
  /// every output against double precision.
  void check(const Problem &problem,
             const std::function<bool(int64_t, int64_t)> &closed,
             Problem::Layout valueLayout = Problem::Layout::Dense) {
    std::function<bool(int64_t, int64_t, int64_t)> anyBatch;
    if (closed)
      anyBatch = [closed](int64_t, int64_t query, int64_t key) {
        return closed(query, key);
      };
    check(problem, anyBatch, /*perBatch=*/false, valueLayout);
  }

  /// The same with `closed(batch, query, key)`: one [S, S] mask for every
  /// batch (`perBatch` false) or one per batch, [B, 1, S, S], as a padded
  /// batch's key padding mask broadcast over the queries would be. Or,
  /// with `added(batch, head, query, key)` instead, an additive fp32 mask
  /// [B, H, S, S] (an ALiBi bias with a causal -inf, a padded batch's
  /// finfo.min) broadcast where `added` ignores the batch (`perBatch`
  /// false: [1, H, S, S]).
  using Added = std::function<float(int64_t, int64_t, int64_t, int64_t)>;
  void check(const Problem &problem,
             const std::function<bool(int64_t, int64_t, int64_t)> &closed,
             bool perBatch, Problem::Layout valueLayout,
             const Added &added = nullptr) {
    const int64_t B = problem.batch, H = problem.heads, S = problem.sequence,
                  D = problem.headDim;
    Type bf16 = BFloat16Type::get(&context), f32 = Float32Type::get(&context),
         i1 = IntegerType::get(&context, 1);
    using Layout = Problem::Layout;
    AttentionKernelSpec spec;
    spec.batch = B;
    spec.heads = H;
    spec.sequence = S;
    spec.headDim = D;
    spec.scale = problem.scale;
    spec.fp32Scores = fp32Scores;
    spec.q = problem.operand(bf16, Layout::Interleaved);
    spec.k = problem.operand(bf16, Layout::Interleaved);
    spec.v = problem.operand(bf16, valueLayout);
    spec.out = problem.operand(bf16, Layout::Dense);
    spec.dout = problem.operand(bf16, Layout::Interleaved);
    spec.dq = problem.operand(bf16, Layout::Dense);
    spec.dk = problem.operand(bf16, Layout::Transposed);
    spec.dv = problem.operand(bf16, Layout::Interleaved);
    int64_t masks = perBatch ? B : 1;
    if (closed)
      spec.mask = {i1, masks * S * S, 0, {perBatch ? S * S : 0, 0, S, 1}};
    if (added)
      spec.mask = {
          f32, masks * H * S * S, 0, {perBatch ? H * S * S : 0, S * S, S, 1}};
    spec.lse = {f32, B * H * S, 0, {H * S, S, 1, 0}};
    spec.delta = spec.lse;
    ASSERT_EQ(whyAttentionKernelsCannotRun(spec), "");

    // The inputs, random bf16 (q and k larger, so that the softmax is far
    // from uniform).
    std::mt19937 random(7);
    std::normal_distribution<float> normal;
    auto fill = [&](std::vector<uint16_t> &data, float sigma) {
      data.resize(B * H * S * D);
      for (uint16_t &value : data)
        value = toBf16(sigma * normal(random));
    };
    std::vector<uint16_t> q, k, v, dout;
    fill(q, 1.5f);
    fill(k, 1.5f);
    fill(v, 1.0f);
    fill(dout, 1.0f);
    std::vector<uint8_t> mask(masks * S * S);
    for (int64_t b = 0; b < masks; ++b)
      for (int64_t i = 0; i < S; ++i)
        for (int64_t j = 0; j < S; ++j)
          mask[(b * S + i) * S + j] = closed && closed(b, i, j);
    std::vector<float> bias(added ? masks * H * S * S : 0);
    for (int64_t b = 0; b < masks && added; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < S; ++i)
          for (int64_t j = 0; j < S; ++j)
            bias[((b * H + h) * S + i) * S + j] = added(b, h, i, j);
    std::vector<uint16_t> out(B * H * S * D), dq(out.size()), dk(out.size()),
        dv(out.size());
    std::vector<float> lse(B * H * S), delta(B * H * S);

    // The three kernels, emulated on the host.
    OwningOpRef<ModuleOp> container =
        ModuleOp::create(UnknownLoc::get(&context));
    (*container)
        ->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                  UnitAttr::get(&context));
    OpBuilder builder = OpBuilder::atBlockEnd(container->getBody());
    auto gpuModule =
        builder.create<gpu::GPUModuleOp>(container->getLoc(), "attention");
    int64_t grids[3];
    const char *names[3] = {"attention_forward", "attention_backward_query",
                            "attention_backward_key_value"};
    AttentionKernel kinds[3] = {AttentionKernel::Forward,
                                AttentionKernel::BackwardQuery,
                                AttentionKernel::BackwardKeyValue};
    // Products per step of 32: scores (4 fragments by the head's chunks
    // of k = 16, the last one half zeros where 16 does not divide D), then
    // forward p v, query backward dp and dq, key/value backward dp, dv, dk
    // (each 2 by D / 8, or 4 by the chunks).
    int64_t chunks = (D + 15) / 16;
    int64_t products[3] = {4 * chunks + 2 * D / 8, 2 * (4 * chunks) + 2 * D / 8,
                           2 * (4 * chunks) + 2 * (2 * D / 8)};
    for (int i = 0; i < 3; ++i) {
      AttentionLaunch launch =
          buildAttentionKernel(gpuModule, names[i], kinds[i], spec, kBlockSize);
      grids[i] = launch.grid;
      // A warp per 16 rows of a sequence (the last one's partly empty
      // where 16 does not divide the sequence), a block's warps of one
      // sequence (its last block's partly idle).
      int64_t tiles = (S + 15) / 16;
      EXPECT_EQ(launch.warps, B * H * tiles);
      EXPECT_EQ(launch.grid,
                B * H * ((tiles + kBlockSize / 32 - 1) / (kBlockSize / 32)));
      EXPECT_EQ(launch.mmasPerStep, products[i]) << names[i];
      // Under a causal mask a warp takes about half of the steps of 32;
      // without one, or with one per batch, all of them.
      double steps = double((S + 31) / 32);
      if (!closed || perBatch || added) {
        EXPECT_EQ(launch.stepsPerWarp, steps) << names[i];
      } else {
        EXPECT_GT(launch.stepsPerWarp, 0.5 * steps) << names[i];
        EXPECT_LT(launch.stepsPerWarp, 0.5 * steps + 1) << names[i];
      }
    }
    ASSERT_TRUE(succeeded(verify(*container))) << diagnostics;
    void *handle = loadEmulatedKernels(gpuModule);
    ASSERT_NE(handle, nullptr);
    // Each argument's storage: its operand's (an operand with pairs is two
    // arguments on the same storage).
    std::map<const AttentionOperand *, void *> storage = {
        {&spec.q, q.data()},
        {&spec.k, k.data()},
        {&spec.v, v.data()},
        {&spec.mask, added ? static_cast<void *>(bias.data()) : mask.data()},
        {&spec.out, out.data()},
        {&spec.lse, lse.data()},
        {&spec.dout, dout.data()},
        {&spec.delta, delta.data()},
        {&spec.dq, dq.data()},
        {&spec.dk, dk.data()},
        {&spec.dv, dv.data()}};
    for (int i = 0; i < 3; ++i) {
      using Host = void (*)(void **, int64_t, int64_t);
      auto entry = reinterpret_cast<Host>(
          dlsym(handle, (std::string(names[i]) + "_host").c_str()));
      ASSERT_NE(entry, nullptr) << names[i];
      std::vector<void *> buffers, params;
      for (const AttentionArgument &argument :
           getAttentionKernelArguments(kinds[i], spec))
        buffers.push_back(storage.at(argument.operand));
      for (void *&buffer : buffers)
        params.push_back(&buffer);
      entry(params.data(), grids[i], kBlockSize);
    }
    dlclose(handle);

    // The PTX: one mma.sync per product, a ballot per step; ptxas accepts it.
    FailureOr<std::string> ptx = compileGpuModuleToPtx(*container, gpuModule);
    ASSERT_TRUE(succeeded(ptx)) << diagnostics;
    EXPECT_NE(ptx->find("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"),
              std::string::npos);
    EXPECT_NE(ptx->find("vote.sync.ballot.b32"), std::string::npos);
    // The steps' shared tiles: copied into shared memory (16 bytes at a
    // time where rows are aligned), their fragments read with ldmatrix
    // (transposed for the products' second operand), between barriers.
    EXPECT_NE(ptx->find(".shared .align 16"), std::string::npos);
    EXPECT_NE(ptx->find("st.shared.v4.b32"), std::string::npos);
    EXPECT_NE(ptx->find("ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
              std::string::npos);
    EXPECT_NE(ptx->find("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"),
              std::string::npos);
    EXPECT_NE(ptx->find("bar.sync"), std::string::npos);
    checkPtxas(*ptx);

    // Attention in double precision from the same bf16 inputs, the scores
    // rounded as the bf16 bmm and its scaling round them (not with
    // fp32Scores).
    std::vector<double> wantOut(out.size()), wantLse(lse.size()),
        wantDq(out.size()), wantDk(out.size()), wantDv(out.size());
    auto value = [&](const std::vector<uint16_t> &data,
                     const AttentionOperand &operand, int64_t b, int64_t h,
                     int64_t row, int64_t column) {
      return double(
          fromBf16(data[problem.position(operand, b, h, row, column)]));
    };
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> p(S * S), ds(S * S);
        for (int64_t i = 0; i < S; ++i) {
          double maximum = -INFINITY, sum = 0;
          std::vector<double> s(S);
          for (int64_t j = 0; j < S; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < D; ++d)
              dot +=
                  value(q, spec.q, b, h, i, d) * value(k, spec.k, b, h, j, d);
            s[j] = closed && closed(b, i, j) ? -INFINITY
                   : fp32Scores
                       ? dot * problem.scale
                       : roundBf16(roundBf16(dot) * float(problem.scale));
            if (added)
              s[j] += added(b, h, i, j);
            maximum = std::max(maximum, s[j]);
          }
          for (int64_t j = 0; j < S; ++j)
            sum += std::exp(s[j] - maximum);
          wantLse[(b * H + h) * S + i] = maximum + std::log(sum);
          for (int64_t j = 0; j < S; ++j)
            p[i * S + j] = std::exp(s[j] - maximum) / sum;
          // dp = dout v^T, ds = p (dp - sum_j p dp) * scale.
          std::vector<double> dp(S);
          double rowSum = 0;
          for (int64_t j = 0; j < S; ++j) {
            for (int64_t d = 0; d < D; ++d)
              dp[j] += value(dout, spec.dout, b, h, i, d) *
                       value(v, spec.v, b, h, j, d);
            rowSum += p[i * S + j] * dp[j];
          }
          for (int64_t j = 0; j < S; ++j)
            ds[i * S + j] = p[i * S + j] * (dp[j] - rowSum) * problem.scale;
        }
        for (int64_t i = 0; i < S; ++i)
          for (int64_t d = 0; d < D; ++d) {
            double o = 0, gq = 0, gk = 0, gv = 0;
            for (int64_t j = 0; j < S; ++j) {
              o += p[i * S + j] * value(v, spec.v, b, h, j, d);
              gq += ds[i * S + j] * value(k, spec.k, b, h, j, d);
              // Row i as a key: its gradients sum over queries j.
              gk += ds[j * S + i] * value(q, spec.q, b, h, j, d);
              gv += p[j * S + i] * value(dout, spec.dout, b, h, j, d);
            }
            int64_t dense = ((b * H + h) * S + i) * D + d;
            wantOut[dense] = o;
            wantDq[dense] = gq;
            wantDk[dense] = gk;
            wantDv[dense] = gv;
          }
      }
    // Each output against its answer, relative to the answer's largest
    // element: bf16 operands of the products (p and ds rounded, as the
    // unfused program rounds them) leave errors near 2^-8 of it; a wrong
    // fragment or row leaves errors of the order of the values.
    // A NaN (a value read from unwritten shared memory, which the
    // emulation fills with NaN) is as wrong as can be.
    auto distance = [](double got, double want) {
      double difference = std::fabs(got - want);
      return std::isnan(difference) ? INFINITY : difference;
    };
    auto compare = [&](const char *name, const std::vector<uint16_t> &got,
                       const AttentionOperand &operand,
                       const std::vector<double> &want) {
      double largest = 0, worst = 0;
      for (double x : want)
        largest = std::max(largest, std::fabs(x));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < S; ++i)
            for (int64_t d = 0; d < D; ++d)
              worst = std::max(worst,
                               distance(value(got, operand, b, h, i, d),
                                        want[((b * H + h) * S + i) * D + d]));
      EXPECT_GT(largest, 0.1) << name;
      EXPECT_LT(worst, 0.02 * largest)
          << name << ": worst " << worst << " of " << largest;
    };
    compare("out", out, spec.out, wantOut);
    compare("dq", dq, spec.dq, wantDq);
    compare("dk", dk, spec.dk, wantDk);
    compare("dv", dv, spec.dv, wantDv);
    double worstLse = 0;
    for (size_t i = 0; i < lse.size(); ++i)
      worstLse = std::max(worstLse, distance(lse[i], wantLse[i]));
    // From fp32 scores the log-sum-exp is exact to fp32's resolution; from
    // scores rounded to bf16 (as the reference rounds them), to 1e-3.
    EXPECT_LT(worstLse, fp32Scores ? 2e-5 : 1e-3);
  }

  /// ptxas (CUDA's, or on PATH) assembles the PTX for sm_90, where present.
  void checkPtxas(const std::string &ptx) {
    llvm::ErrorOr<std::string> ptxas =
        llvm::sys::findProgramByName("ptxas", {"/usr/local/cuda/bin"});
    if (!ptxas)
      ptxas = llvm::sys::findProgramByName("ptxas");
    if (!ptxas)
      return;
    SmallString<256> input, output;
    ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("attention", "ptx", input));
    ASSERT_FALSE(
        llvm::sys::fs::createTemporaryFile("attention", "cubin", output));
    {
      std::error_code code;
      llvm::raw_fd_ostream os(input, code);
      ASSERT_FALSE(code);
      os << ptx;
    }
    std::string message;
    int status = llvm::sys::ExecuteAndWait(
        *ptxas, {*ptxas, "-arch=sm_90", input.str(), "-o", output.str()},
        std::nullopt, {}, 0, 0, &message);
    llvm::sys::fs::remove(input);
    llvm::sys::fs::remove(output);
    EXPECT_EQ(status, 0) << message;
  }
};

/// Causal attention over two batches of three heads, 64 positions (two
/// steps of 32, the second skipped by the first rows' warps, a block's
/// last four warps idle), head
/// dimension 32; q, k and dout read through the interleaved layout the
/// projections leave, dk written transposed.
TEST_F(GpuAttentionKernelsTest, CausalMatchesDoublePrecision) {
  check({2, 3, 64, 32, 0.17677669529663687},
        [](int64_t query, int64_t key) { return key > query; });
}

/// A mask that is not causal (every query sees a different set of keys,
/// some steps closed for some warps only), head dimension 16, v stored
/// transposed (no pairs of neighbouring columns to load at once).
TEST_F(GpuAttentionKernelsTest, ArbitraryMaskMatchesDoublePrecision) {
  check(
      {1, 2, 96, 16, 0.25},
      [](int64_t query, int64_t key) {
        if (key == query)
          return false;
        return (query * 7 + key * 3) % 5 == 0 || (key >= 64 && query < 40);
      },
      Problem::Layout::Transposed);
}

/// Sequences that leave the last warp's rows and the last step's columns
/// part empty: 40 positions (two and a half warps of rows, a step and a
/// quarter), causal; 7 (odd: the mask has no pairs, one warp of rows, one
/// step), an arbitrary mask. Nothing past the sequence is read into a
/// result or written.
TEST_F(GpuAttentionKernelsTest, SequencesOfAnyLengthMatchDoublePrecision) {
  check({2, 2, 40, 32, 0.17677669529663687},
        [](int64_t query, int64_t key) { return key > query; });
  check(
      {1, 3, 7, 16, 0.25},
      [](int64_t query, int64_t key) {
        return key != query && (query + 2 * key) % 3 == 0;
      },
      Problem::Layout::Transposed);
}

/// Heads narrower than 16 or not a multiple of it, whose last 8 columns
/// the products over the head dimension take as a k of 16 half zeros, and
/// whose last 8-column tile of the outputs has no neighbour: heads of 8
/// (the corpus llama's), causal over 8 positions (one warp of rows, a
/// quarter of a step); heads of 24, an arbitrary mask over 48 positions,
/// v stored transposed.
TEST_F(GpuAttentionKernelsTest, HeadsOfEightColumnTilesMatchDoublePrecision) {
  check({2, 4, 8, 8, 0.35355339059327373},
        [](int64_t query, int64_t key) { return key > query; });
  check(
      {1, 2, 48, 24, 0.20412414523193154},
      [](int64_t query, int64_t key) {
        return key != query && (query * 5 + key) % 4 == 0;
      },
      Problem::Layout::Transposed);
}

/// A mask per batch: a padded batch's key padding (the second sequence's
/// last 19 of 48 positions hidden from every query; v transposed), and an
/// arbitrary mask that differs between the two batches (the warps of one
/// batch skip other steps than the other's).
TEST_F(GpuAttentionKernelsTest, MaskPerBatchMatchesDoublePrecision) {
  check(
      {2, 2, 48, 16, 0.25},
      [](int64_t batch, int64_t, int64_t key) {
        return key >= (batch == 0 ? 48 : 29);
      },
      /*perBatch=*/true, Problem::Layout::Transposed);
  check(
      {2, 1, 64, 32, 0.17677669529663687},
      [](int64_t batch, int64_t query, int64_t key) {
        return batch == 0 ? key > query : (key >= 32 && query < 32);
      },
      /*perBatch=*/true, Problem::Layout::Dense);
}

/// No mask at all (an encoder's attention: the op `unmasked`), so no mask
/// argument and no step skipped: 80 positions (two and a half steps, five
/// warps of rows), heads of 16; and 16 positions with heads of 8 (the
/// DiT block of test/Inputs/aten), v stored transposed.
TEST_F(GpuAttentionKernelsTest, UnmaskedMatchesDoublePrecision) {
  check({2, 2, 80, 16, 0.25}, nullptr);
  check({2, 2, 16, 8, 0.35355339059327379}, nullptr,
        Problem::Layout::Transposed);
}

/// An additive fp32 mask (train.attention_kernel's f32 mask, added to the
/// scaled scores): an ALiBi bias per head with -inf above the diagonal
/// ([1, H, S, S], 48 positions: a step and a half), and a padded batch's
/// mask per batch as HF builds it (0 where seen, finfo.min where not, a
/// finite value; [B, H, S, S], 64 positions). No step is skipped.
TEST_F(GpuAttentionKernelsTest, AdditiveMaskMatchesDoublePrecision) {
  check({1, 2, 48, 16, 0.25}, nullptr, /*perBatch=*/false,
        Problem::Layout::Dense,
        [](int64_t, int64_t head, int64_t query, int64_t key) {
          return key > query ? -INFINITY
                             : -0.25f * float(head + 1) * float(query - key);
        });
  check({2, 2, 64, 32, 0.17677669529663687}, nullptr, /*perBatch=*/true,
        Problem::Layout::Dense,
        [](int64_t batch, int64_t, int64_t, int64_t key) {
          return key >= (batch == 0 ? 64 : 37)
                     ? std::numeric_limits<float>::lowest()
                     : 0.0f;
        });
}

/// Scores kept in fp32 as torch's SDPA kernels keep them (fp32_scores: no
/// rounding of q k^T or of its scaling, dp in fp32): causal over 64
/// positions with heads of 32 (a scale that is not a power of two), and an
/// unmasked encoder over 40. The log-sum-exp must match fp32 scores to
/// 2e-5; kernels that rounded the scores are off by 1e-2 to 3e-2 there.
TEST_F(GpuAttentionKernelsTest, Fp32ScoresMatchDoublePrecision) {
  fp32Scores = true;
  check({2, 3, 64, 32, 0.17677669529663687},
        [](int64_t query, int64_t key) { return key > query; });
  check({1, 2, 40, 16, 0.25}, nullptr);
}

} // namespace
