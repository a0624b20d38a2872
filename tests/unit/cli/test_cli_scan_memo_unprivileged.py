"""The scan memo as a normal user: a hit prints what a fresh scan prints, and a memo the user does
not own (planted by root in the user's state) is never used."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import unprivileged

#: ``python -c RUNNER MODE ARGS...``: the library's racy granularity shortened (the tree is new),
#: then ``tooldir ARGS``; MODE ``warm`` also shortens the content index's (so its file settles).
RUNNER = """
import sys
import tooldir.read.scanmemo as memo
memo.RACY_NS = 50_000_000
# other tests add and delete users while this one runs, and the accounts files are inputs of the
# memo (their stats): the test's own copies stand in for them
memo.ACCOUNTS = ACCOUNTS_COPIES
if sys.argv[1] == "warm":
    import tooldir.read.index as index
    index.RACY_NS = 50_000_000
from tooldir._cli import main
sys.exit(main(sys.argv[2:]))
"""


def reforged(data: bytes, output: bytes) -> bytes:
    """The memo ``data`` with another output, its header made to match (a well-formed memo)."""
    magic, header, rest = data.split(b"\n", 2)
    head = json.loads(header)
    table = rest[head["output"] :]
    head["output"], head["output_sha256"] = len(output), hashlib.sha256(output).hexdigest()
    return b"\n".join([magic, json.dumps(head, separators=(",", ":")).encode(), output + table])


@pytest.fixture
def user() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: a throwaway user needs root")
    with unprivileged.throwaway_user() as name:
        yield name


def test_a_normal_users_memo_hit_is_the_fresh_output_and_a_foreign_memo_is_ignored(user: str) -> None:
    entry = pwd.getpwnam(user)
    workdir = Path(tempfile.mkdtemp(prefix="tooldir-memo-", dir="/tmp"))
    try:
        os.chmod(workdir, 0o700)
        tools = workdir / "tools" / "hello_tool"
        tools.mkdir(parents=True)
        (tools / "schema.json").write_text(
            '{"name": "hello_tool", "description": "Say hello.", "input_schema": {"type": "object"},'
            ' "risk": "read", "execute": {"command": ["python3", "run.py"]}}'
        )
        (tools / "run.py").write_text("print('hello')\n")
        for path in [workdir, *workdir.rglob("*")]:
            os.chown(path, entry.pw_uid, entry.pw_gid)
        scan = ["scan", "--json", "--user-dir", "tools", "--project", ".", "--state-dir", str(workdir / "state")]

        copies = (str(workdir / "passwd"), str(workdir / "group"))
        for copy in copies:
            shutil.copy2(Path("/etc") / Path(copy).name, copy)
            os.chown(copy, entry.pw_uid, entry.pw_gid)
        runner = RUNNER.replace("ACCOUNTS_COPIES", repr(copies))

        def run(mode: str, *extra: str) -> bytes:
            argv = [sys.executable, "-c", runner, mode, *scan, *extra]
            done = unprivileged.run_as_user(user, argv, workdir, expose=unprivileged.python_trees())
            for view in workdir.glob("view-*"):  # its mount points, left empty: the next run makes them again
                view.rmdir()
            assert done.returncode == 0, done.stderr.decode()[-2000:]
            return done.stdout

        def warm() -> Path:
            time.sleep(0.1)
            for _ in range(3):
                run("warm")
                time.sleep(0.1)
            memos = list((workdir / "state" / "index").glob("scan-*.memo"))
            assert len(memos) == 1
            return memos[0]

        memo = warm()
        assert memo.stat().st_uid == entry.pw_uid and memo.stat().st_mode & 0o777 == 0o600
        assert (memo.parent.stat().st_mode & 0o777) == 0o700
        fresh = run("hit", "--no-index")
        assert b'"hello_tool"' in fresh
        assert run("hit") == fresh
        # a valid memo with other output is used when it is the user's own (user state is
        # trusted; tests elsewhere show what it can never decide)... (other users created on this
        # machine in the meantime change /etc/passwd: then warm again)
        evil = fresh.replace(b"hello_tool", b"hello_evil")
        for _ in range(3):
            forged = reforged(memo.read_bytes(), evil)
            memo.write_bytes(forged)
            if run("hit") == evil:
                break
            memo = warm()
        else:
            raise AssertionError("a well-formed memo of the user's was never used")
        # ...and never when root planted it: another owner
        memo.unlink()
        memo.write_bytes(forged)
        os.chmod(memo, 0o600)
        assert memo.stat().st_uid == 0
        assert run("hit") == fresh
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
