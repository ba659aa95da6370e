//===- Pt2Schema.h - Reading the schema's structures ------------*- C++ -*-===//
//
// What the rest of the reader needs from Pt2Schema.cpp besides the public
// parseModelJson: reading a TensorMeta, which the payload configs of
// data/weights/ and data/constants/ embed. Private to lib/Import.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_LIB_IMPORT_PT2SCHEMA_H
#define MANTISSA_LIB_IMPORT_PT2SCHEMA_H

#include "mantissa/Import/Pt2Archive.h"

#include "llvm/ADT/Twine.h"
#include "llvm/Support/JSON.h"

namespace mlir::mantissa::pt2::detail {

class JsonPath;
class JsonReader;

/// Reads a schema TensorMeta. `label` names the tensor in errors, e.g.
/// "tensor 'x'" or "weight 'fc1.weight'".
bool readTensorMeta(JsonReader &reader, const llvm::json::Value &value,
                    const JsonPath &path, const llvm::Twine &label,
                    TensorMeta &meta);

/// Reads the program's range_constraints (`top`) and binds its batch symbol
/// in `reader.symbols` to the micro-batch (ReadOptions::microBatch, else
/// the size the program was exported with, found among the user inputs'
/// sizes in `module`). Refuses a program with other shape symbols and a
/// micro-batch outside the symbol's range. Pt2Specialization.cpp.
bool bindBatchSymbol(JsonReader &reader, const llvm::json::Object &top,
                     const llvm::json::Object &module, BatchBinding &batch);

/// After the graph is read with the symbol bound: evaluates the graph's
/// symbolic values, replaces every argument naming one by its value,
/// checks the graph's assertions and drops the nodes that only compute
/// sizes (getSymbolicShapeOperators()). For a static program, refuses a
/// ReadOptions::microBatch other than the exported batch.
bool specializeProgram(JsonReader &reader, Program &program);

} // namespace mlir::mantissa::pt2::detail

#endif // MANTISSA_LIB_IMPORT_PT2SCHEMA_H
