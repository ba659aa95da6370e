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

} // namespace mlir::mantissa::pt2::detail

#endif // MANTISSA_LIB_IMPORT_PT2SCHEMA_H
