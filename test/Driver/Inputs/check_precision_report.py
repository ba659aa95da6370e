#!/usr/bin/env python3
"""Checks mantissa-compile's --precision-report=json for the corpus llama
under llama-mixed.yaml (or llama-split.yaml, with --split) against
expectations computed here, independently of the compiler: the parameters
and shapes come from torch's own state_dict (llama.init.safetensors), the
dtypes from the spec's rules, and the totals from the definitions in
PrecisionSpec.h.

With --split every bf16-gathered parameter has master fp32_split (rule at
line 5, the norms' at line 7): its master is the bf16 copy plus 2 bytes of
remainder, so it counts 2 master bytes per element beside the 2 of the copy.

usage: check_precision_report.py REPORT.json INIT.safetensors SPEC_NAME [--split]
"""

import json
import struct
import sys

BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def state_dict_shapes(path):
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    header.pop("__metadata__", None)
    return {name: entry["shape"] for name, entry in header.items()}


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def main():
    report = json.load(open(sys.argv[1]))
    shapes = state_dict_shapes(sys.argv[2])
    spec = sys.argv[3]
    split = sys.argv[4:] == ["--split"]
    failures = []

    def expect(condition, message):
        if not condition:
            failures.append(message)

    expect(set(report) == {"tensors", "groups", "totals", "warnings", "compute",
                           "matrix_products", "matrix_product_counts",
                           "cpu_gemm_library"},
           "top-level keys: %s" % sorted(report))
    # The spec sets no compute dtype: every product as exported (fp32), each
    # [.., M, K] x [.., K, N] counted as 2 M N K flops per batch element.
    expect(report["compute"] is None, "compute: %s" % report["compute"])
    products = report["matrix_products"]
    for p in products:
        lhs, rhs = p["lhs_shape"], p["rhs_shape"]
        expect(lhs[-1] == rhs[-2], "%s: inner sizes %s x %s" % (p["node"], lhs, rhs))
        batch = 1
        for size in lhs[:-2]:
            batch *= size
        expect(p["flops"] == 2 * batch * lhs[-2] * lhs[-1] * rhs[-1], p["node"] + ": flops")
        expect(p["operand_type"] == "f32" and p["result_type"] == "f32", p["node"] + ": dtypes")
        # fp32 products run in oneDNN on every CPU it supports.
        expect(p["cpu_path"] == ("loops" if report["cpu_gemm_library"].startswith("MANTISSA_CPU_GEMM=loops")
                                 else "oneDNN fp32"), p["node"] + ": cpu_path " + p["cpu_path"])
    expect(report["matrix_product_counts"] == {"f32": len(products)} and products,
           "counts: %s" % report["matrix_product_counts"])
    params = [t for t in report["tensors"] if t["kind"] == "parameter"]
    expect({t["fqn"] for t in params} == set(shapes),
           "parameters differ from the state_dict")
    keys = {"fqn", "kind", "shape", "master", "gather", "reduce", "moments",
            "group", "decided_by"}
    for t in report["tensors"]:
        expect(set(t) == keys, "%s: keys %s" % (t["fqn"], sorted(t)))

    # Expected plans: `*norm*` -> master fp32, gather fp32; default bf16.
    for t in params:
        fqn = t["fqn"]
        expect(t["shape"] == shapes[fqn], fqn + ": shape")
        norm = "norm" in fqn
        want = ("fp32", "fp32", "fp32", "fp32") if norm else \
               ("fp32_split" if split else "fp32", "bf16", "bf16", "fp32")
        got = (t["master"], t["gather"], t["reduce"], t["moments"])
        expect(got == want, "%s: %s, expected %s" % (fqn, got, want))
        rule = spec + (":7" if split else ":5")
        want_by = {"master": rule, "gather": rule, "reduce": rule,
                   "moments": "default"} if norm else \
                  {"master": spec + ":5" if split else "exported",
                   "gather": "default", "reduce": "default",
                   "moments": "default"}
        expect(t["decided_by"] == want_by,
               "%s: decided_by %s" % (fqn, t["decided_by"]))

    # Expected groups: one unit per layer and the root, each with a main
    # bf16 group and a nested fp32 group for its norms.
    def unit_of(fqn):
        parts = fqn.split(".")
        return ".".join(parts[:2]) if parts[0] == "layers" else ""

    units = []
    for fqn in shapes:
        if unit_of(fqn) not in units:
            units.append(unit_of(fqn))
    order = [t["fqn"] for t in params]
    want_groups = {}
    for unit in units:
        name = unit or "root"
        members = [f for f in order if unit_of(f) == unit]
        want_groups[name] = ("bf16", None, unit != "",
                             [f for f in members if "norm" not in f])
        want_groups[name + "/fp32"] = ("fp32", name, False,
                                       [f for f in members if "norm" in f])
    got_groups = {}
    for g in report["groups"]:
        got_groups[g["name"]] = (g["gather"], g["nested_in"],
                                 g["reshard_after_forward"], g["members"])
        expect(g["unit"] == (g["name"].split("/")[0] if g["name"] != "root"
                             and not g["name"].startswith("root/") else ""),
               g["name"] + ": unit")
    expect(got_groups == want_groups,
           "groups:\n  got  %s\n  want %s" % (got_groups, want_groups))
    for t in params:
        expect(t["group"] in want_groups and
               t["fqn"] in want_groups[t["group"]][3],
               t["fqn"] + ": group " + str(t["group"]))

    # Totals from the definitions.
    want = {"parameters": 0, "parameter_elements": 0, "parameter_bytes": 0,
            "master_bytes": 0, "moments_bytes": 0, "reduced_bytes_per_step": 0,
            "gathered_bytes_per_step": 0, "all_gathers_per_step": 0,
            "reduce_scatters_per_step": 0}
    plan = {}
    for fqn, shape in shapes.items():
        n = numel(shape)
        master, gather, reduce, moments = \
            ("fp32",) * 4 if "norm" in fqn else ("fp32", "bf16", "bf16", "fp32")
        plan[fqn] = (n, gather)
        want["parameters"] += 1
        want["parameter_elements"] += n
        if master != gather:
            want["parameter_bytes"] += n * BYTES[gather]
        # A split master is the bf16 copy plus a 16-bit remainder.
        split_master = split and "norm" not in fqn
        want["master_bytes"] += n * (2 if split_master else BYTES[master])
        want["moments_bytes"] += 2 * n * BYTES[moments]
        want["reduced_bytes_per_step"] += n * BYTES[reduce]
    for name, (gather, _, reshard, members) in want_groups.items():
        times = 2 if reshard else 1
        want["gathered_bytes_per_step"] += times * sum(
            plan[m][0] * BYTES[gather] for m in members)
        want["all_gathers_per_step"] += times
        want["reduce_scatters_per_step"] += 1
    want["resident_bytes"] = (want["parameter_bytes"] + want["master_bytes"] +
                              want["moments_bytes"])
    want["collectives_per_step"] = (want["all_gathers_per_step"] +
                                    want["reduce_scatters_per_step"])
    totals = report["totals"]
    for key, value in want.items():
        expect(totals.get(key) == value,
               "totals.%s = %s, expected %s" % (key, totals.get(key), value))
    expect(abs(totals["resident_bytes_per_parameter"] -
               want["resident_bytes"] / want["parameter_elements"]) < 1e-9,
           "resident_bytes_per_parameter")
    expect(report["warnings"] == [], "warnings: %s" % report["warnings"])

    if failures:
        print("\n".join(failures))
        return 1
    print("OK: %d parameters, %d groups, resident %d bytes (%.2f per "
          "parameter), gathered %d bytes, %d collectives" % (
              want["parameters"], len(want_groups), want["resident_bytes"],
              want["resident_bytes"] / want["parameter_elements"],
              want["gathered_bytes_per_step"], want["collectives_per_step"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
