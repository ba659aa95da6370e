#!/usr/bin/env python3
"""Writes a copy of a group or batch norm archive with one node made wrong,
for the importer's diagnostics (test/Import/normalization.test).

usage: make_bad_normalization.py MODE IN.pt2 OUT.pt2

MODE is one of:
  group-mismatch     the first native_group_norm gets group = 3 (of 8 channels)
  recorded-shape     torch's recorded shape of the first native_group_norm's
                     mean becomes [4, 5] (the computed one is [4, 4])
  no-stats-eval      the `_native_batch_norm_legit.no_stats` node gets
                     training = False, with no running statistics to use
  backward-no-saved  the first training-mode native_batch_norm_backward
                     loses its save_mean
"""
import json
import sys
import zipfile


def first(graph, target, where=lambda node: True):
    for node in graph["nodes"]:
        if node["target"] == f"torch.ops.aten.{target}" and where(node):
            return node
    sys.exit(f"no {target} node")


def argument(node, name):
    return next(entry for entry in node["inputs"] if entry["name"] == name)


def main():
    mode, source, target = sys.argv[1:4]
    with zipfile.ZipFile(source) as archive:
        entries = [(info.filename, archive.read(info)) for info in archive.infolist()]
    root = entries[0][0].split("/")[0]
    model_name = f"{root}/models/model.json"
    model = json.loads(dict(entries)[model_name])
    graph = model["graph_module"]["graph"]

    if mode == "group-mismatch":
        argument(first(graph, "native_group_norm.default"), "group")["arg"] = {"as_int": 3}
    elif mode == "recorded-shape":
        mean = first(graph, "native_group_norm.default")["outputs"][1]["as_tensor"]["name"]
        graph["tensor_values"][mean]["sizes"] = [{"as_int": 4}, {"as_int": 5}]
    elif mode == "no-stats-eval":
        node = first(graph, "_native_batch_norm_legit.no_stats")
        argument(node, "training")["arg"] = {"as_bool": False}
    elif mode == "backward-no-saved":
        node = first(graph, "native_batch_norm_backward.default",
                     lambda node: argument(node, "train")["arg"]["as_bool"])
        argument(node, "save_mean")["arg"] = {"as_none": True}
    else:
        sys.exit(f"unknown mode {mode}")

    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as out:
        for filename, data in entries:
            if filename == model_name:
                data = json.dumps(model).encode()
            out.writestr(zipfile.ZipInfo(filename, date_time=(1980, 1, 1, 0, 0, 0)), data)


if __name__ == "__main__":
    main()
