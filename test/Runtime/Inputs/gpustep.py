#!/usr/bin/env python3
"""A hand-written GPU step (docs/gpu-step.md) for the runtime's tests.

  gpustep.py program DIR N     write DIR/step.gpu.json, step.ptx and
                               step.constants.bin: loss = w . x + count (a
                               cuBLAS GEMM into the arena, then a kernel),
                               grad(w) = x * 1.0 (a kernel reading {scale,
                               N} from a constant), count += 1 (a
                               buffer_mutation); the kernels are
                               unittests/Runtime/GpuStepTestKernels.cpp's.
                               Also DIR/w.safetensors (w, F32 [N]),
                               DIR/inputs.safetensors (x, count = 0) and
                               DIR/g.safetensors (grad.w = x, the gradient
                               for mantissa-run --grads).
  gpustep.py losses OUT INPUTS [--bf16] P0 P1 ...
                               every "step k loss L" line of OUT has
                               L = P(k-1) . x + (k - 1) (fp32-close), where
                               Pj are safetensors files with w after j steps
                               (rounded to bf16 first with --bf16: the step
                               reads the gathered bf16 parameters)
"""
import json, os, struct, sys

sys.path.insert(0, os.path.dirname(__file__))
from st import read, write  # noqa: E402


def entry(name, params):
    lines = ",\n".join("\t.param .u64 %s_param_%d" % (name, i)
                       for i in range(params))
    return ".visible .entry %s(\n%s\n)\n{\n\tret;\n}\n\n" % (name, lines)


def floats(values):
    return struct.pack("<%df" % len(values), *values)


def tensor(name, role, shape, count):
    return {"name": name, "role": role, "dtype": "F32", "shape": shape,
            "bytes": 4 * count}


def program(directory, n):
    os.makedirs(directory, exist_ok=True)
    ptx = ".version 8.0\n.target sm_90\n.address_size 64\n\n"
    for a in ("f32", "bf16", "f16"):
        for b in ("f32", "bf16", "f16"):
            if a != b:
                ptx += entry("mantissa_convert_%s_to_%s" % (a, b), 3)
    ptx += entry("test_add_scalar", 3) + entry("test_scale", 3)
    ptx += entry("test_increment", 2)
    with open(os.path.join(directory, "step.ptx"), "w") as f:
        f.write(ptx)
    # 256 bytes of junk, then {scale, n} at offset 256.
    with open(os.path.join(directory, "step.constants.bin"), "wb") as f:
        f.write(floats([-7.0] * 64) + floats([1.0]) + struct.pack("<i", n))

    def operand(buffer, ld):
        return {"buffer": buffer, "offset": 0, "ld": ld, "stride": 0,
                "dtype": "F32"}

    step = {
        "format": 1, "step": "dot", "ptx": "step.ptx", "block_size": 256,
        "arena_bytes": 768, "constants": "step.constants.bin",
        "arguments": [tensor("w", "parameter", [n], n),
                      tensor("x", "user_input", [n], n),
                      tensor("count", "buffer", [1], 1)],
        "results": [tensor("", "loss", [], 1),
                    tensor("w", "gradient", [n], n),
                    tensor("count", "buffer_mutation", [1], 1)],
        "buffers": [{"kind": "argument", "index": 0},
                    {"kind": "argument", "index": 1},
                    {"kind": "argument", "index": 2},
                    {"kind": "result", "index": 0},
                    {"kind": "result", "index": 1},
                    {"kind": "result", "index": 2},
                    {"kind": "temporary", "offset": 512, "bytes": 4},
                    {"kind": "constant", "offset": 256, "bytes": 8}],
        "ops": [
            {"kind": "gemm", "source": "dot (gpustep.py:1)",
             "transa": True, "transb": False, "m": 1, "n": 1, "k": n,
             "batch": 1, "alpha": 1.0, "beta": 0.0,
             "a": operand(0, n), "b": operand(1, n), "c": operand(6, 1)},
            {"kind": "kernel", "entry": "test_add_scalar", "grid": 1,
             "buffers": [6, 2, 3], "source": "loss (gpustep.py:2)"},
            {"kind": "kernel", "entry": "test_scale", "grid": 4,
             "buffers": [1, 7, 4], "source": "grad (gpustep.py:3)"},
            {"kind": "kernel", "entry": "test_increment", "grid": 1,
             "buffers": [2, 5], "source": "count (gpustep.py:4)"}]}
    with open(os.path.join(directory, "step.gpu.json"), "w") as f:
        json.dump(step, f, indent=1)
    w = [((i * 37 + 11) % 101 - 50) / 64.0 for i in range(n)]
    x = [((i * 53 + 7) % 97 - 48) / 32.0 for i in range(n)]
    write(os.path.join(directory, "w.safetensors"),
          {"w": ("F32", [n], floats(w))}, {"format": "pt"})
    write(os.path.join(directory, "inputs.safetensors"),
          {"x": ("F32", [n], floats(x)),
           "count": ("F32", [1], floats([0.0]))}, {"format": "pt"})
    write(os.path.join(directory, "g.safetensors"),
          {"grad.w": ("F32", [n], floats(x))}, {"format": "pt"})


def unpack(raw):
    return list(struct.unpack("<%df" % (len(raw) // 4), raw))


def bf16(value):
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def losses(out, inputs, params, rounded):
    x = unpack(read(inputs)[0]["x"][2])
    seen = {}
    for line in open(out):
        parts = line.split()
        if len(parts) == 4 and parts[0] == "step" and parts[2] == "loss":
            seen[int(parts[1])] = float(parts[3])
    if sorted(seen) != list(range(1, len(params) + 1)):
        print("LOSSES WRONG: steps %s, expected 1..%d" %
              (sorted(seen), len(params)))
        sys.exit(1)
    for k in sorted(seen):
        w = unpack(read(params[k - 1])[0]["w"][2])
        if rounded:
            w = [bf16(v) for v in w]
        expected = sum(a * b for a, b in zip(w, x)) + (k - 1)
        scale = sum(abs(a * b) for a, b in zip(w, x)) + 1
        if abs(seen[k] - expected) > 1e-5 * scale:
            print("LOSSES WRONG: step %d loss %.9g, expected %.9g" %
                  (k, seen[k], expected))
            sys.exit(1)
    print("LOSSES OK (%d steps)" % len(seen))


def main():
    if sys.argv[1] == "program":
        program(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "losses":
        rest = sys.argv[4:]
        rounded = bool(rest) and rest[0] == "--bf16"
        losses(sys.argv[2], sys.argv[3], rest[1:] if rounded else rest, rounded)
    else:
        sys.exit("unknown command " + sys.argv[1])


if __name__ == "__main__":
    main()
