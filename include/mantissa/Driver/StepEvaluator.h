//===- StepEvaluator.h - Running a training step's forward/backward -*- C++
//-*-===//
//
// One training step's forward and backward, evaluated either by the
// reference interpreter (torch's exact CPU semantics) or by compiled CPU code
// (train -> linalg -> LLVM -> a cached shared library).
//
//===----------------------------------------------------------------------===//

#ifndef MANTISSA_DRIVER_STEPEVALUATOR_H
#define MANTISSA_DRIVER_STEPEVALUATOR_H

#include "mantissa/Dialect/Train/IR/TrainOps.h"
#include "mantissa/Reference/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/Pass.h"
#include "llvm/Support/Error.h"
#include <memory>
#include <string>

namespace mlir::mantissa {

/// Evaluates one step: arguments in the step's argument order and types,
/// results in its result order and types.
class StepEvaluator {
public:
  virtual ~StepEvaluator() = default;
  virtual llvm::Expected<SmallVector<reference::Tensor>>
  evaluate(ArrayRef<reference::Tensor> arguments) = 0;
  /// "reference" or "compiled (CPU)", for reports.
  virtual llvm::StringRef describe() const = 0;
  /// Whether evaluateRaw is available (compiled code, not the interpreter).
  virtual bool hasRawEntry() const { return false; }
  /// Evaluates on raw buffers, with no conversion or copy: `pointers` holds
  /// one dense row-major buffer per argument, then one per result (which
  /// the step fills), each in the type of the step the code was compiled
  /// from (for compiled CPU code, deriveCpuStep's). Only with hasRawEntry.
  virtual void evaluateRaw(void **pointers) {}
};

/// The reference interpreter on `step` (which must outlive the evaluator).
std::unique_ptr<StepEvaluator> createReferenceEvaluator(train::StepOp step);

/// How createCompiledEvaluator came by its library.
struct CompileCacheReport {
  /// Hash of the planned step, lowering version and host CPU.
  std::string hash;
  /// The library in the cache; empty when no cache directory was usable.
  std::string libraryPath;
  /// True when the library was already in the cache.
  bool cached = false;
  /// Seconds spent compiling (or only loading, when cached).
  double seconds = 0;
};

/// A module holding a copy of `step` that `pass` has rewritten, or an error
/// naming the `what` it was to derive, with the pass's diagnostics.
llvm::Expected<OwningOpRef<ModuleOp>> deriveStep(train::StepOp step,
                                                 std::unique_ptr<Pass> pass,
                                                 llvm::StringRef what);

/// `step` as the CPU compiles it: a copy, in a module of its own, whose
/// parameters are taken in their gather dtype where the step only reads
/// them rounded to it (mantissa-read-gathered-parameters), as the runtime
/// holds them; so the runtime binds its gathered copy as it is instead of
/// widening it every micro-batch for the step to round it back. It computes
/// what `step` computes from the masters. The CPU step library's signature
/// and step.cpu.json's arguments are this step's. Deriving it again from
/// its result changes nothing.
llvm::Expected<OwningOpRef<ModuleOp>> deriveCpuStep(train::StepOp step);

/// Compiles deriveCpuStep(step) for the CPU into a shared library (clang -O2
/// -march=native) and loads it; evaluate() still takes `step`'s argument
/// types, rounding parameters the library takes gathered as `step`'s casts
/// would. Libraries are cached by a hash of the derived step in
/// `$MANTISSA_CACHE_DIR` (default `$XDG_CACHE_HOME/mantissa` or
/// `~/.cache/mantissa`). Fails with the lowering's diagnostics (e.g. an
/// operation without a lowering).
llvm::Expected<std::unique_ptr<StepEvaluator>>
createCompiledEvaluator(train::StepOp step,
                        CompileCacheReport *report = nullptr);

/// The symbol of the step's entry in its library,
/// `mantissa_step_<step>_packed(void **pointers)`: one pointer per argument,
/// then one per result.
std::string getStepLibraryEntry(train::StepOp step);

/// How this process compiles the CPU step's bf16 matrix products, decided
/// once from the CPU it compiles for (MANTISSA_CPU_TARGET) and the running
/// oneDNN's answer: where oneDNN has no bf16 matmul for that CPU, they
/// become fp32 products of operands widened by the ops that make them
/// (mantissa-widen-bf16-products); elsewhere they stay bf16, and the
/// runtime still widens any that the oneDNN it runs with refuses
/// (lib/Runtime/CpuGemm.cpp).
struct CpuBf16Products {
  /// getCpuTarget(); empty with MANTISSA_CPU_GEMM=loops (no choice).
  std::string cpu;
  /// Whether this process's oneDNN has a bf16 matmul (on this CPU, under
  /// ONEDNN_MAX_CPU_ISA).
  bool libraryBf16 = true;
  /// Whether the products are widened when the step is compiled.
  bool widen = false;
  /// The run's one warning line about them (empty when !widen).
  std::string warning;
  /// For the compile cache's key.
  std::string key() const;
};
const CpuBf16Products &getCpuBf16Products();

/// getCpuBf16Products().warning if `step` has bf16 products to widen, else
/// empty.
std::string getWidenedBf16ProductsWarning(train::StepOp step);

/// Lowers a copy of `step` and compiles it (clang -O2 -march=native
/// -fopenmp) into a shared library at `libraryPath` with the entry
/// getStepLibraryEntry(step); written under a temporary name and renamed.
/// When `fellBackTo` is given (`libraryPath` is in the compile cache) and the
/// library cannot be written there (a full disk), it is compiled into a
/// temporary file instead, with one warning, and `*fellBackTo` names it.
llvm::Error compileStepLibrary(train::StepOp step, llvm::StringRef libraryPath,
                               std::string *fellBackTo = nullptr);

/// The directory compiled steps are cached in: `$MANTISSA_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/mantissa`, else `~/.cache/mantissa`; empty when none can
/// be named.
std::string getCompileCacheDirectory();

/// getCompileCacheDirectory(), created, when it is a folder that can be
/// written; otherwise warns once on stderr (naming the folder and why) and
/// returns empty, so that the caller compiles into a temporary folder
/// instead. The first call in a process removes what dead writers left in
/// it (removeAbandonedTemporaries).
std::string getUsableCompileCacheDirectory();

/// Warns once (as getUsableCompileCacheDirectory does) that the cache
/// `directory` could not take a compiled file, for `reason` (a full disk),
/// and that the caller compiles into a temporary folder instead.
void warnCacheUnusable(llvm::StringRef directory, llvm::StringRef reason);

/// Removes what a writer of ours that is gone left in `folder`: entries
/// `<name>.tmp.<pid>` (files or folders; only those of `<name>` == `stem`
/// when it is given) whose process no longer exists and whose lock is free:
/// `<folder>/<name>.lock` where the writer held one (cache entries,
/// CompileCacheLock), else the entry itself (a folder its writer keeps
/// flock'ed, lockTemporaryFolder). Entries of live processes are left alone.
void removeAbandonedTemporaries(llvm::StringRef folder,
                                llvm::StringRef stem = "");

/// Holds an exclusive flock on the folder `path` while it lives, marking it
/// as being written (removeAbandonedTemporaries leaves it alone).
class TemporaryFolderLock {
public:
  explicit TemporaryFolderLock(llvm::StringRef path);
  ~TemporaryFolderLock();
  TemporaryFolderLock(const TemporaryFolderLock &) = delete;
  TemporaryFolderLock &operator=(const TemporaryFolderLock &) = delete;

private:
  int descriptor = -1;
};

/// Records `path`'s size and checksum beside it (`<path>.sum`), once the
/// cache file is complete.
void sealCacheFile(llvm::StringRef path);

/// Whether the cache file at `path` is complete and unchanged since it was
/// sealed (a truncated or damaged entry is compiled again, never loaded).
bool isIntactCacheFile(llvm::StringRef path);

/// An exclusive lock on a cache entry (`<entry>.lock`, flock) for as long as
/// it lives, so that two runs compiling the same step do it once: the second
/// waits and then finds the entry. A lock that cannot be taken is skipped
/// (the entry's own atomic rename still keeps it whole).
class CompileCacheLock {
public:
  explicit CompileCacheLock(llvm::StringRef entry);
  ~CompileCacheLock();
  CompileCacheLock(const CompileCacheLock &) = delete;
  CompileCacheLock &operator=(const CompileCacheLock &) = delete;

private:
  int descriptor = -1;
};

/// A hash of everything compiled code for `step` depends on: the planned
/// step (graph, precision plan and dtypes), the compiler build and
/// `target` (what the code is compiled for).
std::string hashPlannedStep(train::StepOp step, llvm::StringRef target);

} // namespace mlir::mantissa

#endif // MANTISSA_DRIVER_STEPEVALUATOR_H
