"""The managed policy for a user who is not root (issue 27 item 4): root's file is a floor their own
policy cannot lower; a managed file that user owns is refused. Runs as a throwaway user."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import unprivileged

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="creating a throwaway user needs root")

SCRIPT = """
import json, pathlib, sys
import tooldir.policy as p
from tooldir.errors import PolicyError
p.MANAGED_POLICY_PATH = pathlib.Path(sys.argv[1])  # the test's stand-in for /etc/tooldir/policy.toml
try:
    e = p.read_policy()
except PolicyError as exc:
    print(json.dumps({"error": exc.diagnostics()}))
else:
    print(json.dumps({"timeout_s": e.policy.sandbox.timeout_s, "managed": [o.message() for o in e.overridden],
                      "origin": e.origin("sandbox.timeout_s")}))
"""


def run(owner_is_user: bool) -> dict[str, object]:
    with unprivileged.throwaway_user() as user:
        uid = pwd.getpwnam(user).pw_uid
        workdir = Path(tempfile.mkdtemp(prefix="tooldir-managed-user-", dir="/tmp"))
        try:
            workdir.chmod(0o755)
            managed = workdir / "etc" / "tooldir" / "policy.toml"
            managed.parent.mkdir(parents=True)
            managed.parent.parent.chmod(0o755)
            managed.parent.chmod(0o755)
            managed.write_text("[sandbox]\ntimeout_s = 10\n")
            managed.chmod(0o644)
            if owner_is_user:
                os.chown(managed, uid, uid)
            config = workdir / "home" / ".config" / "tooldir"
            config.mkdir(parents=True)
            (config / "policy.toml").write_text("[sandbox]\ntimeout_s = 600\n")
            for folder in (workdir / "home", workdir / "home" / ".config", config, config / "policy.toml"):
                os.chown(folder, uid, uid)
            done = unprivileged.run_as_user(
                user,
                [sys.executable, "-c", SCRIPT, str(managed)],
                workdir,
                expose=unprivileged.python_trees(),
            )
            assert done.returncode == 0, done.stderr.decode()
            result: dict[str, object] = json.loads(done.stdout)
            return result
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


def test_an_unprivileged_users_policy_cannot_raise_a_key_roots_managed_policy_sets() -> None:
    result = run(owner_is_user=False)
    assert result["timeout_s"] == 10
    assert str(result["origin"]).startswith("managed:") and str(result["origin"]).endswith("policy.toml:2")
    (message,) = result["managed"]  # type: ignore[misc]
    assert "sandbox.timeout_s = 600.0" in message and "is ignored" in message


def test_a_managed_policy_owned_by_the_user_is_refused() -> None:
    result = run(owner_is_user=True)
    assert "not root" in str(result["error"])
