"""Issue 17 as a normal user: ``tooldir init`` under any umask (here 000, the worst) still makes a
package that loads clean and runs in the sandbox as that user, from the plain install."""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import unprivileged
from plaininstall import PlainInstall


@pytest.fixture
def user() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: a throwaway user needs root")
    with unprivileged.throwaway_user() as name:
        yield name


@pytest.mark.parametrize("lang", ["python", "node"])
def test_a_normal_user_with_umask_000_inits_a_package_that_loads_clean_and_runs(
    plain: PlainInstall, user: str, lang: str
) -> None:
    entry = pwd.getpwnam(user)
    workdir = Path(tempfile.mkdtemp(prefix="tooldir-init-", dir="/tmp"))
    try:
        os.chmod(workdir, 0o700)
        os.chown(workdir, entry.pw_uid, entry.pw_gid)
        tooldir = shlex.quote(plain.tooldir)
        options = "--user-dir tools --state-dir " + shlex.quote(str(workdir / "state"))
        script = (
            f"umask 000 && {tooldir} init hello --dir tools --lang {lang} >/dev/null && "
            f"{tooldir} scan --json {options} && "
            f'{tooldir} run hello --input \'{{"text": "hi"}}\' --json {options}'
        )
        done = unprivileged.run_as_user(
            user, ["sh", "-c", script], workdir, expose=[plain.bin.parent, *unprivileged.python_trees()]
        )
        assert done.returncode == 0, (done.stdout + done.stderr).decode()[-3000:]
        decoder = json.JSONDecoder()
        text = done.stdout.decode()
        scanned, end = decoder.raw_decode(text)
        ran, _ = decoder.raw_decode(text[end:].lstrip())
        assert [(t["name"], t["status"]) for t in scanned["tools"]] == [("hello", "active")]
        assert scanned["diagnostics"] == []
        assert ran["ok"] is True and ran["content"] == "hello got 2 characters: hi"
        modes = {p.name: p.stat().st_mode & 0o777 for p in (workdir / "tools" / "hello").iterdir()}
        assert set(modes.values()) == {0o644}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
