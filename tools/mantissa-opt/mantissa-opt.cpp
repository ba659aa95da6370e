//===- mantissa-opt.cpp - mlir-opt for Mantissa's dialect and passes ------===//
//
// Parses, verifies, transforms and prints `train` IR. Lit tests drive it.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/Passes.h"
#include "mantissa/Conversion/TrainToGPU.h"
#include "mantissa/Conversion/TrainToLLVM.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mantissa/Transforms/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  // Only what the project uses: the all-in-one registration headers would
  // cost most of this tool's build time.
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  mlir::mantissa::registerTransformsPasses();
  mlir::mantissa::registerConversionPasses();
  // Mantissa's lowering passes, mantissa-train-cpu-pipeline and the upstream
  // passes it names, so that each of its stages runs here.
  mlir::mantissa::registerTrainCpuPipelinePasses();
  // The GPU step's passes (mantissa/Transforms/GPU/Passes.td, then
  // mantissa/Conversion/TrainToGPU/Buffers/Passes.td) and
  // mantissa-train-gpu-pipeline, which runs them in pipeline order, so that
  // a lit test runs what compileTrainStepForGpu runs.
  mlir::mantissa::registerTrainToGPUPasses();

  mlir::DialectRegistry registry;
  registry
      .insert<mlir::mantissa::train::TrainDialect, mlir::func::FuncDialect>();
  // What --mantissa-lower-train-to-linalg produces, so that it prints and
  // parses.
  registry.insert<mlir::arith::ArithDialect, mlir::linalg::LinalgDialect,
                  mlir::math::MathDialect, mlir::scf::SCFDialect,
                  mlir::tensor::TensorDialect>();
  // And what the CPU pipeline's later stages read and produce (buffers,
  // OpenMP, the LLVM dialect).
  mlir::mantissa::registerTrainToLLVMDialects(registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "Mantissa optimizer driver\n", registry));
}
