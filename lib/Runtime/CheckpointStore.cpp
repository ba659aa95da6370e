//===- CheckpointStore.cpp - The trainer's checkpoints --------------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// Checkpoint layout (format "mantissa-checkpoint", version 2): one folder
// per checkpoint, CKPT/step-<K>, written as CKPT/step-<K>.tmp and renamed
// into place once complete (the commit point: a kill before it leaves the
// earlier folders intact and a .tmp folder the next save removes). In it:
//
//   step-<k>.rank-<r>-of-<W>.safetensors   one per rank, each written under a
//       temporary name, fsynced and renamed. Keys `<state>/<fqn>` with state
//       param (gather dtype), master (fp32), exp_avg, exp_avg_sq,
//       max_exp_avg_sq (moments dtype): the rank's contiguous element range
//       of the tensor, flat. Metadata: format, step, rank, world_size,
//       `ranges` (JSON: key -> [begin, end) elements), `checksums` (JSON:
//       key -> FNV-1a 64 of its bytes, hex; version 2) and `plan` (JSON: fqn
//       -> master/gather/reduce/moments).
//
// Loading verifies what it reads: every file's size against the index, its
// step, rank and world size against the index, and each tensor it reads
// against its checksum (a rank reads only the ranges it needs, so tensors
// are checked one by one, not whole files). Version 1 checkpoints, which
// have no checksums, still load.
//   index.json   written last, by rank 0 once every rank has written: step,
//       world_size, plan, shapes, per file its size and ranges, and the
//       trainer's state (`trainer`: AdamW step count, skips, data position,
//       hyperparameters).
//
// `--keep-checkpoints N` removes all but the newest N folders after each
// commit. `--resume CKPT` takes the newest complete step-<K> folder,
// `--resume CKPT/step-<K>` that one; a folder holding index.json itself (the
// flat layout of earlier versions) is read as it is.
//
// A checkpoint folder belongs to one run. Every index names its run (`run`,
// a random identity a new run draws and a resumed run continues), and the
// run holds CKPT/run.lock (flock) while it lives: the kernel releases it
// when the process ends, however it ends, so a killed run's lock is free
// and the file alone means nothing. Holding it, a run removes what a dead
// writer left (`step-K.tmp`, a `step-K.old` or `step-K.pruned` being
// removed) and refuses the folder if it holds another run's checkpoints;
// pruning removes only the run's own. A folder is removed by renaming it to
// `step-K.pruned` first, so that a kill while removing it never leaves a
// `step-K` without all its files.
//
// Loading keys state by FQN and element range, never by position, so a
// checkpoint of any world size is resharded on load.
//
//
// Part of libmantissa_rt: no LLVM or MLIR headers here.
//
//===----------------------------------------------------------------------===//

#include "CheckpointStore.h"
#include "mantissa/Format/InputFile.h"
#include "mantissa/Runtime/UpdateRunner.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace mlir::mantissa::rt;
using namespace mlir::mantissa::rt::detail;

/// The format version saveCheckpoint writes (loading also reads 1).
static constexpr int64_t kCheckpointVersion = 2;

/// A tensor's checksum as the metadata records it: FNV-1a 64 (the
/// artifact's), 16 hex digits.
static std::string checksumText(const std::vector<uint8_t> &bytes) {
  return checkpointChecksumText(fnv1a64(bytes.data(), bytes.size()));
}

/// `object[key]` of an index read from disk, as an integer: `fallback` when
/// the key is absent, std::nullopt when its value is not an integer. json's
/// value() would throw out of the loader for another type, and convert a
/// float beyond int64_t's range with undefined behaviour.
static std::optional<int64_t> integerField(const json &object, const char *key,
                                           int64_t fallback) {
  if (!object.is_object() || !object.contains(key))
    return fallback;
  const json &value = object[key];
  if (!value.is_number_integer())
    return std::nullopt;
  return value.get<int64_t>();
}

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

static json planJson(const Artifact &artifact) {
  json plan = json::object();
  for (const ArtifactTensor &tensor : artifact.tensors()) {
    if (!tensor.isParameter)
      continue;
    plan[tensor.fqn] = {{"master", tensor.masterSplit
                                       ? std::string("fp32_split")
                                       : dtypeName(tensor.master)},
                        {"gather", dtypeName(tensor.gather)},
                        {"reduce", dtypeName(tensor.reduce)},
                        {"moments", dtypeName(tensor.moments)}};
  }
  return plan;
}

static bool fsyncDirectory(const std::string &dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0)
    return false;
  bool ok = fsync(fd) == 0;
  close(fd);
  return ok;
}

bool mlir::mantissa::rt::writeFileAtomically(const std::string &path,
                                             const std::string &text,
                                             std::string &error) {
  std::string temporary = path + ".tmp." + std::to_string(getpid());
  int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    error = temporary + ": cannot create: " + std::strerror(errno);
    return false;
  }
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      error = temporary + ": write failed: " + std::strerror(errno);
      close(fd);
      unlink(temporary.c_str());
      return false;
    }
    done += size_t(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0 ||
      rename(temporary.c_str(), path.c_str()) != 0) {
    error = path + ": cannot commit: " + std::strerror(errno);
    unlink(temporary.c_str());
    return false;
  }
  size_t slash = path.find_last_of('/');
  fsyncDirectory(slash == std::string::npos ? "." : path.substr(0, slash));
  return true;
}

static std::string rankFileName(int64_t stepNumber, int r, int w) {
  char name[96];
  std::snprintf(name, sizeof(name), "step-%08lld.rank-%d-of-%d.safetensors",
                (long long)stepNumber, r, w);
  return name;
}

/// Removes `path` and everything below it.
static void removeTree(const std::string &path) {
  if (DIR *handle = opendir(path.c_str())) {
    while (dirent *entry = readdir(handle)) {
      std::string name = entry->d_name;
      if (name == "." || name == "..")
        continue;
      std::string child = path + "/" + name;
      struct stat info;
      if (lstat(child.c_str(), &info) == 0 && S_ISDIR(info.st_mode))
        removeTree(child);
      else
        unlink(child.c_str());
    }
    closedir(handle);
  }
  rmdir(path.c_str());
}

/// The step of a checkpoint folder name `step-K`, or -1.
static int64_t checkpointFolderStep(const std::string &name) {
  if (name.rfind("step-", 0) != 0 || name.size() == 5)
    return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (int64_t(1) << 58))
      return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

/// The complete checkpoint folders `step-K` in `dir` (those holding an
/// index), by step.
static std::map<int64_t, std::string>
checkpointFolders(const std::string &dir) {
  std::map<int64_t, std::string> folders;
  if (DIR *handle = opendir(dir.c_str())) {
    while (dirent *entry = readdir(handle)) {
      std::string name = entry->d_name;
      int64_t step = checkpointFolderStep(name);
      struct stat info;
      if (step >= 0 &&
          stat((dir + "/" + name + "/index.json").c_str(), &info) == 0)
        folders[step] = dir + "/" + name;
    }
    closedir(handle);
  }
  return folders;
}

/// The index of the checkpoint folder `dir`, parsed (discarded when it
/// cannot be read or parsed).
static json readIndex(const std::string &dir) {
  std::ifstream in(dir + "/index.json");
  if (!in)
    return json(json::value_t::discarded);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str(), nullptr, false);
}

/// The run an index names: empty for checkpoints written before runs had an
/// identity.
static std::string runOf(const json &index) {
  if (index.is_object() && index.contains("run") && index["run"].is_string())
    return index["run"].get<std::string>();
  return "";
}

/// How a run is named in messages.
static std::string runText(const std::string &run) {
  return run.empty() ? std::string("a run of an earlier version")
                     : "run " + run;
}

/// A file the index of checkpoint folder `dir` lists that is missing (a
/// folder a killed run was removing), or empty. Other damage is left to
/// load(), which names it.
static std::string missingCheckpointFile(const std::string &dir,
                                         const json &index) {
  if (!index.is_object() || !index.contains("files") ||
      !index["files"].is_array())
    return "";
  for (const json &entry : index["files"]) {
    if (!entry.is_object() || !entry.contains("file") ||
        !entry["file"].is_string())
      continue;
    std::string name = entry["file"].get<std::string>();
    struct stat info;
    if (!name.empty() && name.find('/') == std::string::npos &&
        stat((dir + "/" + name).c_str(), &info) != 0)
      return name;
  }
  return "";
}

/// The checkpoint `--resume DIR` means: the newest complete `DIR/step-K`,
/// else DIR itself (a step folder, or the flat layout of earlier versions).
/// A folder missing files its index lists (a kill while pruning, by an
/// earlier version) is skipped with a warning.
static std::string resolveCheckpoint(const std::string &dir,
                                     std::vector<std::string> *warnings) {
  std::map<int64_t, std::string> folders = checkpointFolders(dir);
  for (auto it = folders.rbegin(); it != folders.rend(); ++it) {
    std::string missing =
        missingCheckpointFile(it->second, readIndex(it->second));
    if (missing.empty())
      return it->second;
    if (warnings)
      warnings->push_back("skipping " + it->second + ": its file " + missing +
                          " is missing (a run was killed while removing it)");
  }
  return folders.empty() ? dir : folders.rbegin()->second;
}

/// Removes the checkpoint folder `path` (a step-K): renamed to
/// `path.pruned` first, so that a kill midway leaves no step-K without its
/// files; what is left is removed by the next run that claims the folder.
static void removeCheckpoint(const std::string &path) {
  std::string doomed = path + ".pruned";
  removeTree(doomed);
  if (rename(path.c_str(), doomed.c_str()) == 0)
    removeTree(doomed);
}

/// What a writer of ours leaves in a checkpoint folder while it works, named
/// `step-K<suffix>`: a checkpoint being written, one being replaced and one
/// being removed.
static bool isCheckpointLeftover(const std::string &name) {
  for (const char *suffix : {".tmp", ".old", ".pruned"}) {
    size_t length = std::strlen(suffix);
    if (name.size() > length &&
        name.compare(name.size() - length, length, suffix) == 0 &&
        checkpointFolderStep(name.substr(0, name.size() - length)) >= 0)
      return true;
  }
  return false;
}

/// Whether a folder `step-K` without an index holds only files a writer of
/// ours names (rank files, index.json being written): what a kill leaves
/// while an earlier version removed it.
static bool holdsOnlyCheckpointFiles(const std::string &dir) {
  DIR *handle = opendir(dir.c_str());
  if (!handle)
    return false;
  bool ours = true;
  while (dirent *entry = readdir(handle)) {
    std::string name = entry->d_name;
    if (name == "." || name == "..")
      continue;
    std::string base = name.substr(0, name.find(".tmp."));
    if (base != "index.json" &&
        !(base.rfind("step-", 0) == 0 &&
          base.find(".rank-") != std::string::npos && base.size() > 12 &&
          base.compare(base.size() - 12, 12, ".safetensors") == 0))
      ours = false;
  }
  closedir(handle);
  return ours;
}

std::string CheckpointStore::newRunId() {
  std::random_device device;
  char text[17];
  std::snprintf(text, sizeof(text), "%08x%08x", unsigned(device()),
                unsigned(device()));
  return text;
}

CheckpointStore::~CheckpointStore() {
  if (lockDescriptor < 0)
    return;
  // A folder this run created and wrote no checkpoint into is not left
  // behind (a run that stops before its first save writes nothing).
  const std::string &root = options.saveDir;
  bool empty = createdFolder;
  if (DIR *handle = empty ? opendir(root.c_str()) : nullptr) {
    while (dirent *entry = readdir(handle)) {
      std::string name = entry->d_name;
      if (name != "." && name != ".." && name != "run.lock")
        empty = false;
    }
    closedir(handle);
  }
  if (empty) {
    unlink((root + "/run.lock").c_str());
    rmdir(root.c_str());
  }
  // Closing the descriptor releases the lock (as the process's end does).
  close(lockDescriptor);
}

/// The message for a --save-checkpoint folder holding `folder`, a checkpoint
/// of `run`, that the starting run does not continue.
static std::string foreignCheckpointMessage(const std::string &root,
                                            const std::string &folder,
                                            const std::string &run,
                                            bool resuming) {
  return "--save-checkpoint " + root + " holds checkpoints of another run (" +
         folder + ", of " + runText(run) + ")" +
         (resuming ? ", not of the run --resume continues" : "") +
         "; saving there would replace or prune them. --resume " + root +
         " continues that run, another --save-checkpoint folder starts a new "
         "one beside it, and --overwrite-checkpoints removes that run's "
         "checkpoints (nothing else in the folder) and starts over there";
}

bool mlir::mantissa::rt::checkCheckpointFolderOwner(
    const CheckpointOptions &options, std::string &error) {
  const std::string &root = options.saveDir;
  if (root.empty() || options.overwrite)
    return true;
  std::map<int64_t, std::string> folders = checkpointFolders(root);
  if (folders.empty())
    return true;
  bool resuming = !options.resumeDir.empty();
  std::string run;
  if (resuming) {
    json resumed = readIndex(resolveCheckpoint(options.resumeDir, nullptr));
    // An index that cannot be read is refused by the resume, naming it.
    if (!resumed.is_object())
      return true;
    run = runOf(resumed);
  }
  for (const auto &[step, folder] : folders) {
    json index = readIndex(folder);
    if (!index.is_object())
      continue; // refused or skipped when the run claims the folder
    if (!resuming || runOf(index) != run) {
      error = foreignCheckpointMessage(root, folder, runOf(index), resuming);
      return false;
    }
  }
  return true;
}

bool CheckpointStore::lockFolder() {
  const std::string &root = options.saveDir;
  if (root.empty() || rank != 0)
    return true;
  createdFolder = mkdir(root.c_str(), 0755) == 0;
  if (!createdFolder && errno != EEXIST)
    return fail(root + ": cannot create the checkpoint folder: " +
                std::strerror(errno));
  std::string lockPath = root + "/run.lock";
  int fd = open(lockPath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return fail(lockPath + ": cannot open the checkpoint folder's lock: " +
                std::strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int error = errno;
    char holder[128] = {0};
    ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
    std::string who = n > 0 ? std::string(holder, size_t(n)) : "";
    while (!who.empty() && (who.back() == '\n' || who.back() == ' '))
      who.pop_back();
    close(fd);
    if (error == EWOULDBLOCK)
      return fail("--save-checkpoint " + root + " is in use by another run" +
                  (who.empty() ? "" : " (" + who + ")") + ", which holds " +
                  lockPath +
                  ": two runs writing one folder would replace each other's "
                  "checkpoints; wait for it to end, or choose another folder");
    return fail(lockPath +
                ": cannot lock the checkpoint folder: " + std::strerror(error));
  }
  lockDescriptor = fd;
  return true;
}

bool CheckpointStore::claimFolder(const std::string &id,
                                  std::vector<std::string> &warnings) {
  runId = id;
  const std::string &root = options.saveDir;
  if (root.empty() || rank != 0)
    return true;
  // Who holds the folder, for the message of a run it refuses.
  std::string holder = "pid " + std::to_string(getpid()) + ", " + runText(id);
  if (ftruncate(lockDescriptor, 0) != 0 ||
      pwrite(lockDescriptor, holder.data(), holder.size(), 0) !=
          ssize_t(holder.size()))
    return fail(root +
                "/run.lock: cannot write the checkpoint folder's lock: " +
                std::strerror(errno));

  // The lock is ours, so no writer of ours is alive in the folder: what a
  // writer left there is a dead one's.
  std::vector<std::string> leftovers, foreign;
  if (DIR *handle = opendir(root.c_str())) {
    while (dirent *entry = readdir(handle)) {
      std::string name = entry->d_name, path = root + "/" + name;
      struct stat info;
      if (isCheckpointLeftover(name) ||
          (checkpointFolderStep(name) >= 0 &&
           stat((path + "/index.json").c_str(), &info) != 0 &&
           holdsOnlyCheckpointFiles(path)))
        leftovers.push_back(path);
    }
    closedir(handle);
  }
  for (const std::string &path : leftovers) {
    // A checkpoint moved aside to be replaced by one of the same step, the
    // kill before the new one took its place: it is put back.
    std::string step = path.substr(0, path.size() - 4);
    struct stat info;
    if (path.size() > 4 && path.compare(path.size() - 4, 4, ".old") == 0 &&
        stat(step.c_str(), &info) != 0 &&
        stat((path + "/index.json").c_str(), &info) == 0 &&
        rename(path.c_str(), step.c_str()) == 0) {
      warnings.push_back("put back " + step +
                         ", which a killed run had moved "
                         "aside to replace it");
      continue;
    }
    removeTree(path);
    warnings.push_back("removed " + path + ", which a killed run left");
  }
  bool resuming = !options.resumeDir.empty();
  for (const auto &[step, folder] : checkpointFolders(root)) {
    json index = readIndex(folder);
    std::string run = runOf(index);
    if (!index.is_object())
      return fail(folder + "/index.json: cannot be read, so whose checkpoint " +
                  folder +
                  " is cannot be told; move it away or choose "
                  "another --save-checkpoint folder");
    if (run == runId) {
      // Its own checkpoint, which a kill while pruning left without files.
      std::string missing = missingCheckpointFile(folder, index);
      if (!missing.empty()) {
        removeCheckpoint(folder);
        warnings.push_back("removed " + folder + ": its file " + missing +
                           " is missing (a run was killed while removing it)");
      }
      continue;
    }
    if (!options.overwrite)
      return fail(foreignCheckpointMessage(root, folder, run, resuming));
    foreign.push_back(folder);
  }
  for (const std::string &folder : foreign)
    removeCheckpoint(folder);
  if (!foreign.empty())
    warnings.push_back("--overwrite-checkpoints: removed " +
                       std::to_string(foreign.size()) +
                       " checkpoint(s) of another run from " + root);
  fsyncDirectory(root);
  return true;
}

bool CheckpointStore::checkFolder() {
  const std::string &root = options.saveDir;
  // --overwrite-checkpoints removes the other run's checkpoints, whatever
  // model they are of.
  if (root.empty() || options.overwrite)
    return true;
  std::map<int64_t, std::string> folders = checkpointFolders(root);
  if (folders.empty())
    return true;
  // The newest checkpoint there must be of this model: the same parameters
  // with the same shapes (what a resume would need).
  const std::string &newest = folders.rbegin()->second;
  std::vector<uint8_t> text;
  std::string readError;
  readRegularFile(newest + "/index.json", text, readError);
  json index = json::parse(text, nullptr, false);
  json shapes = index.is_object() ? index.value("shapes", json()) : json();
  std::string problem;
  if (!shapes.is_object())
    problem = "its index.json cannot be read";
  std::set<std::string> ours;
  for (const ArtifactTensor &tensor : artifact.tensors()) {
    if (!tensor.isParameter || !problem.empty())
      continue;
    ours.insert(tensor.fqn);
    if (!shapes.contains(tensor.fqn))
      problem = "it has no parameter '" + tensor.fqn + "'";
    else if (shapes[tensor.fqn] != json(tensor.shape))
      problem = "its parameter '" + tensor.fqn + "' has shape " +
                shapes[tensor.fqn].dump() + ", this model's " +
                shapeText(tensor.shape);
  }
  if (problem.empty())
    for (const auto &[fqn, shape] : shapes.items())
      if (!ours.count(fqn)) {
        problem = "it has a parameter '" + fqn + "' this model lacks";
        break;
      }
  if (problem.empty())
    return true;
  return fail("--save-checkpoint " + root +
              " holds checkpoints of another "
              "model (" +
              newest + ": " + problem +
              "); saving there would mix them: choose another folder");
}

bool CheckpointStore::save(int64_t stepNumber, const json &trainer) {
  // Each checkpoint is a folder of its own, DIR/step-K, written as
  // DIR/step-K.tmp and renamed into place once complete (the commit point).
  const std::string &root = options.saveDir;
  std::string finalDir = root + "/step-" + std::to_string(stepNumber);
  std::string dir = finalDir + ".tmp";
  if (rank == 0) {
    mkdir(root.c_str(), 0755);
    removeTree(dir); // a writer killed earlier
    mkdir(dir.c_str(), 0755);
  }
  comm.allAgree(true); // the directory exists before any rank writes
  std::vector<HostTensor> tensors;
  json ranges = json::object(), checksums = json::object();
  auto add = [&](const std::string &state, const ArtifactMember &member,
                 const MemberSlice &slice, const uint8_t *data, DType dtype) {
    HostTensor tensor;
    tensor.name = state + "/" + member.fqn;
    tensor.dtype = dtype;
    tensor.shape = {slice.size()};
    tensor.bytes.assign(data, data + slice.size() * elementSize(dtype));
    ranges[tensor.name] = {slice.begin, slice.end};
    checksums[tensor.name] = checksumText(tensor.bytes);
    tensors.push_back(std::move(tensor));
  };
  for (GroupState &state : groups)
    for (size_t m = 0; m < state.group->members.size(); ++m) {
      const ArtifactMember &member = state.group->members[m];
      const MemberSlice &slice = state.slices[m];
      if (!slice.size())
        continue;
      if (member.master == MasterKind::Remainder) {
        // Saved as an fp32-master run saves it: the exact fp32 master and
        // its round-to-nearest-even bf16 copy, so that any plan or tool
        // resumes from it (the resident bf16 half differs from that copy
        // only at exact ties; see splitFp32Master).
        std::vector<float> masters(size_t(slice.size()));
        joinSplitMasters(
            member, state.fullParam.data(),
            shardAddress(state, member, Role::Master, slice.begin),
            shardAddress(state, member, Role::ExpAvgSq, slice.begin),
            slice.begin, slice.end, masters.data());
        std::vector<uint16_t> copy(masters.size());
        for (size_t i = 0; i < masters.size(); ++i)
          copy[i] = floatToBF16Bits(masters[i]);
        add("param", member, slice,
            reinterpret_cast<const uint8_t *>(copy.data()), DType::BF16);
        add("master", member, slice,
            reinterpret_cast<const uint8_t *>(masters.data()), DType::F32);
      } else {
        add("param", member, slice,
            state.fullParam.data() + member.paramOffset +
                slice.begin * elementSize(member.param),
            member.param);
      }
      if (member.master == MasterKind::FP32)
        add("master", member, slice,
            shardAddress(state, member, Role::Master, slice.begin), DType::F32);
      add("exp_avg", member, slice,
          shardAddress(state, member, Role::ExpAvg, slice.begin),
          member.moments);
      if (member.master == MasterKind::Remainder) {
        // Without the tie marks of the remainder master: Adam's exp_avg_sq.
        const uint8_t *marked =
            shardAddress(state, member, Role::ExpAvgSq, slice.begin);
        std::vector<uint8_t> clean(
            marked, marked + slice.size() * elementSize(member.moments));
        for (int64_t i = 0; i < slice.size(); ++i)
          setSignBit(clean.data(), i, member.moments, false);
        add("exp_avg_sq", member, slice, clean.data(), member.moments);
      } else {
        add("exp_avg_sq", member, slice,
            shardAddress(state, member, Role::ExpAvgSq, slice.begin),
            member.moments);
      }
      if (state.group->amsgrad)
        add("max_exp_avg_sq", member, slice,
            shardAddress(state, member, Role::MaxExpAvgSq, slice.begin),
            member.moments);
    }
  std::string fileName = rankFileName(stepNumber, rank, world);
  std::map<std::string, std::string> metadata = {
      {"format", "mantissa-checkpoint"},
      {"version", std::to_string(kCheckpointVersion)},
      {"step", std::to_string(stepNumber)},
      {"rank", std::to_string(rank)},
      {"world_size", std::to_string(world)},
      {"ranges", ranges.dump()},
      {"checksums", checksums.dump()},
      {"plan", planJson(artifact).dump()}};
  std::string writeError;
  bool ok =
      writeSafeTensors(dir + "/" + fileName, tensors, metadata, writeError);
  if (!comm.allAgree(ok)) {
    // Nothing half-written stays (each rank removed its own temporary file).
    if (rank == 0)
      removeTree(dir);
    return fail(ok ? "checkpoint at step " + std::to_string(stepNumber) +
                         ": another rank failed to write its file"
                   : writeError);
  }
  if (rank != 0)
    return comm.allAgree(true);

  json index = {{"format", "mantissa-checkpoint"},
                {"version", kCheckpointVersion},
                {"step", stepNumber},
                {"world_size", world},
                {"run", runId},
                {"plan", planJson(artifact)},
                {"trainer", trainer}};
  json shapes = json::object();
  for (const ArtifactTensor &tensor : artifact.tensors())
    if (tensor.isParameter)
      shapes[tensor.fqn] = tensor.shape;
  index["shapes"] = shapes;
  json files = json::array();
  for (int r = 0; r < world; ++r) {
    std::string name = rankFileName(stepNumber, r, world);
    struct stat info;
    if (stat((dir + "/" + name).c_str(), &info) != 0)
      ok = fail(dir + "/" + name + ": missing after it was written");
    files.push_back(
        {{"file", name}, {"rank", r}, {"bytes", int64_t(info.st_size)}});
  }
  index["files"] = files;
  if (ok)
    ok = writeFileAtomically(dir + "/index.json", index.dump(1), writeError) ||
         fail(writeError);
  if (ok) {
    // A checkpoint of the same step (written by a run resumed from an
    // earlier one) is replaced: moved aside first, since rename cannot
    // replace a folder that is not empty.
    std::string aside = finalDir + ".old";
    struct stat info;
    bool replacing = stat(finalDir.c_str(), &info) == 0;
    if (replacing) {
      removeTree(aside);
      if (rename(finalDir.c_str(), aside.c_str()) != 0)
        ok = fail(finalDir + ": cannot move the older checkpoint aside: " +
                  std::strerror(errno));
    }
    if (ok && rename(dir.c_str(), finalDir.c_str()) != 0) {
      ok = fail(finalDir +
                ": cannot commit the checkpoint: " + std::strerror(errno));
      if (replacing)
        rename(aside.c_str(), finalDir.c_str()); // the older one stays
    }
    fsyncDirectory(root);
    if (ok && replacing)
      removeTree(aside);
  }
  if (!ok)
    removeTree(dir); // a checkpoint not committed (a full disk, a limit)
  if (ok && options.keep > 0) {
    // Only this run's checkpoints (claimFolder refused or removed others).
    std::vector<std::string> own;
    for (const auto &[step, folder] : checkpointFolders(root))
      if (runOf(readIndex(folder)) == runId)
        own.push_back(folder);
    int64_t excess = int64_t(own.size()) - options.keep;
    for (auto it = own.begin(); excess > 0 && it != own.end(); ++it, --excess)
      removeCheckpoint(*it);
  }
  return comm.allAgree(ok);
}

/// Reads a checkpoint and installs this rank's shard. Nothing is changed
/// unless everything loads.
bool CheckpointStore::load(const std::string &given,
                           const json &hyperparameters, int64_t &stepOut,
                           TrainerCounters &counters,
                           std::vector<std::string> &warnings) {
  std::string dir = resolveCheckpoint(given, rank == 0 ? &warnings : nullptr);
  std::string indexPath = dir + "/index.json";
  std::vector<uint8_t> text;
  std::string readError;
  if (!readRegularFile(indexPath, text, readError))
    return fail(indexPath + ": cannot read the checkpoint index (" + readError +
                "; and " + given +
                " holds no complete step-K checkpoint folder)");
  json index = json::parse(text, nullptr, false);
  // Every field is read by its type: the index is a file, and any may be
  // missing or of another type (json's typed reads would throw).
  if (index.is_discarded() || !index.is_object() ||
      index.value("format", json()) != "mantissa-checkpoint")
    return fail(indexPath + ": damaged checkpoint index");
  json versionValue = index.value("version", json(0));
  int64_t version =
      versionValue.is_number_integer() ? versionValue.get<int64_t>() : 0;
  if (version != 1 && version != kCheckpointVersion)
    return fail(indexPath + ": unknown checkpoint version " +
                versionValue.dump() + " (this runtime reads 1 and " +
                std::to_string(kCheckpointVersion) + ")");
  if (!index.contains("step") || !index["step"].is_number_integer() ||
      !index.contains("files") || !index["files"].is_array())
    return fail(indexPath + ": damaged checkpoint index (no step or files)");
  stepOut = index["step"].get<int64_t>();
  // Every field against what the checkpoint implies, before any file is
  // read: a counter out of range would train on silently (an AdamW step
  // count of 0 or 2^62 changes every update, a negative one makes NaNs).
  auto badField = [&](const std::string &field, const std::string &value,
                      const std::string &why) {
    return fail(indexPath + ": '" + field + "' is " + value + ": " + why);
  };
  if (stepOut < 1)
    return badField("step", std::to_string(stepOut),
                    "a checkpoint is written after a step, the first is 1");
  std::string folderName = dir.substr(dir.find_last_of('/') + 1);
  int64_t named = checkpointFolderStep(folderName);
  if (named >= 0 && named != stepOut)
    return badField("step", std::to_string(stepOut),
                    "the folder is " + folderName +
                        "; the index belongs to another checkpoint");
  json worldValue = index.value("world_size", json());
  if (!worldValue.is_number_integer() || worldValue.get<int64_t>() < 1 ||
      worldValue.get<int64_t>() != int64_t(index["files"].size()))
    return badField("world_size", worldValue.dump(),
                    "expected the number of rank files 'files' lists (" +
                        std::to_string(index["files"].size()) + ")");
  if (index.contains("run") && !index["run"].is_string())
    return badField("run", index["run"].dump(),
                    "expected the run's identity, a string");
  // The trainer's state: checkpoints written before it was saved resume as
  // runs without skips whose steps each had one micro-batch.
  if (index.contains("trainer") && !index["trainer"].is_object())
    return badField("trainer", index["trainer"].dump().substr(0, 40),
                    "expected an object");
  const json trainer =
      index.contains("trainer") ? index["trainer"] : json::object();
  std::optional<int64_t> trainerState[4];
  const std::pair<const char *, int64_t> trainerFields[4] = {
      {"optimizer_step", stepOut},
      {"consecutive_skips", 0},
      {"skipped_steps", 0},
      {"micro_batches_done", stepOut}};
  for (int i = 0; i < 4; ++i) {
    trainerState[i] =
        integerField(trainer, trainerFields[i].first, trainerFields[i].second);
    if (!trainerState[i])
      return badField(std::string("trainer.") + trainerFields[i].first,
                      trainer[trainerFields[i].first].dump(),
                      "expected an integer");
  }
  TrainerCounters loaded;
  loaded.optimizerStep = *trainerState[0];
  loaded.consecutiveSkips = *trainerState[1];
  loaded.skippedSteps = *trainerState[2];
  loaded.microBatchesDone = *trainerState[3];
  loaded.runId = runOf(index);
  std::string steps = "the checkpoint is at step " + std::to_string(stepOut);
  if (loaded.optimizerStep < 0 || loaded.optimizerStep > stepOut)
    return badField("trainer.optimizer_step",
                    std::to_string(loaded.optimizerStep),
                    "expected 0 to " + std::to_string(stepOut) + " (" + steps +
                        ", and each step applies at most one update)");
  if (loaded.skippedSteps < 0 ||
      loaded.skippedSteps != stepOut - loaded.optimizerStep)
    return badField(
        "trainer.skipped_steps", std::to_string(loaded.skippedSteps),
        "expected " + std::to_string(stepOut - loaded.optimizerStep) + " (" +
            steps + " and 'trainer.optimizer_step' is " +
            std::to_string(loaded.optimizerStep) +
            ": each step either applies an update or is skipped)");
  if (loaded.consecutiveSkips < 0 ||
      loaded.consecutiveSkips > loaded.skippedSteps)
    return badField("trainer.consecutive_skips",
                    std::to_string(loaded.consecutiveSkips),
                    "expected 0 to 'trainer.skipped_steps' (" +
                        std::to_string(loaded.skippedSteps) + ")");
  // At least one micro-batch a step; the bound keeps every sample index the
  // data position implies far from overflowing.
  constexpr int64_t kMaxMicroBatches = int64_t(1) << 40;
  if (loaded.microBatchesDone < stepOut ||
      loaded.microBatchesDone > kMaxMicroBatches)
    return badField(
        "trainer.micro_batches_done", std::to_string(loaded.microBatchesDone),
        "expected " + std::to_string(stepOut) + " to 2^40 (" + steps +
            ", and each step takes at least one "
            "micro-batch)");

  // This rank's slice of every member, [begin, end) elements.
  std::map<std::string, std::pair<int64_t, int64_t>> sliceOf;
  // Members that keep no master now: a master saved for one becomes the
  // parameter, which every rank holds whole, so it is read whole too (read
  // only within the slice, the other ranks' pieces had no bytes).
  // So is the master of a remainder member: every rank sets the bf16 high
  // half of the whole parameter from it.
  std::set<std::string> masterBecomesParam;
  for (GroupState &state : groups)
    for (size_t m = 0; m < state.group->members.size(); ++m) {
      const ArtifactMember &member = state.group->members[m];
      sliceOf[member.fqn] = {state.slices[m].begin, state.slices[m].end};
      if (member.master == MasterKind::None ||
          member.master == MasterKind::Remainder)
        masterBecomesParam.insert(member.fqn);
    }

  // Every file, validated (size against the index, then the format).
  std::vector<SafeTensorsFile> files;
  struct Piece {
    const HostTensor *tensor;
    int64_t begin, end;
    std::string file;
  };
  std::map<std::string, std::vector<Piece>> pieces; // "state/fqn" -> pieces
  files.reserve(index["files"].size());
  for (const json &entry : index["files"]) {
    if (!entry.is_object())
      return fail(indexPath +
                  ": damaged checkpoint index (a 'files' entry is not an "
                  "object)");
    json nameValue = entry.value("file", json());
    std::string name =
        nameValue.is_string() ? nameValue.get<std::string>() : std::string();
    std::string path = dir + "/" + name;
    // Rank files lie in the checkpoint's own folder: a name that leaves it
    // (an edited or hostile index) is refused, not followed.
    if (!name.empty() &&
        (name == "." || name == ".." || name.find('/') != std::string::npos))
      return fail(indexPath + ": 'files' lists \"" + name +
                  "\", which is not a file name in the checkpoint's folder");
    struct stat info;
    if (name.empty() || stat(path.c_str(), &info) != 0)
      return fail(path + ": checkpoint file is missing");
    json bytes = entry.value("bytes", json());
    if (!bytes.is_number_integer() ||
        bytes.get<int64_t>() != int64_t(info.st_size))
      return fail(path + ": checkpoint file is truncated or damaged (" +
                  std::to_string(info.st_size) + " bytes, the index says " +
                  bytes.dump() + ")");
    files.emplace_back();
    std::string readError;
    // Only what this rank holds is read: every parameter in full (each rank
    // holds them all gathered), the other states where a file's range meets
    // this rank's slice of the member.
    json fileRanges;
    const std::map<std::string, std::string> *rangesOf = nullptr;
    auto select = [&](const std::string &name,
                      const std::map<std::string, std::string> &metadata) {
      size_t slash = name.find('/');
      if (slash == std::string::npos || name.compare(0, slash, "param") == 0 ||
          (name.compare(0, slash, "master") == 0 &&
           masterBecomesParam.count(name.substr(slash + 1))))
        return true;
      if (rangesOf != &metadata) {
        rangesOf = &metadata;
        auto found = metadata.find("ranges");
        fileRanges =
            json::parse(found == metadata.end() ? std::string() : found->second,
                        nullptr, false);
      }
      auto slice = sliceOf.find(name.substr(slash + 1));
      const json &range = fileRanges.is_object() && fileRanges.contains(name)
                              ? fileRanges[name]
                              : json();
      // Malformed entries are read, and refused below with their reason.
      if (slice == sliceOf.end() || !range.is_array() || range.size() != 2 ||
          !range[0].is_number_integer() || !range[1].is_number_integer())
        return true;
      return range[0].get<int64_t>() < slice->second.second &&
             slice->second.first < range[1].get<int64_t>();
    };
    if (!SafeTensorsFile::read(path, files.back(), readError, select))
      return fail("checkpoint: " + readError);
    const SafeTensorsFile &file = files.back();
    json ranges = json::parse(
        file.metadata().count("ranges") ? file.metadata().at("ranges") : "",
        nullptr, false);
    if (!ranges.is_object())
      return fail(path + ": damaged checkpoint file (no element ranges)");
    // The file belongs to this checkpoint: its step, rank and world size
    // are the index's (an edited index is refused here).
    auto metadataOf = [&](const char *key) {
      auto found = file.metadata().find(key);
      return found == file.metadata().end() ? std::string() : found->second;
    };
    std::string expectedRank =
        entry.contains("rank") && entry["rank"].is_number_integer()
            ? std::to_string(entry["rank"].get<int64_t>())
            : std::string("?");
    for (auto [key, expected] :
         {std::pair<const char *, std::string>{"step", std::to_string(stepOut)},
          {"world_size",
           index.contains("world_size") &&
                   index["world_size"].is_number_integer()
               ? std::to_string(index["world_size"].get<int64_t>())
               : std::string("?")},
          {"rank", expectedRank}})
      if (metadataOf(key) != expected)
        return fail(path + ": the file's " + key + " is '" + metadataOf(key) +
                    "', the index (" + indexPath + ") says " + expected +
                    ": the checkpoint was edited or mixed with another");
    json checksums = json::parse(metadataOf("checksums"), nullptr, false);
    if (version >= 2 && !checksums.is_object())
      return fail(path + ": damaged checkpoint file (no checksums)");
    if (version >= 2)
      for (const HostTensor &tensor : file.tensors()) {
        // Tensors this rank does not need were not read (no bytes).
        if (tensor.bytes.empty())
          continue;
        const json &sum =
            checksums.contains(tensor.name) ? checksums[tensor.name] : json();
        if (!sum.is_string() ||
            sum.get<std::string>() != checksumText(tensor.bytes))
          return fail(path + ": tensor '" + tensor.name +
                      "' does not match its checksum: the checkpoint is "
                      "damaged");
      }
    for (const HostTensor &tensor : file.tensors()) {
      const json &range =
          ranges.contains(tensor.name) ? ranges[tensor.name] : json();
      if (!range.is_array() || range.size() != 2 ||
          !range[0].is_number_integer() || !range[1].is_number_integer())
        return fail(path + ": tensor '" + tensor.name +
                    "' has no element range");
      int64_t begin = range[0].get<int64_t>(), end = range[1].get<int64_t>();
      // end < begin first: end - begin could overflow int64_t.
      if (begin < 0 || end < begin || end - begin != tensor.numElements())
        return fail(path + ": tensor '" + tensor.name +
                    "' does not match its element range");
      // Masters and moments a run cannot continue from, found here rather
      // than after --max-skips skipped steps.
      if (std::string finiteError;
          !checkFiniteTensor(tensor, path, finiteError, begin))
        return fail(finiteError);
      pieces[tensor.name].push_back({&tensor, begin, end, path});
    }
  }
  json shapes = index.value("shapes", json::object());

  // Assemble elements [from, to) of `key` as `target` into `out`.
  auto assemble = [&](const std::string &key, int64_t count, int64_t from,
                      int64_t to, uint8_t *out, DType target) -> bool {
    int64_t covered = from;
    std::vector<Piece> &list = pieces[key];
    std::sort(list.begin(), list.end(),
              [](const Piece &a, const Piece &b) { return a.begin < b.begin; });
    for (const Piece &piece : list) {
      if (piece.end > count)
        return fail(piece.file + ": tensor '" + key + "' has elements up to " +
                    std::to_string(piece.end) + ", the parameter has " +
                    std::to_string(count));
      int64_t a = std::max(covered, piece.begin), b = std::min(to, piece.end);
      if (a > covered)
        break;
      if (a >= b)
        continue;
      // A tensor the file filter skipped has no bytes: never read past them
      // (select above must read every piece this rank assembles).
      if (piece.tensor->bytes.empty())
        return fail(piece.file + ": tensor '" + key +
                    "' was not read, but this rank needs its elements [" +
                    std::to_string(a) + ", " + std::to_string(b) + ")");
      convertElements(*piece.tensor, a - piece.begin, b - a,
                      out + (a - from) * elementSize(target), target);
      covered = b;
    }
    if (covered < to)
      return fail(dir + ": checkpoint tensor '" + key +
                  "' is missing elements [" + std::to_string(covered) + ", " +
                  std::to_string(to) + ")");
    return true;
  };
  auto storedDType = [&](const std::string &key) -> std::optional<DType> {
    auto it = pieces.find(key);
    if (it == pieces.end() || it->second.empty())
      return std::nullopt;
    return it->second.front().tensor->dtype;
  };

  // Stage every buffer first; install only when all of it loaded.
  struct Staged {
    uint8_t *target;
    std::vector<uint8_t> bytes;
  };
  std::vector<Staged> staged;
  std::set<std::string> used;
  // The tie marks of the current remainder member's masters (sign bits laid
  // out as its exp_avg_sq slice).
  std::vector<uint8_t> tieMarks;
  for (GroupState &state : groups)
    for (size_t m = 0; m < state.group->members.size(); ++m) {
      const ArtifactMember &member = state.group->members[m];
      const std::string &fqn = member.fqn;
      if (!shapes.contains(fqn) && !storedDType("param/" + fqn))
        return fail(dir + ": the checkpoint has no tensor '" + fqn + "'");
      if (shapes.contains(fqn) && shapes[fqn] != json(member.shape))
        return fail(dir + ": tensor '" + fqn + "' has shape " +
                    shapes[fqn].dump() + " in the checkpoint, expected " +
                    shapeText(member.shape));
      // Parameters: the whole tensor (every rank holds the gathered copy).
      std::optional<DType> paramType = storedDType("param/" + fqn);
      if (!paramType)
        return fail(dir + ": the checkpoint has no tensor 'param/" + fqn + "'");
      if (!isFloatingPoint(*paramType))
        return fail(dir + ": tensor 'param/" + fqn + "' has dtype " +
                    std::string(safeTensorsDTypeName(*paramType)) +
                    ", expected a floating-point dtype");
      std::optional<DType> masterType = storedDType("master/" + fqn);
      if (masterType && *masterType != DType::F32)
        return fail(dir + ": tensor 'master/" + fqn + "' has dtype " +
                    dtypeName(*masterType) + ", expected fp32");
      // A master saved for a parameter that now has none: the parameter
      // takes the master's (exact) value and the master is dropped.
      std::string paramSource = "param/" + fqn;
      if (masterType && member.master == MasterKind::None) {
        warnings.push_back("'" + fqn +
                           "': dropping the saved fp32 master (the "
                           "plan keeps no master now); the parameter takes "
                           "its value");
        paramSource = "master/" + fqn;
      }
      used.insert("param/" + fqn);
      used.insert("master/" + fqn);
      const MemberSlice &slice = state.slices[m];
      if (member.master == MasterKind::Remainder) {
        // `master: fp32_split`: the fp32 masters (or, without them, the
        // parameter widened) split into the bf16 parameter, whole, and this
        // rank's remainders; the saved bf16 copy is not needed.
        std::string source = masterType ? "master/" + fqn : "param/" + fqn;
        if (!masterType && *paramType != DType::F32 && rank == 0)
          warnings.push_back("'" + fqn +
                             "': no master in the checkpoint; "
                             "created from the " +
                             dtypeName(*paramType) + " parameter");
        std::vector<float> masters(size_t(member.count));
        if (!assemble(source, member.count, 0, member.count,
                      reinterpret_cast<uint8_t *>(masters.data()), DType::F32))
          return false;
        Staged high{state.fullParam.data() + member.paramOffset,
                    std::vector<uint8_t>(2 * member.count)};
        Staged low{slice.size()
                       ? shardAddress(state, member, Role::Master, slice.begin)
                       : nullptr,
                   std::vector<uint8_t>(2 * slice.size())};
        // The tie marks, set in exp_avg_sq once it is staged below.
        tieMarks.assign(size_t(slice.size() * elementSize(member.moments)), 0);
        splitMasters(masters.data(), member.count, high.bytes.data(), slice,
                     low.bytes.data(), tieMarks.data(), member.moments);
        staged.push_back(std::move(high));
        if (slice.size())
          staged.push_back(std::move(low));
      } else {
        Staged param{state.fullParam.data() + member.paramOffset, {}};
        param.bytes.resize(member.count * elementSize(member.param));
        if (!assemble(paramSource, member.count, 0, member.count,
                      param.bytes.data(), member.param))
          return false;
        staged.push_back(std::move(param));
      }

      if (member.master == MasterKind::FP32 && slice.size()) {
        // No master saved (plain AdamW, or the parameter was fp32): the
        // master is created from the parameter.
        std::string source = masterType ? "master/" + fqn : "param/" + fqn;
        if (!masterType && *paramType != DType::F32 && rank == 0)
          warnings.push_back("'" + fqn +
                             "': no master in the checkpoint; "
                             "created from the " +
                             dtypeName(*paramType) + " parameter");
        Staged master{shardAddress(state, member, Role::Master, slice.begin),
                      std::vector<uint8_t>(slice.size() * 4)};
        if (!assemble(source, member.count, slice.begin, slice.end,
                      master.bytes.data(), DType::F32))
          return false;
        staged.push_back(std::move(master));
      }
      std::vector<std::pair<const char *, Role>> moments = {
          {"exp_avg", Role::ExpAvg}, {"exp_avg_sq", Role::ExpAvgSq}};
      if (state.group->amsgrad)
        moments.push_back({"max_exp_avg_sq", Role::MaxExpAvgSq});
      for (auto [name, role] : moments) {
        std::string key = std::string(name) + "/" + fqn;
        used.insert(key);
        std::optional<DType> type = storedDType(key);
        if (!type)
          return fail(dir + ": the checkpoint has no tensor '" + key + "'");
        if (*type != member.moments) {
          // A plan that changed the moments' dtype resumes, as one that
          // changed the masters does: widened exactly, or rounded to the
          // plan's narrower dtype (said, since the low bits are lost).
          if (!isFloatingPoint(*type))
            return fail(dir + ": tensor '" + key + "' has dtype " +
                        dtypeName(*type) + ", expected " +
                        dtypeName(member.moments));
          bool widen = elementSize(member.moments) > elementSize(*type);
          if (rank == 0)
            warnings.push_back(
                "'" + key + "': moments saved in " + dtypeName(*type) +
                (widen ? ", widened to " + dtypeName(member.moments)
                       : ", rounded to " + dtypeName(member.moments) +
                             " (the plan keeps " + dtypeName(member.moments) +
                             " moments now; the low bits are lost)"));
        }
        if (!slice.size())
          continue;
        Staged moment{
            shardAddress(state, member, role, slice.begin),
            std::vector<uint8_t>(slice.size() * elementSize(member.moments))};
        if (!assemble(key, member.count, slice.begin, slice.end,
                      moment.bytes.data(), member.moments))
          return false;
        if (role == Role::ExpAvgSq && member.master == MasterKind::Remainder)
          for (int64_t i = 0; i < slice.size(); ++i)
            setSignBit(moment.bytes.data(), i, member.moments,
                       hasSignBit(tieMarks.data(), i, member.moments));
        staged.push_back(std::move(moment));
      }
    }
  for (Staged &entry : staged)
    std::memcpy(entry.target, entry.bytes.data(), entry.bytes.size());
  counters = loaded;
  // The data position counts micro-batches of B samples: resumed at another
  // B (mantissa-run --micro-batch), the same samples are as many of the new
  // size, or the resume is refused.
  const json &savedParameters = trainer.contains("hyperparameters")
                                    ? trainer["hyperparameters"]
                                    : json::object();
  std::optional<int64_t> savedBatch =
      integerField(savedParameters, "micro_batch", 0);
  std::optional<int64_t> batch =
      integerField(hyperparameters, "micro_batch", 0);
  if (savedBatch && batch && *savedBatch > 0 && *batch > 0 &&
      *savedBatch != *batch) {
    int64_t samples = 0;
    if (__builtin_mul_overflow(counters.microBatchesDone, *savedBatch,
                               &samples) ||
        samples % *batch != 0)
      return fail(indexPath + ": the checkpoint has trained on " +
                  std::to_string(counters.microBatchesDone) +
                  " micro-batches of " + std::to_string(*savedBatch) +
                  " samples, not a whole number of micro-batches of " +
                  std::to_string(*batch) + " (--micro-batch)");
    counters.microBatchesDone = samples / *batch;
  }
  if (rank == 0 && trainer.contains("hyperparameters") &&
      trainer["hyperparameters"].is_object()) {
    const json &now = hyperparameters;
    for (auto &[key, saved] : trainer["hyperparameters"].items()) {
      if (now.contains(key) && now[key] != saved)
        warnings.push_back("resuming with " + key + " " + now[key].dump() +
                           " (the checkpoint was trained with " + saved.dump() +
                           ")");
    }
  }
  return true;
}
