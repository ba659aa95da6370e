"""edit-index.py CHECKPOINT OUT: copies the checkpoint folder CHECKPOINT
(step-K) to OUT/<field>=<value>, one copy per edit of its index.json below,
and to OUT/intact unedited."""
import json
import os
import shutil
import sys

source, out = sys.argv[1], sys.argv[2]
EDITS = [
    ("trainer", "optimizer_step", -5),
    ("trainer", "optimizer_step", 0),
    ("trainer", "optimizer_step", 2**62),
    ("trainer", "micro_batches_done", -1),
    ("trainer", "micro_batches_done", 2e3),
    ("trainer", "consecutive_skips", 1),
    ("trainer", "skipped_steps", -1),
    (None, "step", 0),
    (None, "world_size", 0),
    (None, "run", 7),
    (None, "trainer", []),
]
os.makedirs(out, exist_ok=True)
shutil.copytree(source, os.path.join(out, "intact"))
for section, field, value in EDITS:
    name = "%s=%s" % (field, json.dumps(value).replace(" ", ""))
    folder = os.path.join(out, name)
    shutil.copytree(source, folder)
    path = os.path.join(folder, "index.json")
    with open(path) as f:
        index = json.load(f)
    (index[section] if section else index)[field] = value
    with open(path, "w") as f:
        json.dump(index, f)
