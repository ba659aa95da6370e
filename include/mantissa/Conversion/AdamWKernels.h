//===- AdamWKernels.h - Building and compiling AdamW kernels ----*- C++ -*-===//
//
// The C++ entry points that turn a shard group's layout into code: a module
// holding one train.adamw_update, lowered to a CPU shared library (through
// LLVM IR and clang) or to PTX for sm_90.
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_CONVERSION_ADAMWKERNELS_H
#define MANTISSA_CONVERSION_ADAMWKERNELS_H

#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Format/AdamWScalars.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LogicalResult.h"

#include <string>

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace mlir::mantissa {

using AdamWMember = train::AdamWUpdateOp::Member;
using AdamWMasterKind = train::AdamWUpdateOp::MasterKind;

/// The roles of a group's buffers, in the order of the kernels' arguments.
enum class AdamWBuffer { Grad, Param, Master, ExpAvg, ExpAvgSq, MaxExpAvgSq };
constexpr unsigned kNumAdamWBuffers = 6;

/// One shard group's update: its members and compile-time options.
struct AdamWGroup {
  SmallVector<AdamWMember> members;
  bool amsgrad = false;
  bool maximize = false;

  /// Bytes each buffer needs (at least 16, so that every buffer exists).
  int64_t getBufferBytes(AdamWBuffer buffer) const;
  /// Whether any member has a master (the op then takes a master buffer).
  bool hasMaster() const;
};

/// Appends a member of `count` elements to `group`, at the first offsets in
/// each buffer past the members already there, aligned to 16 bytes.
AdamWMember &appendAdamWMember(AdamWGroup &group, std::string name,
                               int64_t count, train::DType grad,
                               train::DType param, AdamWMasterKind master,
                               train::DType moments);

/// Registers every dialect, interface and translation the functions below
/// need in `registry`.
void registerAdamWKernelDialects(DialectRegistry &registry);

/// Builds a module with one function `name` that performs the group's
/// update:
///
///   void name(void *grad, void *param, void *master, void *exp_avg,
///             void *exp_avg_sq, void *max_exp_avg_sq, double lr,
///             double beta1, double beta2, double eps, double weight_decay,
///             int64_t step, float grad_scale, int64_t part, int64_t parts);
///
/// All six buffers are always parameters (unused ones are ignored);
/// `grad_scale` multiplies the gradients (clipping); `part` and `parts`
/// split the update into disjoint slices of tiles, for threads or ranks.
/// The GPU lowering of the same function (lowerAdamWForGpu) launches a
/// kernel that takes the slice as a tile range.
OwningOpRef<ModuleOp> buildAdamWKernelModule(MLIRContext *context,
                                             const AdamWGroup &group,
                                             StringRef name);

/// Lowers a module of train.adamw_update ops for the CPU down to the LLVM
/// dialect (vector width 16 for a target CPU without AVX-512, else 8;
/// bare-pointer calling convention). With
/// `gpuElementCode`, each chunk of 8 elements is updated with the GPU
/// kernel's element code (for testing it without a GPU).
LogicalResult lowerAdamWToLLVMDialect(ModuleOp module, int64_t tileSize = 4096,
                                      bool gpuElementCode = false);

/// Translates an LLVM-dialect module to textual LLVM IR.
FailureOr<std::string> translateToLLVMIRText(ModuleOp module);

/// The CPU that generated host code is compiled for: the environment's
/// MANTISSA_CPU_TARGET, an x86-64 CPU name LLVM knows (`znver3`,
/// `x86-64-v3`, `sapphirerapids`, ...), or `native` (the compiling machine,
/// the default when unset). It lets one machine build and test the code
/// another CPU would run (e.g. AVX2 without AVX-512 on an AVX-512 host). Any
/// other value is reported and exits 1.
std::string getCpuTarget();

/// The name of getCpuTarget()'s CPU: LLVM's name of this machine's CPU for
/// `native`, else the target itself (artifacts record it; the compile
/// cache's key includes it).
std::string getCpuTargetName();

/// Compiles textual LLVM IR into a shared library at `libraryPath` with
/// clang-19 (-O`optLevel` -march=<getCpuTarget()> -fPIC -shared
/// -Wl,-Bsymbolic, then `extraArguments`). Reports failures in `error`.
LogicalResult
compileLLVMIRToSharedLibrary(StringRef llvmIR, StringRef libraryPath,
                             std::string &error, unsigned optLevel = 3,
                             ArrayRef<StringRef> extraArguments = {});

/// Lowers the train.adamw_update of a module to a gpu.module with the
/// kernel `<function>_kernel` and its launch (the first half of
/// compileAdamWToPTX), in tiles of `tileSize` elements as on the CPU.
LogicalResult lowerAdamWForGpu(ModuleOp module, int64_t tileSize = 4096,
                               unsigned blockSize = 256);

/// Lowers a module to a gpu.module and returns the PTX for sm_90 (without
/// the trailing NUL), or fails with diagnostics. The kernel's parameters:
/// the group's present buffers in role order, the eight fp32 scalars of
/// AdamWStepScalars, then the tile range [first, end) as two 64-bit
/// integers; launch it with one block per tile of the range.
FailureOr<std::string> compileAdamWToPTX(ModuleOp module,
                                         int64_t tileSize = 4096,
                                         unsigned blockSize = 256);

/// Number of tiles of `tileSize` elements in `group` (each member starts a
/// tile): the tile range of the whole group is [0, getAdamWNumTiles).
int64_t getAdamWNumTiles(const AdamWGroup &group, int64_t tileSize = 4096);

/// A group's CPU kernel: built, lowered, compiled to a shared library with
/// clang-19 and loaded with dlopen (the library is deleted on destruction).
class AdamWCpuKernel {
public:
  /// The C signature of buildAdamWKernelModule's function.
  using Function = void (*)(void *grad, void *param, void *master, void *expAvg,
                            void *expAvgSq, void *maxExpAvgSq, double lr,
                            double beta1, double beta2, double eps,
                            double weightDecay, int64_t step, float gradScale,
                            int64_t part, int64_t parts);

  /// Compiles `group`; on failure returns null and explains in `error`.
  static std::unique_ptr<AdamWCpuKernel> compile(const AdamWGroup &group,
                                                 std::string &error,
                                                 int64_t tileSize = 4096,
                                                 bool gpuElementCode = false);
  ~AdamWCpuKernel();

  Function getFunction() const { return function; }
  /// The LLVM IR the library was compiled from.
  const std::string &getLLVMIR() const { return llvmIR; }

private:
  AdamWCpuKernel() = default;
  void *library = nullptr;
  Function function = nullptr;
  std::string libraryPath;
  std::string llvmIR;
};

} // namespace mlir::mantissa

#endif // MANTISSA_CONVERSION_ADAMWKERNELS_H
