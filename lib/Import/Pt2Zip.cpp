//===- Pt2Zip.cpp - Read-only access to a zip archive in memory -----------===//
//
// libzip reads the archive from the caller's buffer without copying it. A
// damaged archive (cut short, a flipped bit, entries that disagree with their
// headers) is reported as "truncated or corrupt" with libzip's reason, and an
// entry's CRC is verified by reading one byte past its end.
//
//===----------------------------------------------------------------------===//

#include "Pt2Zip.h"

#include "Pt2Json.h"

#include <algorithm>
#include <cstring>
#include <vector>

using namespace mlir::mantissa::pt2;
using namespace mlir::mantissa::pt2::detail;
using llvm::StringRef;
using llvm::Twine;

llvm::Expected<std::unique_ptr<ZipArchive>>
ZipArchive::open(StringRef bytes, StringRef displayName,
                 const ReadOptions &options) {
  // 22 bytes is the smallest zip (an empty end-of-central-directory
  // record); libzip would open an empty input as an empty archive.
  if (bytes.size() < 22)
    return makeError(displayName + ": not a zip archive (only " +
                     Twine(bytes.size()) + " bytes)");
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t *source =
      zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
  if (!source)
    return makeZipError(displayName, "cannot read zip archive", &error);
  zip_t *handle =
      zip_open_from_source(source, ZIP_RDONLY | ZIP_CHECKCONS, &error);
  if (!handle) {
    zip_source_free(source);
    int code = zip_error_code_zip(&error);
    bool looksLikeZip = bytes.starts_with(StringRef("PK\x03\x04", 4));
    if (code == ZIP_ER_NOZIP && !looksLikeZip) {
      zip_error_fini(&error);
      return makeError(displayName + ": not a zip archive");
    }
    // A zip whose end was cut off has local headers but no central
    // directory, which libzip also reports as "not a zip archive".
    if (code == ZIP_ER_NOZIP) {
      zip_error_fini(&error);
      return makeError(displayName +
                       ": truncated or corrupt zip archive (it has no "
                       "central directory; was the file cut short?)");
    }
    return makeZipError(displayName, "truncated or corrupt zip archive",
                        &error);
  }
  zip_error_fini(&error);

  auto archive =
      std::unique_ptr<ZipArchive>(new ZipArchive(handle, displayName, options));
  if (llvm::Error indexError = archive->indexEntries())
    return std::move(indexError);
  return std::move(archive);
}

ZipArchive::~ZipArchive() { zip_discard(handle); }

/// Deflate's largest expansion: a 258-byte match in about two bits.
constexpr uint64_t kMaxDeflateRatio = 1032;

llvm::Error ZipArchive::stat(StringRef name, EntryStat &out, bool &found) {
  auto it = entries.find(name);
  found = it != entries.end();
  if (!found)
    return llvm::Error::success();
  zip_stat_t stat;
  zip_stat_init(&stat);
  const zip_uint64_t needed =
      ZIP_STAT_SIZE | ZIP_STAT_COMP_SIZE | ZIP_STAT_COMP_METHOD;
  if (zip_stat_index(handle, it->second, 0, &stat) != 0 ||
      (stat.valid & needed) != needed)
    return corrupt("cannot stat " + name + ": " + zip_strerror(handle));
  out.index = it->second;
  out.size = stat.size;
  out.compressedSize = stat.comp_size;
  out.compressed = stat.comp_method != ZIP_CM_STORE;
  if (stat.comp_method == ZIP_CM_STORE && stat.size != stat.comp_size)
    return corrupt("entry " + name + " is stored uncompressed in " +
                   Twine(stat.comp_size) + " bytes but declares " +
                   Twine(stat.size) + " bytes");
  if (stat.comp_method == ZIP_CM_DEFLATE &&
      (stat.comp_size > UINT64_MAX / kMaxDeflateRatio ||
       stat.size > stat.comp_size * kMaxDeflateRatio + 1024))
    return corrupt("entry " + name + " declares " + Twine(stat.size) +
                   " bytes, more than its " + Twine(stat.comp_size) +
                   " deflated bytes can hold");
  if (stat.comp_method != ZIP_CM_STORE && stat.comp_method != ZIP_CM_DEFLATE)
    return makeError(
        displayName + ": entry " + name + " is compressed with zip method " +
        Twine(stat.comp_method) + "; .pt2 entries are stored or deflated");
  if (stat.size > options.maxEntryBytes)
    return makeError(displayName + ": entry " + name + " is " +
                     Twine(stat.size) + " bytes, more than the limit of " +
                     Twine(options.maxEntryBytes));
  return llvm::Error::success();
}

llvm::Error ZipArchive::read(StringRef name, std::string &contents, bool &found,
                             uint64_t maxBytes, const Twine &bound) {
  EntryStat entry;
  if (llvm::Error error = stat(name, entry, found))
    return error;
  if (!found)
    return llvm::Error::success();
  if (entry.size > maxBytes)
    return makeError(displayName + ": entry " + name + " declares " +
                     Twine(entry.size) + " bytes, more than the " +
                     Twine(maxBytes) + " bytes that " + bound);
  contents.assign(static_cast<size_t>(entry.size), '\0');
  return readChunks(name, entry, [&](uint64_t offset, StringRef chunk) {
    std::memcpy(contents.data() + offset, chunk.data(), chunk.size());
  });
}

llvm::Error ZipArchive::readJson(StringRef name, std::string &contents,
                                 bool &found) {
  EntryStat entry;
  if (llvm::Error error = stat(name, entry, found))
    return error;
  if (!found)
    return llvm::Error::success();
  if (!entry.compressed)
    return read(name, contents, found, entry.size, "it stores");
  uint64_t limit = std::max<uint64_t>(
      uint64_t(1) << 20,
      entry.compressedSize > UINT64_MAX / options.maxJsonInflation
          ? UINT64_MAX
          : entry.compressedSize * options.maxJsonInflation);
  return read(name, contents, found, limit,
              "a JSON entry of " + Twine(entry.compressedSize) +
                  " deflated bytes may inflate to (" +
                  Twine(options.maxJsonInflation) +
                  ":1; JSON deflates about 20:1)");
}

llvm::Error ZipArchive::readChunks(
    StringRef name, const EntryStat &entry,
    llvm::function_ref<void(uint64_t offset, StringRef chunk)> consume) {
  zip_file_t *file = zip_fopen_index(handle, entry.index, 0);
  if (!file)
    return corrupt("cannot open " + name + ": " + zip_strerror(handle));
  std::vector<char> buffer(
      static_cast<size_t>(std::min<uint64_t>(entry.size, kChunkBytes)) + 1);
  zip_uint64_t done = 0;
  while (done < entry.size) {
    zip_uint64_t want =
        std::min<zip_uint64_t>(entry.size - done, buffer.size() - 1);
    zip_int64_t got = zip_fread(file, buffer.data(), want);
    if (got < 0) {
      std::string why = zip_file_strerror(file);
      zip_fclose(file);
      return corrupt("cannot read " + name + ": " + why);
    }
    if (got == 0)
      break;
    consume(done, StringRef(buffer.data(), static_cast<size_t>(got)));
    done += static_cast<zip_uint64_t>(got);
  }
  if (done != entry.size) {
    zip_fclose(file);
    return corrupt(name + " is shorter than its header says");
  }
  // libzip verifies an entry's CRC only once a read hits its end.
  char pastEnd;
  zip_int64_t extra = zip_fread(file, &pastEnd, 1);
  if (extra != 0) {
    std::string why =
        extra < 0 ? zip_file_strerror(file) : "longer than its header says";
    zip_fclose(file);
    return corrupt("cannot read " + name + ": " + why);
  }
  int closeStatus = zip_fclose(file);
  if (closeStatus != 0) {
    zip_error_t error;
    zip_error_init_with_code(&error, closeStatus);
    std::string why = zip_error_strerror(&error);
    zip_error_fini(&error);
    return corrupt("cannot read " + name + ": " + why);
  }
  return llvm::Error::success();
}

llvm::Error ZipArchive::makeZipError(StringRef displayName, const Twine &what,
                                     zip_error_t *error) {
  std::string why = zip_error_strerror(error);
  zip_error_fini(error);
  return makeError(displayName + ": " + what + " (" + why + ")");
}

llvm::Error ZipArchive::corrupt(const Twine &why) const {
  return makeError(displayName + ": truncated or corrupt zip archive (" + why +
                   ")");
}

llvm::Error ZipArchive::indexEntries() {
  zip_int64_t count = zip_get_num_entries(handle, 0);
  if (count <= 0)
    return makeError(displayName + ": the zip archive is empty");
  StringRef rootFolder;
  std::string firstName;
  for (zip_int64_t index = 0; index < count; ++index) {
    const char *rawName = zip_get_name(handle, index, ZIP_FL_ENC_RAW);
    if (!rawName)
      return corrupt("entry " + Twine(index) + " has no name");
    StringRef name(rawName);
    if (index == 0) {
      size_t slash = name.find('/');
      if (slash == StringRef::npos || slash == 0)
        return makeError(displayName + ": entry '" + name +
                         "' is not inside a root folder, as .pt2 archives' "
                         "entries are");
      firstName = name.str();
      rootFolder = StringRef(firstName).take_front(slash + 1);
    }
    if (!name.consume_front(rootFolder) || name.empty() || name.ends_with("/"))
      continue;
    if (!entries.try_emplace(name, static_cast<zip_uint64_t>(index)).second)
      return corrupt("duplicate entry " + rootFolder + name);
  }
  return llvm::Error::success();
}
