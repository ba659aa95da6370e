//===- CpuGemm.cpp - The compiled CPU step's matrix products --------------===//
//
// Part of the Mantissa project.
//
// Products run as oneDNN matmul primitives (brgemm kernels: avx512_core for
// fp32, avx512_core_bf16 or avx512_core_amx for bf16 operands, fp32
// accumulation either way), cached by shape. A product adds to C (oneDNN's
// sum post-op) or, as its descriptor says (kGemmAccumulate 0), writes C
// without reading it. Per call, the step's product is found by its
// descriptor's address (planAt) and each thread reuses its oneDNN memory
// objects, so a call costs the kernels and little else.
//
// bf16 operands on a CPU where oneDNN has no bf16 matmul (AVX2 machines, or
// ONEDNN_MAX_CPU_ISA=AVX2; oneDNN 2.6 refuses the primitive there) are
// widened: the product copies its operands into fp32 scratch buffers of the
// calling thread (exact: every bf16 value is an fp32 value; the buffers grow
// to the largest product and are reused) and runs as an fp32 product on
// them. A product of bf16 values is exact in fp32, and the sums accumulate
// in fp32 either way, so a widened product is bit for bit the fp32 library
// product of the widened operands (the same entry, tiles and threads); like
// every library product it differs from the generated loops by fp32
// accumulation order only (MANTISSA_CPU_GEMM=loops keeps the loops' order).
// The choice is made per product shape when the step first calls it, from
// the running oneDNN's answer (cpuGemmPath), and a run says once that it
// widens (describeWidenedProducts).
//
// A product may round its sums to bf16 as it writes them (kGemmRoundC):
// kept in fp32, or stored into a bf16 C, for which each tile is summed
// into an fp32 scratch of the calling thread, laid out as C, and rounded
// from there while it is in the cache.
//
// Determinism: oneDNN splits the reduction across threads when a product's
// output is small, so its sums would depend on the thread count, and the
// trainer promises the same bits whatever the split into ranks (and so
// whatever OMP_NUM_THREADS each rank gets). Here every product is cut into
// tiles chosen from its shape alone (row blocks of kTileRows, or groups of
// batch items), each tile is computed by one thread with a primitive created
// for one thread (whole reduction, one order), and the tiles are spread over
// the OpenMP threads. The sums of an element therefore depend on the shape
// only.
//
// libmantissa_rt links LLVM's OpenMP runtime before oneDNN, whose GNU OpenMP
// calls (GOMP_parallel, omp_in_parallel, ...) then bind to it (libomp exports
// them under GNU's symbol versions): the step's loops, these tiles and
// oneDNN share one thread pool, and oneDNN, called inside a tile's parallel
// region, runs on the calling thread.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/CpuGemm.h"
#include "mantissa/Format/CpuClones.h"
#include "mantissa/Format/DType.h"

#include <dlfcn.h>
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

using namespace mlir::mantissa::rt;

namespace {

using Descriptor = std::array<int64_t, kGemmFieldCount>;

/// Rows of A and C per tile when the product has more (a block large
/// enough for the kernels' register blocking, small enough to give two
/// threads work on llama_medium's 128-row products).
constexpr int64_t kTileRows = 64;
/// Batch items are grouped into tiles of at least this many flops, and
/// products below it run on the calling thread.
constexpr int64_t kMinimumTileFlops = int64_t(1) << 20;

/// One tile kind of a product: the primitive (or none, when oneDNN has no
/// implementation for the layout) and its scratchpad size.
struct Kernel {
  std::unique_ptr<dnnl::matmul> primitive;
  dnnl::memory::desc a, b, c, scratchpad;
  size_t scratchpadBytes = 0;
  /// bf16 operands oneDNN has no matmul for: the product runs widened.
  bool widen = false;
  CpuGemmPath path() const {
    return widen        ? CpuGemmPath::Widened
           : !primitive ? CpuGemmPath::Loops
                        : CpuGemmPath::Library;
  }
};

/// The fp32 product that `d`'s widened operands make: each operand dense, in
/// the orientation it has in `d` (contiguous along the same dimension, so
/// that oneDNN picks the kernel it would for fp32 operands of that layout).
Descriptor widenedDescriptor(const Descriptor &d) {
  Descriptor w = d;
  int64_t m = d[kGemmM], n = d[kGemmN], k = d[kGemmK];
  w[kGemmTypeA] = w[kGemmTypeB] = kGemmF32;
  bool aAlongK = d[kGemmStrideAK] == 1;
  w[kGemmStrideABatch] = m * k;
  w[kGemmStrideAM] = aAlongK ? k : 1;
  w[kGemmStrideAK] = aAlongK ? 1 : m;
  bool bAlongN = d[kGemmStrideBN] == 1;
  w[kGemmStrideBBatch] = k * n;
  w[kGemmStrideBK] = bAlongN ? n : 1;
  w[kGemmStrideBN] = bAlongN ? 1 : k;
  return w;
}

/// Widens `count` bf16 values `stride` apart into contiguous fp32 bits
/// (a bf16 value is the high half of the fp32 one).
void widenLine(const uint16_t *__restrict in, uint32_t *__restrict out,
               int64_t count, int64_t stride) {
  if (stride == 1) {
    for (int64_t i = 0; i < count; ++i) // vectorised
      out[i] = uint32_t(in[i]) << 16;
    return;
  }
  for (int64_t i = 0; i < count; ++i)
    out[i] = uint32_t(in[i * stride]) << 16;
}

/// Copies `batch` bf16 matrices of rows x columns into `target` as fp32:
/// element [b][r][c] from source[b * from[0] + r * from[1] + c * from[2]]
/// to target[b * to[0] + r * to[1] + c * to[2]], walking the target's
/// contiguous dimension innermost (a copy: the same bits at any thread
/// count).
void widenOperand(const uint16_t *source, uint32_t *target, int64_t batch,
                  int64_t rows, int64_t columns, const int64_t from[3],
                  const int64_t to[3]) {
  // Inner: the dimension the target is contiguous along.
  bool columnsInner = to[2] == 1;
  int64_t outer = columnsInner ? rows : columns;
  int64_t inner = columnsInner ? columns : rows;
  int64_t fromOuter = columnsInner ? from[1] : from[2];
  int64_t fromInner = columnsInner ? from[2] : from[1];
  int64_t toOuter = columnsInner ? to[1] : to[2];
  int64_t fromItem = from[0], toItem = to[0];
  int64_t lines = batch * outer;
#pragma omp parallel for schedule(static) if (lines * inner >=                 \
                                              (int64_t(1) << 16))
  for (int64_t line = 0; line < lines; ++line) {
    int64_t item = line / outer, o = line % outer;
    widenLine(source + item * fromItem + o * fromOuter,
              target + item * toItem + o * toOuter, inner, fromInner);
  }
}

const char *effectiveIsaName() {
  switch (dnnl::get_effective_cpu_isa()) {
  case dnnl::cpu_isa::avx512_core_amx:
    return "avx512_core_amx";
  case dnnl::cpu_isa::avx512_core_bf16:
    return "avx512_core_bf16";
  case dnnl::cpu_isa::avx512_core_vnni:
    return "avx512_core_vnni";
  case dnnl::cpu_isa::avx512_core:
    return "avx512_core";
  case dnnl::cpu_isa::avx2_vnni:
    return "avx2_vnni";
  case dnnl::cpu_isa::avx2:
    return "avx2";
  case dnnl::cpu_isa::avx:
    return "avx";
  case dnnl::cpu_isa::sse41:
    return "sse41";
  default:
    return "?";
  }
}

dnnl::memory::data_type dataType(int64_t type) {
  return type == kGemmBF16 ? dnnl::memory::data_type::bf16
                           : dnnl::memory::data_type::f32;
}

int64_t elementBytes(int64_t type) { return type == kGemmBF16 ? 2 : 4; }

float loadElement(const void *base, int64_t index, int64_t type) {
  if (type == kGemmBF16)
    return bf16BitsToFloat(static_cast<const uint16_t *>(base)[index]);
  return static_cast<const float *>(base)[index];
}

/// Stores `value`, rounded as every bf16 C is (floatToBF16Bits) where C is
/// bf16.
void storeElement(void *base, int64_t index, int64_t type, float value) {
  if (type == kGemmBF16)
    static_cast<uint16_t *>(base)[index] = floatToBF16Bits(value);
  else
    static_cast<float *>(base)[index] = value;
}

/// Rounds the fp32 sums that tile `t` wrote (at `sums`) to bf16, as
/// floatToBF16Bits rounds (the bits of the step's arith.truncf, and of
/// torch's): into `narrow`, a bf16 C laid out as the sums, when given,
/// else in place, kept in fp32 (arith.truncf then arith.extf). Both are
/// kGemmRoundC, done right after the tile's kernel, while the sums are in
/// the cache, instead of a pass of the step over the whole product.
/// Compiled for AVX2 and the baseline (CpuClones.h): 8 lanes where the CPU
/// has them.
MANTISSA_AVX2_AND_BASELINE void roundTileToBf16(const Descriptor &t,
                                                float *sums, uint16_t *narrow) {
  for (int64_t item = 0; item < t[kGemmBatch]; ++item)
    for (int64_t row = 0; row < t[kGemmM]; ++row) {
      int64_t at = item * t[kGemmStrideCBatch] + row * t[kGemmStrideCM];
      float *__restrict line = sums + at;
      if (narrow) {
        uint16_t *__restrict out = narrow + at;
        for (int64_t column = 0; column < t[kGemmN]; ++column)
          out[column] = floatToBF16Bits(line[column]);
      } else {
        for (int64_t column = 0; column < t[kGemmN]; ++column)
          line[column] = bf16BitsToFloat(floatToBF16Bits(line[column]));
      }
    }
}

/// A tile in plain loops, for layouts oneDNN has no kernel for (never the
/// step's own products; reported once per shape).
void referenceTile(const Descriptor &d, const void *a, const void *b, void *c) {
  for (int64_t batch = 0; batch < d[kGemmBatch]; ++batch)
    for (int64_t i = 0; i < d[kGemmM]; ++i)
      for (int64_t j = 0; j < d[kGemmN]; ++j) {
        int64_t at = batch * d[kGemmStrideCBatch] + i * d[kGemmStrideCM] +
                     j * d[kGemmStrideCN];
        float sum = 0;
        for (int64_t k = 0; k < d[kGemmK]; ++k)
          sum += loadElement(a,
                             batch * d[kGemmStrideABatch] +
                                 i * d[kGemmStrideAM] + k * d[kGemmStrideAK],
                             d[kGemmTypeA]) *
                 loadElement(b,
                             batch * d[kGemmStrideBBatch] +
                                 k * d[kGemmStrideBK] + j * d[kGemmStrideBN],
                             d[kGemmTypeB]);
        storeElement(
            c, at, d[kGemmTypeC],
            d[kGemmAccumulate] ? loadElement(c, at, d[kGemmTypeC]) + sum : sum);
      }
}

/// The product of an empty sum: C unchanged, or (when C is written
/// rather than added to) zero.
void emptyProduct(const Descriptor &d, void *c) {
  if (d[kGemmAccumulate])
    return;
  for (int64_t batch = 0; batch < d[kGemmBatch]; ++batch)
    for (int64_t i = 0; i < d[kGemmM]; ++i)
      for (int64_t j = 0; j < d[kGemmN]; ++j)
        storeElement(c,
                     batch * d[kGemmStrideCBatch] + i * d[kGemmStrideCM] +
                         j * d[kGemmStrideCN],
                     d[kGemmTypeC], 0.0f);
}

/// Runs `body` with this thread's OpenMP thread count at one (oneDNN reads
/// it when it creates a primitive and when it runs one outside a parallel
/// region), restoring it afterwards.
template <typename Body> void withOneThread(Body body) {
  int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  body();
  omp_set_num_threads(saved);
}

class GemmLibrary {
public:
  static GemmLibrary &get() {
    static GemmLibrary library;
    return library;
  }

  /// The kernel of tiles shaped as `d` (created on first use, for one
  /// thread).
  const Kernel &kernel(const Descriptor &d) {
    std::lock_guard<std::mutex> lock(mutex);
    std::unique_ptr<Kernel> &slot = kernels[d];
    if (slot)
      return *slot;
    slot = std::make_unique<Kernel>();
    dnnl::primitive_attr attributes;
    // C += A * B: the sum post-op adds the old C; without it C = A * B.
    if (d[kGemmAccumulate]) {
      dnnl::post_ops accumulate;
      accumulate.append_sum(1.0f);
      attributes.set_post_ops(accumulate);
    }
    // Each tile runs concurrently with others on one primitive: each
    // thread brings its own scratchpad.
    attributes.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    std::string problem;
    auto create = [&](const Descriptor &t) {
      using dims = dnnl::memory::dims;
      dnnl::memory::desc a(
          dims{t[kGemmBatch], t[kGemmM], t[kGemmK]}, dataType(t[kGemmTypeA]),
          dims{t[kGemmStrideABatch], t[kGemmStrideAM], t[kGemmStrideAK]});
      dnnl::memory::desc b(
          dims{t[kGemmBatch], t[kGemmK], t[kGemmN]}, dataType(t[kGemmTypeB]),
          dims{t[kGemmStrideBBatch], t[kGemmStrideBK], t[kGemmStrideBN]});
      dnnl::memory::desc c(
          dims{t[kGemmBatch], t[kGemmM], t[kGemmN]}, dataType(t[kGemmTypeC]),
          dims{t[kGemmStrideCBatch], t[kGemmStrideCM], t[kGemmStrideCN]});
      try {
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attributes,
                                        engine);
        slot->a = a;
        slot->b = b;
        slot->c = c;
        slot->scratchpad = pd.scratchpad_desc();
        slot->scratchpadBytes = slot->scratchpad.get_size();
        slot->primitive = std::make_unique<dnnl::matmul>(pd);
        return true;
      } catch (const dnnl::error &error) {
        problem = error.what();
        return false;
      }
    };
    withOneThread([&] {
      if (create(d))
        return;
      // Run widened (mantissa_rt_cpu_gemm), of which a run warns once.
      if ((slot->widen =
               d[kGemmTypeA] == kGemmBF16 && d[kGemmTypeB] == kGemmBF16))
        return;
      std::fprintf(stderr,
                   "mantissa: warning: oneDNN has no matmul for a %lldx%lld"
                   "x%lldx%lld product of this layout (%s); computing it in "
                   "plain loops\n",
                   (long long)d[kGemmBatch], (long long)d[kGemmM],
                   (long long)d[kGemmN], (long long)d[kGemmK], problem.c_str());
    });
    return *slot;
  }

  /// Runs one tile on the calling thread.
  void run(const Kernel &kernel, const Descriptor &d, const void *a,
           const void *b, void *c) {
    if (!kernel.primitive) {
      referenceTile(d, a, b, c);
      return;
    }
    /// One thread's arguments of one kernel: memory objects made once and
    /// pointed at each call's operands (the step allocates its buffers in
    /// the same order every step, so the addresses mostly repeat and the
    /// handles are left as they are).
    struct Arguments {
      std::array<dnnl::memory, 4> memory;
      std::array<void *, 4> handles{};
      std::array<dnnl_exec_arg_t, 4> list;
      int count = 0;
    };
    thread_local std::vector<uint8_t> scratchpad;
    thread_local std::unique_ptr<dnnl::stream> stream;
    thread_local std::unordered_map<const Kernel *, Arguments> bound;
    if (!stream)
      stream = std::make_unique<dnnl::stream>(engine);
    if (scratchpad.size() < kernel.scratchpadBytes)
      scratchpad.resize(kernel.scratchpadBytes);
    std::array<void *, 4> handles = {
        const_cast<void *>(a), const_cast<void *>(b), c, scratchpad.data()};
    auto [entry, made] = bound.try_emplace(&kernel);
    Arguments &arguments = entry->second;
    if (made) {
      const dnnl::memory::desc *descs[4] = {&kernel.a, &kernel.b, &kernel.c,
                                            &kernel.scratchpad};
      const int kinds[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST,
                            DNNL_ARG_SCRATCHPAD};
      arguments.count = kernel.scratchpadBytes ? 4 : 3;
      for (int i = 0; i < arguments.count; ++i) {
        arguments.memory[i] = dnnl::memory(*descs[i], engine, handles[i]);
        arguments.handles[i] = handles[i];
        arguments.list[i] = {kinds[i], arguments.memory[i].get()};
      }
    }
    for (int i = 0; i < arguments.count; ++i)
      if (arguments.handles[i] != handles[i]) {
        arguments.memory[i].set_data_handle(handles[i]);
        arguments.handles[i] = handles[i];
      }
    dnnl::error::wrap_c_api(
        dnnl_primitive_execute(kernel.primitive->get(), stream->get(),
                               arguments.count, arguments.list.data()),
        "could not execute a matmul");
    stream->wait();
  }

  dnnl::engine engine{dnnl::engine::kind::cpu, 0};

private:
  std::mutex mutex;
  std::map<Descriptor, std::unique_ptr<Kernel>> kernels;
};

/// A batch stride for a batch of one, which oneDNN still checks: past the
/// whole matrix.
int64_t loneBatchStride(int64_t rows, int64_t rowStride, int64_t columns,
                        int64_t columnStride) {
  return std::max<int64_t>({1, rows * rowStride, columns * columnStride});
}

/// A product cut into tiles: from the shape alone, never from the thread
/// count. At most four tile kinds: full or last along each of batch and rows.
struct Tiling {
  int64_t rows, rowTiles, items, batchTiles;
  Descriptor kinds[2][2];
  const Kernel *kernels[2][2];

  explicit Tiling(const Descriptor &d) {
    int64_t batch = d[kGemmBatch], m = d[kGemmM], n = d[kGemmN], k = d[kGemmK];
    rows = std::min(m, kTileRows);
    rowTiles = (m + rows - 1) / rows;
    int64_t itemFlops = 2 * rows * n * k;
    items = rowTiles > 1
                ? 1
                : std::min(batch, std::max<int64_t>(
                                      1, (kMinimumTileFlops + itemFlops - 1) /
                                             itemFlops));
    batchTiles = (batch + items - 1) / items;
    auto tileDescriptor = [&](int64_t tileItems, int64_t tileRows) {
      Descriptor t = d;
      t[kGemmBatch] = tileItems;
      t[kGemmM] = tileRows;
      if (tileItems == 1) {
        t[kGemmStrideABatch] =
            loneBatchStride(tileRows, d[kGemmStrideAM], k, d[kGemmStrideAK]);
        t[kGemmStrideBBatch] =
            loneBatchStride(k, d[kGemmStrideBK], n, d[kGemmStrideBN]);
        t[kGemmStrideCBatch] =
            loneBatchStride(tileRows, d[kGemmStrideCM], n, d[kGemmStrideCN]);
      }
      return t;
    };
    GemmLibrary &library = GemmLibrary::get();
    for (int lastItems = 0; lastItems < 2; ++lastItems)
      for (int lastRows = 0; lastRows < 2; ++lastRows) {
        int64_t tileItems =
            lastItems ? batch - (batchTiles - 1) * items : items;
        int64_t tileRows = lastRows ? m - (rowTiles - 1) * rows : rows;
        kinds[lastItems][lastRows] = tileDescriptor(tileItems, tileRows);
        kernels[lastItems][lastRows] =
            &library.kernel(kinds[lastItems][lastRows]);
      }
  }

  int64_t tiles() const { return batchTiles * rowTiles; }

  /// The product's path: the least direct of its tiles'.
  CpuGemmPath path() const {
    CpuGemmPath path = CpuGemmPath::Library;
    for (auto &row : kernels)
      for (const Kernel *kernel : row)
        path = std::max(path, kernel->path());
    return path;
  }
};

/// The product that computes `d`: a bf16 C (kGemmRoundC) is summed into an
/// fp32 scratch of C's layout, and rounded from there.
Descriptor summedDescriptor(const Descriptor &d) {
  Descriptor s = d;
  s[kGemmTypeC] = kGemmF32;
  return s;
}

/// What every call of one product reuses: the descriptor as the step gave
/// it, whether the product runs widened, whether it sums into a scratch
/// that it then narrows into a bf16 C, the descriptor it runs (the given
/// one, or the fp32 product of the widened operands, with an fp32 C) and
/// that one's tiles.
struct Plan {
  Descriptor given;
  bool widen = false;
  bool narrow = false;
  Descriptor run;
  Tiling tiling;

  explicit Plan(const Descriptor &d)
      : given(d), narrow(d[kGemmTypeC] == kGemmBF16), run(summedDescriptor(d)),
        tiling(run) {
    if (d[kGemmTypeA] == kGemmBF16 && tiling.path() == CpuGemmPath::Widened) {
      widen = true;
      run = widenedDescriptor(run);
      tiling = Tiling(run);
      // Once per product, not per call: the line is built only here.
      warnOfWidenedProductsOnce(describeWidenedProducts());
    }
  }
};

/// The plan of descriptor `d`, made on its first use and kept for the run.
const Plan &sharedPlan(const Descriptor &d) {
  static std::mutex mutex;
  static std::map<Descriptor, std::unique_ptr<Plan>> plans;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Plan> &slot = plans[d];
  if (!slot)
    slot = std::make_unique<Plan>(d);
  return *slot;
}

/// The plan of the descriptor at `address`. A descriptor is a constant of
/// the step library, so its address names one product and the calling
/// thread remembers its plan by it, without a lock; the plan's descriptor
/// is compared with the one at the address on each call, since a library
/// loaded later may hold another product's there.
const Plan &planAt(const int64_t *address) {
  thread_local std::unordered_map<const int64_t *, const Plan *> known;
  const Plan *&plan = known[address];
  if (!plan || !std::equal(plan->given.begin(), plan->given.end(), address)) {
    Descriptor d;
    std::copy(address, address + kGemmFieldCount, d.begin());
    plan = &sharedPlan(d);
  }
  return *plan;
}

} // namespace

extern "C" void mantissa_rt_cpu_gemm(uintptr_t descriptorAddress, uintptr_t a,
                                     uintptr_t b, uintptr_t c) {
  const auto *descriptor = reinterpret_cast<const int64_t *>(descriptorAddress);
  if (descriptor[kGemmAbi] != kCpuGemmAbi) {
    std::fprintf(stderr,
                 "mantissa: a product of the compiled step has descriptor "
                 "version %lld; this runtime reads version %lld\n",
                 (long long)descriptor[kGemmAbi], (long long)kCpuGemmAbi);
    std::abort();
  }
  // A bf16 C is written, never added to: the sum rounded once.
  if (descriptor[kGemmTypeC] == kGemmBF16 &&
      (!descriptor[kGemmRoundC] || descriptor[kGemmAccumulate])) {
    std::fprintf(stderr, "mantissa: a product of the compiled step has a bf16 "
                         "C that it does not write rounded (kGemmRoundC 1, "
                         "kGemmAccumulate 0)\n");
    std::abort();
  }
  int64_t batch = descriptor[kGemmBatch], m = descriptor[kGemmM],
          n = descriptor[kGemmN], k = descriptor[kGemmK];
  if (batch <= 0 || m <= 0 || n <= 0)
    return;
  if (k <= 0) {
    Descriptor d;
    std::copy(descriptor, descriptor + kGemmFieldCount, d.begin());
    emptyProduct(d, reinterpret_cast<void *>(c));
    if (d[kGemmRoundC] && d[kGemmTypeC] == kGemmF32)
      roundTileToBf16(d, reinterpret_cast<float *>(c), nullptr);
    return;
  }
  const Plan &plan = planAt(descriptor);
  const Descriptor &d = plan.run;
  const Tiling &tiling = plan.tiling;
  if (plan.widen) {
    // The packing step: the operands widened into this thread's buffers,
    // then the fp32 product of them.
    thread_local std::vector<uint32_t> wideA, wideB; // fp32 bits
    const Descriptor &given = plan.given;
    if (wideA.size() < size_t(batch * m * k))
      wideA.resize(batch * m * k);
    if (wideB.size() < size_t(batch * k * n))
      wideB.resize(batch * k * n);
    // One operand (its three stride fields) from the given layout into the
    // widened product's.
    auto widen = [&](uintptr_t from, uint32_t *to, int64_t rows, int64_t cols,
                     std::array<int, 3> fields) {
      const int64_t fromStrides[3] = {given[fields[0]], given[fields[1]],
                                      given[fields[2]]};
      const int64_t toStrides[3] = {d[fields[0]], d[fields[1]], d[fields[2]]};
      widenOperand(reinterpret_cast<const uint16_t *>(from), to, batch, rows,
                   cols, fromStrides, toStrides);
    };
    widen(a, wideA.data(), m, k,
          {kGemmStrideABatch, kGemmStrideAM, kGemmStrideAK});
    widen(b, wideB.data(), k, n,
          {kGemmStrideBBatch, kGemmStrideBK, kGemmStrideBN});
    a = reinterpret_cast<uintptr_t>(wideA.data());
    b = reinterpret_cast<uintptr_t>(wideB.data());
  }
  // A bf16 C: the sums go to the calling thread's scratch, laid out as C,
  // which each tile then rounds into C.
  uintptr_t sums = c;
  if (plan.narrow) {
    thread_local std::vector<float> scratch;
    size_t span = size_t((batch - 1) * d[kGemmStrideCBatch] +
                         (m - 1) * d[kGemmStrideCM] + n);
    if (scratch.size() < span)
      scratch.resize(span);
    sums = reinterpret_cast<uintptr_t>(scratch.data());
  }
  GemmLibrary &library = GemmLibrary::get();
  int64_t tiles = tiling.tiles();
  auto runTile = [&](int64_t tile) {
    int64_t batchTile = tile / tiling.rowTiles,
            rowTile = tile % tiling.rowTiles;
    int lastItems = batchTile == tiling.batchTiles - 1;
    int lastRows = rowTile == tiling.rowTiles - 1;
    int64_t item = batchTile * tiling.items, row = rowTile * tiling.rows;
    auto at = [&](uintptr_t base, int64_t type, int64_t batchStride,
                  int64_t rowStride, int64_t rowIndex) {
      return reinterpret_cast<void *>(
          base +
          (item * batchStride + rowIndex * rowStride) * elementBytes(type));
    };
    const Descriptor &kind = tiling.kinds[lastItems][lastRows];
    void *tileC =
        at(sums, d[kGemmTypeC], d[kGemmStrideCBatch], d[kGemmStrideCM], row);
    library.run(
        *tiling.kernels[lastItems][lastRows], kind,
        at(a, d[kGemmTypeA], d[kGemmStrideABatch], d[kGemmStrideAM], row),
        at(b, d[kGemmTypeB], d[kGemmStrideBBatch], 0, 0), tileC);
    if (d[kGemmRoundC]) // always so for a bf16 C (checked above)
      roundTileToBf16(kind, static_cast<float *>(tileC),
                      plan.narrow ? static_cast<uint16_t *>(
                                        at(c, kGemmBF16, d[kGemmStrideCBatch],
                                           d[kGemmStrideCM], row))
                                  : nullptr);
  };
  if (tiles == 1 || 2 * batch * m * n * k < 2 * kMinimumTileFlops) {
    withOneThread([&] {
      for (int64_t tile = 0; tile < tiles; ++tile)
        runTile(tile);
    });
    return;
  }
#pragma omp parallel
  {
    // Inside the region oneDNN runs on this thread; the count of one also
    // covers a GNU OpenMP runtime that does not see this region.
    omp_set_num_threads(1);
#pragma omp for schedule(dynamic, 1)
    for (int64_t tile = 0; tile < tiles; ++tile)
      runTile(tile);
  }
}

CpuGemmPath mlir::mantissa::rt::cpuGemmPath(const int64_t *descriptor) {
  Descriptor d;
  std::memcpy(d.data(), descriptor, sizeof(int64_t) * kGemmFieldCount);
  if (d[kGemmBatch] <= 0 || d[kGemmM] <= 0 || d[kGemmN] <= 0 || d[kGemmK] <= 0)
    return CpuGemmPath::Library; // nothing to compute
  d = summedDescriptor(d);
  CpuGemmPath path = Tiling(d).path();
  if (path != CpuGemmPath::Widened)
    return path;
  return Tiling(widenedDescriptor(d)).path() == CpuGemmPath::Library
             ? CpuGemmPath::Widened
             : CpuGemmPath::Loops;
}

std::string
mlir::mantissa::rt::describeWidenedProducts(const std::string &compiledFor) {
  const dnnl_version_t *version = dnnl_version();
  char why[256];
  if (compiledFor.empty())
    std::snprintf(why, sizeof(why), "this CPU (ISA %s)", effectiveIsaName());
  else
    std::snprintf(why, sizeof(why),
                  "%s, the CPU the step is compiled for (MANTISSA_CPU_TARGET; "
                  "it needs AVX-512 F, BW, VL and DQ)",
                  compiledFor.c_str());
  char text[768];
  std::snprintf(text, sizeof(text),
                "bf16 products run as fp32 GEMMs on widened operands: oneDNN "
                "%d.%d.%d has no bf16 matmul for %s; the products are exact "
                "and accumulate in fp32 either way (mantissa-compile "
                "--precision-report lists each product's path)",
                version->major, version->minor, version->patch, why);
  return text;
}

void mlir::mantissa::rt::warnOfWidenedProductsOnce(const std::string &line) {
  static std::once_flag once;
  std::call_once(once, [&] {
    std::fprintf(stderr, "mantissa: warning: %s\n", line.c_str());
  });
}

bool mlir::mantissa::rt::cpuGemmAvailable() { return true; }

std::string mlir::mantissa::rt::describeCpuGemmLibrary() {
  const dnnl_version_t *version = dnnl_version();
  Dl_info info{};
  std::string openmp = "unknown";
  if (void *symbol = dlsym(RTLD_DEFAULT, "omp_in_parallel");
      symbol && dladdr(symbol, &info) && info.dli_fname)
    openmp = info.dli_fname;
  const char *isa = effectiveIsaName();
  char text[512];
  std::snprintf(text, sizeof(text), "oneDNN %d.%d.%d, ISA %s, OpenMP %s",
                version->major, version->minor, version->patch, isa,
                openmp.c_str());
  return text;
}
