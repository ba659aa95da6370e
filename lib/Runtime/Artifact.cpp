//===- Artifact.cpp - Loading a compiled Mantissa artifact ----------------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/Artifact.h"
#include "mantissa/Format/InputFile.h"
#include "mantissa/Runtime/HostCpu.h"

#include <cstdio>
#include <dlfcn.h>
#include <fstream>
#include <iterator>

using namespace mlir::mantissa::rt;

std::string mlir::mantissa::rt::checkpointChecksumText(uint64_t checksum) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", (unsigned long long)checksum);
  return text;
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

bool mlir::mantissa::rt::readWholeFile(const std::string &path,
                                       std::vector<uint8_t> &bytes,
                                       std::string *why) {
  std::string error;
  bool read = readRegularFile(path, bytes, error);
  if (!read && why)
    *why = error;
  return read;
}

bool Artifact::load(const std::string &directory, Artifact &out,
                    std::string &error) {
  out.dir = directory;
  std::string manifestPath = directory + "/manifest.json";
  std::vector<uint8_t> manifestBytes;
  std::string why;
  if (!readWholeFile(manifestPath, manifestBytes, &why)) {
    error = manifestPath + ": cannot read the manifest (" + why + "; is " +
            directory + " a Mantissa artifact?)";
    return false;
  }
  ArtifactManifest manifest;
  if (!parseArtifactManifest(
          std::string(manifestBytes.begin(), manifestBytes.end()), manifest,
          error)) {
    error = manifestPath + ": " + error;
    return false;
  }
  // kernels.so is compiled for the compiling machine (-march=native):
  // refused here, before dlopen, on a CPU that lacks an extension it may
  // use, rather than dying of SIGILL in the first update.
  if (manifest.kernels && manifest.kernels->targetFeatures)
    if (std::string refusal = checkCompiledFor(
            *manifest.kernels->targetFeatures, manifest.kernels->targetCpu,
            "the artifact's CPU code");
        !refusal.empty()) {
      error = manifestPath + ": " + refusal;
      return false;
    }

  // Every piece must be there and unchanged.
  for (const ManifestFile &file : manifest.files) {
    std::string path = directory + "/" + file.name;
    std::vector<uint8_t> bytes;
    std::string why;
    if (!readWholeFile(path, bytes, &why)) {
      error = path + ": missing piece of the artifact (" + why + ")";
      return false;
    }
    std::string actual =
        manifestChecksumText(fnv1a64(bytes.data(), bytes.size()));
    if (int64_t(bytes.size()) != file.bytes) {
      error = path + ": damaged piece of the artifact (" +
              std::to_string(bytes.size()) + " bytes, the manifest says " +
              std::to_string(file.bytes) + ")";
      return false;
    }
    if (actual != file.checksum) {
      error = path + ": damaged piece of the artifact (checksum " + actual +
              ", the manifest says " + file.checksum + ")";
      return false;
    }
  }
  out.tile = manifest.tileSize;
  out.withPtx = manifest.hasPtx();
  out.kernelsInfo = std::move(manifest.kernels);
  out.tensorList = std::move(manifest.tensors);
  for (ManifestGroup &group : manifest.groups)
    out.groupList.push_back(ArtifactGroup{std::move(group)});

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
