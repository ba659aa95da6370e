#!/usr/bin/env python3
"""Fails when a file breaks the layering of Mantissa's sources.

The floor, Format (include/mantissa/Format, lib/Format), holds the file
formats and ABIs the compiler and the runtime share; the runtime
(include/mantissa/Runtime, lib/Runtime) is built on it and the compiler on
both (docs/architecture.md). So the floor includes no other Mantissa header,
the runtime none but its own and the floor's, and neither includes an LLVM,
MLIR or clang header (the runtime is built and deployed without them).

Usage: check-layering.py [SOURCE_DIR] (default: the checkout it lies in).
Prints each offending include as FILE:LINE: #include ... (why) and exits 1;
ctest runs it as the test `layering`.
"""

import pathlib
import re
import sys

# Each layer: its folders, and the Mantissa headers it may include.
LAYERS = {
    "Format": (["include/mantissa/Format", "lib/Format"], ["mantissa/Format/"]),
    "Runtime": (
        ["include/mantissa/Runtime", "lib/Runtime"],
        ["mantissa/Runtime/", "mantissa/Format/"],
    ),
}
COMPILER_LIBRARIES = ("llvm/", "llvm-c/", "mlir/", "clang/")
SOURCE_SUFFIXES = {".h", ".hpp", ".cpp", ".c", ".inc", ".def"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')


def problem(layer, header, allowed):
    """Why `layer`, which may include the Mantissa headers under `allowed`,
    may not include `header`; None when it may."""
    if header.startswith(COMPILER_LIBRARIES):
        return "%s includes no LLVM, MLIR or clang header" % layer
    if header.startswith("mantissa/") and not header.startswith(tuple(allowed)):
        return "%s may include only the Mantissa headers under %s" % (
            layer, " and ".join(allowed))
    if ".." in pathlib.PurePosixPath(header).parts:
        return "%s includes nothing from outside its folders" % layer
    return None


def main():
    root = pathlib.Path(
        sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent / "..")
    found, checked = [], 0
    for layer, (folders, allowed) in LAYERS.items():
        for folder in folders:
            for path in sorted((root / folder).rglob("*")):
                if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
                    continue
                checked += 1
                lines = path.read_text(errors="replace").splitlines()
                for number, line in enumerate(lines, 1):
                    match = INCLUDE.match(line)
                    why = match and problem(layer, match.group(2), allowed)
                    if why:
                        found.append("%s:%d: %s (%s)" % (
                            path.relative_to(root), number, line.strip(), why))
    for line in found:
        print(line)
    if found:
        print("check-layering: %d include(s) break the layering "
              "(docs/architecture.md)" % len(found))
        return 1
    if checked == 0:
        print("check-layering: no Format or Runtime sources under %s" % root)
        return 1
    print("check-layering: %d Format and Runtime files include no compiler "
          "header" % checked)
    return 0


if __name__ == "__main__":
    sys.exit(main())
