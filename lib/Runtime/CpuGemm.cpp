//===- CpuGemm.cpp - The compiled CPU step's matrix products --------------===//
//
// Part of the Mantissa project.
//
// Products run as oneDNN matmul primitives (brgemm kernels: avx512_core for
// fp32, avx512_core_bf16 or avx512_core_amx for bf16 operands, fp32
// accumulation either way), cached by shape.
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
};

dnnl::memory::data_type dataType(int64_t type) {
  return type == kGemmBF16 ? dnnl::memory::data_type::bf16
                           : dnnl::memory::data_type::f32;
}

int64_t elementBytes(int64_t type) { return type == kGemmBF16 ? 2 : 4; }

float loadElement(const void *base, int64_t index, int64_t type) {
  if (type == kGemmBF16) {
    uint32_t bits = uint32_t(static_cast<const uint16_t *>(base)[index]) << 16;
    float value;
    std::memcpy(&value, &bits, sizeof(value));
    return value;
  }
  return static_cast<const float *>(base)[index];
}

void storeElement(void *base, int64_t index, int64_t type, float value) {
  if (type != kGemmBF16) {
    static_cast<float *>(base)[index] = value;
    return;
  }
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) // NaN stays a quiet NaN
    bits |= 0x00400000u;
  else
    bits += 0x7fffu + ((bits >> 16) & 1u); // round to nearest even
  static_cast<uint16_t *>(base)[index] = uint16_t(bits >> 16);
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
        storeElement(c, at, d[kGemmTypeC],
                     loadElement(c, at, d[kGemmTypeC]) + sum);
      }
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
    using dims = dnnl::memory::dims;
    slot->a = dnnl::memory::desc(
        dims{d[kGemmBatch], d[kGemmM], d[kGemmK]}, dataType(d[kGemmTypeA]),
        dims{d[kGemmStrideABatch], d[kGemmStrideAM], d[kGemmStrideAK]});
    slot->b = dnnl::memory::desc(
        dims{d[kGemmBatch], d[kGemmK], d[kGemmN]}, dataType(d[kGemmTypeB]),
        dims{d[kGemmStrideBBatch], d[kGemmStrideBK], d[kGemmStrideBN]});
    slot->c = dnnl::memory::desc(
        dims{d[kGemmBatch], d[kGemmM], d[kGemmN]}, dataType(d[kGemmTypeC]),
        dims{d[kGemmStrideCBatch], d[kGemmStrideCM], d[kGemmStrideCN]});
    dnnl::post_ops accumulate;
    accumulate.append_sum(1.0f);
    dnnl::primitive_attr attributes;
    attributes.set_post_ops(accumulate);
    // Each tile runs concurrently with others on one primitive: each
    // thread brings its own scratchpad.
    attributes.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    withOneThread([&] {
      try {
        dnnl::matmul::primitive_desc pd(
            dnnl::matmul::desc(slot->a, slot->b, slot->c), attributes, engine);
        slot->scratchpad = pd.scratchpad_desc();
        slot->scratchpadBytes = slot->scratchpad.get_size();
        slot->primitive = std::make_unique<dnnl::matmul>(pd);
      } catch (const dnnl::error &problem) {
        std::fprintf(stderr,
                     "mantissa: warning: oneDNN has no matmul for a %lldx%lld"
                     "x%lldx%lld product of this layout (%s); computing it in "
                     "plain loops\n",
                     (long long)d[kGemmBatch], (long long)d[kGemmM],
                     (long long)d[kGemmN], (long long)d[kGemmK],
                     problem.what());
      }
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
    thread_local std::vector<uint8_t> scratchpad;
    thread_local std::unique_ptr<dnnl::stream> stream;
    if (!stream)
      stream = std::make_unique<dnnl::stream>(engine);
    if (scratchpad.size() < kernel.scratchpadBytes)
      scratchpad.resize(kernel.scratchpadBytes);
    dnnl::memory aMemory(kernel.a, engine, const_cast<void *>(a));
    dnnl::memory bMemory(kernel.b, engine, const_cast<void *>(b));
    dnnl::memory cMemory(kernel.c, engine, c);
    std::unordered_map<int, dnnl::memory> arguments = {
        {DNNL_ARG_SRC, aMemory},
        {DNNL_ARG_WEIGHTS, bMemory},
        {DNNL_ARG_DST, cMemory}};
    if (kernel.scratchpadBytes)
      arguments.emplace(
          DNNL_ARG_SCRATCHPAD,
          dnnl::memory(kernel.scratchpad, engine, scratchpad.data()));
    kernel.primitive->execute(*stream, arguments);
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

} // namespace

extern "C" void mantissa_rt_cpu_gemm(uintptr_t descriptorAddress, uintptr_t a,
                                     uintptr_t b, uintptr_t c) {
  Descriptor d;
  std::memcpy(d.data(), reinterpret_cast<const int64_t *>(descriptorAddress),
              sizeof(int64_t) * kGemmFieldCount);
  if (d[kGemmAbi] != kCpuGemmAbi) {
    std::fprintf(stderr,
                 "mantissa: a product of the compiled step has descriptor "
                 "version %lld; this runtime reads version %lld\n",
                 (long long)d[kGemmAbi], (long long)kCpuGemmAbi);
    std::abort();
  }
  int64_t batch = d[kGemmBatch], m = d[kGemmM], n = d[kGemmN], k = d[kGemmK];
  if (batch <= 0 || m <= 0 || n <= 0)
    return;
  if (k <= 0)
    return; // C += an empty sum
  // The tiles: from the shape alone, never from the thread count.
  int64_t rows = std::min(m, kTileRows);
  int64_t rowTiles = (m + rows - 1) / rows;
  int64_t itemFlops = 2 * rows * n * k;
  int64_t items =
      rowTiles > 1
          ? 1
          : std::min(batch,
                     std::max<int64_t>(1, (kMinimumTileFlops + itemFlops - 1) /
                                              itemFlops));
  int64_t batchTiles = (batch + items - 1) / items;
  int64_t tiles = batchTiles * rowTiles;

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
  // At most four tile kinds: full or last along each of batch and rows.
  Descriptor kinds[2][2];
  const Kernel *kernels[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};
  for (int lastItems = 0; lastItems < 2; ++lastItems)
    for (int lastRows = 0; lastRows < 2; ++lastRows) {
      int64_t tileItems = lastItems ? batch - (batchTiles - 1) * items : items;
      int64_t tileRows = lastRows ? m - (rowTiles - 1) * rows : rows;
      kinds[lastItems][lastRows] = tileDescriptor(tileItems, tileRows);
      kernels[lastItems][lastRows] =
          &library.kernel(kinds[lastItems][lastRows]);
    }
  auto runTile = [&](int64_t tile) {
    int64_t batchTile = tile / rowTiles, rowTile = tile % rowTiles;
    int lastItems = batchTile == batchTiles - 1;
    int lastRows = rowTile == rowTiles - 1;
    int64_t item = batchTile * items, row = rowTile * rows;
    auto at = [&](uintptr_t base, int64_t type, int64_t batchStride,
                  int64_t rowStride, int64_t rowIndex) {
      return reinterpret_cast<void *>(
          base +
          (item * batchStride + rowIndex * rowStride) * elementBytes(type));
    };
    library.run(
        *kernels[lastItems][lastRows], kinds[lastItems][lastRows],
        at(a, d[kGemmTypeA], d[kGemmStrideABatch], d[kGemmStrideAM], row),
        at(b, d[kGemmTypeB], d[kGemmStrideBBatch], 0, 0),
        at(c, d[kGemmTypeC], d[kGemmStrideCBatch], d[kGemmStrideCM], row));
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

bool mlir::mantissa::rt::cpuGemmAvailable() { return true; }

std::string mlir::mantissa::rt::describeCpuGemmLibrary() {
  const dnnl_version_t *version = dnnl_version();
  Dl_info info{};
  std::string openmp = "unknown";
  if (void *symbol = dlsym(RTLD_DEFAULT, "omp_in_parallel");
      symbol && dladdr(symbol, &info) && info.dli_fname)
    openmp = info.dli_fname;
  const char *isa = "?";
  switch (dnnl::get_effective_cpu_isa()) {
  case dnnl::cpu_isa::avx512_core_amx:
    isa = "avx512_core_amx";
    break;
  case dnnl::cpu_isa::avx512_core_bf16:
    isa = "avx512_core_bf16";
    break;
  case dnnl::cpu_isa::avx512_core_vnni:
    isa = "avx512_core_vnni";
    break;
  case dnnl::cpu_isa::avx512_core:
    isa = "avx512_core";
    break;
  case dnnl::cpu_isa::avx2:
    isa = "avx2";
    break;
  default:
    break;
  }
  char text[512];
  std::snprintf(text, sizeof(text), "oneDNN %d.%d.%d, ISA %s, OpenMP %s",
                version->major, version->minor, version->patch, isa,
                openmp.c_str());
  return text;
}
