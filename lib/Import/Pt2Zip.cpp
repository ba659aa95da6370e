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

llvm::Error ZipArchive::read(StringRef name, std::string &contents,
                             bool &found) {
  auto it = entries.find(name);
  found = it != entries.end();
  if (!found)
    return llvm::Error::success();
  zip_uint64_t index = it->second;

  zip_stat_t stat;
  zip_stat_init(&stat);
  if (zip_stat_index(handle, index, 0, &stat) != 0 ||
      !(stat.valid & ZIP_STAT_SIZE))
    return corrupt("cannot stat " + name + ": " + zip_strerror(handle));
  if (stat.size > options.maxEntryBytes)
    return makeError(displayName + ": entry " + name + " is " +
                     Twine(stat.size) + " bytes, more than the limit of " +
                     Twine(options.maxEntryBytes));

  zip_file_t *file = zip_fopen_index(handle, index, 0);
  if (!file)
    return corrupt("cannot open " + name + ": " + zip_strerror(handle));
  contents.assign(static_cast<size_t>(stat.size), '\0');
  zip_uint64_t done = 0;
  while (done < stat.size) {
    zip_int64_t got = zip_fread(file, contents.data() + done, stat.size - done);
    if (got < 0) {
      std::string why = zip_file_strerror(file);
      zip_fclose(file);
      return corrupt("cannot read " + name + ": " + why);
    }
    if (got == 0)
      break;
    done += static_cast<zip_uint64_t>(got);
  }
  if (done != stat.size) {
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
