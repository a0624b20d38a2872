"""Secrets that reach only their tool (DESIGN §11).

A tool declares names (``execute.secrets = ["JIRA_TOKEN"]``); the user keeps the values in
``$XDG_CONFIG_HOME/tooldir/secrets.toml``::

    [secrets]
    JIRA_TOKEN = "..."                              # a value
    GITHUB_TOKEN = {command = ["pass", "show", "gh"]}  # or a command run at call time, no shell

and grants them per tool in the user's policy (``[secrets.grants] jira_get_issue = ["JIRA_TOKEN"]``).

The stages, pure first:

- :func:`parse_secrets` -- the file's text to :class:`SecretEntry` values (no I/O);
- :func:`granted` -- which declared names the policy grants a tool (no I/O);
- :class:`Redactor` -- replaces each value (raw, base64, URL-encoded) by ``[secret:NAME]`` (no I/O);
- :func:`read_secrets_file`, :func:`run_secret_command`, :func:`resolve` -- the I/O edge, called by
  the registry after validation, permission and hooks, just before the sandbox is released.

A value is never put in an exception message, a ``repr`` or a log line.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import selectors
import shutil
import signal
import subprocess
import time
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._internal.smallfile import Unreadable, read_private
from ..errors import ConfigError

SECRETS_FILE_NAME = "secrets.toml"
#: The secrets file is at most this large.
MAX_SECRETS_FILE_BYTES = 256 * 1024
#: A secret's value (from the file or its command) is at most this many bytes of UTF-8.
MAX_SECRET_BYTES = 16 * 1024
#: A secret's ``command`` must finish within this many seconds, or the call is refused.
COMMAND_TIMEOUT_S = 10.0
#: Longest command argv (entries) and entry.
MAX_COMMAND_ARGS = 64
MAX_COMMAND_ARG_CHARS = 1024
#: Variables the sandbox sets itself; a secret may not take their name.
RESERVED_ENV = frozenset({"PATH", "HOME", "TMPDIR", "LANG", "PYTHONDONTWRITEBYTECODE"})

NAME_RE = re.compile(r"[A-Z][A-Z0-9_]{0,127}")


class SecretsFileError(ConfigError):
    """The secrets file cannot be used: ``path`` and why (never a value)."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path

    def diagnostics(self) -> str:
        return f"secrets file {self.path}: {self.message}"


class SecretUnavailableError(Exception):
    """A declared secret cannot be given to the tool: ``name`` and a message naming what to set."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message


@dataclass(frozen=True, slots=True)
class SecretEntry:
    """One ``[secrets]`` entry: a ``value`` or a ``command`` (argv, no shell). Its repr hides the value."""

    name: str
    value: str | None = field(default=None, repr=False)
    command: tuple[str, ...] | None = None

    def __repr__(self) -> str:
        how = "value=<hidden>" if self.value is not None else f"command={list(self.command or ())!r}"
        return f"SecretEntry({self.name!r}, {how})"


def default_secrets_path() -> Path:
    """``$XDG_CONFIG_HOME/tooldir/secrets.toml`` (beside the user's policy file)."""
    from ..policy import config_home

    return Path(config_home()) / "tooldir" / SECRETS_FILE_NAME


# ---------------------------------------------------------------------------------------------
# pure


def parse_secrets(text: str, *, path: str = "<secrets>") -> dict[str, SecretEntry]:
    """The entries of a secrets file's text. Only a ``[secrets]`` table is allowed; each key a
    secret name, each value a non-empty string or ``{command = [argv...]}``.

    Raises:
        SecretsFileError: naming the key and why (never the value).
    """
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise SecretsFileError("not valid TOML: nested too deeply", path=path) from None
    except tomllib.TOMLDecodeError as exc:
        raise SecretsFileError(f"not valid TOML: {_toml_where(exc)}", path=path) from None
    unknown = sorted(set(data) - {"secrets"})
    if unknown:
        raise SecretsFileError(f"unknown key {unknown[0]!r}: the file holds one [secrets] table", path=path)
    table = data.get("secrets", {})
    if not isinstance(table, dict):
        raise SecretsFileError("secrets must be a table ([secrets])", path=path)
    entries: dict[str, SecretEntry] = {}
    for name, raw in table.items():
        if NAME_RE.fullmatch(name) is None:
            raise SecretsFileError(
                f"secrets.{name!r}: a secret name is a capital letter, then capitals, digits or '_' "
                "([A-Z][A-Z0-9_]*, at most 128)",
                path=path,
            )
        entries[name] = _entry(name, raw, path)
    return entries


def _toml_where(exc: tomllib.TOMLDecodeError) -> str:
    # tomllib's message names a line and column, never the text it failed on
    found = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
    return f"line {found.group(1)}, column {found.group(2)}" if found else "the file cannot be parsed"


def _entry(name: str, raw: Any, path: str) -> SecretEntry:
    key = f"secrets.{name}"
    if isinstance(raw, str):
        check_value(name, raw, where=f"{key} in {path}", exc=lambda m: SecretsFileError(m, path=path))
        return SecretEntry(name, value=raw)
    if isinstance(raw, dict):
        extra = sorted(set(raw) - {"command"})
        if extra or "command" not in raw:
            raise SecretsFileError(
                f"{key}: a table holds exactly one key, command = [argv...]"
                + (f" (unknown key {extra[0]!r})" if extra else ""),
                path=path,
            )
        argv = raw["command"]
        if (
            not isinstance(argv, list)
            or not argv
            or len(argv) > MAX_COMMAND_ARGS
            or not all(isinstance(a, str) and 0 < len(a) <= MAX_COMMAND_ARG_CHARS and "\0" not in a for a in argv)
        ):
            raise SecretsFileError(
                f"{key}.command: an array of 1 to {MAX_COMMAND_ARGS} non-empty strings (argv, run without a shell)",
                path=path,
            )
        first = argv[0]
        if "/" in first and not first.startswith("/"):
            raise SecretsFileError(
                f"{key}.command: argv[0] {first!r} is a relative path; use a bare program name (looked up in PATH) "
                "or an absolute path",
                path=path,
            )
        return SecretEntry(name, command=tuple(argv))
    raise SecretsFileError(f"{key}: a string or {{command = [argv...]}}, not {type(raw).__name__}", path=path)


def check_value(name: str, value: str, *, where: str, exc: Any) -> None:
    """Refuse a value no environment variable can carry: empty, NUL, or over the size limit."""
    if not value:
        raise exc(f"{where}: the value of {name} is empty")
    if "\0" in value:
        raise exc(f"{where}: the value of {name} holds a NUL character (an environment variable cannot)")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_SECRET_BYTES:
        raise exc(f"{where}: the value of {name} is over {MAX_SECRET_BYTES} bytes")


def granted(tool: str, declared: Sequence[str], grants: Mapping[str, Sequence[str]]) -> tuple[list[str], list[str]]:
    """(granted, refused): which of ``declared`` the policy's ``[secrets.grants]`` gives ``tool``."""
    allowed = set(grants.get(tool, ()))
    ok = [n for n in declared if n in allowed]
    return ok, [n for n in declared if n not in allowed]


def describe(
    tool: str,
    declared: Sequence[str],
    grants: Mapping[str, Sequence[str]],
    entries: Mapping[str, SecretEntry] | None,
    problem: str | None = None,
) -> list[dict[str, Any]]:
    """What ``tooldir show`` says of each declared secret, never its value: ``granted`` (by the
    policy) and ``value`` -- ``"set"`` (in the secrets file), ``"command"`` (run at call time),
    ``"missing"``, or why the file cannot be used (``problem``)."""
    ok, _ = granted(tool, declared, grants)
    out: list[dict[str, Any]] = []
    for name in declared:
        if problem is not None:
            value = f"unusable: {problem}"
        elif entries is None or name not in entries:
            value = "missing"
        else:
            value = "command" if entries[name].command is not None else "set"
        out.append({"name": name, "granted": name in ok, "value": value})
    return out


def encoded_forms(value: str) -> list[str]:
    """The forms of ``value`` that are redacted: itself, base64 (standard and URL-safe, with and
    without padding) of its UTF-8 bytes, and URL-encoded (``quote`` with and without '/' safe,
    ``quote_plus``). Longest first, each once."""
    from urllib.parse import quote, quote_plus

    raw = value.encode("utf-8", "surrogatepass")
    forms = {value}
    for encoded in (base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()):
        forms |= {encoded, encoded.rstrip("=")}
    forms |= {quote(value, safe=""), quote(value), quote_plus(value), quote_plus(value, safe="")}
    forms.discard("")
    return sorted(forms, key=lambda f: (-len(f), f))


class Redactor:
    """Replaces every value given (and its encoded forms, :func:`encoded_forms`) by ``[secret:NAME]``."""

    __slots__ = ("_names", "_pattern")

    def __init__(self, values: Mapping[str, str]) -> None:
        by_form: dict[str, str] = {}
        for name, value in sorted(values.items()):
            for form in encoded_forms(value):
                by_form.setdefault(form, name)
        forms = sorted(by_form, key=lambda f: (-len(f), f))
        self._names = by_form
        self._pattern = re.compile("|".join(re.escape(f) for f in forms)) if forms else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def __repr__(self) -> str:
        return f"Redactor({sorted(set(self._names.values()))!r})"

    def text(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: f"[secret:{self._names[m.group(0)]}]", text)

    def data(self, bytes_: bytes) -> bytes:
        """``text`` for output bytes: decoded with surrogateescape, so bytes that are not UTF-8 stay as they were."""
        if self._pattern is None:
            return bytes_
        return self.text(bytes_.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")

    def json(self, value: Any) -> Any:
        """Every string (keys too) of a plain JSON value, redacted."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list | tuple):
            return [self.json(v) for v in value]
        if isinstance(value, Mapping):
            return {self.text(str(k)): self.json(v) for k, v in value.items()}
        return value


# ---------------------------------------------------------------------------------------------
# I/O: the file, the commands


def read_secrets_file(path: str | os.PathLike[str] | None = None) -> dict[str, SecretEntry] | None:
    """The entries of the user's secrets file, or None when it does not exist.

    It must be a regular file (opened without blocking: a FIFO or device is refused, never waited
    on), owned by the user, mode 0600 or stricter (nothing for group or others), at most
    :data:`MAX_SECRETS_FILE_BYTES`, valid UTF-8, in folders nobody else can write.

    Raises:
        SecretsFileError: naming the file and why.
    """
    file = Path(path) if path is not None else default_secrets_path()
    where = str(file)
    try:
        data = read_private(file, MAX_SECRETS_FILE_BYTES, what="a secrets file", secret=True, folder="trusted")
    except Unreadable as exc:
        if exc.why == "it is a symbolic link":
            raise SecretsFileError("it is a symbolic link; keep the secrets file a regular file", path=where) from None
        raise SecretsFileError(f"cannot read it: {exc.why}" if exc.os_error else exc.why, path=where) from None
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SecretsFileError(f"invalid UTF-8 at byte {exc.start}", path=where) from None
    return parse_secrets(text, path=where)


def run_secret_command(name: str, argv: Sequence[str], *, timeout_s: float = COMMAND_TIMEOUT_S) -> str:
    """The value a secret's command prints on stdout (one trailing newline removed), run without
    a shell, stdin closed, in its own process group (killed whole at the timeout or when it prints
    more than :data:`MAX_SECRET_BYTES`), from the secrets file's folder.

    Raises:
        SecretUnavailableError: it cannot start, fails, times out, prints too much or nothing.
    """
    shown = " ".join(argv)
    program = argv[0] if "/" in argv[0] else shutil.which(argv[0])
    if program is None or not os.path.isabs(program):
        raise SecretUnavailableError(name, f"the command of secret {name} ({shown}): {argv[0]!r} is not found in PATH")
    cwd = default_secrets_path().parent
    try:
        proc = subprocess.Popen(  # the user's own argv from their secrets file, no shell
            [program, *argv[1:]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            cwd=cwd if cwd.is_dir() else "/",
            close_fds=True,
        )
    except OSError as exc:
        raise SecretUnavailableError(
            name, f"the command of secret {name} ({shown}) cannot start: {exc.strerror or exc}"
        ) from None
    out, err, why = _collect(proc, timeout_s)
    if why is not None:
        raise SecretUnavailableError(name, f"the command of secret {name} ({shown}) {why}")
    if proc.returncode != 0:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        detail = f": {tail[0][:200]}" if tail[0] else ""
        raise SecretUnavailableError(
            name, f"the command of secret {name} ({shown}) exited with {proc.returncode}{detail}"
        )
    try:
        value = out.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretUnavailableError(name, f"the command of secret {name} ({shown}) printed invalid UTF-8") from None
    value = value.removesuffix("\n").removesuffix("\r")
    check_value(
        name, value, where=f"the command of secret {name} ({shown})", exc=lambda m: SecretUnavailableError(name, m)
    )
    return value


def _collect(proc: subprocess.Popen[bytes], timeout_s: float) -> tuple[bytes, bytes, str | None]:
    """stdout and stderr of ``proc`` (each bounded), waiting on its pipes and on its exit (a
    pidfd: the exited leader stays unreaped, so its process group cannot be reused) until both
    pipes end or the deadline. The whole process group is killed when the leader exits (nothing it
    started stays behind) or on a limit; then the leader is reaped."""
    assert proc.stdout is not None and proc.stderr is not None  # noqa: S101 - both are pipes
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    buffers = {out_fd: bytearray(), err_fd: bytearray()}
    why: str | None = None
    deadline = time.monotonic() + timeout_s
    pidfd = os.pidfd_open(proc.pid)
    try:
        with selectors.DefaultSelector() as sel:
            for fd in (out_fd, err_fd, pidfd):
                sel.register(fd, selectors.EVENT_READ)
            while len(sel.get_map()) > 0 and why is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    why = f"did not finish within {timeout_s:g} s"
                    break
                for key, _ in sel.select(left):
                    if key.fd == pidfd:  # the leader exited: end its group, read what is left
                        sel.unregister(pidfd)
                        _kill_group(proc)
                        continue
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fd)
                    elif len(buffers[key.fd]) + len(chunk) > MAX_SECRET_BYTES:
                        why = f"printed more than {MAX_SECRET_BYTES} bytes"
                        break
                    else:
                        buffers[key.fd] += chunk
        _kill_group(proc)  # unreaped until the wait below: the group id is still its own
    finally:
        os.close(pidfd)
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    return bytes(buffers[out_fd]), bytes(buffers[err_fd]), why


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def resolve(
    tool: str,
    declared: Sequence[str],
    grants: Mapping[str, Sequence[str]],
    *,
    secrets_file: str | os.PathLike[str] | None = None,
    run_commands: bool = True,
) -> dict[str, str]:
    """The values of the secrets ``tool`` declares, each granted by the policy and present in the
    secrets file (a command is run now; with ``run_commands=False`` a command secret is
    unavailable instead). Nothing is read or run when a declared name is not granted.

    Raises:
        SecretUnavailableError: the first name that cannot be given, and the key to set.
    """
    if not declared:
        return {}
    for name in declared:
        if name in RESERVED_ENV:
            raise SecretUnavailableError(name, f"secret {name} takes the name of a variable the sandbox sets itself")
    ok, refused = granted(tool, declared, grants)
    if refused:
        name = refused[0]
        raise SecretUnavailableError(
            name,
            f"secret {name} is not granted to {tool}: add it to [secrets.grants] {tool} = [...] in your policy file",
        )
    file = Path(secrets_file) if secrets_file is not None else default_secrets_path()
    try:
        entries = read_secrets_file(file)
    except SecretsFileError as exc:
        raise SecretUnavailableError(declared[0], f"secret {declared[0]} is unavailable: {exc.diagnostics()}") from None
    missing = [n for n in ok if entries is None or n not in entries]
    if missing:
        name = missing[0]
        where = "which does not exist" if entries is None else "which has no such key"
        raise SecretUnavailableError(
            name, f'secret {name} is not set: add {name} = "..." under [secrets] in {file} ({where})'
        )
    assert entries is not None  # noqa: S101 - missing is empty
    values: dict[str, str] = {}
    if not run_commands:
        for name in ok:
            if entries[name].command is not None:
                raise SecretUnavailableError(
                    name, f"secret {name} is given by a command, and this registry runs no secret commands"
                )
    for name in ok:
        entry = entries[name]
        values[name] = entry.value if entry.value is not None else run_secret_command(name, entry.command or ())
    return values


def declared_names(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` once each, in their order."""
    return tuple(dict.fromkeys(names))
