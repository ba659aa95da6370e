//===- mantissa-bench-cpu-gemm.cpp - The step's GEMMs against the peak ----===//
//
// Part of the Mantissa project.
//
// usage: mantissa-bench-cpu-gemm PRODUCTS [REPEATS]
//
// PRODUCTS lists the matrix products of one compiled step, one line each:
// how many times the step calls it, then its kGemmFieldCount descriptor
// values (mantissa/Format/CpuGemmAbi.h; bench/step/run.sh extracts them from
// mantissa-train-cpu-pipeline's output). Prints one JSON object: the time
// and GFLOP/s of the whole list through mantissa_rt_cpu_gemm (the step's own
// entry, tiles and all), and oneDNN's own peak on this machine in the same
// run: a 1024^3 matmul with oneDNN's threading (fp32 and bf16), and the
// same through mantissa_rt_cpu_gemm. Medians over REPEATS (default 30).
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/CpuGemm.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using namespace mlir::mantissa::rt;

namespace {

struct Product {
  int64_t count;
  std::vector<int64_t> descriptor;
  std::vector<uint8_t> a, b, c;
  double flops() const {
    return 2.0 * descriptor[kGemmBatch] * descriptor[kGemmM] *
           descriptor[kGemmN] * descriptor[kGemmK];
  }
};

/// Bytes an operand spans: one past its last element.
size_t span(const std::vector<int64_t> &d, int64_t type, int64_t batchStride,
            int64_t rows, int64_t rowStride, int64_t columns,
            int64_t columnStride) {
  int64_t last = (d[kGemmBatch] - 1) * batchStride + (rows - 1) * rowStride +
                 (columns - 1) * columnStride;
  return size_t(last + 1) * (type == kGemmBF16 ? 2 : 4);
}

template <typename Body> double medianSeconds(int repeats, Body body) {
  body(); // warm: primitives created, pages touched
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    body();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

/// oneDNN's own n^3 matmul (its threading, its layout choice for dense
/// row-major operands), in GFLOP/s; nullopt where oneDNN has no matmul of
/// that type on this CPU (bf16 without AVX512-BF16 or AMX).
std::optional<double> libraryPeak(dnnl::memory::data_type type, int64_t n,
                                  int repeats) {
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  using tag = dnnl::memory::format_tag;
  dnnl::memory::desc a({n, n}, type, tag::ab), b({n, n}, type, tag::ab),
      c({n, n}, dnnl::memory::data_type::f32, tag::ab);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), engine);
  } catch (const dnnl::error &) {
    return std::nullopt;
  }
  dnnl::matmul matmul(pd);
  dnnl::memory am(a, engine), bm(b, engine), cm(c, engine);
  std::fill_n(static_cast<uint8_t *>(am.get_data_handle()), a.get_size(), 0x3c);
  std::fill_n(static_cast<uint8_t *>(bm.get_data_handle()), b.get_size(), 0x3c);
  double seconds = medianSeconds(repeats, [&] {
    matmul.execute(
        stream,
        {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    stream.wait();
  });
  return 2.0 * n * n * n / seconds / 1e9;
}

/// The same n^3 product through the step's entry.
double entryPeak(int64_t type, int64_t n, int repeats) {
  std::vector<int64_t> d(kGemmFieldCount);
  d[kGemmAbi] = kCpuGemmAbi;
  d[kGemmTypeA] = d[kGemmTypeB] = type;
  d[kGemmTypeC] = kGemmF32;
  d[kGemmBatch] = 1;
  d[kGemmM] = d[kGemmN] = d[kGemmK] = n;
  d[kGemmStrideABatch] = d[kGemmStrideBBatch] = d[kGemmStrideCBatch] = n * n;
  d[kGemmStrideAM] = d[kGemmStrideBK] = d[kGemmStrideCM] = n;
  d[kGemmStrideAK] = d[kGemmStrideBN] = d[kGemmStrideCN] = 1;
  d[kGemmAccumulate] = 1;
  std::vector<uint8_t> a(n * n * 4, 0x3c), b(n * n * 4, 0x3c), c(n * n * 4);
  double seconds = medianSeconds(repeats, [&] {
    mantissa_rt_cpu_gemm(reinterpret_cast<uintptr_t>(d.data()),
                         reinterpret_cast<uintptr_t>(a.data()),
                         reinterpret_cast<uintptr_t>(b.data()),
                         reinterpret_cast<uintptr_t>(c.data()));
  });
  return 2.0 * n * n * n / seconds / 1e9;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: mantissa-bench-cpu-gemm PRODUCTS [REPEATS]\n");
    return 2;
  }
  int repeats = argc > 2 ? std::atoi(argv[2]) : 30;
  if (repeats < 1) {
    std::fprintf(stderr, "mantissa-bench-cpu-gemm: REPEATS must be positive\n");
    return 2;
  }
  std::ifstream input(argv[1]);
  if (!input) {
    std::fprintf(stderr, "mantissa-bench-cpu-gemm: cannot read %s\n", argv[1]);
    return 1;
  }
  std::vector<Product> products;
  std::string line;
  int lineNumber = 0;
  while (std::getline(input, line)) {
    ++lineNumber;
    if (line.empty())
      continue;
    std::istringstream fields(line);
    Product product;
    fields >> product.count;
    product.descriptor.resize(kGemmFieldCount);
    for (int64_t &value : product.descriptor)
      fields >> value;
    if (!fields || product.count < 1 ||
        product.descriptor[kGemmAbi] != kCpuGemmAbi) {
      std::fprintf(stderr,
                   "mantissa-bench-cpu-gemm: %s:%d: expected a count and %d "
                   "descriptor values of version %lld\n",
                   argv[1], lineNumber, int(kGemmFieldCount),
                   (long long)kCpuGemmAbi);
      return 1;
    }
    const std::vector<int64_t> &d = product.descriptor;
    product.a.assign(span(d, d[kGemmTypeA], d[kGemmStrideABatch], d[kGemmM],
                          d[kGemmStrideAM], d[kGemmK], d[kGemmStrideAK]),
                     0x3c);
    product.b.assign(span(d, d[kGemmTypeB], d[kGemmStrideBBatch], d[kGemmK],
                          d[kGemmStrideBK], d[kGemmN], d[kGemmStrideBN]),
                     0x3c);
    product.c.assign(span(d, d[kGemmTypeC], d[kGemmStrideCBatch], d[kGemmM],
                          d[kGemmStrideCM], d[kGemmN], d[kGemmStrideCN]),
                     0);
    products.push_back(std::move(product));
  }
  double flops = 0;
  int64_t calls = 0;
  for (const Product &product : products) {
    flops += product.count * product.flops();
    calls += product.count;
  }
  double stepSeconds = medianSeconds(repeats, [&] {
    for (Product &product : products)
      for (int64_t i = 0; i < product.count; ++i)
        mantissa_rt_cpu_gemm(
            reinterpret_cast<uintptr_t>(product.descriptor.data()),
            reinterpret_cast<uintptr_t>(product.a.data()),
            reinterpret_cast<uintptr_t>(product.b.data()),
            reinterpret_cast<uintptr_t>(product.c.data()));
  });
  std::optional<double> peakF32 =
      libraryPeak(dnnl::memory::data_type::f32, 1024, repeats);
  std::optional<double> peakBF16 =
      libraryPeak(dnnl::memory::data_type::bf16, 1024, repeats);
  auto gflops = [](std::optional<double> value) {
    if (!value)
      return std::string("null");
    char text[32];
    std::snprintf(text, sizeof(text), "%.1f", *value);
    return std::string(text);
  };
  double entryF32 = entryPeak(kGemmF32, 1024, repeats);
  std::printf(
      "{\"library\": \"%s\", \"step_products\": %lld, \"step_gflop\": %.4f, "
      "\"step_gemm_ms\": %.3f, \"step_gemm_gflops\": %.1f, "
      "\"peak_f32_gflops\": %s, \"peak_bf16_gflops\": %s, "
      "\"entry_1024_f32_gflops\": %.1f}\n",
      describeCpuGemmLibrary().c_str(), (long long)calls, flops / 1e9,
      stepSeconds * 1e3, flops / stepSeconds / 1e9, gflops(peakF32).c_str(),
      gflops(peakBF16).c_str(), entryF32);
  return 0;
}
