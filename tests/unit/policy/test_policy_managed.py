"""The managed policy (issue 27 item 4): ``/etc/tooldir/policy.toml``, root's own, is a floor under
every user's policy; a user value that would weaken one of its keys is ignored with a
``policy-managed`` warning naming both files and lines; its keys are trusted signers for every user.
The CLI and a host calling the library get it alike. (The conftest points the managed path into
each test's home: no test reads the real one.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from toolkit import make_tool

import tooldir
import tooldir.policy as policy_module
from tooldir._cli import main
from tooldir.errors import PolicyError
from tooldir.policy import read_managed_policy, read_policy

MINISIGN = "RWQdaZcrjL8T2sjQbKvxwkpASoH4auuWOHIe4jAztlSoLHM+zxIaWWto"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a managed policy is root's file: needs root to plant one")


def managed_file(text: str) -> Path:
    path = Path(policy_module.MANAGED_POLICY_PATH)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o644)
    return path


def user_file(text: str) -> Path:
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "tooldir" / "policy.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


MANAGED = """\
[sources.project]
max_risk = "read"

[sandbox]
timeout_s = 10
"""

USER = """\
[sandbox]
timeout_s = 60
memory_mb = 128

[sources.project]
max_risk = "exec"
"""


@needs_root
def test_a_user_value_weakening_a_managed_key_is_ignored_with_policy_managed_naming_both_files_and_lines() -> None:
    managed = managed_file(MANAGED)
    user = user_file(USER)
    effective = read_policy()
    assert effective.policy.sandbox.timeout_s == 10
    assert effective.policy.sources.project.max_risk == "read"
    assert effective.policy.sandbox.memory_mb == 128  # a key the managed file leaves out is the user's
    assert effective.managed_file == str(managed)
    by_key = {o.key: o for o in effective.overridden}
    assert set(by_key) == {"sandbox.timeout_s", "sources.project.max_risk"}
    timeout = by_key["sandbox.timeout_s"]
    assert (timeout.value, timeout.kept, timeout.origin, timeout.managed_origin) == (
        60.0,
        10.0,
        f"{user}:2",
        f"managed:{managed}:5",
    )
    message = timeout.message()
    assert f"{user}:2" in message and f"{managed}:5" in message and "ignored" in message
    codes = [(d.code, d.pointer) for d in effective.diagnostics()]
    assert ("policy-managed", "/sandbox/timeout_s") in codes
    assert ("policy-managed", "/sources/project/max_risk") in codes
    assert effective.origin("sandbox.timeout_s") == f"managed:{managed}:5"
    assert effective.origin("sandbox.memory_mb") == f"{user}:3"


@needs_root
def test_a_user_value_stricter_than_the_managed_one_is_used_and_not_reported() -> None:
    managed_file('[sources.project]\nmax_risk = "write"\n[sandbox]\ntimeout_s = 10\n')
    user = user_file('[sources.project]\nmax_risk = "read"\n[sandbox]\ntimeout_s = 5\n')
    effective = read_policy()
    assert effective.policy.sources.project.max_risk == "read"
    assert effective.policy.sandbox.timeout_s == 5
    assert effective.overridden == ()
    assert effective.origin("sandbox.timeout_s") == f"{user}:4"


@needs_root
def test_the_managed_floor_holds_against_an_explicit_policy_file_and_a_users_preset(tmp_path: Path) -> None:
    managed_file("[sandbox]\nunsafe_allow_unsandboxed = false\n[permissions]\ndeny = ['shell_*']\n")
    other = tmp_path / "other.toml"
    other.write_text("[sandbox]\nunsafe_allow_unsandboxed = true\n[permissions]\ndeny = []\n")
    effective = read_policy(other)
    assert effective.policy.sandbox.unsafe_allow_unsandboxed is False
    assert effective.policy.permissions.deny == ("shell_*",)
    assert {o.key for o in effective.overridden} == {"sandbox.unsafe_allow_unsandboxed", "permissions.deny"}


@needs_root
def test_managed_keys_are_trusted_signers_beside_the_users_own() -> None:
    managed = managed_file(f'[keys]\nminisign = ["{MINISIGN}"]\n')
    user = user_file("[keys]\nminisign = []\nrevoked = []\n")
    effective = read_policy()
    assert effective.policy.keys.minisign == (MINISIGN,)
    assert effective.origin("keys.minisign") == f"managed:{managed}:2 + {user}:2"
    assert effective.overridden == ()


@needs_root
def test_without_a_user_file_the_managed_values_apply_over_the_defaults() -> None:
    managed = managed_file(MANAGED)
    effective = read_policy()
    assert effective.file is None
    assert effective.policy.sandbox.timeout_s == 10
    assert effective.origin("sandbox.timeout_s") == f"managed:{managed}:5"
    assert effective.origin("sandbox.memory_mb") == "default"


def test_no_managed_file_changes_nothing() -> None:
    assert read_managed_policy() is None
    user_file(USER)
    effective = read_policy()
    assert effective.policy.sandbox.timeout_s == 60
    assert effective.managed_file is None and effective.overridden == ()


@needs_root
@pytest.mark.parametrize(
    ("mode", "words"),
    [(0o664, "writable by group"), (0o646, "writable by others")],
    ids=["group-writable", "world-writable"],
)
def test_a_writable_managed_policy_is_refused_with_the_reason(mode: int, words: str) -> None:
    path = managed_file(MANAGED)
    path.chmod(mode)
    with pytest.raises(PolicyError, match=words) as caught:
        read_policy()
    assert caught.value.path == str(path)
    assert "managed policy" in caught.value.message


@needs_root
def test_a_managed_policy_not_owned_by_root_is_refused() -> None:
    path = managed_file(MANAGED)
    os.chown(path, 65534, 65534)
    with pytest.raises(PolicyError, match="owned by uid 65534, not root"):
        read_policy()


@needs_root
def test_a_managed_policy_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real.toml"
    real.write_text(MANAGED)
    link = Path(policy_module.MANAGED_POLICY_PATH)
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    with pytest.raises(PolicyError, match="symbolic link"):
        read_policy()


@needs_root
def test_a_managed_policy_in_a_folder_others_may_write_is_refused() -> None:
    path = managed_file(MANAGED)
    path.parent.chmod(0o777)
    with pytest.raises(PolicyError, match="writable by others"):
        read_policy()


@needs_root
def test_an_invalid_managed_policy_is_an_error_naming_its_key_and_line() -> None:
    managed_file("[sandbox]\ntimeout_s = 'long'\n")
    with pytest.raises(PolicyError) as caught:
        read_policy()
    assert (caught.value.key, caught.value.line) == ("sandbox.timeout_s", 2)


@needs_root
def test_policy_show_gives_the_managed_origin_and_the_warning(capsys: pytest.CaptureFixture[str]) -> None:
    managed = managed_file(MANAGED)
    user = user_file(USER)
    assert main(["policy", "show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["origins"]["sandbox.timeout_s"] == f"managed:{managed}:5"
    assert shown["managed_file"] == str(managed)
    assert {m["key"] for m in shown["managed"]} == {"sandbox.timeout_s", "sources.project.max_risk"}
    assert main(["policy", "show"]) == 0
    text = capsys.readouterr().out
    assert "warning policy-managed: sandbox.timeout_s = 60.0" in text
    assert f"{user}:2" in text


@needs_root
def test_the_cli_and_a_host_both_keep_a_project_tool_under_the_managed_ceiling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    managed_file(MANAGED)  # project tools at most "read"
    user_file('[sources.project]\nmax_risk = "exec"\nrequire = []\n')
    project = tmp_path / "project"
    make_tool(project / ".tooldir" / "tools", "writer", risk="write")
    main(["scan", "--json", "--project", str(project)])
    report = json.loads(capsys.readouterr().out)
    assert {t["name"]: t["status"] for t in report["tools"]} == {"writer": "rejected"}
    assert "policy-managed" in {d["code"] for d in report["diagnostics"]}
    snapshot = tooldir.load(project=str(project))
    assert snapshot.records("writer")[0].status.value == "rejected"
    assert "policy-managed" in {d.code for d in snapshot.diagnostics}
    assert tooldir.make_config(project=str(project)).policy.sources.project.max_risk == "read"


@needs_root
def test_a_managed_allowed_signers_file_is_kept_over_the_users_with_a_warning() -> None:
    managed = managed_file('[keys]\nallowed_signers = "/etc/tooldir/allowed_signers"\n')
    user = user_file('[keys]\nallowed_signers = "~/.config/tooldir/allowed_signers"\n')
    effective = read_policy()
    assert effective.policy.keys.allowed_signers == "/etc/tooldir/allowed_signers"
    (override,) = effective.overridden
    assert (override.key, override.origin, override.managed_origin) == (
        "keys.allowed_signers",
        f"{user}:2",
        f"managed:{managed}:2",
    )


@needs_root
def test_pins_merge_entry_by_entry_and_the_managed_entry_wins_on_a_shared_name() -> None:
    team, mine, other = "sha256:" + "a" * 64, "sha256:" + "b" * 64, "sha256:" + "c" * 64
    managed_file(f'[pins]\nshared = "{team}"\n')
    user_file(f'[pins]\nshared = "{other}"\nmy_tool = "{mine}"\n')
    effective = read_policy()
    assert effective.policy.pins == {"shared": team, "my_tool": mine}
    assert [o.key for o in effective.overridden] == ["pins.shared"]
