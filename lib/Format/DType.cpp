//===- DType.cpp - Element types of stored and exchanged tensors ----------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Format/DType.h"
#include "mantissa/Format/CpuClones.h"

#include <cstring>

namespace mlir::mantissa::rt {

namespace {
/// One row per dtype, so that size and both spellings cannot drift apart.
struct DTypeInfo {
  DType dtype;
  size_t size;
  std::string_view safeTensorsName;
};

constexpr DTypeInfo kDTypeInfos[] = {
    {DType::F32, 4, "F32"},   {DType::BF16, 2, "BF16"}, {DType::F16, 2, "F16"},
    {DType::F64, 8, "F64"},   {DType::I64, 8, "I64"},   {DType::I32, 4, "I32"},
    {DType::I16, 2, "I16"},   {DType::I8, 1, "I8"},     {DType::U8, 1, "U8"},
    {DType::Bool, 1, "BOOL"},
};

const DTypeInfo &infoOf(DType dtype) {
  for (const DTypeInfo &info : kDTypeInfos)
    if (info.dtype == dtype)
      return info;
  // Only reachable with a value cast from outside the enumerators; answer
  // with F32's row rather than reading out of bounds.
  return kDTypeInfos[0];
}
} // namespace

size_t elementSize(DType dtype) { return infoOf(dtype).size; }

bool isFloatingPoint(DType dtype) {
  return dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16 ||
         dtype == DType::F64;
}

std::string_view safeTensorsDTypeName(DType dtype) {
  return infoOf(dtype).safeTensorsName;
}

std::optional<DType> parseSafeTensorsDTypeName(std::string_view name) {
  for (const DTypeInfo &info : kDTypeInfos)
    if (info.safeTensorsName == name)
      return info.dtype;
  return std::nullopt;
}

std::optional<DType> parseProjectDTypeName(std::string_view name) {
  if (name == "fp32" || name == "float32")
    return DType::F32;
  if (name == "bf16" || name == "bfloat16")
    return DType::BF16;
  if (name == "fp16" || name == "float16")
    return DType::F16;
  return std::nullopt;
}

std::string_view projectDTypeName(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "fp32";
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "fp16";
  case DType::F64:
    return "fp64";
  default:
    return safeTensorsDTypeName(dtype);
  }
}

namespace {
/// The loop of one pair of dtypes: with both known at compile time the
/// switches of loadFloatElement and storeFloatElement fold away and the
/// loop vectorises, where one switch per element ran about 19 instructions
/// an element (a step's bf16 gradients widened to fp32: 16M a llama_medium
/// step, cachegrind).
template <DType From, DType To>
[[gnu::always_inline]] inline void convertEach(const uint8_t *__restrict source,
                                               uint8_t *__restrict destination,
                                               int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    storeFloatElement(destination, i, To, loadFloatElement(source, i, From));
}
} // namespace

/// Compiled for AVX2 and the baseline (CpuClones.h). All of training's
/// pairs vectorise but fp16's widening (f16BitsToFloat branches for
/// subnormals), which at least loses the switches.
MANTISSA_AVX2_AND_BASELINE void convertFloatElements(const uint8_t *source,
                                                     DType from,
                                                     uint8_t *destination,
                                                     DType to, int64_t count) {
  if (from == to) {
    std::memcpy(destination, source, count * elementSize(from));
    return;
  }
  if (from == DType::BF16 && to == DType::F32)
    return convertEach<DType::BF16, DType::F32>(source, destination, count);
  if (from == DType::F32 && to == DType::BF16)
    return convertEach<DType::F32, DType::BF16>(source, destination, count);
  if (from == DType::F16 && to == DType::F32)
    return convertEach<DType::F16, DType::F32>(source, destination, count);
  if (from == DType::F32 && to == DType::F16)
    return convertEach<DType::F32, DType::F16>(source, destination, count);
  // The rest (F64, bf16 and fp16 between themselves) one element at a time.
  for (int64_t i = 0; i < count; ++i)
    storeFloatElement(destination, i, to, loadFloatElement(source, i, from));
}

} // namespace mlir::mantissa::rt
