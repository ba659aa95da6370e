#!/usr/bin/env python3
"""Tensor datasets for the tests of --dataset (no torch or numpy needed).

  make_dataset.py write OUT N SEED [options]
      OUT holds N samples of cond.py's inputs: x F32 [N, 8], label I64 [N]
      in [0, 5), y F32 [N, 4], mask BOOL [N, 4], drawn from random.Random(SEED * 16 + k) for
      the k-th of them.
      --only x,label          write only these tensors
      --first INPUTS          samples 0.. are INPUTS' rows (the exported batch)
      --dtype NAME=DT         store NAME as DT (F32, F16, I64, I32, BOOL)
      --width NAME=K          NAME's samples have K elements (last dimension)
      --rows NAME=M           NAME holds M samples instead of N
      --rename OLD=NEW        store tensor OLD under the name NEW
      --set NAME:S=V          element 0 of sample S of NAME is V
  make_dataset.py index OUT FILE...
      an index JSON (HF's model.safetensors.index.json) whose weight_map sends
      each tensor of each FILE to that file (named relative to OUT's folder)
"""
import json, os, random, struct, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from st import read, write  # noqa: E402

PACK = {"F32": "f", "F16": "e", "I64": "q", "I32": "i", "BOOL": "?"}
SPEC = {"x": ("F32", [8]), "label": ("I64", []), "y": ("F32", [4]), "mask": ("BOOL", [4])}


def options(argv):
    parsed = {"only": None, "first": None, "dtype": {}, "width": {}, "rows": {}, "rename": {}, "set": []}
    i = 0
    while i < len(argv):
        flag, value = argv[i], argv[i + 1]
        i += 2
        if flag == "--only":
            parsed["only"] = value.split(",")
        elif flag == "--first":
            parsed["first"] = value
        elif flag == "--set":
            name, rest = value.split(":")
            sample, v = rest.split("=")
            parsed["set"].append((name, int(sample), float(v)))
        else:
            key, v = value.split("=")
            parsed[flag[2:]][key] = v if flag in ("--dtype", "--rename") else int(v)
    return parsed


def make(out, n, seed, argv):
    opt = options(argv)
    first = read(opt["first"])[0] if opt["first"] else {}
    tensors = {}
    for name in opt["only"] or list(SPEC):
        dtype, inner = SPEC[name]
        # One generator per tensor, so that a file of some of the tensors
        # holds the same values as a file of all of them.
        rng = random.Random(seed * 16 + list(SPEC).index(name))
        inner = [opt["width"][name]] if name in opt["width"] else inner
        rows = opt["rows"].get(name, n)
        per = 1
        for d in inner:
            per *= d
        values = []
        for _ in range(rows * per):
            if dtype == "F32":
                values.append(rng.gauss(0.0, 1.0))
            elif dtype == "I64":
                values.append(rng.randrange(5))
            else:
                values.append(rng.random() > 0.3)
        if name in first:
            given_dtype, _, raw = first[name]
            count = len(raw) // struct.calcsize(PACK[given_dtype])
            values[:count] = struct.unpack("<%d%s" % (count, PACK[given_dtype]), raw)
        for target, sample, value in opt["set"]:
            if target == name:
                values[sample * per] = value
        stored = opt["dtype"].get(name, dtype)
        if stored == "BOOL":
            # One byte per element, as written (--set may store a byte that
            # is not a bool).
            raw = bytes(int(v) & 0xFF for v in values)
        else:
            if stored in ("I64", "I32"):
                values = [int(v) for v in values]
            raw = struct.pack("<%d%s" % (len(values), PACK[stored]), *values)
        tensors[opt["rename"].get(name, name)] = (stored, [rows] + inner, raw)
    write(out, tensors, {})


def index(out, files):
    folder = os.path.dirname(os.path.abspath(out))
    weight_map = {}
    for path in files:
        for name in read(path)[0]:
            weight_map[name] = os.path.relpath(os.path.abspath(path), folder)
    with open(out, "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=1)


if __name__ == "__main__":
    if sys.argv[1] == "write":
        make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:])
    elif sys.argv[1] == "index":
        index(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)
