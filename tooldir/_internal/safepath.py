"""``python3 -m tooldir`` must never import a module from the project it is run in.

``python -m`` puts the working directory (the project) first on ``sys.path``, so a ``rich.py``,
``anyio.py`` or ``json.py`` planted there would be imported instead of the real module. The
package runs this before importing anything else: when the process is ``python -m tooldir...``,
the working directory's entries leave ``sys.path``. Only ``sys`` and ``os`` are used (both are
loaded before any ``-m`` module runs). Importing tooldir from a host program (including
``python -m other`` whose code imports tooldir) changes nothing.
"""

import os
import sys

#: Short interpreter options that take an argument (the rest of the word, or the next word).
_TAKES_ARGUMENT = frozenset("cmWX")


def module_run(orig_argv: list[str]) -> str | None:
    """The module named by ``-m`` on an interpreter command line, or None (script, ``-c``, REPL)."""
    args = iter(orig_argv[1:])
    for arg in args:
        if arg == "--" or not arg.startswith("-") or arg == "-":
            return None  # a script or stdin: no -m
        if arg.startswith("--"):
            if arg == "--check-hash-based-pycs":  # the only long option that takes a value
                next(args, "")
            continue
        for i, flag in enumerate(arg[1:], 1):
            if flag in _TAKES_ARGUMENT:
                value = arg[i + 1 :] or next(args, "")
                if flag == "m":
                    return value
                if flag == "c":
                    return None
                break
    return None


def runs_tooldir(argv: list[str], orig_argv: list[str]) -> bool:
    """Is this process ``python -m tooldir`` (or ``-m tooldir.<sub>``), still locating the module?"""
    if not argv or argv[0] != "-m":  # runpy sets argv[0] to "-m" while it imports the package
        return False
    module = module_run(orig_argv)
    return module is not None and (module == "tooldir" or module.startswith("tooldir."))


def is_working_directory(entry: str, cwd: str) -> bool:
    """``entry`` of ``sys.path`` names the working directory ("" and "." included)."""
    if entry in ("", "."):
        return True
    try:
        return os.path.realpath(os.path.join(cwd, entry)) == os.path.realpath(cwd)
    except (OSError, ValueError):
        return False


def drop_working_directory(path: list[str]) -> list[str]:
    """Remove every entry naming the working directory from ``path`` (in place); returns them."""
    try:
        cwd = os.getcwd()
    except OSError:  # the working directory was removed: only the relative spellings can name it
        cwd = ""
    removed = [e for e in path if (e in ("", ".") or (cwd and is_working_directory(e, cwd)))]
    path[:] = [e for e in path if e not in removed]
    return removed


def protect() -> None:
    """When this process is ``python -m tooldir``, take the project off ``sys.path``."""
    if runs_tooldir(sys.argv, list(getattr(sys, "orig_argv", []))):
        drop_working_directory(sys.path)


protect()  # on import: tooldir/__init__.py imports this module before anything else
