#!/usr/bin/env python3
"""Checks mantissa-compile --cost-report=json against the program it models
and against the precision report, independently of the compiler.

usage: check_cost_report.py COST.json PROGRAM.step.gpu.json PRECISION.json
                            [--no-update]

- one entry per op of the program, in order, with the same kind, plus the
  update (unless --no-update);
- each GEMM's flops are 2 m n k batch of its op, and the bf16/fp16 GEMMs'
  add up to the precision report's bf16/fp16 matrix products' (each 2 M N K
  per batch element) but those of the products a fused attention kernel
  runs (the graph nodes its `source` names, which must be bmm products of
  the report); fp32 GEMMs may be more than the products (the GPU
  program also runs other contractions, such as norm-weight gradients, as
  GEMMs), never less;
- a fused attention kernel (`tensor_flops`) takes at least its tensor
  flops at the bf16 peak plus one launch;
- a GEMM takes at least its flops at its dtype's peak and its bytes at the
  copy bandwidth, plus one launch; a kernel at least one launch, and a
  kernel whose threads walk loops in order at least its iterations at the
  stated time each (a launch of several ops: the sum of its members');
- the step is the sum of its ops.
"""
import json
import re
import sys


def main():
    cost = json.load(open(sys.argv[1]))
    program = json.load(open(sys.argv[2]))
    precision = json.load(open(sys.argv[3]))
    with_update = "--no-update" not in sys.argv
    failures = []

    def expect(condition, message):
        if not condition:
            failures.append(message)

    device = cost["device"]
    launch = device["launch_us"]
    entries = cost["kernels"]
    ops = program["ops"]
    expect(len(entries) == len(ops) + (1 if with_update else 0),
           "%d entries for %d ops" % (len(entries), len(ops)))
    expect(cost["kernel_count"] == sum(o["kind"] == "kernel" for o in ops), "kernel_count")
    expect(cost["gemm_count"] == sum(o["kind"] == "gemm" for o in ops), "gemm_count")
    gemm_flops = low_flops = 0
    fused = set()
    for op, entry in zip(ops, entries):
        if op.get("tensor_flops", 0) > 0:
            fused.update(re.findall(r'"([A-Za-z0-9_]+)"\(', op["source"]))
            floor = op["tensor_flops"] / (device["bf16_tflops"] * 1e6) + launch
            expect(entry["predicted_us"] >= floor * (1 - 1e-9),
                   entry["name"] + ": below its tensor flops")
        expect(op["kind"] == entry["kind"], "%s: kind %s" % (entry["name"], entry["kind"]))
        expect(entry["predicted_us"] >= launch - 1e-9, entry["name"] + ": below one launch")
        if op["kind"] == "gemm":
            flops = 2 * op["m"] * op["n"] * op["k"] * op["batch"]
            expect(entry["flops"] == flops, entry["name"] + ": flops")
            gemm_flops += flops
            if op["a"]["dtype"] in ("BF16", "F16"):
                low_flops += flops
            peak = device["bf16_tflops"] if op["a"]["dtype"] in ("BF16", "F16") else device["fp32_tflops"]
            floor = max(flops / (peak * 1e6), entry["bytes"] / (device["copy_bandwidth_gbs"] * 1e3)) + launch
            expect(entry["predicted_us"] >= floor * (1 - 1e-9), entry["name"] + ": below its roofline")
        elif op.get("serial_iterations", 1) > 1:
            # The members of a launch run one after the other in each
            # thread: every member's loop adds to the launch's time.
            loops = [m["serial_iterations"] for m in op.get("members", [op])
                     if m["serial_iterations"] > 1]
            floor = sum(loops) * device["serial_iteration_ns"] / 1e3 + launch
            expect(entry["predicted_us"] >= floor * (1 - 1e-9), entry["name"] + ": below its serial loops")
    fused_products = [p for p in precision["matrix_products"] if p["node"] in fused]
    expect(len(fused_products) == len(fused) and
           all(p["op"] == "bmm" for p in fused_products),
           "the attention kernels name %s, not all bmm products" % sorted(fused))
    unfused = [p for p in precision["matrix_products"] if p["node"] not in fused]
    products = sum(p["flops"] for p in unfused)
    low_products = sum(p["flops"] for p in unfused
                       if p["operand_type"] in ("bf16", "f16"))
    expect(low_flops == low_products,
           "bf16/fp16 GEMM flops %d, the precision report's products %d" % (low_flops, low_products))
    expect(gemm_flops >= products,
           "GEMM flops %d, below the precision report's products %d" % (gemm_flops, products))
    total = sum(e["predicted_us"] for e in entries) / 1e3
    expect(abs(total - cost["predicted_step_ms"]) <= 1e-9 * max(total, 1), "step is not the sum")
    for message in failures[:10]:
        print("FAIL:", message)
    if failures:
        sys.exit(1)
    print("OK: %d ops (%d kernels, %d GEMMs, %.3f GFLOP), %d products fused, predicted %.3f ms"
          % (len(entries), cost["kernel_count"], cost["gemm_count"], gemm_flops / 1e9,
             len(fused), cost["predicted_step_ms"]))


if __name__ == "__main__":
    main()
