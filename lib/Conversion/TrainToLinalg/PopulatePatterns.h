//===- PopulatePatterns.h - TrainToLinalg's pattern families ----*- C++ -*-===//
//
// The patterns of mantissa-lower-train-to-linalg, one set per family of
// train ops, in the families of the reference interpreter (lib/Reference):
// each lives in the file of the same name. The pass (TrainToLinalg.cpp)
// assembles them. Private to lib/Conversion/TrainToLinalg.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_LIB_CONVERSION_TRAINTOLINALG_POPULATEPATTERNS_H
#define MANTISSA_LIB_CONVERSION_TRAINTOLINALG_POPULATEPATTERNS_H

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/DialectConversion.h"

namespace mlir::mantissa::train_to_linalg {

/// The elementwise family (train::ElementwiseOpInterface), one pattern for
/// all of it: ElementwiseOps.cpp.
void populateElementwisePatterns(RewritePatternSet &patterns,
                                 TypeConverter &typeConverter);
/// sum, mean, amax, softmax, log_softmax and their backward ops:
/// ReductionOps.cpp.
void populateReductionPatterns(RewritePatternSet &patterns,
                               TypeConverter &typeConverter);
/// mm, bmm, addmm, layer_norm, rms_norm and their backward ops:
/// LinalgOps.cpp.
void populateLinalgPatterns(RewritePatternSet &patterns,
                            TypeConverter &typeConverter);
/// view, expand, permute, slice, slice_scatter, concat: ShapeOps.cpp.
void populateShapePatterns(RewritePatternSet &patterns,
                           TypeConverter &typeConverter);
/// embedding, gather, index_select, scatter, scatter_value, index_put,
/// embedding_backward: IndexingOps.cpp.
void populateIndexingPatterns(RewritePatternSet &patterns,
                              TypeConverter &typeConverter);
/// full, arange: CreationOps.cpp.
void populateCreationPatterns(RewritePatternSet &patterns,
                              TypeConverter &typeConverter);

} // namespace mlir::mantissa::train_to_linalg

#endif // MANTISSA_LIB_CONVERSION_TRAINTOLINALG_POPULATEPATTERNS_H
