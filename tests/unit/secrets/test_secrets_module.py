"""tooldir.run.secrets: the secrets file, grants, commands and redaction (DESIGN §11, issue 24 item 4)."""

from __future__ import annotations

import base64
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote, quote_plus

import pytest

import tooldir.run.secrets as secrets_module
from tooldir.errors import PolicyError
from tooldir.policy import parse_policy
from tooldir.run.secrets import (
    MAX_SECRET_BYTES,
    MAX_SECRETS_FILE_BYTES,
    Redactor,
    SecretEntry,
    SecretsFileError,
    SecretUnavailableError,
    default_secrets_path,
    encoded_forms,
    parse_secrets,
    read_secrets_file,
    resolve,
    run_secret_command,
)

VALUE = "s3cr3t-T0ken/with+odd=chars & more"


def secrets_file(text: str, mode: int = 0o600) -> Path:
    path = default_secrets_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


# -- the file ----------------------------------------------------------------------------------


def test_the_secrets_file_lives_beside_the_users_policy_file() -> None:
    assert default_secrets_path() == Path(os.environ["XDG_CONFIG_HOME"]) / "tooldir" / "secrets.toml"


def test_a_value_and_a_command_entry_are_read() -> None:
    entries = parse_secrets(f'[secrets]\nJIRA_TOKEN = "{VALUE}"\nGH = {{command = ["pass", "show", "gh"]}}\n')
    assert entries["JIRA_TOKEN"].value == VALUE
    assert entries["GH"].command == ("pass", "show", "gh")
    assert VALUE not in repr(entries["JIRA_TOKEN"])  # a repr never shows a value


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[other]\nX = "v"\n', "unknown key 'other'"),
        ('[secrets]\njira_token = "v"\n', "secrets.'jira_token'"),
        ('[secrets]\nX = ""\n', "the value of X is empty"),
        ('[secrets]\nX = "a\\u0000b"\n', "NUL"),
        ("[secrets]\nX = 3\n", "secrets.X: a string or {command = [argv...]}, not int"),
        ('[secrets]\nX = {command = "pass show x"}\n', "secrets.X.command: an array"),
        ("[secrets]\nX = {command = []}\n", "secrets.X.command: an array"),
        ('[secrets]\nX = {command = ["./get"]}\n', "relative path"),
        ('[secrets]\nX = {command = ["pass"], shell = true}\n', "unknown key 'shell'"),
        ('[secrets]\nX = "v\n', "not valid TOML: line 2"),
    ],
    ids=["unknown-table", "bad-name", "empty", "nul", "number", "command-string", "command-empty",
         "command-relative", "command-extra-key", "not-toml"],
)  # fmt: skip
def test_a_bad_entry_is_refused_naming_the_key_and_why(text: str, says: str) -> None:
    with pytest.raises(SecretsFileError) as caught:
        parse_secrets(text, path="/x/secrets.toml")
    assert says in str(caught.value)
    assert caught.value.path == "/x/secrets.toml"


def test_an_oversized_value_is_refused_without_being_shown() -> None:
    big = "Z" * (MAX_SECRET_BYTES + 1)
    with pytest.raises(SecretsFileError) as caught:
        parse_secrets(f'[secrets]\nX = "{big}"\n')
    assert big not in str(caught.value) and "over" in str(caught.value)


def test_a_toml_error_never_quotes_the_line_it_failed_on() -> None:
    with pytest.raises(SecretsFileError) as caught:
        parse_secrets(f'[secrets]\nX = "{VALUE}" trailing\n')
    assert VALUE not in caught.value.diagnostics()


def test_a_missing_secrets_file_is_none() -> None:
    assert read_secrets_file() is None


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_a_file_of_mode_0600_or_stricter_is_read(mode: int) -> None:
    secrets_file(f'[secrets]\nJIRA_TOKEN = "{VALUE}"\n', mode)
    entries = read_secrets_file()
    assert entries is not None and entries["JIRA_TOKEN"].value == VALUE


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o644])
def test_a_file_group_or_others_may_read_is_refused_with_the_fix(mode: int) -> None:
    path = secrets_file(f'[secrets]\nJIRA_TOKEN = "{VALUE}"\n', mode)
    with pytest.raises(SecretsFileError) as caught:
        read_secrets_file()
    assert f"{mode:04o}" in str(caught.value) and f"chmod 600 {path}" in str(caught.value)


def test_a_symlinked_secrets_file_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real.toml"
    real.write_text('[secrets]\nX = "v"\n')
    real.chmod(0o600)
    default_secrets_path().parent.mkdir(parents=True)
    default_secrets_path().symlink_to(real)
    with pytest.raises(SecretsFileError, match="symbolic link"):
        read_secrets_file()


def test_a_fifo_is_refused_without_blocking() -> None:
    default_secrets_path().parent.mkdir(parents=True)
    os.mkfifo(default_secrets_path(), 0o600)
    with pytest.raises(SecretsFileError, match="not a regular file"):
        read_secrets_file()


def test_a_huge_secrets_file_is_refused() -> None:
    secrets_file("#" * (MAX_SECRETS_FILE_BYTES + 1) + "\n")
    with pytest.raises(SecretsFileError, match="bytes; a secrets file is at most"):
        read_secrets_file()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root (CI runs as root too)")
def test_a_file_owned_by_another_user_is_refused() -> None:
    path = secrets_file('[secrets]\nX = "v"\n')
    os.chown(path, 65534, 65534)
    with pytest.raises(SecretsFileError, match="owned by uid 65534, not by you"):
        read_secrets_file()


def test_a_file_in_a_folder_others_may_write_is_refused() -> None:
    path = secrets_file('[secrets]\nX = "v"\n')
    path.parent.chmod(0o777)
    with pytest.raises(SecretsFileError, match="another user could replace the file"):
        read_secrets_file()


# -- commands ------------------------------------------------------------------------------------


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_command_s_output_is_the_value_without_its_trailing_newline() -> None:
    assert run_secret_command("X", py(f"print({VALUE!r})")) == VALUE


def test_a_command_runs_without_a_shell(tmp_path: Path) -> None:
    canary = tmp_path / "ran"
    assert run_secret_command("X", ["echo", f"a; touch {canary}"]) == f"a; touch {canary}"
    assert not canary.exists()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            py("import sys; sys.stderr.write('gpg: decryption failed\\n'); sys.exit(2)"),
            "exited with 2: gpg: decryption",
        ),
        (py("print('x' * 20000)"), f"printed more than {MAX_SECRET_BYTES} bytes"),
        (py("pass"), "the value of X is empty"),
        (["no-such-program-tooldir"], "is not found in PATH"),
        (py("import sys; sys.stdout.buffer.write(b'\\xff')"), "invalid UTF-8"),
    ],
    ids=["fails", "too-much", "nothing", "not-found", "not-utf8"],
)
def test_a_command_that_fails_makes_the_secret_unavailable_with_the_reason(argv: list[str], says: str) -> None:
    with pytest.raises(SecretUnavailableError) as caught:
        run_secret_command("X", argv)
    assert caught.value.name == "X" and says in caught.value.message


def test_a_command_that_hangs_is_killed_at_its_time_limit_with_what_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pidfile = tmp_path / "child"
    # a clock that stands still until the command has started its child, so that the time limit
    # cannot end the command before there is a child to check, however loaded the machine
    started = time.monotonic()
    clock = SimpleNamespace(monotonic=lambda: time.monotonic() if pidfile.exists() else started)
    monkeypatch.setattr(secrets_module, "time", clock)
    code = (
        "import os, subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pidfile)!r} + '.new', 'w').write(str(p.pid))\n"
        f"os.rename({str(pidfile)!r} + '.new', {str(pidfile)!r})\n"  # whole once it exists
        "time.sleep(600)\n"
    )
    with pytest.raises(SecretUnavailableError, match=r"did not finish within 0\.5 s"):
        run_secret_command("X", py(code), timeout_s=0.5)
    child = int(pidfile.read_text())
    # the whole group was sent SIGKILL: the grandchild dies (gone, or a zombie awaiting its
    # reaper) as soon as the kernel gets to it; the cap only bounds a kill that never lands
    status, gave_up = "", time.monotonic() + 30
    while status not in {"gone", "Z", "X"} and time.monotonic() < gave_up:
        try:
            status = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            status = "gone"
        time.sleep(0.01)
    assert status in {"gone", "Z", "X"}


# -- grants and resolution -------------------------------------------------------------------------


def test_a_declared_but_ungranted_secret_is_unavailable_naming_the_grant_to_add(tmp_path: Path) -> None:
    canary = tmp_path / "ran"
    secrets_file(f'[secrets]\nJIRA_TOKEN = {{command = ["touch", "{canary}"]}}\n')
    with pytest.raises(SecretUnavailableError) as caught:
        resolve("jira_get_issue", ["JIRA_TOKEN"], {"other_tool": ("JIRA_TOKEN",)})
    assert caught.value.name == "JIRA_TOKEN"
    assert "[secrets.grants] jira_get_issue" in caught.value.message
    assert not canary.exists()  # a refused secret's command never runs


def test_a_granted_secret_missing_from_the_file_names_the_file_and_key() -> None:
    secrets_file('[secrets]\nOTHER = "v"\n')
    with pytest.raises(SecretUnavailableError) as caught:
        resolve("t", ["JIRA_TOKEN"], {"t": ("JIRA_TOKEN",)})
    assert f'add JIRA_TOKEN = "..." under [secrets] in {default_secrets_path()}' in caught.value.message


def test_a_granted_secret_without_any_secrets_file_is_unavailable() -> None:
    with pytest.raises(SecretUnavailableError, match="which does not exist"):
        resolve("t", ["JIRA_TOKEN"], {"t": ("JIRA_TOKEN",)})


def test_an_unusable_secrets_file_makes_the_secret_unavailable_with_the_reason() -> None:
    secrets_file(f'[secrets]\nJIRA_TOKEN = "{VALUE}"\n', 0o644)
    with pytest.raises(SecretUnavailableError) as caught:
        resolve("t", ["JIRA_TOKEN"], {"t": ("JIRA_TOKEN",)})
    assert "chmod 600" in caught.value.message and VALUE not in caught.value.message


def test_granted_secrets_resolve_to_their_values_and_commands_run_only_then(tmp_path: Path) -> None:
    secrets_file(f'[secrets]\nA = "{VALUE}"\nB = {{command = ["echo", "from-command"]}}\nC = "not-asked"\n')
    assert resolve("t", ["A", "B"], {"t": ("A", "B", "C")}) == {"A": VALUE, "B": "from-command"}
    assert resolve("t", [], {}) == {}


def test_a_secret_may_not_take_the_name_of_a_variable_the_sandbox_sets() -> None:
    with pytest.raises(SecretUnavailableError, match="variable the sandbox sets itself"):
        resolve("t", ["PATH"], {"t": ("PATH",)})


def test_the_policy_grants_only_valid_names() -> None:
    assert parse_policy('[secrets.grants]\njira_get_issue = ["JIRA_TOKEN"]\n').secrets.grants == {
        "jira_get_issue": ("JIRA_TOKEN",)
    }
    with pytest.raises(PolicyError, match="not a secret name"):
        parse_policy('[secrets.grants]\njira_get_issue = ["jira token"]\n')
    with pytest.raises(PolicyError, match="not a valid tool name"):
        parse_policy('[secrets.grants]\n"a.b" = ["X"]\n')
    with pytest.raises(PolicyError, match=r"unknown key secrets\.values"):
        parse_policy('[secrets]\nvalues = {X = "v"}\n')  # values never live in the policy


# -- redaction ------------------------------------------------------------------------------------


def test_every_encoded_form_of_a_value_is_redacted() -> None:
    raw = VALUE.encode()
    forms = [
        VALUE,
        base64.b64encode(raw).decode(),
        base64.b64encode(raw).decode().rstrip("="),
        base64.urlsafe_b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
        quote(VALUE),
        quote(VALUE, safe=""),
        quote_plus(VALUE),
    ]
    redactor = Redactor({"JIRA_TOKEN": VALUE})
    for form in forms:
        assert form in encoded_forms(VALUE)
        assert redactor.text(f"<{form}>") == "<[secret:JIRA_TOKEN]>", form


def test_redaction_reaches_every_string_of_json_and_keeps_bytes_that_are_not_utf8() -> None:
    redactor = Redactor({"A": "alpha-value", "B": "alpha-value-longer"})
    assert redactor.json({"alpha-value": ["x alpha-value-longer y", 3, None]}) == {
        "[secret:A]": ["x [secret:B] y", 3, None]
    }
    assert redactor.data(b"\xff alpha-value \xfe") == b"\xff [secret:A] \xfe"
    assert not Redactor({}) and Redactor({}).text("alpha-value") == "alpha-value"
    assert "alpha" not in repr(redactor)


def test_secret_entries_never_show_their_value() -> None:
    assert VALUE not in repr(SecretEntry("X", value=VALUE)) and VALUE not in str(SecretEntry("X", value=VALUE))


def test_a_run_request_never_shows_its_secrets_in_its_repr() -> None:
    from tooldir.sandbox import RunRequest

    request = RunRequest(None, b"", 1.0, {"LANG": "C"}, False, {"JIRA_TOKEN": VALUE})  # type: ignore[arg-type]
    assert VALUE not in repr(request) and "LANG" in repr(request)
