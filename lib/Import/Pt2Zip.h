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

#include "llvm/ADT/STLFunctionalExtras.h"
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

  /// What an entry's headers declare, checked against what its compressed
  /// bytes can hold before anything is read.
  struct EntryStat {
    zip_uint64_t index = 0;
    /// Uncompressed bytes.
    uint64_t size = 0;
    uint64_t compressedSize = 0;
    /// Deflated rather than stored (torch stores every entry).
    bool compressed = false;
  };

  /// The declared size of entry `name` (relative to the root folder).
  /// `found` is set to false, without an error, when there is no such entry.
  /// A size that the entry's compressed bytes cannot hold (a stored entry's
  /// sizes differ, a deflated one's exceed deflate's 1032:1), a compression
  /// method other than store and deflate, or a size over
  /// ReadOptions::maxEntryBytes is an error.
  llvm::Error stat(llvm::StringRef name, EntryStat &stat, bool &found);

  /// Reads entry `name` whole. Its declared size must be at most `maxBytes`,
  /// which `bound` describes in the error ("a marker may hold"): the
  /// check comes before anything is allocated. `found` as for stat.
  llvm::Error read(llvm::StringRef name, std::string &contents, bool &found,
                   uint64_t maxBytes, const llvm::Twine &bound);

  /// Reads JSON entry `name` whole. Stored, it is its own bytes in the
  /// archive; deflated, it may inflate at most ReadOptions::maxJsonInflation
  /// times (1 MiB at least), so that a deflate bomb is refused before it is
  /// inflated.
  llvm::Error readJson(llvm::StringRef name, std::string &contents,
                       bool &found);

  /// Streams entry `name` (already stat'ed) through a buffer of
  /// kChunkBytes: `consume` gets each chunk and its offset in the entry.
  /// Memory stays one chunk however large the entry. The entry must hold
  /// exactly its declared size, and its CRC is verified.
  llvm::Error readChunks(
      llvm::StringRef name, const EntryStat &stat,
      llvm::function_ref<void(uint64_t offset, llvm::StringRef chunk)> consume);

  static constexpr size_t kChunkBytes = size_t(1) << 20;

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
