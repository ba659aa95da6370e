"""Reading, editing and rewriting the model.json of a .pt2 archive, shared by
the scripts that write damaged or rewritten archives for the importer's
tests (make_bad_pt2.py, make_bad_normalization.py, make_bad_pooling.py)."""
import json
import sys
import zipfile


class Archive:
    """A .pt2 archive held in memory; `model` is its parsed model.json."""

    def __init__(self, path):
        with zipfile.ZipFile(path) as archive:
            self.entries = [(info.filename, archive.read(info))
                            for info in archive.infolist()]
        root = self.entries[0][0].split("/")[0]
        self.model_name = f"{root}/models/model.json"
        names = dict(self.entries)
        self.model = json.loads(names[self.model_name]) if self.model_name in names else None
        self.graph = self.model["graph_module"]["graph"] if self.model else None

    def write(self, path):
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as out:
            for filename, data in self.entries:
                if filename == self.model_name:
                    data = json.dumps(self.model).encode()
                out.writestr(zipfile.ZipInfo(filename, date_time=(1980, 1, 1, 0, 0, 0)), data)


def first(graph, target, where=lambda node: True):
    """The first node calling torch.ops.aten.TARGET for which `where` holds."""
    for node in graph["nodes"]:
        if node["target"] == f"torch.ops.aten.{target}" and where(node):
            return node
    sys.exit(f"no {target} node")


def argument(node, name):
    """The node's input named `name`."""
    return next(entry for entry in node["inputs"] if entry["name"] == name)
