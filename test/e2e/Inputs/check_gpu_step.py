"""Checks an artifact's GPU step (docs/gpu-step.md) for consistency.

Every buffer id an op names exists, every kernel entry is in the PTX with
one .u64 parameter per buffer, temporaries and constants lie inside the
arena and constants file at aligned offsets, no two temporaries that are
alive at once overlap, GEMM operands fit their buffers, and argument and
result buffers match the step's tensors. Prints a summary line.
"""
import json
import os
import re
import sys

SIZES = {"F32": 4, "BF16": 2, "F16": 2, "F64": 8, "I64": 8, "I32": 4,
         "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def main():
    directory = sys.argv[1]
    manifest = json.load(open(os.path.join(directory, "manifest.json")))
    gpu = manifest["kernels"].get("gpu_step")
    if not gpu:
        fail("the manifest names no gpu_step")
    program = json.load(open(os.path.join(directory, gpu["program"])))
    ptx = open(os.path.join(directory, program["ptx"])).read()
    entries = {}
    for match in re.finditer(r"\.entry (\w+)\(([^)]*)\)", ptx):
        entries[match.group(1)] = match.group(2).count(".param .u64")
    buffers = program["buffers"]
    arena = program["arena_bytes"]
    block = program["block_size"]
    constants = 0
    if "constants" in program:
        constants = os.path.getsize(os.path.join(directory,
                                                 program["constants"]))
    sizes = []
    for index, buffer in enumerate(buffers):
        kind = buffer["kind"]
        if kind in ("argument", "result"):
            tensors = program["arguments" if kind == "argument" else
                              "results"]
            if not 0 <= buffer["index"] < len(tensors):
                fail("buffer %d: no %s %d" % (index, kind, buffer["index"]))
            sizes.append(tensors[buffer["index"]]["bytes"])
            continue
        limit = arena if kind == "temporary" else constants
        if buffer["offset"] % 256 or buffer["offset"] + buffer["bytes"] > limit:
            fail("buffer %d: %s at %d+%d outside %d" %
                 (index, kind, buffer["offset"], buffer["bytes"], limit))
        sizes.append(buffer["bytes"])
    for name in ("arguments", "results"):
        for tensor in program[name]:
            count = 1
            for size in tensor["shape"]:
                count *= size
            if tensor["bytes"] != max(1, count * SIZES[tensor["dtype"]]):
                fail("%s %s: %d bytes for %s %s" %
                     (name, tensor["name"], tensor["bytes"], tensor["dtype"],
                      tensor["shape"]))

    # Liveness: a temporary is alive from the first to the last op naming
    # it; two alive at once must not share bytes.
    first, last = {}, {}
    kernels = gemms = 0
    for position, op in enumerate(program["ops"]):
        if op["kind"] == "kernel":
            kernels += 1
            if op["entry"] not in entries:
                fail("op %d: entry %s is not in the PTX" % (position,
                                                            op["entry"]))
            if entries[op["entry"]] != len(op["buffers"]):
                fail("op %d: %s takes %d pointers, given %d" %
                     (position, op["entry"], entries[op["entry"]],
                      len(op["buffers"])))
            named = op["buffers"]
        else:
            gemms += 1
            named = []
            for role, rows, cols in (("a", "m", "k"), ("b", "k", "n"),
                                     ("c", "m", "n")):
                operand = op[role]
                r, c = op[rows], op[cols]
                if role == "a" and op["transa"] or role == "b" and op["transb"]:
                    r, c = c, r
                if operand["ld"] < max(1, r):
                    fail("op %d: %s.ld %d < %d rows" % (position, role,
                                                        operand["ld"], r))
                end = (operand["offset"] + (op["batch"] - 1) *
                       operand["stride"] + (r - 1) + (c - 1) * operand["ld"]
                       + 1) * SIZES[operand["dtype"]]
                if end > sizes[operand["buffer"]]:
                    fail("op %d: %s reaches byte %d of a %d-byte buffer" %
                         (position, role, end, sizes[operand["buffer"]]))
                named.append(operand["buffer"])
        for buffer in named:
            if not 0 <= buffer < len(buffers):
                fail("op %d: no buffer %d" % (position, buffer))
            first.setdefault(buffer, position)
            last[buffer] = position
    temporaries = [b for b in first if buffers[b]["kind"] == "temporary"]
    for i in temporaries:
        for j in temporaries:
            if i >= j or last[i] < first[j] or last[j] < first[i]:
                continue
            a, b = buffers[i], buffers[j]
            if (a["offset"] < b["offset"] + b["bytes"] and
                    b["offset"] < a["offset"] + a["bytes"]):
                fail("temporaries %d and %d are alive together and overlap"
                     % (i, j))
    total = sum(b["bytes"] for b in buffers if b["kind"] == "temporary")
    print("GPU step: %d kernels, %d gemms, arena %d of %d temporary bytes"
          % (kernels, gemms, arena, total))
    if gpu["kernels"] != kernels or gpu["gemms"] != gemms:
        fail("the manifest counts differ from the program's")
    # Loop nests (scatters) and how their iterations are shared out: the
    # threads each run `serial_iterations` in order.
    # A launch may run several independent ops, each on its first threads.
    groups = [op for op in program["ops"]
              if op["kind"] == "kernel" and len(op.get("members", [])) > 1]
    print("launches running several ops: %d (%d ops)"
          % (len(groups), sum(len(op["members"]) for op in groups)))
    printed_fold = False
    for op in program["ops"]:
        if op["kind"] != "kernel":
            continue
        for member in op.get("members", []):
            if not all(0 <= b < len(op["buffers"]) for b in member["buffers"]):
                fail("a member of %s names a buffer it does not have"
                     % op["entry"])
            stride = member.get("thread_stride", 1)
            if member.get("elements_per_thread", 1) > 1 and stride > 1:
                fail("a member of %s runs several iterations a thread on "
                     "strided threads" % op["entry"])
            if member["threads"] * stride > op["threads"]:
                fail("a member of %s needs more threads than it launches"
                     % op["entry"])
            if block % stride:
                fail("a member of %s has a thread stride that does not "
                     "divide the block" % op["entry"])
        # The first launch running a fold of partials (a member with a
        # thread stride), after the partials it folds: a norm's mean of
        # squares.
        names = [re.findall(r'loc\("(\w+)"', m["source"])[:1]
                 for m in op.get("members", [])]
        if not printed_fold and any("thread_stride" in m
                                    for m in op.get("members", [])):
            printed_fold = True
            # "/k": one iteration every k threads.
            print("launch with a fold: " + ", ".join(
                "%s %d x %d%s" % (
                    n[0] if n else "?", m["threads"], m["serial_iterations"],
                    " /%d" % m["thread_stride"] if "thread_stride" in m else "")
                for n, m in zip(names, op["members"])))
        for member in op.get("members", [op]):
            if member["source"].startswith("scf.for"):
                name = re.search(r'loc\("(\w+)"', member["source"])
                per = member.get("elements_per_thread", 1)
                print("loop nest %s: %d threads x %d in order%s"
                      % (name.group(1) if name else "?", member["threads"],
                         member["serial_iterations"],
                         ", %d a thread" % per if per > 1 else ""))
    print("PASS")


if __name__ == "__main__":
    main()
