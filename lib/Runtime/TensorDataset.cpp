//===- TensorDataset.cpp - Safetensors files as a step's samples ----------===//
//
// Part of the Mantissa project.
//
//===----------------------------------------------------------------------===//
//
// Each file's header is read and validated by the safetensors reader
// (SafeTensors.h, without loading any data), then the file is mapped whole
// with mmap(PROT_READ, MAP_SHARED) and a column's rows are read in place. A
// sample is found by a binary search over the files of its column.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/TensorDataset.h"
#include "mantissa/Runtime/CpuStep.h"
#include "mantissa/Runtime/TrainerOptions.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mlir::mantissa::rt {

namespace {

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t d = 0; d < shape.size(); ++d)
    text += (d ? ", " : "") + std::to_string(shape[d]);
  return text + "]";
}

std::string nameList(const std::vector<std::string> &names) {
  std::string text;
  for (size_t i = 0; i < names.size() && i < 10; ++i)
    text += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > 10)
    text += " and " + std::to_string(names.size() - 10) + " more";
  return names.empty() ? std::string("none") : text;
}

std::string dtypeName(DType dtype) {
  return std::string(safeTensorsDTypeName(dtype));
}

bool isId(DType dtype) { return dtype == DType::I64 || dtype == DType::I32; }

int64_t loadId(const uint8_t *bytes, DType dtype, int64_t index) {
  if (dtype == DType::I64) {
    int64_t value = 0;
    std::memcpy(&value, bytes + 8 * index, 8);
    return value;
  }
  int32_t value = 0;
  std::memcpy(&value, bytes + 4 * index, 4);
  return value;
}

/// The shards an index JSON (HF's `model.safetensors.index.json`) names, in
/// the order of their first appearance, each with the tensors its
/// `weight_map` sends to it. Files are relative to the index's folder.
bool readIndex(const std::string &path,
               std::vector<std::pair<std::string, std::set<std::string>>> &out,
               std::string &error) {
  std::ifstream stream(path);
  if (!stream) {
    error = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  std::stringstream text;
  text << stream.rdbuf();
  nlohmann::json index = nlohmann::json::parse(text.str(), nullptr,
                                               /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) {
    error = path + ": not a JSON object (an index of sharded safetensors "
                   "files, with a 'weight_map')";
    return false;
  }
  auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object() || map->empty()) {
    error = path + ": no 'weight_map' object naming each tensor's file";
    return false;
  }
  size_t slash = path.find_last_of('/');
  std::string folder =
      slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  std::map<std::string, size_t> shardOf;
  for (const auto &entry : map->items()) {
    if (!entry.value().is_string() ||
        entry.value().get<std::string>().empty()) {
      error = path + ": weight_map entry '" + entry.key() +
              "' is not the name of a file";
      return false;
    }
    std::string file = entry.value().get<std::string>();
    std::string shard = file[0] == '/' ? file : folder + file;
    auto [at, fresh] = shardOf.emplace(shard, out.size());
    if (fresh)
      out.push_back({shard, {}});
    out[at->second].second.insert(entry.key());
  }
  return true;
}

} // namespace

//===----------------------------------------------------------------------===//
// Columns
//===----------------------------------------------------------------------===//

struct TensorColumns::Mapping {
  void *address = nullptr;
  size_t size = 0;
};

TensorColumns::~TensorColumns() {
  for (Mapping &mapping : mappings)
    if (mapping.address)
      ::munmap(mapping.address, mapping.size);
}

const TensorColumns::Column::Piece &
TensorColumns::Column::pieceOf(int64_t sample) const {
  auto after = std::upper_bound(pieces.begin(), pieces.end(), sample,
                                [](int64_t value, const Piece &piece) {
                                  return value < piece.firstSample;
                                });
  return *(after - 1);
}

const TensorColumns::Column *
TensorColumns::find(const std::string &name) const {
  for (const Column &column : columnList)
    if (column.name == name)
      return &column;
  return nullptr;
}

std::unique_ptr<TensorColumns>
TensorColumns::open(const std::vector<std::string> &paths,
                    const std::string &flag, std::string &error) {
  auto columns = std::unique_ptr<TensorColumns>(new TensorColumns());
  auto fail = [&](const std::string &message) {
    error = flag + ": " + message;
    return nullptr;
  };
  // The safetensors files, each with the tensors an index expects in it.
  std::vector<std::pair<std::string, std::optional<std::set<std::string>>>>
      files;
  std::vector<std::string> indexOf;
  for (const std::string &path : paths) {
    if (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
      std::vector<std::pair<std::string, std::set<std::string>>> shards;
      if (!readIndex(path, shards, error))
        return fail(error);
      for (auto &[shard, names] : shards) {
        files.push_back({shard, names});
        indexOf.push_back(path);
      }
      continue;
    }
    files.push_back({path, std::nullopt});
    indexOf.push_back("");
  }
  columns->filePaths.reserve(files.size());
  for (const auto &file : files)
    columns->filePaths.push_back(file.first);

  /// The files of each group of columns, and the samples it holds so far.
  struct Group {
    std::vector<std::string> names;
    int64_t samples = 0;
    const std::string *firstFile = nullptr;
  };
  std::vector<Group> groups;
  std::map<std::string, size_t> groupOf, columnOf;
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string &path = columns->filePaths[f];
    SafeTensorsFile header;
    // The header alone: the data is used in place, through the mapping.
    if (!SafeTensorsFile::read(
            path, header, error,
            [](const std::string &,
               const std::map<std::string, std::string> &) { return false; }))
      return fail(error);
    if (header.size() == 0)
      return fail(path + ": holds no tensors");
    if (const auto &expected = files[f].second) {
      std::set<std::string> held(header.names().begin(), header.names().end());
      if (held != *expected) {
        std::vector<std::string> missing, extra;
        for (const std::string &name : *expected)
          if (!held.count(name))
            missing.push_back(name);
        for (const std::string &name : held)
          if (!expected->count(name))
            extra.push_back(name);
        return fail(
            path + ": does not hold what the index " + indexOf[f] + " says (" +
            (missing.empty() ? "" : "missing " + nameList(missing)) +
            (missing.empty() || extra.empty() ? "" : "; ") +
            (extra.empty() ? "" : "not in its weight_map " + nameList(extra)) +
            ")");
      }
    }
    // One sample count per file: the first dimension of every tensor.
    int64_t samples = -1;
    std::string first;
    for (const HostTensor &tensor : header.tensors()) {
      if (tensor.shape.empty())
        return fail(path + ": tensor '" + tensor.name +
                    "' is a scalar; a dataset's tensors have a first "
                    "dimension that counts their samples");
      if (samples >= 0 && tensor.shape[0] != samples)
        return fail(path + ": tensor '" + tensor.name + "' holds " +
                    std::to_string(tensor.shape[0]) + " samples, tensor '" +
                    first + "' " + std::to_string(samples) +
                    "; the tensors of one file share their first (sample) "
                    "dimension");
      if (samples < 0) {
        samples = tensor.shape[0];
        first = tensor.name;
      }
    }
    if (samples == 0)
      return fail(path + ": holds no samples (its tensors' first dimension, "
                         "N, is 0)");

    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat status;
    if (fd < 0 || ::fstat(fd, &status) != 0) {
      std::string reason = std::strerror(errno);
      if (fd >= 0)
        ::close(fd);
      return fail(path + ": cannot open: " + reason);
    }
    Mapping mapping;
    mapping.size = size_t(status.st_size);
    mapping.address =
        ::mmap(nullptr, mapping.size, PROT_READ, MAP_SHARED, fd, 0);
    int mapErrno = errno;
    ::close(fd);
    if (mapping.address == MAP_FAILED)
      return fail(path + ": cannot map: " + std::strerror(mapErrno));
    columns->mappings.push_back(mapping);
    const uint8_t *base = static_cast<const uint8_t *>(mapping.address);

    // Files holding the same tensors continue one group; a file holding
    // some of a group's tensors and not others fits nowhere.
    std::vector<std::string> names = header.names();
    std::sort(names.begin(), names.end());
    size_t group = groups.size();
    for (const std::string &name : names)
      if (auto known = groupOf.find(name); known != groupOf.end()) {
        group = known->second;
        break;
      }
    if (group < groups.size() && groups[group].names != names)
      return fail(path + ": holds the tensors " + nameList(names) + ", but " +
                  *groups[group].firstFile + " holds " +
                  nameList(groups[group].names) +
                  "; files concatenate along the samples only when they hold "
                  "the same tensors");
    if (group == groups.size()) {
      groups.push_back({names, 0, &path});
      for (const std::string &name : names)
        groupOf[name] = group;
    }
    for (size_t t = 0; t < header.size(); ++t) {
      const HostTensor &tensor = header.tensors()[t];
      std::vector<int64_t> sampleShape(tensor.shape.begin() + 1,
                                       tensor.shape.end());
      int64_t sampleBytes =
          *checkedNumElements(sampleShape) * int64_t(elementSize(tensor.dtype));
      if (header.dataOffset(t) + uint64_t(samples * sampleBytes) > mapping.size)
        return fail(path + ": tensor '" + tensor.name +
                    "' ends past the end of the file (did it change while "
                    "it was read?)");
      auto [at, fresh] =
          columnOf.emplace(tensor.name, columns->columnList.size());
      if (fresh) {
        Column column;
        column.name = tensor.name;
        column.dtype = tensor.dtype;
        column.sampleShape = sampleShape;
        column.sampleBytes = sampleBytes;
        columns->columnList.push_back(std::move(column));
      }
      Column &column = columns->columnList[at->second];
      if (column.dtype != tensor.dtype || column.sampleShape != sampleShape)
        return fail(path + ": tensor '" + tensor.name + "' is " +
                    dtypeName(tensor.dtype) + " with samples of " +
                    shapeText(sampleShape) + ", but in " +
                    *column.pieces.front().path + " it is " +
                    dtypeName(column.dtype) + " with samples of " +
                    shapeText(column.sampleShape));
      column.pieces.push_back({groups[group].samples, samples,
                               base + header.dataOffset(t),
                               &columns->filePaths[f]});
    }
    groups[group].samples += samples;
  }
  for (const Group &group : groups)
    if (group.samples != groups.front().samples)
      return fail("the tensors " + nameList(groups.front().names) + " (from " +
                  *groups.front().firstFile + ") hold " +
                  std::to_string(groups.front().samples) + " samples, the " +
                  "tensors " + nameList(group.names) + " (from " +
                  *group.firstFile + ") " + std::to_string(group.samples) +
                  "; every tensor of a dataset holds the same samples");
  columns->samples = groups.empty() ? 0 : groups.front().samples;
  if (columns->samples == 0)
    return fail("no files given");
  return columns;
}

//===----------------------------------------------------------------------===//
// The dataset against the step
//===----------------------------------------------------------------------===//

namespace {

/// Checks every id of `column` against what `input` accepts: the bound of
/// the table it indexes (with its ignored id), and in any case the input's
/// integer type. Bool data must be 0 or 1.
bool checkValues(const TensorColumns::Column &column, const StepTensor &input,
                 const std::string &flag, std::string &error) {
  bool ids = isId(column.dtype);
  if (!ids && column.dtype != DType::Bool)
    return true;
  int64_t lower = INT64_MIN, upper = INT64_MAX; // [lower, upper]
  std::string range;
  if (input.indexBound.bound >= 1) {
    lower = 0;
    upper = input.indexBound.bound - 1;
    range =
        "outside [0, " + std::to_string(input.indexBound.bound) + ")" +
        (input.indexBound.what.empty() ? std::string()
                                       : " (" + input.indexBound.what + ")");
  } else if (input.dtype == DType::I32) {
    lower = INT32_MIN;
    upper = INT32_MAX;
    range = "outside the step's I32 input";
  } else if (ids) {
    return true;
  }
  int64_t elements = column.sampleBytes / int64_t(elementSize(column.dtype));
  for (const TensorColumns::Column::Piece &piece : column.pieces)
    for (int64_t s = 0; s < piece.samples; ++s) {
      const uint8_t *row = piece.data + s * column.sampleBytes;
      for (int64_t e = 0; e < elements; ++e) {
        int64_t value = ids ? loadId(row, column.dtype, e) : row[e];
        bool fits = ids ? (value >= lower && value <= upper) ||
                              value == input.indexBound.ignored
                        : value <= 1;
        if (fits)
          continue;
        error = flag + ": " + *piece.path + ": tensor '" + column.name +
                "' sample " + std::to_string(s) + " (sample " +
                std::to_string(piece.firstSample + s) +
                " of the dataset), element " + std::to_string(e) + ": " +
                (ids ? "id " + std::to_string(value) + " is " + range
                     : "byte " + std::to_string(value) +
                           " is not a bool (0 or 1)") +
                ", for the step's user input '" + input.name + "'";
        return false;
      }
    }
  return true;
}

} // namespace

std::unique_ptr<TensorDataset>
TensorDataset::open(const std::vector<StepTensor> &arguments,
                    const Options &options, std::string &error) {
  auto dataset = std::unique_ptr<TensorDataset>(new TensorDataset());
  std::vector<std::string> inputNames;
  for (const StepTensor &argument : arguments)
    if (argument.role == StepTensor::Role::UserInput)
      inputNames.push_back(argument.name);
  for (const auto &[input, tensor] : options.tensorOfInput)
    if (std::find(inputNames.begin(), inputNames.end(), input) ==
        inputNames.end()) {
      error = "--dataset-map: '" + input +
              "' is not a user input of the step (its user inputs are " +
              nameList(inputNames) + ")";
      return nullptr;
    }
  for (const StepTensor &argument : arguments) {
    if (argument.role != StepTensor::Role::UserInput ||
        options.generatedInputs.count(argument.name))
      continue;
    if (argument.shape.empty()) {
      error = "--dataset: the step's user input '" + argument.name +
              "' is a scalar; a dataset fills inputs whose first dimension "
              "is the micro-batch's samples";
      return nullptr;
    }
    if (!dataset->bindings.empty() && argument.shape[0] != dataset->batch) {
      error = "--dataset: the step's user inputs disagree on the micro-batch "
              "size (their first dimension): '" +
              dataset->bindings.front().input.name + "' is " +
              shapeText(dataset->bindings.front().input.shape) + ", '" +
              argument.name + "' " + shapeText(argument.shape);
      return nullptr;
    }
    dataset->batch = argument.shape[0];
    auto renamed = options.tensorOfInput.find(argument.name);
    dataset->bindings.push_back(
        {argument, renamed == options.tensorOfInput.end() ? argument.name
                                                          : renamed->second});
  }
  if (dataset->bindings.empty() || dataset->batch < 1) {
    error = "--dataset: the step has no user input with samples to fill";
    return nullptr;
  }

  // Each split against the step: every input has its column, every column
  // fills an input.
  auto check = [&](const TensorColumns &columns, const std::string &flag) {
    std::vector<std::string> held;
    for (const TensorColumns::Column &column : columns.columns())
      held.push_back(column.name);
    for (const Binding &binding : dataset->bindings) {
      const StepTensor &input = binding.input;
      const TensorColumns::Column *column = columns.find(binding.tensor);
      if (!column) {
        error = flag + ": no tensor '" + binding.tensor +
                "' for the step's user input '" + input.name +
                "' (the dataset holds " + nameList(held) +
                "; --dataset-map INPUT=TENSOR fills an input from a tensor "
                "of another name)";
        return false;
      }
      const std::string &file = *column->pieces.front().path;
      std::vector<int64_t> sampleShape(input.shape.begin() + 1,
                                       input.shape.end());
      if (column->dtype != input.dtype &&
          !(isId(column->dtype) && isId(input.dtype))) {
        error = flag + ": " + file + ": tensor '" + column->name + "' is " +
                dtypeName(column->dtype) + ", the step's user input '" +
                input.name + "' takes " + dtypeName(input.dtype);
        return false;
      }
      if (column->sampleShape != sampleShape) {
        error = flag + ": " + file + ": tensor '" + column->name +
                "' holds samples of " + shapeText(column->sampleShape) +
                ", the step's user input '" + input.name + "' takes " +
                shapeText(input.shape) + ": " + std::to_string(input.shape[0]) +
                " samples of " + shapeText(sampleShape);
        return false;
      }
      if (!checkValues(*column, input, flag, error))
        return false;
    }
    for (const TensorColumns::Column &column : columns.columns()) {
      bool used = options.generatedInputs.count(column.name) != 0;
      for (const Binding &binding : dataset->bindings)
        used |= binding.tensor == column.name;
      if (!used) {
        error = flag + ": " + *column.pieces.front().path + ": tensor '" +
                column.name + "' fills none of the step's user inputs (" +
                nameList(inputNames) +
                "; --dataset-map INPUT=TENSOR fills an input from a tensor "
                "of another name)";
        return false;
      }
    }
    return true;
  };
  dataset->train = TensorColumns::open(options.train, "--dataset", error);
  if (!dataset->train || !check(*dataset->train, "--dataset"))
    return nullptr;
  if (!options.validation.empty()) {
    dataset->validation =
        TensorColumns::open(options.validation, "--val-dataset", error);
    if (!dataset->validation || !check(*dataset->validation, "--val-dataset"))
      return nullptr;
    int64_t held = dataset->validation->numSamples();
    if (held / dataset->batch < options.evalBatches) {
      error = "--eval-batches " + std::to_string(options.evalBatches) +
              ": the validation dataset holds " + std::to_string(held) +
              " samples, fewer than " + std::to_string(options.evalBatches) +
              " micro-batches of " + std::to_string(dataset->batch);
      return nullptr;
    }
  }
  dataset->order = std::make_unique<SampleOrder>(dataset->train->numSamples(),
                                                 options.shuffleSeed);
  return dataset;
}

int64_t TensorDataset::validationMicroBatches() const {
  return validation ? validation->numSamples() / batch : 0;
}

bool TensorDataset::loadMicroBatch(DataSplit split, int64_t firstSample,
                                   std::vector<HostTensor> &inputs,
                                   std::string &error) {
  bool validating = split == DataSplit::Validation;
  if (validating && !validation) {
    error = "no validation data (--val-dataset)";
    return false;
  }
  if (firstSample < 0 ||
      (validating && firstSample > validation->numSamples() - batch)) {
    error = "--val-dataset: samples [" + std::to_string(firstSample) + ", " +
            std::to_string(firstSample + batch) + ") are not in the " +
            std::to_string(validation ? validation->numSamples() : 0) +
            " samples of the validation dataset";
    return false;
  }
  const TensorColumns &data = validating ? *validation : *train;
  // The dataset's sample behind each of the micro-batch's rows.
  std::vector<int64_t> samples(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b)
    samples[size_t(b)] =
        validating ? firstSample + b : order->sample(firstSample + b);
  inputs.resize(bindings.size());
  for (size_t i = 0; i < bindings.size(); ++i) {
    const StepTensor &input = bindings[i].input;
    const TensorColumns::Column &column = *data.find(bindings[i].tensor);
    HostTensor &tensor = inputs[i];
    tensor.name = input.name;
    tensor.dtype = input.dtype;
    tensor.shape = input.shape;
    tensor.bytes.resize(size_t(input.bytes));
    int64_t rowBytes = int64_t(tensor.bytes.size()) / batch;
    int64_t elements = rowBytes / int64_t(elementSize(input.dtype));
    for (int64_t b = 0; b < batch; ++b) {
      int64_t sample = samples[size_t(b)];
      const TensorColumns::Column::Piece &piece = column.pieceOf(sample);
      const uint8_t *row =
          piece.data + (sample - piece.firstSample) * column.sampleBytes;
      uint8_t *out = tensor.bytes.data() + b * rowBytes;
      if (column.dtype == input.dtype) {
        std::memcpy(out, row, size_t(rowBytes));
        continue;
      }
      // I32 and I64 ids, which open() checked to fit the input.
      for (int64_t e = 0; e < elements; ++e) {
        int64_t id = loadId(row, column.dtype, e);
        if (input.dtype == DType::I64) {
          std::memcpy(out + 8 * e, &id, 8);
        } else {
          int32_t narrow = int32_t(id);
          std::memcpy(out + 4 * e, &narrow, 4);
        }
      }
    }
  }
  return true;
}

std::unique_ptr<BatchSource>
openBatchSource(const std::vector<StepTensor> &arguments,
                const TrainerOptions &options, std::string &error) {
  if (!options.data.tensors)
    return CpuStepGradients::openTokenData(arguments, options, error);
  TensorDataset::Options data;
  data.train = options.data.paths;
  data.validation = options.data.validationPaths;
  data.shuffleSeed = options.data.shuffleSeed;
  data.tensorOfInput = options.data.tensorOfInput;
  data.evalBatches = options.eval.batches;
  // The hook for random state made inside the step (issue 40, item 2): the
  // user inputs it fills go into data.generatedInputs here, and the
  // gradient sources, which store every user input from the micro-batch
  // (storeStepInput), skip them.
  return TensorDataset::open(arguments, data, error);
}

} // namespace mlir::mantissa::rt
