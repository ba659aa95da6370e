"""Copies a safetensors state dict with one tensor's first element set to NaN.

Usage: poison_weights.py IN.safetensors TENSOR OUT.safetensors
(the trainer's skip test: a NaN weight makes every loss NaN).
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
body[entry["data_offsets"][0]:entry["data_offsets"][0] + 4] = struct.pack("<f", float("nan"))
open(target, "wb").write(data[:8 + length] + bytes(body))
