#!/usr/bin/env python3
"""Writes bad batches for mantissa-run's error tests into DIR."""
import json
import struct
import sys


def write(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, raw) in sorted(tensors.items()):
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def floats(count):
    return struct.pack(f"<{count}f", *([0.5] * count))


directory = sys.argv[1]
write(f"{directory}/missing.safetensors", {"input.0": ("F32", [4, 16], floats(64))})
write(f"{directory}/shape.safetensors", {"input.0": ("F32", [4, 15], floats(60)),
                                         "input.1": ("F32", [4, 8], floats(32)),
                                         "fc1.weight": ("F32", [16, 32], floats(512))})
write(f"{directory}/dtype.safetensors", {"input.0": ("F32", [4, 16], floats(64)),
                                         "input.1": ("I64", [4, 8], struct.pack("<32q", *([1] * 32)))})
write(f"{directory}/tokens.safetensors", {"input.0": ("I64", [2, 8], struct.pack("<16q", *([70] * 16))),
                                          "input.1": ("I64", [2, 8], struct.pack("<16q", *([1] * 16)))})
