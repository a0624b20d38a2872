"""Start a helper process of tooldir's own (input validation, signature checks): the same
interpreter in isolated mode (``-I``: no user site, no environment, no working directory on
``sys.path``), in ``/``, with no inherited descriptors, given only this tooldir package's folder
(the boot code makes it the ``__path__`` of a stub ``tooldir`` package, so importing a submodule
never runs ``tooldir/__init__``), so a project's files can never be imported into it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_PACKAGE = str(Path(__file__).resolve().parents[1])  # this tooldir package's folder


def start_helper(boot: str, *, bufsize: int = -1) -> subprocess.Popen[bytes]:
    """``python -I -c boot <package folder>`` with pipes for stdin and stdout (stderr discarded).

    Raises:
        OSError: the interpreter could not be started.
    """
    return subprocess.Popen(
        [sys.executable, "-I", "-c", boot, _PACKAGE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd="/",
        close_fds=True,
        bufsize=bufsize,
    )
