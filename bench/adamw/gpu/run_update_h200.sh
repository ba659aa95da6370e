#!/usr/bin/env bash
# The runtime's GPU update path (mantissa-run --device cuda: PTX kernels
# through the CUDA driver, NCCL collectives, state resident on the device) on
# an H200, against the CPU update path's bits.
#
#   bench/adamw/gpu/run_update_h200.sh prepare [DIR]   here, where LLVM/MLIR
#       is: writes artifacts with PTX (golden fp32, golden bf16 + fp32 master,
#       the corpus llama with mixed precision, and a synthetic 2^22-element
#       bf16 + fp32-master tensor), their gradients, the CPU update path's
#       final parameters after $STEPS steps and a CPU checkpoint at step
#       $HALF, from $BUILD_DIR (default build-rt, else build);
#   bench/adamw/gpu/run_update_h200.sh run [DIR]       on the GPU machine (no
#       LLVM): builds the runtime alone (bench/gpu/build_runtime.sh), runs
#       every artifact at world size 1 with --device cuda, and compares the
#       final parameters with the CPU's bit for bit (max difference when not
#       equal); also resumes the CPU checkpoint on the GPU and a GPU
#       checkpoint on the GPU. Prints one line per check and the timings.
#
# DIR defaults to build/update-gpu (ignored by git; carry it to the device).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
command="${1:-}"
dir="${2:-$repo/build/update-gpu}"
STEPS=10
HALF=5
cases="golden_fp32 golden_master llama_mixed synthetic_master"

case "$command" in
prepare)
  build="${BUILD_DIR:-}"
  if [[ -z "$build" ]]; then
    for candidate in "$repo/build-rt" "$repo/build"; do
      [[ -x "$candidate/bin/mantissa-artifact-gen" ]] && { build=$candidate; break; }
    done
  fi
  gen="$build/bin/mantissa-artifact-gen"
  compile="$build/bin/mantissa-compile"
  run="$build/bin/mantissa-run"
  st="$repo/test/Runtime/Inputs/st.py"
  corpus="${MANTISSA_CORPUS_DIR:-$repo/test/Inputs/corpus}"
  rm -rf "$dir"
  mkdir -p "$dir"
  golden="$corpus/adamw_golden.safetensors"

  python3 "$st" pick "$golden" "$dir/golden_fp32.w.safetensors" w=p0
  python3 "$st" pick "$golden" "$dir/golden_fp32.grads.safetensors" grad.w=grad.0
  "$gen" --weights "$dir/golden_fp32.w.safetensors" -o "$dir/golden_fp32"

  python3 "$st" pick "$golden" "$dir/golden_master.w.safetensors" w=master.p0_bf16
  python3 "$st" pick "$golden" "$dir/golden_master.grads.safetensors" grad.w=grad_bf16.0
  "$gen" --weights "$dir/golden_master.w.safetensors" \
    --plan master=fp32,gather=bf16,reduce=bf16,moments=fp32 -o "$dir/golden_master"

  "$compile" "$corpus/llama.pt2" --precision "$repo/test/Runtime/Inputs/mixed.yaml" \
    -o "$dir/llama_mixed"
  cp "$corpus/llama.grads.safetensors" "$dir/llama_mixed.grads.safetensors"

  # 2^22 bf16 parameters (two tensors) with fp32 masters: large enough that
  # the kernel, not the launch, dominates a step.
  python3 - "$dir" <<'EOF'
import random, struct, sys, json
sys.path.insert(0, "")
out = sys.argv[1]
random.seed(7)
def bf16(values):
    raw = struct.pack(f"<{len(values)}f", *values)
    words = struct.unpack(f"<{len(values)}I", raw)
    return struct.pack(f"<{len(words)}H",
                       *[((w + 0x7FFF + ((w >> 16) & 1)) >> 16) & 0xFFFF for w in words])
def write(path, tensors):
    header, offset, chunks = {}, 0, []
    for name in sorted(tensors):
        dtype, shape, raw = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw); offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode(); text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
shapes = {"a": [1024, 3072], "b": [1024, 1024]}
weights, grads = {}, {}
for name, shape in shapes.items():
    n = shape[0] * shape[1]
    weights[name] = ("BF16", shape, bf16([random.uniform(0.5, 1.5) for _ in range(n)]))
    grads["grad." + name] = ("BF16", shape, bf16([random.gauss(0, 1e-3) for _ in range(n)]))
write(f"{out}/synthetic_master.w.safetensors", weights)
write(f"{out}/synthetic_master.grads.safetensors", grads)
EOF
  "$gen" --weights "$dir/synthetic_master.w.safetensors" \
    --plan master=fp32,gather=bf16,reduce=bf16,moments=fp32 -o "$dir/synthetic_master"

  for name in $cases; do
    [[ -f "$dir/$name/kernels.0.ptx" ]] || { echo "$name: no PTX in the artifact" >&2; exit 1; }
    "$run" "$dir/$name" --grads "$dir/$name.grads.safetensors" --steps "$STEPS" \
      --final-params "$dir/$name.cpu.safetensors" --no-memory-report
    # (The synthetic tensor's checkpoint would not fit the carry limit.)
    [[ $name == synthetic_master ]] && continue
    "$run" "$dir/$name" --grads "$dir/$name.grads.safetensors" --steps "$HALF" \
      --save-checkpoint "$dir/$name.cpu-ck" --save-every "$HALF" --no-memory-report
  done
  rm -f "$dir"/*.w.safetensors
  # The synthetic tensors' CPU result (16 MiB) is made on the device by the
  # runtime's own CPU path, so that everything carried stays under the
  # device tool's 64 MiB.
  rm -f "$dir/synthetic_master.cpu.safetensors"
  "$repo/bench/gpu/carry_deps.sh" "$dir/deps"
  du -sh "$dir"
  ;;

run)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  build="${RUNTIME_BUILD_DIR:-$dir/build-runtime}"
  runner=$("$repo/bench/gpu/build_runtime.sh" "$build" "$dir/deps" "$dir/cmake.log")
  st="$repo/test/Runtime/Inputs/st.py"
  compare() { # compare NAME A B: bit equality, else the max difference
    python3 - "$@" <<'EOF'
import json, struct, sys
def read(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n]); header.pop("__metadata__", None)
    body = data[8 + n:]
    return {k: body[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in header.items()}
name, a, b = sys.argv[1], read(sys.argv[2]), read(sys.argv[3])
if a.keys() != b.keys():
    print(f"FAIL {name}: different tensors"); sys.exit(1)
words = sum(len(v) // 4 for v in a.values())
differ, worst, worst_rel = 0, 0.0, 0.0
for k in a:
    if a[k] == b[k]:
        continue
    x = struct.unpack(f"<{len(a[k])//4}f", a[k]); y = struct.unpack(f"<{len(b[k])//4}f", b[k])
    for p, q in zip(x, y):
        if struct.pack("<f", p) != struct.pack("<f", q):
            differ += 1
            worst = max(worst, abs(p - q))
            worst_rel = max(worst_rel, abs(p - q) / max(abs(q), 1e-30))
if differ == 0:
    print(f"PASS {name}: bit-identical ({len(a)} tensors, {words} fp32 values)")
else:
    print(f"DIFF {name}: {differ} of {words} values differ, max abs {worst:.3g}, max rel {worst_rel:.3g}")
    sys.exit(1)
EOF
  }
  status=0
  for name in $cases; do
    art="$dir/$name" grads="$dir/$name.grads.safetensors"
    echo "== $name"
    if [[ ! -f "$dir/$name.cpu.safetensors" ]]; then
      "$runner" "$art" --grads "$grads" --steps "$STEPS" \
        --final-params "$dir/$name.cpu.safetensors" --no-memory-report > /dev/null || { status=1; continue; }
    fi
    "$runner" "$art" --grads "$grads" --steps "$STEPS" --device cuda \
      --final-params "$dir/$name.gpu.safetensors" | tee "$dir/$name.gpu.log" || { status=1; continue; }
    compare "$name: GPU vs CPU after $STEPS steps" "$dir/$name.gpu.safetensors" "$dir/$name.cpu.safetensors" || status=1
    # The CPU's checkpoint at step $HALF, resumed on the GPU.
    if [[ -d "$dir/$name.cpu-ck" ]]; then
      "$runner" "$art" --grads "$grads" --steps "$STEPS" --device cuda \
        --resume "$dir/$name.cpu-ck" --final-params "$dir/$name.cpu-to-gpu.safetensors" \
        --no-memory-report || status=1
      compare "$name: CPU checkpoint at $HALF resumed on the GPU" \
        "$dir/$name.cpu-to-gpu.safetensors" "$dir/$name.cpu.safetensors" || status=1
    fi
    # A GPU checkpoint at step $HALF, resumed on the GPU.
    rm -rf "$dir/$name.gpu-ck"
    "$runner" "$art" --grads "$grads" --steps "$HALF" --device cuda --save-checkpoint "$dir/$name.gpu-ck" \
      --save-every "$HALF" --no-memory-report || status=1
    "$runner" "$art" --grads "$grads" --steps "$STEPS" --device cuda --resume "$dir/$name.gpu-ck" \
      --final-params "$dir/$name.gpu-resumed.safetensors" --no-memory-report || status=1
    compare "$name: GPU checkpoint at $HALF resumed on the GPU" "$dir/$name.gpu-resumed.safetensors" "$dir/$name.cpu.safetensors" || status=1
  done
  # Timing: 100 steps of the synthetic 2^22-parameter tensor pair.
  echo "== timing (synthetic_master, 2^22 bf16 parameters + fp32 masters, 100 steps)"
  "$runner" "$dir/synthetic_master" --grads "$dir/synthetic_master.grads.safetensors" --steps 100 \
    --device cuda | grep -E '^(device|time|memory|kernels):' || status=1
  # Several ranks on the GPU path are refused with a clear message.
  if command -v mpirun >/dev/null && [[ "$runner" == "$build/bin/mantissa-run" ]]; then
    echo "== world size 2 with --device cuda (expected: a clear refusal)"
    mpirun --allow-run-as-root --oversubscribe -np 2 "$runner" "$dir/golden_fp32" \
      --grads "$dir/golden_fp32.grads.safetensors" --steps 1 --device cuda 2>&1 | grep -m1 error || true
  fi
  [[ $status == 0 ]] && echo "ALL PASS" || echo "SOME CHECKS FAILED"
  exit $status
  ;;

*)
  echo "usage: $0 prepare|run [DIR]" >&2
  exit 2
  ;;
esac
