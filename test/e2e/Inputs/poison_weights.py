"""Copies a safetensors state dict with one tensor set to the largest float.

Usage: poison_weights.py IN.safetensors TENSOR OUT.safetensors
(the trainer's skip test: every element of TENSOR at 3.4e38, which is
finite, so the weights load, but makes every loss NaN; a NaN weight itself
is refused when it loads).
"""
import json
import struct
import sys

source, name, target = sys.argv[1:4]
data = open(source, "rb").read()
length = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + length])
entry = header[name]
assert entry["dtype"] == "F32", entry
body = bytearray(data[8 + length:])
begin, end = entry["data_offsets"]
body[begin:end] = struct.pack("<f", 3.4028234663852886e38) * ((end - begin) // 4)
open(target, "wb").write(data[:8 + length] + bytes(body))
