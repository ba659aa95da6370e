# -*- Python -*-
# Lit configuration of Mantissa's tests: FileCheck tests of mantissa-opt,
# mantissa-compile and mantissa-run.

import os
import shutil

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "MANTISSA"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test", ".yaml"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "Inputs", "CMakeLists.txt"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.mantissa_obj_root, "test")

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%corpus", config.mantissa_corpus_dir))
config.substitutions.append(("%examples", os.path.join(config.mantissa_src_root, "examples")))
config.substitutions.append(
    ("%mantissa_run", os.path.join(config.mantissa_tools_dir, "mantissa-run")))
config.substitutions.append(
    ("%artifact-gen",
     os.path.join(config.mantissa_tools_dir, "mantissa-artifact-gen")))
# The runtime-only mantissa-run (no LLVM), built beside the full one.
config.substitutions.append(
    ("%mantissa-run-runtime",
     os.path.join(config.mantissa_tools_dir, "mantissa-run-runtime")))
config.environment["FILECHECK_OPTS"] = "-enable-var-scope --allow-unused-prefixes=false"

# Uninstrumented libMLIR and instrumented tools share containers, which
# makes ASan's container-overflow check report false positives, and MLIR's
# storage allocator poisons memory it hands out again.
config.environment["ASAN_OPTIONS"] = (
    "detect_container_overflow=0:allow_user_poisoning=0:detect_leaks=1")
config.environment["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"

# Compiled steps are cached inside the build tree, shared by the tests.
config.environment["MANTISSA_CACHE_DIR"] = os.path.join(
    config.mantissa_obj_root, "test", "step-cache")

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

tools = [
    ToolSubst("mantissa-opt", unresolved="fatal"),
    ToolSubst("mantissa-compile", unresolved="ignore"),
    ToolSubst("mantissa-run", unresolved="ignore"),
]
llvm_config.add_tool_substitutions(tools, [config.mantissa_tools_dir, config.llvm_tools_dir])

# Long end-to-end runs are left out of the sanitizer configuration, which
# runs the unit tests and mantissa-opt's tests (and whatever else is quick).
if config.mantissa_sanitized:
    config.available_features.add("sanitized")

# Multi-rank runs (the runtime's update path, whole training steps).
if shutil.which("mpirun"):
    config.available_features.add("mpirun")
    mpirun = "mpirun --allow-run-as-root --oversubscribe"
    if config.mantissa_sanitized:
        # OpenMPI's own allocations outlive MPI_Finalize, which LeakSanitizer
        # reports in every rank; leaks are still checked in single-rank runs.
        mpirun = "env ASAN_OPTIONS=%s:detect_leaks=0 %s" % (
            config.environment.get("ASAN_OPTIONS", ""), mpirun)
    config.substitutions.append(("%mpirun", mpirun))

# A small full disk for a test, in a mount namespace of its own (`unshare
# -rm`, where unprivileged user namespaces are allowed): a tmpfs of a few KiB.
def _can_mount_tmpfs():
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        try:
            return subprocess.call(
                ["unshare", "-rm", "sh", "-c",
                 'mount -t tmpfs -o size=16k tmpfs "$0"', folder],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0
        except OSError:
            return False

if shutil.which("unshare") and _can_mount_tmpfs():
    config.available_features.add("tmpfs-namespace")

if os.path.isdir(config.mantissa_corpus_dir):
    config.available_features.add("corpus")
else:
    # The corpus ships in test/Inputs/corpus: a missing one is a broken
    # checkout or configuration, which must fail the run rather than mark
    # half the tests unsupported.
    lit_config.error("the test corpus %s is missing (MANTISSA_CORPUS_DIR)"
                     % config.mantissa_corpus_dir)

# The exporter's tests and the zoo run with torch, transformers and diffusers
# from scripts/setup.sh's venv (MANTISSA_TORCH_PYTHON), with the package
# python/mantissa on the path.
if config.mantissa_torch_python:
    config.available_features.add("torch")
    config.substitutions.append(("%torch_python", config.mantissa_torch_python))
    config.environment["PYTHONPATH"] = os.path.join(config.mantissa_src_root, "python")
    config.environment["MANTISSA_COMPILE"] = os.path.join(
        config.mantissa_tools_dir, "mantissa-compile")

# ptxas checks the generated PTX where the CUDA toolkit is installed.
ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
if os.path.exists(ptxas):
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", ptxas))

# The GPU paths can only be checked for their failure when there is no CUDA
# driver to load.
import ctypes
try:
    ctypes.CDLL("libcuda.so.1")
except OSError:
    config.available_features.add("no-cuda-driver")

# Stand-ins for libcuda.so.1, libnccl.so.2 and libcublas.so.13
# (unittests/Runtime/FakeCuda.cpp) drive the GPU paths without a GPU.
fake_cuda = os.path.join(config.mantissa_tools_dir, "..", "unittests", "fake-cuda")
if os.path.exists(os.path.join(fake_cuda, "libcuda.so.1")):
    config.available_features.add("fake-cuda")
    config.substitutions.append(("%fakecuda", os.path.abspath(fake_cuda)))
