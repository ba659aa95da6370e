//===- Artifact.cpp - Loading a compiled Mantissa artifact ----------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/Artifact.h"
#include "mantissa/Runtime/HostCpu.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <dlfcn.h>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

using namespace mlir::mantissa::rt;
using json = nlohmann::json;

const char *mlir::mantissa::rt::roleName(Role role) {
  static const char *names[] = {"grad",    "param",      "master",
                                "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return names[unsigned(role)];
}

uint64_t mlir::mantissa::rt::fnv1a64(const uint8_t *data, size_t size) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) {
    hash ^= data[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::string mlir::mantissa::rt::manifestChecksumText(uint64_t checksum) {
  std::ostringstream text;
  text << std::hex << checksum;
  return text.str();
}

std::string mlir::mantissa::rt::checkpointChecksumText(uint64_t checksum) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", (unsigned long long)checksum);
  return text;
}

int64_t ArtifactMember::elementBytes(Role role, bool amsgrad) const {
  switch (role) {
  case Role::Grad:
    return int64_t(elementSize(grad));
  case Role::Param:
    return int64_t(elementSize(param));
  case Role::Master:
    return master == MasterKind::None        ? 0
           : master == MasterKind::Remainder ? 2
                                             : 4;
  case Role::ExpAvg:
  case Role::ExpAvgSq:
    return int64_t(elementSize(moments));
  case Role::MaxExpAvgSq:
    return amsgrad ? int64_t(elementSize(moments)) : 0;
  }
  return 0;
}

int64_t ArtifactMember::byteOffset(Role role) const {
  switch (role) {
  case Role::Grad:
    return gradOffset;
  case Role::Param:
    return paramOffset;
  case Role::Master:
    return masterOffset;
  default:
    return momentsOffset;
  }
}

ByteRange mlir::mantissa::rt::tileRangeBytes(const ArtifactGroup &group,
                                             int64_t tileSize, Role role,
                                             int64_t firstTile,
                                             int64_t endTile) {
  ByteRange range{INT64_MAX, -1};
  for (const ArtifactMember &member : group.members) {
    int64_t bytes = member.elementBytes(role, group.amsgrad);
    if (!bytes)
      continue;
    int64_t from = std::max(firstTile, member.firstTile);
    int64_t to = std::min(endTile, member.firstTile + member.numTiles);
    if (from >= to)
      continue;
    int64_t firstElement = (from - member.firstTile) * tileSize;
    int64_t endElement =
        std::min((to - member.firstTile) * tileSize, member.count);
    range.begin =
        std::min(range.begin, member.byteOffset(role) + firstElement * bytes);
    range.end =
        std::max(range.end, member.byteOffset(role) + endElement * bytes);
  }
  if (range.end < 0)
    return {0, 0};
  return range;
}

std::pair<int64_t, int64_t>
mlir::mantissa::rt::shardTiles(const ArtifactGroup &group, int rank,
                               int world) {
  // The kernel computes these boundaries with unsigned division; so do we.
  uint64_t tiles = uint64_t(group.numTiles);
  return {int64_t(uint64_t(rank) * tiles / uint64_t(world)),
          int64_t(uint64_t(rank + 1) * tiles / uint64_t(world))};
}

Artifact::~Artifact() {
  if (library)
    dlclose(library);
}

const ArtifactTensor *Artifact::findTensor(const std::string &fqn) const {
  for (const ArtifactTensor &tensor : tensorList)
    if (tensor.fqn == fqn)
      return &tensor;
  return nullptr;
}

namespace {
/// Thrown inside the loader only, turned into the error message.
struct ManifestError {
  std::string message;
};

DType parseDType(const json &value, const std::string &what) {
  if (!value.is_string())
    throw ManifestError{what + " is not a dtype name"};
  std::optional<DType> dtype = parseProjectDTypeName(value.get<std::string>());
  if (!dtype)
    throw ManifestError{what + " has unknown dtype '" +
                        value.get<std::string>() + "'"};
  return *dtype;
}

int64_t parseInt(const json &object, const char *key, const std::string &what,
                 int64_t min = 0) {
  if (!object.contains(key) || !object[key].is_number_integer())
    throw ManifestError{what + ": '" + key + "' is missing or not an integer"};
  int64_t value = object[key].get<int64_t>();
  if (value < min)
    throw ManifestError{what + ": '" + key + "' is out of range"};
  return value;
}

std::string parseString(const json &object, const char *key,
                        const std::string &what) {
  if (!object.contains(key) || !object[key].is_string())
    throw ManifestError{what + ": '" + key + "' is missing or not a string"};
  return object[key].get<std::string>();
}

/// Whether `name` names a file of the artifact's directory itself: not
/// empty, no '/' (so neither absolute nor climbing out, e.g.
/// "../../dev/zero", which readWholeFile would read without end), and
/// neither "." nor "..". The compiler writes only such names.
bool isPlainFileName(const std::string &name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == std::string::npos;
}

std::vector<int64_t> parseShape(const json &object, const std::string &what) {
  if (!object.contains("shape") || !object["shape"].is_array())
    throw ManifestError{what + ": 'shape' is missing"};
  std::vector<int64_t> shape;
  for (const json &dim : object["shape"]) {
    if (!dim.is_number_integer() || dim.get<int64_t>() < 0)
      throw ManifestError{what + ": 'shape' has a bad dimension"};
    shape.push_back(dim.get<int64_t>());
  }
  return shape;
}

} // namespace

bool mlir::mantissa::rt::readWholeFile(const std::string &path,
                                       std::vector<uint8_t> &bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  bytes.assign(std::istreambuf_iterator<char>(in),
               std::istreambuf_iterator<char>());
  return !in.bad();
}

bool Artifact::load(const std::string &directory, Artifact &out,
                    std::string &error) {
  out.dir = directory;
  std::string manifestPath = directory + "/manifest.json";
  std::vector<uint8_t> manifestBytes;
  if (!readWholeFile(manifestPath, manifestBytes)) {
    error = manifestPath + ": cannot read the manifest (is " + directory +
            " a Mantissa artifact?)";
    return false;
  }
  json manifest = json::parse(manifestBytes.begin(), manifestBytes.end(),
                              nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.is_object()) {
    error = manifestPath + ": damaged manifest (not valid JSON)";
    return false;
  }
  try {
    if (!manifest.contains("format") ||
        manifest["format"] != "mantissa-artifact")
      throw ManifestError{"not a Mantissa artifact manifest (format is not "
                          "'mantissa-artifact')"};
    int64_t version = parseInt(manifest, "version", "manifest");
    if (version != kArtifactVersion)
      throw ManifestError{"unknown artifact version " +
                          std::to_string(version) + " (this runtime reads " +
                          std::to_string(kArtifactVersion) + ")"};
    out.tile = parseInt(manifest, "tile_size", "manifest", 1);
    // kernels.so is compiled for the compiling machine (-march=native):
    // refused here, before dlopen, on a CPU that lacks an extension it may
    // use, rather than dying of SIGILL in the first update.
    if (manifest.contains("kernels"))
      if (std::string refusal = checkCompiledFor(
              manifest["kernels"], "kernels.", "the artifact's CPU code");
          !refusal.empty())
        throw ManifestError{refusal};

    // Every piece must be there and unchanged.
    if (!manifest.contains("files") || !manifest["files"].is_object())
      throw ManifestError{"'files' is missing"};
    for (const char *required :
         {"kernels.so", "weights.safetensors", "step.mlir"})
      if (!manifest["files"].contains(required))
        throw ManifestError{std::string("'files' does not list ") + required};
    for (auto &[name, entry] : manifest["files"].items()) {
      if (!isPlainFileName(name))
        throw ManifestError{
            "'files' lists " +
            json(name).dump(-1, ' ', false, json::error_handler_t::replace) +
            ", which is not a file name in the artifact's directory"};
      std::string path = directory + "/" + name;
      std::vector<uint8_t> bytes;
      if (!readWholeFile(path, bytes)) {
        error = path + ": missing piece of the artifact";
        return false;
      }
      int64_t expected = parseInt(entry, "bytes", "files." + name);
      std::string checksum = parseString(entry, "fnv1a64", "files." + name);
      std::string actual =
          manifestChecksumText(fnv1a64(bytes.data(), bytes.size()));
      if (int64_t(bytes.size()) != expected) {
        error = path + ": damaged piece of the artifact (" +
                std::to_string(bytes.size()) + " bytes, the manifest says " +
                std::to_string(expected) + ")";
        return false;
      }
      if (actual != checksum) {
        error = path + ": damaged piece of the artifact (checksum " + actual +
                ", the manifest says " + checksum + ")";
        return false;
      }
      if (name.size() > 4 && name.rfind("kernels.", 0) == 0 &&
          name.compare(name.size() - 4, 4, ".ptx") == 0)
        out.withPtx = true;
    }

    if (!manifest.contains("tensors") || !manifest["tensors"].is_array())
      throw ManifestError{"'tensors' is missing"};
    for (const json &entry : manifest["tensors"]) {
      ArtifactTensor tensor;
      tensor.fqn = parseString(entry, "fqn", "tensor");
      std::string what = "tensor '" + tensor.fqn + "'";
      std::string kind = parseString(entry, "kind", what);
      if (kind != "parameter" && kind != "buffer")
        throw ManifestError{what + ": unknown kind '" + kind + "'"};
      tensor.isParameter = kind == "parameter";
      tensor.shape = parseShape(entry, what);
      tensor.exported =
          parseDType(entry.value("exported", json()), what + " 'exported'");
      json masterValue = entry.value("master", json());
      tensor.masterSplit = masterValue == "fp32_split";
      tensor.master = tensor.masterSplit
                          ? DType::F32
                          : parseDType(masterValue, what + " 'master'");
      tensor.gather =
          parseDType(entry.value("gather", json()), what + " 'gather'");
      if (tensor.isParameter) {
        tensor.reduce =
            parseDType(entry.value("reduce", json()), what + " 'reduce'");
        tensor.moments =
            parseDType(entry.value("moments", json()), what + " 'moments'");
        tensor.group = parseString(entry, "group", what);
      }
      out.tensorList.push_back(std::move(tensor));
    }

    if (!manifest.contains("groups") || !manifest["groups"].is_array())
      throw ManifestError{"'groups' is missing"};
    std::set<std::string> seen;
    for (const json &entry : manifest["groups"]) {
      ArtifactGroup group;
      group.name = parseString(entry, "name", "group");
      std::string what = "group '" + group.name + "'";
      group.unit = parseString(entry, "unit", what);
      group.gather =
          parseDType(entry.value("gather", json()), what + " 'gather'");
      if (entry.contains("nested_in") && entry["nested_in"].is_string())
        group.nestedIn = entry["nested_in"].get<std::string>();
      group.reshardAfterForward = entry.value("reshard_after_forward", true);
      group.amsgrad = entry.value("amsgrad", false);
      group.maximize = entry.value("maximize", false);
      group.kernelSymbol = parseString(entry, "kernel", what);
      if (entry.contains("gpu_kernel") && entry["gpu_kernel"].is_string())
        group.gpuKernelSymbol = entry["gpu_kernel"].get<std::string>();
      group.numTiles = parseInt(entry, "num_tiles", what);
      if (!entry.contains("buffer_bytes"))
        throw ManifestError{what + ": 'buffer_bytes' is missing"};
      for (unsigned role = 0; role < kNumRoles; ++role)
        group.bufferBytes[role] =
            parseInt(entry["buffer_bytes"], roleName(Role(role)),
                     what + " buffer_bytes");
      if (!entry.contains("members") || !entry["members"].is_array())
        throw ManifestError{what + ": 'members' is missing"};
      int64_t nextTile = 0, nextElement = 0;
      for (const json &m : entry["members"]) {
        ArtifactMember member;
        member.fqn = parseString(m, "fqn", what + " member");
        std::string mwhat = what + " member '" + member.fqn + "'";
        if (!seen.insert(member.fqn).second)
          throw ManifestError{mwhat + " is listed twice"};
        member.shape = parseShape(m, mwhat);
        member.count = parseInt(m, "count", mwhat);
        member.firstElement = parseInt(m, "first_element", mwhat);
        member.firstTile = parseInt(m, "first_tile", mwhat);
        member.numTiles = parseInt(m, "num_tiles", mwhat);
        member.grad = parseDType(m.value("grad", json()), mwhat + " 'grad'");
        member.param = parseDType(m.value("param", json()), mwhat + " 'param'");
        member.moments =
            parseDType(m.value("moments", json()), mwhat + " 'moments'");
        std::string master = parseString(m, "master", mwhat);
        if (master == "none")
          member.master = MasterKind::None;
        else if (master == "fp32")
          member.master = MasterKind::FP32;
        else if (master == "remainder")
          member.master = MasterKind::Remainder;
        else
          throw ManifestError{mwhat + ": unknown master kind '" + master + "'"};
        if (!m.contains("offsets"))
          throw ManifestError{mwhat + ": 'offsets' is missing"};
        member.gradOffset = parseInt(m["offsets"], "grad", mwhat);
        member.paramOffset = parseInt(m["offsets"], "param", mwhat);
        member.masterOffset = parseInt(m["offsets"], "master", mwhat);
        member.momentsOffset = parseInt(m["offsets"], "moments", mwhat);
        // The layout must be the one the kernel was compiled for. Every
        // number is the manifest's own (each in [0, 2^63)): products and
        // sums are checked, since one that overflows int64_t is no layout.
        int64_t product = 1;
        for (int64_t dim : member.shape)
          if (__builtin_mul_overflow(product, dim, &product))
            throw ManifestError{mwhat + ": inconsistent layout"};
        if (product != member.count || member.firstTile != nextTile ||
            member.firstElement != nextElement ||
            member.numTiles !=
                member.count / out.tile + (member.count % out.tile != 0))
          throw ManifestError{mwhat + ": inconsistent layout"};
        for (unsigned role = 0; role < kNumRoles; ++role) {
          int64_t bytes = member.elementBytes(Role(role), group.amsgrad);
          int64_t extent = 0;
          if (bytes && (__builtin_mul_overflow(member.count, bytes, &extent) ||
                        member.byteOffset(Role(role)) >
                            group.bufferBytes[role] - extent))
            throw ManifestError{mwhat + ": lies outside the " +
                                roleName(Role(role)) + " buffer"};
        }
        if (__builtin_add_overflow(nextTile, member.numTiles, &nextTile) ||
            __builtin_add_overflow(nextElement, member.count, &nextElement))
          throw ManifestError{mwhat + ": inconsistent layout"};
        group.members.push_back(std::move(member));
      }
      if (nextTile != group.numTiles)
        throw ManifestError{what + ": 'num_tiles' does not match its members"};
      out.groupList.push_back(std::move(group));
    }
    for (const ArtifactTensor &tensor : out.tensorList)
      if (tensor.isParameter && !seen.count(tensor.fqn))
        throw ManifestError{"parameter '" + tensor.fqn + "' is in no group"};
  } catch (const ManifestError &e) {
    error = manifestPath + ": " + e.message;
    return false;
  } catch (const json::exception &e) {
    error = manifestPath + ": damaged manifest (" + e.what() + ")";
    return false;
  }

  std::string libraryPath = directory + "/kernels.so";
  out.library = dlopen(libraryPath.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!out.library) {
    const char *why = dlerror();
    error = libraryPath +
            ": cannot load the CPU kernels: " + (why ? why : "unknown error");
    return false;
  }
  for (ArtifactGroup &group : out.groupList) {
    group.kernel = reinterpret_cast<AdamWKernelFn>(
        dlsym(out.library, group.kernelSymbol.c_str()));
    if (!group.kernel) {
      error = libraryPath + ": has no kernel '" + group.kernelSymbol +
              "' for group '" + group.name + "'";
      return false;
    }
  }
  return true;
}
