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
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pt2_edit import Archive, argument, first  # noqa: E402




def main():
    mode, source, target = sys.argv[1:4]
    archive = Archive(source)
    graph = archive.graph

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

    archive.write(target)


if __name__ == "__main__":
    main()
