//===- SupportedOperatorsTest.cpp - The importer's one operator list ------===//
//
// getSupportedOperators() is the list other tools read (the exporter's
// check before it writes a graph): the keys of the importer's one handler
// table, which every family file (lib/Import/Import*.cpp) fills. It must
// hold each family's operators, sorted, each once, named as graphs name
// them.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Import/TorchImporter.h"

#include "llvm/ADT/STLExtras.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

using namespace mlir::mantissa;

namespace {

TEST(SupportedOperatorsTest, EveryFamilyIsListedSortedOnce) {
  std::vector<std::string> operators = getSupportedOperators();
  EXPECT_TRUE(std::is_sorted(operators.begin(), operators.end()));
  EXPECT_EQ(std::set<std::string>(operators.begin(), operators.end()).size(),
            operators.size());
  // ATen's operators, and those the reader evaluates at the bound batch.
  llvm::ArrayRef<llvm::StringRef> symbolic = pt2::getSymbolicShapeOperators();
  for (const std::string &name : operators)
    EXPECT_TRUE(name.rfind("torch.ops.aten.", 0) == 0 ||
                llvm::is_contained(symbolic, name))
        << name;
  EXPECT_TRUE(std::binary_search(operators.begin(), operators.end(),
                                 std::string("_operator.mul")));
  // One overload of each family file.
  for (const char *overload :
       {"add.Tensor", "gelu_backward.default", "sum.dim_IntList",
        "_softmax.default", "mm.default", "addmm.default",
        "native_layer_norm_backward.default", "view.default",
        "slice_scatter.default", "embedding_dense_backward.default",
        "index_put.default", "arange.start_step", "convolution.default",
        "nll_loss_forward.default",
        "_scaled_dot_product_flash_attention_for_cpu.default",
        "max_pool2d_with_indices.default"}) {
    std::string name = std::string("torch.ops.aten.") + overload;
    EXPECT_TRUE(std::binary_search(operators.begin(), operators.end(), name))
        << name << " is not listed";
  }
  // Nothing the importer refuses is listed.
  EXPECT_FALSE(std::binary_search(operators.begin(), operators.end(),
                                  std::string("torch.ops.aten.lstm.input")));
}

} // namespace
