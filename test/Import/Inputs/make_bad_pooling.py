#!/usr/bin/env python3
"""Writes a copy of a pooling or upsampling archive with one node made wrong,
for the importer's diagnostics (test/Import/pooling.test).

usage: make_bad_pooling.py MODE IN.pt2 OUT.pt2

MODE is one of:
  adaptive-uneven  the first _adaptive_avg_pool2d pools [6, 6] to [4, 4]
                   (windows of two sizes)
  padding          the first max_pool2d_with_indices gets padding [2, 2] for
                   its kernel [2, 2] (torch allows at most half the kernel)
  recorded-shape   torch's recorded shape of the first avg_pool2d's output
                   becomes [3, 2, 4, 4] (the computed one is [3, 2, 3, 3])
  scale-factors    the first upsample_nearest2d.vec gets three scale factors
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pt2_edit import Archive, argument, first  # noqa: E402




def main():
    mode, source, target = sys.argv[1:4]
    archive = Archive(source)
    graph = archive.graph

    if mode == "adaptive-uneven":
        node = first(graph, "_adaptive_avg_pool2d.default")
        argument(node, "output_size")["arg"] = {"as_ints": [4, 4]}
    elif mode == "padding":
        node = first(graph, "max_pool2d_with_indices.default")
        node["inputs"] = [entry for entry in node["inputs"] if entry["name"] != "padding"]
        node["inputs"].append({"name": "padding", "arg": {"as_ints": [2, 2]}, "kind": 1})
    elif mode == "recorded-shape":
        output = first(graph, "avg_pool2d.default")["outputs"][0]["as_tensor"]["name"]
        graph["tensor_values"][output]["sizes"] = [{"as_int": size} for size in (3, 2, 4, 4)]
    elif mode == "scale-factors":
        node = first(graph, "upsample_nearest2d.vec")
        argument(node, "scale_factors")["arg"] = {"as_floats": [2.0, 2.0, 2.0]}
    else:
        sys.exit(f"unknown mode {mode}")

    archive.write(target)


if __name__ == "__main__":
    main()
