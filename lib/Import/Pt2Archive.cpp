//===- Pt2Archive.cpp - Reader for torch.export .pt2 archives -------------===//
//
// The archive layout is that of torch/export/pt2_archive/_package.py, the JSON
// that of torch/_export/serde/schema.py. The input is untrusted: every JSON
// access is checked, every size bounded and every offset computed with
// overflow checks, and each failure becomes a one-line error that names the
// file and the offending value.
//
// The reader is split by concern: Pt2Zip (the zip archive), Pt2Json (checked
// JSON access), Pt2Schema (models/model.json, with the parseModelJson entry
// point), Pt2StoredTensors (weights and constants) and Pt2Enums (the enums'
// names). This file ties them together into readPt2Archive and
// readPt2ArchiveFromBuffer, and holds the data model's small lookups and the
// summary.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Import/Pt2Archive.h"
#include "mantissa/Format/InputFile.h"

#include "Pt2ArchiveLayout.h"
#include "Pt2Json.h"
#include "Pt2StoredTensors.h"
#include "Pt2Zip.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <unistd.h>

using namespace mlir::mantissa::pt2;
using namespace mlir::mantissa::pt2::detail;
using llvm::StringRef;

//===----------------------------------------------------------------------===//
// Small helpers of the data model
//===----------------------------------------------------------------------===//

int64_t TensorMeta::getNumElements() const {
  // The reader has checked that this product does not overflow.
  int64_t count = 1;
  for (int64_t size : sizes)
    count *= size;
  return count;
}

const NamedArgument *
mlir::mantissa::pt2::findNamedArgument(llvm::ArrayRef<NamedArgument> arguments,
                                       llvm::StringRef name) {
  for (const NamedArgument &argument : arguments)
    if (argument.name == name)
      return &argument;
  return nullptr;
}

const TensorMeta *Graph::findTensor(llvm::StringRef name) const {
  auto it = tensorValues.find(name.str());
  return it == tensorValues.end() ? nullptr : &it->second;
}

bool StoredTensor::isTiedTo(const StoredTensor &other) const {
  return blobName == other.blobName && meta.dtype == other.meta.dtype &&
         meta.sizes == other.meta.sizes && meta.strides == other.meta.strides &&
         meta.storageOffset == other.meta.storageOffset;
}

static const StoredTensor *
findStoredTensor(llvm::ArrayRef<StoredTensor> tensors, llvm::StringRef fqn) {
  // Sorted by FQN (see Program).
  auto it = llvm::partition_point(
      tensors, [&](const StoredTensor &tensor) { return tensor.fqn < fqn; });
  return it != tensors.end() && it->fqn == fqn ? &*it : nullptr;
}

const StoredTensor *Program::findWeight(llvm::StringRef fqn) const {
  return findStoredTensor(weights, fqn);
}

const StoredTensor *Program::findConstant(llvm::StringRef fqn) const {
  return findStoredTensor(constants, fqn);
}

//===----------------------------------------------------------------------===//
// mantissa.export's record
//===----------------------------------------------------------------------===//

/// Reads the user outputs' names from extra/mantissa.json, when the archive
/// has it and it names them: one distinct string per user output of the
/// signature, in graph order. Anything else there is mantissa.export's
/// record for people and is not read.
static llvm::Error readUserOutputNames(ZipArchive &archive,
                                       llvm::StringRef displayName,
                                       const ReadOptions &options,
                                       Program &program) {
  std::string text;
  bool found = false;
  if (llvm::Error error = archive.readJson(kMantissaExtraEntry, text, found))
    return error;
  if (!found)
    return llvm::Error::success();
  JsonReader reader(displayName, kMantissaExtraEntry, options);
  std::optional<llvm::json::Value> document = reader.parseDocument(text);
  if (!document)
    return reader.takeError();
  JsonPath root;
  const llvm::json::Object *record = reader.getObject(*document, root);
  if (!record)
    return reader.takeError();
  const llvm::json::Value *field =
      JsonReader::getOptionalField(*record, "user_outputs");
  if (!field)
    return llvm::Error::success();
  JsonPath namesPath = root.field("user_outputs");
  const llvm::json::Array *names = reader.getArray(*field, namesPath);
  if (!names)
    return reader.takeError();
  size_t userOutputs =
      llvm::count_if(program.signature.outputSpecs, [](const OutputSpec &spec) {
        return spec.kind == OutputSpec::Kind::UserOutput;
      });
  if (names->size() != userOutputs) {
    reader.fail(namesPath, "names " + llvm::Twine(names->size()) +
                               " outputs, but the program has " +
                               llvm::Twine(userOutputs) + " user outputs");
    return reader.takeError();
  }
  std::vector<std::string> result;
  for (auto [position, value] : llvm::enumerate(*names)) {
    std::string name;
    if (!reader.read(value, namesPath.index(position), name))
      return reader.takeError();
    if (name.empty() || name == "loss" || llvm::is_contained(result, name)) {
      reader.fail(namesPath.index(position),
                  "'" + name + "' is " +
                      (name.empty()     ? "not a name"
                       : name == "loss" ? "the loss's name"
                                        : "named twice"));
      return reader.takeError();
    }
    result.push_back(std::move(name));
  }
  program.userOutputNames = std::move(result);
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

llvm::Expected<Program>
mlir::mantissa::pt2::readPt2ArchiveFromBuffer(llvm::StringRef bytes,
                                              llvm::StringRef displayName,
                                              const ReadOptions &options) {
  llvm::Expected<std::unique_ptr<ZipArchive>> archiveOrError =
      ZipArchive::open(bytes, displayName, options);
  if (!archiveOrError)
    return archiveOrError.takeError();
  ZipArchive &archive = **archiveOrError;

  std::string text;
  bool found = false;
  // The two markers are a word each ("pt2", "little").
  const uint64_t kMaxMarkerBytes = 64;
  if (llvm::Error error = archive.read("archive_format", text, found,
                                       kMaxMarkerBytes, "a marker may hold"))
    return std::move(error);
  if (!found)
    return makeError(displayName +
                     ": archive_format not found in archive (not a "
                     "torch.export .pt2 archive)");
  if (StringRef(text).trim() != "pt2")
    return makeError(displayName + ": archive_format is '" +
                     StringRef(text).trim() + "', expected 'pt2'");
  if (llvm::Error error = archive.read("byteorder", text, found,
                                       kMaxMarkerBytes, "a marker may hold"))
    return std::move(error);
  if (found && StringRef(text).trim() != "little")
    return makeError(displayName + ": the archive's byte order is '" +
                     StringRef(text).trim() +
                     "'; only little-endian archives are supported");

  if (llvm::Error error = archive.readJson(kModelJsonEntry, text, found))
    return std::move(error);
  if (!found)
    return makeError(displayName + ": " + kModelJsonEntry +
                     " not found in archive");
  llvm::Expected<Program> program = parseModelJson(text, displayName, options);
  if (!program)
    return program.takeError();
  text.clear();
  text.shrink_to_fit();

  if (archive.contains("data/weights/model.pt"))
    return makeError(displayName +
                     ": the weights are stored in the legacy pickled format "
                     "(data/weights/model.pt), which is not supported; "
                     "re-export with torch >= 2.7");
  if (llvm::Error error =
          readStoredTensors(archive, displayName, "weight", kWeightsDir,
                            kWeightsConfigEntry, options, program->weights))
    return std::move(error);
  if (llvm::Error error =
          readStoredTensors(archive, displayName, "constant", kConstantsDir,
                            kConstantsConfigEntry, options, program->constants))
    return std::move(error);
  if (llvm::Error error = checkStoredInputs(*program, displayName))
    return std::move(error);
  if (llvm::Error error =
          readUserOutputNames(archive, displayName, options, *program))
    return std::move(error);
  return program;
}

llvm::Expected<Program>
mlir::mantissa::pt2::readPt2Archive(llvm::StringRef path,
                                    const ReadOptions &options) {
  // Opened through openRegularFile, so that a FIFO or a device is refused
  // instead of blocking the open or never ending the read.
  std::string openError;
  int fd = rt::openRegularFile(path.str(), openError);
  if (fd < 0)
    return makeError(path + ": " + openError);
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getOpenFile(fd, path, /*FileSize=*/-1,
                                      /*RequiresNullTerminator=*/false);
  ::close(fd);
  if (!buffer)
    return makeError(path + ": cannot read: " + buffer.getError().message());
  return readPt2ArchiveFromBuffer((*buffer)->getBuffer(), path, options);
}

//===----------------------------------------------------------------------===//
// Summary
//===----------------------------------------------------------------------===//

static void printTensorMeta(const TensorMeta &meta, llvm::raw_ostream &os) {
  os << stringifyScalarType(meta.dtype) << '[';
  llvm::interleave(meta.sizes, os, ",");
  os << ']';
}

void mlir::mantissa::pt2::printProgramSummary(const Program &program,
                                              llvm::raw_ostream &os) {
  os << "schema " << program.schemaMajorVersion << '.'
     << program.schemaMinorVersion << ", torch " << program.torchVersion
     << '\n';
  os << "inputs (" << program.signature.inputSpecs.size() << "):\n";
  for (const InputSpec &spec : program.signature.inputSpecs) {
    os << "  " << stringifyInputKind(spec.kind) << ' ' << spec.argName;
    if (!spec.fqn.empty())
      os << " <- " << spec.fqn;
    if (spec.kind == InputSpec::Kind::Buffer && !spec.persistent)
      os << " (non-persistent)";
    if (const TensorMeta *meta = program.graph.findTensor(spec.argName)) {
      os << ' ';
      printTensorMeta(*meta, os);
    }
    os << '\n';
  }
  os << "outputs (" << program.signature.outputSpecs.size() << "):\n";
  for (const OutputSpec &spec : program.signature.outputSpecs) {
    os << "  " << stringifyOutputKind(spec.kind) << ' ' << spec.argName;
    if (!spec.fqn.empty())
      os << " -> " << spec.fqn;
    os << '\n';
  }
  auto printStored = [&](StringRef title,
                         llvm::ArrayRef<StoredTensor> tensors) {
    os << title << " (" << tensors.size() << "):\n";
    for (const StoredTensor &tensor : tensors) {
      os << "  " << tensor.fqn << ' ';
      printTensorMeta(tensor.meta, os);
      os << " from " << tensor.blobName;
      if (tensor.isFake)
        os << " (fake)";
      os << '\n';
    }
  };
  printStored("weights", program.weights);
  printStored("constants", program.constants);
  std::map<std::string, unsigned> targetCounts;
  for (const Node &node : program.graph.nodes)
    ++targetCounts[node.target];
  os << "nodes (" << program.graph.nodes.size() << "):\n";
  for (const auto &[target, count] : targetCounts)
    os << "  " << count << " x " << target << '\n';
}
