"""Writes a model's files all at once or not at all.

Files are written into a hidden folder beside OUT_DIR (same filesystem) and
renamed into place only when every one of them was written, so a failure at
any point leaves OUT_DIR as it was.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from .errors import ExportError


class Staging:
    def __init__(self, out_dir: str, name: str, replaces: list[str]):
        """`replaces`: files of an earlier export of NAME that this one
        does not write (its references when exported without them) and so
        removes, so that OUT_DIR never mixes two exports."""
        self.out_dir = os.path.abspath(out_dir)
        if os.path.exists(self.out_dir) and not os.path.isdir(self.out_dir):
            raise ExportError(f"{out_dir} exists and is not a folder")
        parent = os.path.dirname(self.out_dir)
        os.makedirs(parent, exist_ok=True)
        self.folder = tempfile.mkdtemp(
            prefix=f".{os.path.basename(self.out_dir)}.{name}.", suffix=".partial", dir=parent)
        self.replaces = replaces
        # mkdtemp's folder is private; the files are as any other the user writes.
        umask = os.umask(0)
        os.umask(umask)
        self.mode = 0o666 & ~umask
        os.chmod(self.folder, 0o777 & ~umask)

    def path(self, filename: str) -> str:
        return os.path.join(self.folder, filename)

    def commit(self) -> list[str]:
        written = sorted(os.listdir(self.folder))
        for filename in written:
            os.chmod(os.path.join(self.folder, filename), self.mode)
        if not os.path.exists(self.out_dir):
            os.rename(self.folder, self.out_dir)
        else:
            for filename in written:
                os.replace(os.path.join(self.folder, filename),
                           os.path.join(self.out_dir, filename))
            os.rmdir(self.folder)
            for filename in self.replaces:
                stale = os.path.join(self.out_dir, filename)
                if filename not in written and os.path.exists(stale):
                    os.remove(stale)
        return [os.path.join(self.out_dir, filename) for filename in written]

    def abort(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> "Staging":
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is not None:
            self.abort()
