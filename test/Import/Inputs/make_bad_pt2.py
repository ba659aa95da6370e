#!/usr/bin/env python3
"""Writes a damaged or rewritten copy of a .pt2 archive for the importer's
tests.

usage: make_bad_pt2.py MODE IN.pt2 OUT.pt2

MODE is one of: no-model-json, schema-major-9, unknown-dtype, use-pickle,
unsupported-ops, forward-only, malformed-node (one node's tensor argument
becomes a string), numbers-in-self (every add.Tensor / mul.Tensor whose
`other` is a Python number gets it as `self` instead, the form torch's
decompositions write for `1 + x`; the values do not change).
"""
import json
import sys
import zipfile


def main():
    mode, source, target = sys.argv[1:4]
    with zipfile.ZipFile(source) as archive:
        entries = {info.filename: archive.read(info) for info in archive.infolist()}
    root = next(iter(entries)).split("/")[0]
    model_name = f"{root}/models/model.json"
    weights_name = f"{root}/data/weights/model_weights_config.json"
    model = json.loads(entries[model_name])
    graph = model["graph_module"]["graph"]
    signature = model["graph_module"]["signature"]

    if mode == "no-model-json":
        del entries[model_name]
    elif mode == "schema-major-9":
        model["schema_version"]["major"] = 9
    elif mode == "unknown-dtype":
        graph["tensor_values"]["p_fc1_weight"]["dtype"] = 42
    elif mode == "use-pickle":
        weights = json.loads(entries[weights_name])
        weights["config"]["fc2.bias"]["use_pickle"] = True
        entries[weights_name] = json.dumps(weights).encode()
    elif mode == "unsupported-ops":
        # Two different nodes become operators nobody implements.
        graph["nodes"][2]["target"] = "torch.ops.aten.frobnicate.default"
        graph["nodes"][5]["target"] = "torch.ops.aten.special_zeta.default"
    elif mode == "malformed-node":
        graph["nodes"][2]["inputs"][0]["arg"] = {"as_string": "addmm"}
    elif mode == "numbers-in-self":
        swapped = 0
        for node in graph["nodes"]:
            if node["target"] not in ("torch.ops.aten.add.Tensor",
                                      "torch.ops.aten.mul.Tensor"):
                continue
            inputs = {i["name"]: i for i in node["inputs"]}
            other = inputs["other"]["arg"]
            if "as_int" in other or "as_float" in other:
                inputs["other"]["arg"] = inputs["self"]["arg"]
                inputs["self"]["arg"] = other
                swapped += 1
        if not swapped:
            sys.exit("no add/mul node with a number operand")
    elif mode == "forward-only":
        signature["output_specs"] = [
            {"user_output": {"arg": {"as_tensor": {"name": spec["loss_output"]["arg"]["name"]}}}}
            for spec in signature["output_specs"] if "loss_output" in spec
        ]
        graph["outputs"] = graph["outputs"][:1]
    else:
        sys.exit(f"unknown mode {mode}")
    if model_name in entries:
        entries[model_name] = json.dumps(model).encode()

    with zipfile.ZipFile(target, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)


if __name__ == "__main__":
    main()
