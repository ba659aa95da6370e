//===- GpuStepTestKernels.cpp - Host kernels of the hand-written GPU steps ===//
//
// Part of the Mantissa project. Test-only.
//
//===----------------------------------------------------------------------===//
//
// The library FAKE_CUDA_HOST_KERNELS names in the GPU step tests: for
// every entry E of their hand-written PTX, `E_host(void **kernelParams,
// int64_t grid, int64_t block)` runs the whole launch on the host
// (FakeCuda.cpp calls it from cuLaunchKernel with the launch's own
// kernelParams: kernelParams[i] points at the i-th parameter's value), the
// ABI of the compiler's emulated kernels (GpuHostEmulation.h). Sizes the
// compiler would bake into a kernel are read from a constant buffer here, so
// that one library serves programs of any size.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Format/DType.h"

#include <cstdint>
#include <cstring>

using mlir::mantissa::rt::DType;

extern "C" {
/// The grid, block and count of the last conversion launch.
int64_t gpustep_test_convert_launch[3];
}

namespace {

/// The value of parameter `index` (every test kernel's are .u64).
uint64_t value(void **params, int index) {
  uint64_t bits;
  std::memcpy(&bits, params[index], 8);
  return bits;
}
float *floats(void **params, int index) {
  return reinterpret_cast<float *>(uintptr_t(value(params, index)));
}

void convert(void **params, int64_t grid, int64_t block, DType from, DType to) {
  const uint8_t *source =
      reinterpret_cast<const uint8_t *>(uintptr_t(value(params, 0)));
  uint8_t *target = reinterpret_cast<uint8_t *>(uintptr_t(value(params, 1)));
  int64_t count = int64_t(value(params, 2));
  gpustep_test_convert_launch[0] = grid;
  gpustep_test_convert_launch[1] = block;
  gpustep_test_convert_launch[2] = count;
  for (int64_t i = 0; i < count; ++i)
    mlir::mantissa::rt::storeFloatElement(
        target, i, to, mlir::mantissa::rt::loadFloatElement(source, i, from));
}

} // namespace

extern "C" {

/// The parameters of the last test_record launch and its grid and block,
/// for the test to compare with what it bound and launched.
uint64_t gpustep_test_recorded[6];
int gpustep_test_launches;

/// out[i] = a[i] + b[i] for 4 floats.
void test_add4_host(void **params, int64_t, int64_t) {
  ++gpustep_test_launches;
  for (int i = 0; i < 4; ++i)
    floats(params, 2)[i] = floats(params, 0)[i] + floats(params, 1)[i];
}

/// Records its four parameters and the launch geometry.
void test_record_host(void **params, int64_t grid, int64_t block) {
  ++gpustep_test_launches;
  for (int i = 0; i < 4; ++i)
    gpustep_test_recorded[i] = value(params, i);
  gpustep_test_recorded[4] = uint64_t(grid);
  gpustep_test_recorded[5] = uint64_t(block);
}

/// out[0] = a[0] + b[0].
void test_add_scalar_host(void **params, int64_t, int64_t) {
  floats(params, 2)[0] = floats(params, 0)[0] + floats(params, 1)[0];
}

/// out[i] = in[i] * scale for i < count, where the constant buffer holds
/// {float scale, int32 count}.
void test_scale_host(void **params, int64_t, int64_t) {
  float scale = floats(params, 1)[0];
  int32_t count;
  std::memcpy(&count, floats(params, 1) + 1, 4);
  for (int32_t i = 0; i < count; ++i)
    floats(params, 2)[i] = floats(params, 0)[i] * scale;
}

/// out[0] = in[0] + 1.
void test_increment_host(void **params, int64_t, int64_t) {
  floats(params, 1)[0] = floats(params, 0)[0] + 1.0f;
}

#define CONVERT(from, to, FROM, TO)                                            \
  void mantissa_convert_##from##_to_##to##_host(void **params, int64_t grid,   \
                                                int64_t block) {               \
    convert(params, grid, block, DType::FROM, DType::TO);                      \
  }
CONVERT(f32, bf16, F32, BF16)
CONVERT(f32, f16, F32, F16)
CONVERT(bf16, f32, BF16, F32)
CONVERT(bf16, f16, BF16, F16)
CONVERT(f16, f32, F16, F32)
CONVERT(f16, bf16, F16, BF16)
#undef CONVERT
}
