"""Run a command as a throwaway unprivileged user (tests that must hold for non-root users too).

When the interpreter, the virtualenv or the checkout lives below a folder other users cannot enter
(pyenv under /root, a clone under /root), a private mount namespace shows just those trees to the
user: the host's folders and permissions are never changed.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def blocking_ancestor(path: Path) -> Path | None:
    """The highest folder on ``path`` that other users cannot enter (e.g. /root for pyenv)."""
    current = Path("/")
    for part in path.parts[1:]:
        current = current / part
        if current.is_dir() and not os.stat(current).st_mode & 0o001:
            return current
    return None


@contextmanager
def throwaway_user() -> Iterator[str]:
    """A new system user, deleted afterwards. Only root can do this."""
    for tool in ("useradd", "unshare", "setpriv"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is needed to run tests as an unprivileged user")
    name = f"tdtest{secrets.token_hex(3)}"
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
        timeout=30,
    )
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True, timeout=30)


def python_trees() -> list[Path]:
    """What a child interpreter needs to see: the base install, the virtualenv and the checkout."""
    return [Path(sys.base_prefix), Path(sys.prefix), REPO]


def run_as_user(
    user: str,
    argv: list[str],
    workdir: Path,
    *,
    expose: Iterable[Path] = (),
    timeout: float = 120,
    keep_env: Iterable[str] = (),
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` as ``user`` with a clean environment (HOME under ``workdir``), in ``workdir``;
    ``keep_env``: names of this process's variables passed on (the machine's own settings a login
    of that user has too, e.g. which certificate authorities TLS trusts)."""
    env = ["env", "-i", "PATH=/usr/bin:/bin", f"HOME={workdir}/home", "LANG=C.UTF-8"]
    env += [f"{name}={os.environ[name]}" for name in keep_env if name in os.environ]
    drop = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--", *env, *argv]
    hidden: dict[Path, set[Path]] = {}
    for given in expose:
        tree = given.resolve()
        blocker = blocking_ancestor(tree)
        if blocker is not None and tree != blocker:
            hidden.setdefault(blocker, set()).add(blocker / tree.relative_to(blocker).parts[0])
    if not hidden:
        return subprocess.run(drop, capture_output=True, timeout=timeout, check=False, cwd=workdir)
    steps = ["set -e"]
    for n, (blocker, inners) in enumerate(sorted(hidden.items())):
        views = []
        for m, inner in enumerate(sorted(inners)):
            view = workdir / f"view-{n}-{m}"
            view.mkdir()
            views.append((inner, view))
            steps.append(f"mount --bind {shlex.quote(str(inner))} {shlex.quote(str(view))}")
        steps.append(f"mount -t tmpfs -o mode=0755,size=1m tooldir-test {shlex.quote(str(blocker))}")
        for inner, view in views:
            steps.append(f"mkdir -p {shlex.quote(str(inner))}")
            steps.append(f"mount --bind {shlex.quote(str(view))} {shlex.quote(str(inner))}")
    steps.append('exec "$@"')
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", "; ".join(steps), "sh", *drop],
        capture_output=True,
        timeout=timeout,
        check=False,
        cwd=workdir,
    )
