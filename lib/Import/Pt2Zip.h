//===- Pt2Zip.h - Read-only access to a zip archive in memory ---*- C++ -*-===//
//
// A thin layer over libzip for the .pt2 reader: the archive is read from
// memory, entries are looked up by their name below the archive's root
// folder, their sizes are bounded by ReadOptions, and every libzip failure
// becomes a one-line error that names the file. Private to lib/Import.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_LIB_IMPORT_PT2ZIP_H
#define MANTISSA_LIB_IMPORT_PT2ZIP_H

#include "mantissa/Import/Pt2Archive.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Error.h"

#include <zip.h>

#include <memory>
#include <string>

namespace mlir::mantissa::pt2::detail {

/// A read-only view of the zip archive, with entry names relative to the
/// archive's root folder.
class ZipArchive {
public:
  static llvm::Expected<std::unique_ptr<ZipArchive>>
  open(llvm::StringRef bytes, llvm::StringRef displayName,
       const ReadOptions &options);

  ~ZipArchive();
  ZipArchive(const ZipArchive &) = delete;
  ZipArchive &operator=(const ZipArchive &) = delete;

  bool contains(llvm::StringRef name) const { return entries.count(name); }

  /// Reads entry `name` (relative to the root folder). `found` is set to
  /// false, without an error, when there is no such entry.
  llvm::Error read(llvm::StringRef name, std::string &contents, bool &found);

private:
  ZipArchive(zip_t *handle, llvm::StringRef displayName,
             const ReadOptions &options)
      : handle(handle), displayName(displayName), options(options) {}

  static llvm::Error makeZipError(llvm::StringRef displayName,
                                  const llvm::Twine &what, zip_error_t *error);

  llvm::Error corrupt(const llvm::Twine &why) const;

  /// Maps entry names below the root folder to their indices. Like torch's
  /// reader, the root folder is that of the first entry and entries outside
  /// it are ignored.
  llvm::Error indexEntries();

  zip_t *handle;
  std::string displayName;
  const ReadOptions &options;
  llvm::StringMap<zip_uint64_t> entries;
};

} // namespace mlir::mantissa::pt2::detail

#endif // MANTISSA_LIB_IMPORT_PT2ZIP_H
