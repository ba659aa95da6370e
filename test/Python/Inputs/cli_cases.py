"""Runs `python3 -m mantissa.export` cases in one process, for speed: each
line of CASES is `LABEL [ENV=VALUE ...] -- ARGS`, run through the CLI's own
main(); prints `== LABEL exit N`, then what the case printed to stderr.
`ENV=` unsets ENV; a `torch_version=V` setting stands for an installed torch
of version V. `{inputs}` and `{tmp}` in a line are replaced by the given
folders.

usage: cli_cases.py CASES INPUTS TMP
"""

import contextlib
import io
import os
import shlex
import sys

import torch

from mantissa.export.__main__ import main


def run(label: str, settings: dict[str, str], args: list[str]) -> None:
    saved_env = dict(os.environ)
    saved_version = torch.__version__
    for key, value in settings.items():
        if key == "torch_version":
            torch.__version__ = value
        elif value:
            os.environ[key] = value
        else:
            os.environ.pop(key, None)
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            status = main(args)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        torch.__version__ = saved_version
    print(f"== {label} exit {status}")
    print(errors.getvalue().strip())


def cases(path: str, inputs: str, tmp: str):
    with open(path) as lines:
        for line in lines:
            if not line.strip() or line.startswith("#"):
                continue
            line = line.replace("{inputs}", inputs).replace("{tmp}", tmp)
            head, _, tail = line.partition(" -- ")
            label, *assignments = shlex.split(head)
            settings = dict(item.split("=", 1) for item in assignments)
            yield label, settings, shlex.split(tail)


if __name__ == "__main__":
    for label, settings, args in cases(*sys.argv[1:4]):
        run(label, settings, args)
