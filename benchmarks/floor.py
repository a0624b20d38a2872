"""The plain floor every load benchmark compares against: walk a root (root -> package -> files),
read every file, sha256 it and ``json.loads`` every schema.json, keeping nothing.

``floor(root)`` runs it in-process; ``python3 benchmarks/floor.py ROOT`` is the whole-process
floor (standard library only, so its start-up is the interpreter's own).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

SCRIPT = os.path.realpath(__file__)  # os.path, not pathlib: the floor imports no more than it needs


def floor(root: str) -> int:
    """The number of package folders walked."""
    n = 0
    with os.scandir(root) as packages:
        for pkg in packages:
            if not pkg.is_dir(follow_symlinks=False):
                continue
            with os.scandir(pkg.path) as files:
                for f in files:
                    if not f.is_file(follow_symlinks=False):
                        continue
                    with open(f.path, "rb") as fh:
                        data = fh.read()
                    hashlib.sha256(data).hexdigest()
                    if f.name == "schema.json":
                        json.loads(data)
            n += 1
    return n


if __name__ == "__main__":
    print(floor(sys.argv[1]))
