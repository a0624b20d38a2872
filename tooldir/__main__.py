"""``python3 -m tooldir``: the same command line as the ``tooldir`` script.

``python -m`` puts the working directory (often a project with untrusted files) first on
``sys.path``; the package drops it before importing anything else (``tooldir/_internal/safepath.py``), and
this module checks again before the command line is imported.
"""

import sys

from ._internal import safepath as _safepath

if __name__ == "__main__":
    _safepath.drop_working_directory(sys.path)
    from ._cli import run

    run()
