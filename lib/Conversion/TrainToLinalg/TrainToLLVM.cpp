//===- TrainToLLVM.cpp - train.step to LLVM-dialect CPU code --------------===//
//
// mantissa-lower-train-to-linalg, then one-shot bufferization with results
// turned into out-parameters and temporaries freed, linalg to loops, polynomial
// approximations of the math functions LLVM has no inline lowering for, and the
// verified CPU pipeline of TOOLCHAIN.md (bf16 emulated in f32, truncf as
// integer code).
//
//===----------------------------------------------------------------------===//

#include "mantissa/Conversion/TrainToLLVM.h"

#include "mantissa/Conversion/Passes.h"
#include "mantissa/Dialect/Train/IR/TrainDialect.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/Arith/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Bufferization/Transforms/FuncBufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Linalg/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Transforms/AllocationOpInterfaceImpl.h"
#include "mlir/Dialect/MemRef/Transforms/BufferViewFlowOpInterfaceImpl.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/BufferDeallocationOpInterfaceImpl.h"
#include "mlir/Dialect/SCF/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"

#include <mutex>

using namespace mlir;

void mlir::mantissa::registerTrainToLLVMDialects(DialectRegistry &registry) {
  registry
      .insert<train::TrainDialect, affine::AffineDialect, arith::ArithDialect,
              bufferization::BufferizationDialect, cf::ControlFlowDialect,
              func::FuncDialect, linalg::LinalgDialect, LLVM::LLVMDialect,
              math::MathDialect, memref::MemRefDialect, scf::SCFDialect,
              tensor::TensorDialect>();
  arith::registerBufferizableOpInterfaceExternalModels(registry);
  linalg::registerBufferizableOpInterfaceExternalModels(registry);
  tensor::registerBufferizableOpInterfaceExternalModels(registry);
  scf::registerBufferizableOpInterfaceExternalModels(registry);
  arith::registerBufferDeallocationOpInterfaceExternalModels(registry);
  scf::registerBufferDeallocationOpInterfaceExternalModels(registry);
  memref::registerAllocationOpInterfaceExternalModels(registry);
  memref::registerBufferViewFlowOpInterfaceExternalModels(registry);
  bufferization::func_ext::registerBufferizableOpInterfaceExternalModels(
      registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
}

/// Runs a textual pipeline on `module` (registering the passes it names
/// once per process).
static LogicalResult runPipeline(ModuleOp module, StringRef pipeline) {
  static std::once_flag registered;
  std::call_once(registered, [] {
    registerConversionPasses();
    bufferization::registerBufferizationPasses();
    registerLinalgPasses();
    memref::registerMemRefPasses();
    arith::registerArithPasses();
    registerCanonicalizerPass();
    registerCSEPass();
    mantissa::registerLowerTrainToLinalgPass();
  });
  FailureOr<OpPassManager> parsed = parsePassPipeline(pipeline);
  if (failed(parsed))
    return failure();
  PassManager pm(module.getContext());
  static_cast<OpPassManager &>(pm) = std::move(*parsed);
  return pm.run(module);
}

LogicalResult mlir::mantissa::lowerTrainStepsToLLVM(ModuleOp module) {
  if (failed(runPipeline(
          module, "builtin.module(mantissa-lower-train-to-linalg,"
                  "linalg-fuse-elementwise-ops,"
                  "empty-tensor-to-alloc-tensor,"
                  "one-shot-bufferize{bufferize-function-boundaries "
                  "function-boundary-type-conversion=identity-layout-map},"
                  "buffer-results-to-out-params,"
                  // Frees every temporary before the function returns.
                  "ownership-based-buffer-deallocation,canonicalize,"
                  "buffer-deallocation-simplification,"
                  "bufferization-lower-deallocations,canonicalize)")))
    return failure();
  // Copies between strided views would call the `memrefCopy` runtime
  // function; as linalg.copy they become loops.
  module.walk([](memref::CopyOp copy) {
    OpBuilder b(copy);
    b.create<linalg::CopyOp>(copy.getLoc(), copy.getSource(), copy.getTarget());
    copy.erase();
  });
  if (failed(runPipeline(module,
                         "builtin.module(func.func(convert-linalg-to-loops),"
                         "expand-strided-metadata,lower-affine)")))
    return failure();
  // tanh and erf have no LLVM lowering without libm; the polynomial
  // approximations (f32) need none.
  RewritePatternSet patterns(module.getContext());
  populateMathPolynomialApproximationPatterns(patterns);
  if (failed(applyPatternsAndFoldGreedily(module, std::move(patterns))))
    return failure();
  return runPipeline(
      module,
      "builtin.module(arith-emulate-unsupported-floats{source-types=bf16 "
      "target-type=f32},arith-expand{include-bf16=true},convert-scf-to-cf,"
      "convert-math-to-llvm,convert-arith-to-llvm,finalize-memref-to-llvm,"
      "convert-func-to-llvm{use-bare-ptr-memref-call-conv=1},"
      "convert-cf-to-llvm,reconcile-unrealized-casts)");
}
