//===- ArtifactManifest.cpp - The schema of an artifact's manifest --------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Format/ArtifactManifest.h"
#include "JsonFields.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <set>
#include <sstream>

using namespace mlir::mantissa::rt;
using detail::ProgramError;
using json = nlohmann::json;

const char *mlir::mantissa::rt::roleName(Role role) {
  static const char *names[] = {"grad",    "param",      "master",
                                "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return names[unsigned(role)];
}

const char *mlir::mantissa::rt::masterKindName(MasterKind kind) {
  switch (kind) {
  case MasterKind::None:
    return "none";
  case MasterKind::FP32:
    return "fp32";
  case MasterKind::Remainder:
    return "remainder";
  }
  return "none";
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

ByteRange mlir::mantissa::rt::tileRangeBytes(const ManifestGroup &group,
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
mlir::mantissa::rt::shardTiles(const ManifestGroup &group, int rank,
                               int world) {
  // The kernel computes these boundaries with unsigned division; so do we.
  uint64_t tiles = uint64_t(group.numTiles);
  return {int64_t(uint64_t(rank) * tiles / uint64_t(world)),
          int64_t(uint64_t(rank + 1) * tiles / uint64_t(world))};
}

bool ArtifactManifest::hasPtx() const {
  for (const ManifestFile &file : files) {
    const std::string &name = file.name;
    if (name.size() > 4 && name.rfind("kernels.", 0) == 0 &&
        name.compare(name.size() - 4, 4, ".ptx") == 0)
      return true;
  }
  return false;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {

std::string dtypeName(DType dtype) {
  return std::string(projectDTypeName(dtype));
}

json memberJson(const ArtifactMember &member) {
  return json{{"fqn", member.fqn},
              {"shape", member.shape},
              {"count", member.count},
              {"first_element", member.firstElement},
              {"first_tile", member.firstTile},
              {"num_tiles", member.numTiles},
              {"grad", dtypeName(member.grad)},
              {"param", dtypeName(member.param)},
              {"master", masterKindName(member.master)},
              {"moments", dtypeName(member.moments)},
              {"offsets", json{{"grad", member.gradOffset},
                               {"param", member.paramOffset},
                               {"master", member.masterOffset},
                               {"moments", member.momentsOffset}}}};
}

json groupJson(const ManifestGroup &group) {
  json bufferBytes = json::object();
  for (unsigned role = 0; role < kNumRoles; ++role)
    bufferBytes[roleName(Role(role))] = group.bufferBytes[role];
  json members = json::array();
  for (const ArtifactMember &member : group.members)
    members.push_back(memberJson(member));
  return json{{"name", group.name},
              {"unit", group.unit},
              {"gather", dtypeName(group.gather)},
              {"nested_in",
               group.nestedIn.empty() ? json(nullptr) : json(group.nestedIn)},
              {"reshard_after_forward", group.reshardAfterForward},
              {"amsgrad", group.amsgrad},
              {"maximize", group.maximize},
              {"kernel", group.kernelSymbol},
              {"gpu_kernel", group.gpuKernelSymbol},
              {"num_tiles", group.numTiles},
              {"buffer_bytes", std::move(bufferBytes)},
              {"members", std::move(members)}};
}

json tensorJson(const ArtifactTensor &tensor) {
  json entry{{"fqn", tensor.fqn},
             {"kind", tensor.isParameter ? "parameter" : "buffer"},
             {"shape", tensor.shape},
             {"exported", dtypeName(tensor.exported)},
             {"master", tensor.masterSplit ? std::string("fp32_split")
                                           : dtypeName(tensor.master)},
             {"gather", dtypeName(tensor.gather)}};
  if (tensor.isParameter) {
    entry["reduce"] = dtypeName(tensor.reduce);
    entry["moments"] = dtypeName(tensor.moments);
    entry["group"] = tensor.group;
  }
  return entry;
}

json kernelsJson(const ManifestKernels &kernels) {
  json out{{"cpu", kernels.cpuLibrary},
           {"tile_size", kernels.tileSize},
           {"target_cpu", kernels.targetCpu}};
  if (kernels.targetFeatures)
    out["target_features"] = *kernels.targetFeatures;
  if (!kernels.gpuNote.empty())
    out["gpu_note"] = kernels.gpuNote;
  else
    out["gpu"] = kernels.gpu;
  if (!kernels.gpuStepNote.empty())
    out["gpu_step_note"] = kernels.gpuStepNote;
  if (kernels.cpuStep)
    out["cpu_step"] = json{{"program", kernels.cpuStep->program},
                           {"target_cpu", kernels.cpuStep->targetCpu}};
  if (kernels.gpuStep)
    out["gpu_step"] = json{{"program", kernels.gpuStep->program},
                           {"kernels", kernels.gpuStep->kernels},
                           {"gemms", kernels.gpuStep->gemms},
                           {"arena_bytes", kernels.gpuStep->arenaBytes}};
  return out;
}

} // namespace

std::string
mlir::mantissa::rt::writeArtifactManifest(const ArtifactManifest &manifest) {
  json files = json::object();
  for (const ManifestFile &file : manifest.files)
    files[file.name] = json{{"bytes", file.bytes}, {"fnv1a64", file.checksum}};
  json tensors = json::array();
  for (const ArtifactTensor &tensor : manifest.tensors)
    tensors.push_back(tensorJson(tensor));
  json groups = json::array();
  for (const ManifestGroup &group : manifest.groups)
    groups.push_back(groupJson(group));
  json root{{"format", kArtifactFormat},
            {"version", kArtifactVersion},
            {"step", manifest.step},
            {"tile_size", manifest.tileSize},
            {"kernel_abi", kAdamWKernelAbiText},
            {"files", std::move(files)},
            {"tensors", std::move(tensors)},
            {"buffers", manifest.buffers},
            {"groups", std::move(groups)}};
  if (manifest.kernels)
    root["kernels"] = kernelsJson(*manifest.kernels);
  // Keys sorted (json's objects are ordered maps), as every reader since
  // version 1 has seen them; names that are not UTF-8 are written with
  // U+FFFD rather than refused.
  return root.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

namespace {

DType parseDType(const json &value, const std::string &what) {
  if (!value.is_string())
    throw ProgramError{what + " is not a dtype name"};
  std::optional<DType> dtype = parseProjectDTypeName(value.get<std::string>());
  if (!dtype)
    throw ProgramError{what + " has unknown dtype '" +
                       value.get<std::string>() + "'"};
  return *dtype;
}

int64_t parseInt(const json &object, const char *key, const std::string &what,
                 int64_t min = 0) {
  if (!object.contains(key) || !object[key].is_number_integer())
    throw ProgramError{what + ": '" + key + "' is missing or not an integer"};
  int64_t value = object[key].get<int64_t>();
  if (value < min)
    throw ProgramError{what + ": '" + key + "' is out of range"};
  return value;
}

/// `object[key]` when it is a string, else "" (fields only reports read).
std::string optionalString(const json &object, const char *key) {
  return object.contains(key) && object[key].is_string()
             ? object[key].get<std::string>()
             : std::string();
}

/// Whether `name` names a file of the artifact's directory itself: not
/// empty, no '/' (so neither absolute nor climbing out, e.g.
/// "../../dev/zero", which a reader would read without end), and neither
/// "." nor "..". The compiler writes only such names.
bool isPlainFileName(const std::string &name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == std::string::npos;
}

std::vector<int64_t> parseShape(const json &object, const std::string &what) {
  if (!object.contains("shape") || !object["shape"].is_array())
    throw ProgramError{what + ": 'shape' is missing"};
  std::vector<int64_t> shape;
  for (const json &dim : object["shape"]) {
    if (!dim.is_number_integer() || dim.get<int64_t>() < 0)
      throw ProgramError{what + ": 'shape' has a bad dimension"};
    shape.push_back(dim.get<int64_t>());
  }
  return shape;
}

ManifestKernels parseKernels(const json &kernels) {
  ManifestKernels out;
  out.cpuLibrary = optionalString(kernels, "cpu");
  if (kernels.contains("tile_size") && kernels["tile_size"].is_number_integer())
    out.tileSize = kernels["tile_size"].get<int64_t>();
  out.targetCpu = optionalString(kernels, "target_cpu");
  out.targetFeatures = detail::targetFeatures(kernels, "kernels.");
  out.gpu = optionalString(kernels, "gpu");
  out.gpuNote = optionalString(kernels, "gpu_note");
  out.gpuStepNote = optionalString(kernels, "gpu_step_note");
  // A step entry that names no program is kept (with an empty program), so
  // that its reader can say so.
  if (kernels.contains("cpu_step")) {
    const json &step = kernels["cpu_step"];
    out.cpuStep = ManifestKernels::CpuStep{};
    if (step.is_object()) {
      out.cpuStep->program = optionalString(step, "program");
      out.cpuStep->targetCpu = optionalString(step, "target_cpu");
    }
  }
  if (kernels.contains("gpu_step")) {
    const json &step = kernels["gpu_step"];
    out.gpuStep = ManifestKernels::GpuStep{};
    if (step.is_object()) {
      out.gpuStep->program = optionalString(step, "program");
      auto count = [&](const char *key) {
        return step.contains(key) && step[key].is_number_integer()
                   ? step[key].get<int64_t>()
                   : int64_t(0);
      };
      out.gpuStep->kernels = count("kernels");
      out.gpuStep->gemms = count("gemms");
      out.gpuStep->arenaBytes = count("arena_bytes");
    }
  }
  return out;
}

ArtifactTensor parseTensor(const json &entry) {
  ArtifactTensor tensor;
  tensor.fqn = detail::string(entry, "fqn", "tensor");
  std::string what = "tensor '" + tensor.fqn + "'";
  std::string kind = detail::string(entry, "kind", what);
  if (kind != "parameter" && kind != "buffer")
    throw ProgramError{what + ": unknown kind '" + kind + "'"};
  tensor.isParameter = kind == "parameter";
  tensor.shape = parseShape(entry, what);
  tensor.exported =
      parseDType(entry.value("exported", json()), what + " 'exported'");
  json masterValue = entry.value("master", json());
  tensor.masterSplit = masterValue == "fp32_split";
  tensor.master = tensor.masterSplit
                      ? DType::F32
                      : parseDType(masterValue, what + " 'master'");
  tensor.gather = parseDType(entry.value("gather", json()), what + " 'gather'");
  if (tensor.isParameter) {
    tensor.reduce =
        parseDType(entry.value("reduce", json()), what + " 'reduce'");
    tensor.moments =
        parseDType(entry.value("moments", json()), what + " 'moments'");
    tensor.group = detail::string(entry, "group", what);
  }
  return tensor;
}

/// Parses one member, checking its layout against the tiles and elements
/// before it (`nextTile`, `nextElement`, advanced past it) and the group's
/// buffers.
ArtifactMember parseMember(const json &m, const ManifestGroup &group,
                           const std::string &what, int64_t tileSize,
                           int64_t &nextTile, int64_t &nextElement) {
  ArtifactMember member;
  member.fqn = detail::string(m, "fqn", what + " member");
  std::string mwhat = what + " member '" + member.fqn + "'";
  member.shape = parseShape(m, mwhat);
  member.count = parseInt(m, "count", mwhat);
  member.firstElement = parseInt(m, "first_element", mwhat);
  member.firstTile = parseInt(m, "first_tile", mwhat);
  member.numTiles = parseInt(m, "num_tiles", mwhat);
  member.grad = parseDType(m.value("grad", json()), mwhat + " 'grad'");
  member.param = parseDType(m.value("param", json()), mwhat + " 'param'");
  member.moments = parseDType(m.value("moments", json()), mwhat + " 'moments'");
  std::string master = detail::string(m, "master", mwhat);
  if (master == "none")
    member.master = MasterKind::None;
  else if (master == "fp32")
    member.master = MasterKind::FP32;
  else if (master == "remainder")
    member.master = MasterKind::Remainder;
  else
    throw ProgramError{mwhat + ": unknown master kind '" + master + "'"};
  if (!m.contains("offsets"))
    throw ProgramError{mwhat + ": 'offsets' is missing"};
  member.gradOffset = parseInt(m["offsets"], "grad", mwhat);
  member.paramOffset = parseInt(m["offsets"], "param", mwhat);
  member.masterOffset = parseInt(m["offsets"], "master", mwhat);
  member.momentsOffset = parseInt(m["offsets"], "moments", mwhat);
  // The layout must be the one the kernel was compiled for. Every number
  // is the manifest's own (each in [0, 2^63)): products and sums are
  // checked, since one that overflows int64_t is no layout.
  int64_t product = 1;
  for (int64_t dim : member.shape)
    if (__builtin_mul_overflow(product, dim, &product))
      throw ProgramError{mwhat + ": inconsistent layout"};
  if (product != member.count || member.firstTile != nextTile ||
      member.firstElement != nextElement ||
      member.numTiles !=
          member.count / tileSize + (member.count % tileSize != 0))
    throw ProgramError{mwhat + ": inconsistent layout"};
  for (unsigned role = 0; role < kNumRoles; ++role) {
    int64_t bytes = member.elementBytes(Role(role), group.amsgrad);
    int64_t extent = 0;
    if (bytes &&
        (__builtin_mul_overflow(member.count, bytes, &extent) ||
         member.byteOffset(Role(role)) > group.bufferBytes[role] - extent))
      throw ProgramError{mwhat + ": lies outside the " + roleName(Role(role)) +
                         " buffer"};
  }
  if (__builtin_add_overflow(nextTile, member.numTiles, &nextTile) ||
      __builtin_add_overflow(nextElement, member.count, &nextElement))
    throw ProgramError{mwhat + ": inconsistent layout"};
  return member;
}

ManifestGroup parseGroup(const json &entry, int64_t tileSize,
                         std::set<std::string> &seen) {
  ManifestGroup group;
  group.name = detail::string(entry, "name", "group");
  std::string what = "group '" + group.name + "'";
  group.unit = detail::string(entry, "unit", what);
  group.gather = parseDType(entry.value("gather", json()), what + " 'gather'");
  group.nestedIn = optionalString(entry, "nested_in");
  group.reshardAfterForward = entry.value("reshard_after_forward", true);
  group.amsgrad = entry.value("amsgrad", false);
  group.maximize = entry.value("maximize", false);
  group.kernelSymbol = detail::string(entry, "kernel", what);
  group.gpuKernelSymbol = optionalString(entry, "gpu_kernel");
  group.numTiles = parseInt(entry, "num_tiles", what);
  if (!entry.contains("buffer_bytes"))
    throw ProgramError{what + ": 'buffer_bytes' is missing"};
  for (unsigned role = 0; role < kNumRoles; ++role)
    group.bufferBytes[role] = parseInt(
        entry["buffer_bytes"], roleName(Role(role)), what + " buffer_bytes");
  if (!entry.contains("members") || !entry["members"].is_array())
    throw ProgramError{what + ": 'members' is missing"};
  int64_t nextTile = 0, nextElement = 0;
  for (const json &m : entry["members"]) {
    // A member's name is checked for duplicates before its fields, so that
    // a repeated FQN is reported as such whatever else is wrong with it.
    std::string fqn = detail::string(m, "fqn", what + " member");
    if (!seen.insert(fqn).second)
      throw ProgramError{what + " member '" + fqn + "' is listed twice"};
    group.members.push_back(
        parseMember(m, group, what, tileSize, nextTile, nextElement));
  }
  if (nextTile != group.numTiles)
    throw ProgramError{what + ": 'num_tiles' does not match its members"};
  return group;
}

void parseManifest(const json &manifest, ArtifactManifest &out) {
  if (!manifest.contains("format") || manifest["format"] != kArtifactFormat)
    throw ProgramError{"not a Mantissa artifact manifest (format is not "
                       "'mantissa-artifact')"};
  int64_t version = parseInt(manifest, "version", "manifest");
  if (version != kArtifactVersion)
    throw ProgramError{"unknown artifact version " + std::to_string(version) +
                       " (this runtime reads " +
                       std::to_string(kArtifactVersion) + ")"};
  out.tileSize = parseInt(manifest, "tile_size", "manifest", 1);
  out.step = optionalString(manifest, "step");
  if (manifest.contains("kernels") && manifest["kernels"].is_object())
    out.kernels = parseKernels(manifest["kernels"]);

  // Every piece must be listed, by a name in the artifact's directory.
  if (!manifest.contains("files") || !manifest["files"].is_object())
    throw ProgramError{"'files' is missing"};
  for (const char *required :
       {"kernels.so", "weights.safetensors", "step.mlir"})
    if (!manifest["files"].contains(required))
      throw ProgramError{std::string("'files' does not list ") + required};
  for (auto &[name, entry] : manifest["files"].items()) {
    if (!isPlainFileName(name))
      throw ProgramError{
          "'files' lists " +
          json(name).dump(-1, ' ', false, json::error_handler_t::replace) +
          ", which is not a file name in the artifact's directory"};
    out.files.push_back({name, parseInt(entry, "bytes", "files." + name),
                         detail::string(entry, "fnv1a64", "files." + name)});
  }

  if (!manifest.contains("tensors") || !manifest["tensors"].is_array())
    throw ProgramError{"'tensors' is missing"};
  for (const json &entry : manifest["tensors"])
    out.tensors.push_back(parseTensor(entry));
  if (manifest.contains("buffers") && manifest["buffers"].is_array())
    for (const json &name : manifest["buffers"])
      if (name.is_string())
        out.buffers.push_back(name.get<std::string>());

  if (!manifest.contains("groups") || !manifest["groups"].is_array())
    throw ProgramError{"'groups' is missing"};
  std::set<std::string> seen;
  for (const json &entry : manifest["groups"])
    out.groups.push_back(parseGroup(entry, out.tileSize, seen));
  for (const ArtifactTensor &tensor : out.tensors)
    if (tensor.isParameter && !seen.count(tensor.fqn))
      throw ProgramError{"parameter '" + tensor.fqn + "' is in no group"};
}

} // namespace

bool mlir::mantissa::rt::parseArtifactManifest(const std::string &text,
                                               ArtifactManifest &out,
                                               std::string &error) {
  out = ArtifactManifest();
  json manifest = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.is_object()) {
    error = "damaged manifest (not valid JSON)";
    return false;
  }
  try {
    parseManifest(manifest, out);
  } catch (const ProgramError &e) {
    error = e.message;
    return false;
  } catch (const json::exception &e) {
    error = std::string("damaged manifest (") + e.what() + ")";
    return false;
  }
  return true;
}

bool mlir::mantissa::rt::isArtifactManifestText(const std::string &text) {
  json manifest = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return !manifest.is_discarded() && manifest.is_object() &&
         manifest.contains("format") && manifest["format"] == kArtifactFormat;
}
