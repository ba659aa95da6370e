#!/usr/bin/env python3
"""Checks a step's gradients against central finite differences of its loss.

usage: check_gradients.py MANTISSA_RUN MODEL.pt2 BATCH.safetensors GRADS.safetensors

GRADS is what `mantissa-run --reference --dump-grads` wrote for MODEL at its
own weights. For three elements of every parameter, the loss is evaluated
again (with mantissa-run --weights) at the weight +- eps, and
(L+ - L-) / 2 eps must match the gradient. fp32 parameters only.
"""
import json
import struct
import subprocess
import sys
import tempfile
import zipfile

EPS = 1e-2


def read_safetensors(path):
    data = open(path, "rb").read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    out = {}
    for name, entry in header.items():
        if name != "__metadata__":
            begin, end = entry["data_offsets"]
            raw = data[8 + length + begin:8 + length + end]
            out[name] = (entry["shape"], list(struct.unpack(f"<{len(raw) // 4}f", raw)))
    return out


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (shape, values) in sorted(tensors.items()):
        raw = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_weights(model):
    with zipfile.ZipFile(model) as archive:
        names = archive.namelist()
        root = names[0].split("/")[0]
        config = json.loads(archive.read(f"{root}/data/weights/model_weights_config.json"))["config"]
        weights = {}
        for fqn, entry in config.items():
            shape = [s["as_int"] for s in entry["tensor_meta"]["sizes"]]
            raw = archive.read(f"{root}/data/weights/{entry['path_name']}")
            weights[fqn] = (shape, list(struct.unpack(f"<{len(raw) // 4}f", raw)))
        return weights


def loss_at(runner, model, batch, weights, directory):
    path = f"{directory}/weights.safetensors"
    write_safetensors(path, weights)
    output = subprocess.run([runner, model, "--reference", "--inputs", batch, "--weights", path],
                            check=True, capture_output=True, text=True).stdout
    return float(output.split()[1])


def main():
    runner, model, batch, grads_path = sys.argv[1:5]
    weights = read_weights(model)
    grads = read_safetensors(grads_path)
    failures = 0
    with tempfile.TemporaryDirectory() as directory:
        for fqn, (shape, values) in sorted(weights.items()):
            gradient = grads["grad." + fqn][1]
            for index in sorted({0, len(values) // 2, len(values) - 1}):
                original = values[index]
                values[index] = original + EPS
                plus = loss_at(runner, model, batch, weights, directory)
                values[index] = original - EPS
                minus = loss_at(runner, model, batch, weights, directory)
                values[index] = original
                estimate = (plus - minus) / (2 * EPS)
                ok = abs(estimate - gradient[index]) <= 2e-3 + 2e-2 * abs(gradient[index])
                failures += not ok
                print(f"{'ok' if ok else 'FAIL'} {fqn}[{index}] grad={gradient[index]:.6f} "
                      f"finite_difference={estimate:.6f}")
    print(f"failures={failures}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
