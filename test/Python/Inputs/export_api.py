"""Exports a fixture through the Python API and prints the ExportResult.

usage: export_api.py FACTORY OUT_DIR NAME MANTISSA_COMPILE
"""

import sys

import fixtures  # this folder is the script's, so on sys.path
from mantissa.export import ExportResult, export_training_step

factory, out_dir, name, mantissa_compile = sys.argv[1:5]
model, batch = getattr(fixtures, factory)()
result = export_training_step(model, batch, out_dir, name, mantissa_compile=mantissa_compile)
assert isinstance(result, ExportResult)
print(f"user_inputs {result.user_inputs}")
print(f"batch_dims {result.batch_dims}")
print(f"parameters {result.parameter_count}")
print(f"module_paths {result.module_paths}")
for operator, count in result.operators.items():
    print(f"operator {operator} {count}")
for path in result.files:
    print(f"file {path}")
