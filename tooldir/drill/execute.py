"""The acting half of a drill: user and attacker steps, the load, tool calls through the Registry,
and the audit log. Everything goes through tooldir's public surfaces (the loader, ``tooldir ...``
commands, ``Registry.call``, ``tooldir.run.audit.verify``); machinery a build lacks raises
:class:`NotRunnableError` so the drill fails with "not runnable yet".
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import resource
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..model import BuiltinSpec
from ..policy import Policy, load_policy, read_policy
from ..snapshot.loader import Loader, make_config
from ..snapshot.store import Snapshot
from .cliargs import vet
from .plant import (
    DRILL_ENV_PREFIX,
    Arena,
    NotRunnableError,
    ScenarioError,
    UnavailableError,
    apply_plant,
)

if TYPE_CHECKING:
    from . import CallSpec, Step

_T = TypeVar("_T")


def given(value: _T | None) -> _T:
    """A field the scenario validator already required for this kind."""
    if value is None:
        raise ValueError("a required scenario field is missing (the validator should have caught this)")
    return value


def need(module: str, attribute: str) -> Any:
    """``tooldir.<module>.<attribute>``, or NotRunnableError naming what is missing."""
    try:
        mod = importlib.import_module(f"tooldir.{module}")
    except ImportError as exc:
        raise NotRunnableError(f"tooldir.{module} does not exist in this build ({exc})") from None
    if not hasattr(mod, attribute):
        raise NotRunnableError(f"tooldir.{module}.{attribute} does not exist in this build")
    return getattr(mod, attribute)


# ---------------------------------------------------------------------------------------------
# Loading


def raw_user_policy() -> Policy:
    """The user's policy.toml of the arena as written (by the scenario)."""
    policy, _ = load_policy(None)
    return policy


def user_policy() -> Policy:
    """The user's policy as the drill applies it: under the drill's ceiling (:func:`ceiling`)."""
    return ceiling(raw_user_policy())


def ceiling(policy: Policy) -> Policy:
    """Clamp what a scenario's policy may grant its tools: no network but through tooldir's proxy
    to loopback (a ``sandbox.network_allow`` of loopback address literals and ``localhost``
    only), no unsandboxed runs, and only the drill's own environment variables. A scenario is
    downloaded content; its policy never loosens the drill's own limits."""
    allow = _loopback_ceiling(policy)
    sandbox = policy.sandbox.model_copy(
        update={
            "network": allow is not None,
            "network_allow": allow,
            "network_unrestricted": False,
            "unsafe_allow_unsandboxed": False,
            "env_allow": tuple(name for name in policy.sandbox.env_allow if name.startswith(DRILL_ENV_PREFIX)),
        }
    )
    return policy.model_copy(update={"sandbox": sandbox})


def _loopback_ceiling(policy: Policy) -> tuple[str, ...] | None:
    """The loopback entries of the scenario's ``sandbox.network_allow`` when it turns the network
    on with one; None (no network) otherwise."""
    if not policy.sandbox.network or policy.sandbox.network_allow is None:
        return None
    return tuple(e for e in policy.sandbox.network_allow if _loopback_entry(e))


def _loopback_entry(text: str) -> bool:
    import ipaddress

    from ..netallow import parse_entry

    entry = parse_entry(text)  # the policy already parsed it
    if entry.kind == "address":
        return ipaddress.ip_address(entry.host).is_loopback
    return entry.kind == "name" and entry.host == "localhost"


def clamped(policy: Policy) -> list[str]:
    """The keys of ``policy`` that :func:`ceiling` takes back (for the drill's report)."""
    keys = []
    if policy.sandbox.network and policy.sandbox.network_allow is None:
        keys.append("sandbox.network")
    if policy.sandbox.network_unrestricted:
        keys.append("sandbox.network_unrestricted")
    keys += [f"sandbox.network_allow {e}" for e in policy.sandbox.network_allow or () if not _loopback_entry(e)]
    if policy.sandbox.unsafe_allow_unsandboxed:
        keys.append("sandbox.unsafe_allow_unsandboxed")
    keys += [f"sandbox.env_allow {name}" for name in policy.sandbox.env_allow if not name.startswith(DRILL_ENV_PREFIX)]
    return keys


def load(builtins: tuple[BuiltinSpec, ...], *, host: bool = False) -> Snapshot:
    """Exactly what ``tooldir scan`` does inside the project with no options: default user root,
    the user's policy and state (from the isolated HOME / XDG environment), the cwd as project.
    ``host``: what a host embedding the library loads, ``make_config(project=".")`` with the
    library's own defaults for everything else (host:defaults)."""
    if host:
        config = make_config(project=".", builtins=builtins)
    else:
        effective = read_policy(None)  # as the CLI reads it: under the (arena's) managed policy
        config = make_config(
            project=".",
            user_dirs=None,
            policy=ceiling(effective.policy),
            state_dir=None,
            builtins=builtins,
            policy_file=effective.file,
            policy_overridden=effective.overridden,
        )
    snapshot = Loader(config).load()
    if any(t.server is not None for t in snapshot.tools):  # MCP server packages: their last listings
        from ..upstream import extend_snapshot, load_upstream_state

        snapshot = extend_snapshot(snapshot, load_upstream_state(config.state_dir), config.policy, builtins)
    return snapshot


def high_water_key(arena: Arena) -> str:
    """The fingerprint key of the user's signature high-water marks (versions.json)."""
    from ..state import HIGH_WATER

    return str((arena.state / HIGH_WATER).relative_to(arena.base))


def high_water(arena: Arena) -> dict[tuple[str, str], int] | None:
    """The user's high-water marks now; None when tooldir cannot read them (the state check then
    reports any change of the file)."""
    from ..errors import StateError
    from ..state import load_high_water

    try:
        return load_high_water(arena.state)
    except StateError:
        return None


# ---------------------------------------------------------------------------------------------
# Steps


def apply_step(
    step: Step, arena: Arena, builtins: tuple[BuiltinSpec, ...], where: str, runtime: Runtime | None
) -> None:
    """One step; a path it needs that is not there is a scenario error naming the step, and so
    is anything it would do outside the arena (an :class:`ArenaEscapeError`). Afterwards every
    link the scenario planted must still lead inside the arena."""
    try:
        _apply_step(step, arena, builtins, where, runtime)
        arena.fs.check_links(where)
    except OSError as exc:
        target = step.path or step.tool or step.into or ""
        raise ScenarioError(
            f"{where}: {target}: {exc.strerror or exc} (does the scenario plant it?)", path=arena.scenario
        ) from None


def _apply_step(
    step: Step, arena: Arena, builtins: tuple[BuiltinSpec, ...], where: str, runtime: Runtime | None
) -> None:
    do = step.do
    fs = arena.fs
    if do == "reload":
        if runtime is None:
            raise ScenarioError(f"{where}: 'reload' only makes sense after the load", path=arena.scenario)
        runtime.reload()
    elif do == "approve":
        approve(arena, arena.resolve(given(step.tool), where), builtins)
    elif do == "pin":
        pin(arena, arena.resolve(given(step.tool), where), builtins, where)
    elif do == "forge-approval":
        into = arena.resolve(given(step.into), where)
        _require_no_link(arena, into, where)  # tooldir's own writer puts approvals.json there
        approve(arena, arena.resolve(given(step.tool), where), builtins, state_dir=into)
    elif do == "write":
        target = arena.resolve(given(step.path), where)
        fs.write(target, arena.payload(step.text, step.hex), where, keep_times=step.keep_times)
    elif do == "remove":
        fs.remove(arena.resolve(given(step.path), where), where)
    elif do == "copy":
        source, target = arena.resolve(given(step.path), where), arena.resolve(given(step.to), where)
        fs.write(target, fs.read(source, where), where)
    elif do == "replace":
        target = arena.resolve(given(step.path), where)
        data = fs.read(target, where)
        old = arena.substitute(given(step.old)).encode()
        if old not in data:
            raise ScenarioError(f"{where}: {step.old!r} does not occur in {step.path}", path=arena.scenario)
        new = data.replace(old, arena.substitute(step.text or "").encode(), 1)
        fs.write(target, new, where, keep_times=step.keep_times)
    elif do == "corrupt":
        corrupt(arena, given(step.path), given(step.line), given(step.column), where)
    elif do == "delete-line":
        target = arena.resolve(given(step.path), where)
        lines = fs.read(target, where).splitlines(keepends=True)
        if given(step.line) > len(lines):
            raise ScenarioError(f"{where}: {step.path} has no line {step.line}", path=arena.scenario)
        del lines[given(step.line) - 1]
        fs.write(target, b"".join(lines), where)
    elif do == "truncate":
        target = arena.resolve(given(step.path), where)
        lines = fs.read(target, where).splitlines(keepends=True)
        if given(step.line) > len(lines):
            raise ScenarioError(f"{where}: {step.path} has no line {step.line}", path=arena.scenario)
        fs.write(target, b"".join(lines[: given(step.line) - 1]), where)
    elif do == "tamper-line":
        tamper_line(arena, step, where)
    elif do == "policy":
        write_policy(arena, given(step.text), where)
    elif do == "tooldir":
        out = run_cli(arena, [arena.substitute(a) for a in step.args], step.exit, where)
        check_stdout(step, out, arena, where)
    elif do == "sign-ssh":
        sign_ssh(arena, given(step.key), given(step.path), step.namespace, where)
    elif do == "add-key":
        add_session_key(arena.substitute(given(step.text)), arena.secret, where, arena)
    elif do == "setenv":  # e.g. a server's declared variable changes (only the drill's own names)
        name, _, value = given(step.text).partition("=")
        if not name.startswith(DRILL_ENV_PREFIX) or not value:
            raise ScenarioError(
                f"{where}: setenv takes NAME=value, NAME starting {DRILL_ENV_PREFIX}", path=arena.scenario
            )
        os.environ[name] = arena.substitute(value)
    elif do == "python-m-tooldir":
        out = run_python_m(
            arena, [arena.substitute(a) for a in step.args], step.exit, where, max_rss_mb=step.max_rss_mb
        )
        check_stdout(step, out, arena, where)
    elif do == "forge-index":
        forge_index(arena, arena.resolve(given(step.tool), where), where)
    elif do == "forge-scanmemo":
        forge_scanmemo(arena, [arena.substitute(a) for a in step.args], where)
    else:
        apply_plant(given(step.plant), arena, where)


def _require_no_link(arena: Arena, path: Path, where: str) -> None:
    """``path`` (which tooldir itself will open by name) is reached without a link, and is no link."""
    st = arena.fs.lstat(path, where)
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise arena.fs.escape(where, path, "is a symlink; tooldir would follow it")


def forge_index(arena: Arena, package: Path, where: str) -> None:
    """The attacker rewrites the user's content index entry of ``package``: it gets the package's
    current stats and a read time far enough in the past that it is not racily clean, while its
    digest, files and manifest stay what the index recorded (an attacker who can write user state).
    With no entry yet, one is written for the package as it is now, in exactly the index file and
    format the load would read (so a later forge-index step can keep that content's digest)."""
    from dataclasses import replace

    from ..read.index import decode, encode, entry_from_candidate, header_for, index_path, stat_key
    from ..read.validate import validate_package

    config = make_config(project=".", user_dirs=None, policy=user_policy(), state_dir=None)
    root = next((r for r in config.roots if r.path == str(package.parent)), None)
    if root is None:
        raise ScenarioError(f"{where}: {package} is not in a tool root of the load", path=arena.scenario)
    header = header_for(root, config.policy)
    path = index_path(config.state_dir, root)
    held = arena.fs.lstat(path, where)
    entries = decode(arena.fs.read(path, where), header).entries if held is not None else {}
    entry = entries.get(package.name)
    if entry is None:
        from ..read.discover import scan_one

        scan = scan_one(root, package.name, config.policy.limits)
        entry = entry_from_candidate(validate_package(scan, config.policy), scan, 0, os.geteuid())
        if entry is None:
            raise ScenarioError(f"{where}: {package} cannot be indexed (it does not scan cleanly)", path=arena.scenario)
    now = {rel: stat_key(os.lstat(package / rel if rel else package)) for rel, _ in entry.stats}
    newest = max(max(key[7], key[8]) for key in now.values())
    entries[package.name] = replace(entry, stats=tuple(now.items()), scanned_ns=newest + 3600 * 10**9)
    arena.fs.write(path, encode(header, entries), where, dir_mode=0o700)


def check_stdout(step: Step, out: str, arena: Arena, where: str) -> None:
    """A ``tooldir`` step's ``stdout_includes`` / ``stdout_excludes``: what the user was shown,
    compared without whitespace, so that a line the console wrapped at its width (``COLUMNS``)
    still shows what it shows, and a value split across lines is still found."""
    shown = _unspaced(out)
    for text in step.stdout_includes:
        if _unspaced(arena.substitute(text)) not in shown:
            seen = " | ".join(out.replace(arena.secret, "{secret}").splitlines())[:800]  # what it did show
            raise ScenarioError(f"{where}: its output does not show {text!r}; it showed: {seen}", path=arena.scenario)
    for text in step.stdout_excludes:
        if _unspaced(arena.substitute(text)) in shown:
            raise ScenarioError(f"{where}: its output shows {text!r}", path=arena.scenario)


def _unspaced(text: str) -> str:
    return "".join(text.split())


def forge_scanmemo(arena: Arena, args: list[str], where: str) -> None:
    """The attacker writes the user's scan memo (:mod:`tooldir.read.scanmemo`) for the scan ``args``:
    its key and stat table as that scan computes them now, a recording time far enough in the
    past that it is not racily clean, and the output (and exit status) the memo already held, or,
    with no memo yet, what that scan prints now (an attacker who can write user state)."""
    from .._internal.atomic import write_atomic
    from ..read import scanmemo

    cli = arena.command_line
    parsed = cli.parser(args).parse_args(args)
    if parsed.command != "scan":
        raise ScenarioError(f"{where}: forge-scanmemo takes a 'scan' command line", path=arena.scenario)
    vet(args, cli=cli, base=arena.base, cwd=arena.project, scenario=arena.scenario, where=where)
    with contextlib.redirect_stdout(io.StringIO()):  # as run_cli runs the scan: stdout is no terminal
        keyed = cli.scan_memo_request(parsed)
    if keyed is None:
        raise ScenarioError(f"{where}: 'tooldir {' '.join(args)}' has no scan memo", path=arena.scenario)
    req, key, dists = keyed
    held = scanmemo.read(req.path)
    memo = scanmemo.decode(held) if held is not None else None
    if memo is not None:
        text, status = memo.text, memo.status
    else:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            status = cli.main([*args, "--no-index"])
        text = out.getvalue()
    path = Path(req.path)
    arena.fs.makedirs(path.parent, where, mode=0o700)  # before the table: it records the state dir
    _require_no_link(arena, path, where)
    table = scanmemo.record(req, dists)
    if table is None:
        raise ScenarioError(f"{where}: the roots of 'tooldir {' '.join(args)}' cannot be recorded", path=arena.scenario)
    recorded = table.newest_ns + scanmemo.RACY_NS + 1
    write_atomic(path, scanmemo.encode(key, table, recorded, text=text, status=status, req=req))


def add_session_key(description: str, payload: str, where: str, arena: Arena) -> None:
    """The user has a ``user`` key (payload: the drill secret) in their session keyring -- a fresh
    session keyring if the inherited one is not theirs. It expires by itself after a minute."""
    import ctypes

    from ..sandbox.seccomp import machine_arch

    arch = machine_arch()
    if arch is None:
        raise UnavailableError("add-key: no syscall table for this machine's architecture")
    libc = ctypes.CDLL(None, use_errno=True)
    add_key, keyctl = arch.syscalls["add_key"], arch.syscalls["keyctl"]
    join_session, set_timeout, session = 1, 15, -3
    data = payload.encode()
    key = libc.syscall(add_key, b"user", description.encode(), data, len(data), session)
    if key < 0:
        libc.syscall(keyctl, join_session, None)
        key = libc.syscall(add_key, b"user", description.encode(), data, len(data), session)
    if key < 0:
        raise ScenarioError(
            f"{where}: add-key: the kernel refused ({os.strerror(ctypes.get_errno())})", path=arena.scenario
        )
    libc.syscall(keyctl, set_timeout, key, 60)


def corrupt(arena: Arena, path: str, line: int, column: int, where: str) -> None:
    """Change one character (to another letter or digit) in place: a bit of tampering."""
    target = arena.resolve(path, where)
    lines = arena.fs.read(target, where).split(b"\n")
    if line > len(lines) or column > len(lines[line - 1]):
        raise ScenarioError(f"{where}: {path} has no line {line} column {column}", path=arena.scenario)
    row = bytearray(lines[line - 1])
    row[column - 1] = ord("B") if row[column - 1] == ord("A") else ord("A")
    lines[line - 1] = bytes(row)
    arena.fs.write(target, b"\n".join(lines), where)


def tamper_line(arena: Arena, step: Step, where: str) -> None:
    """Rewrite one JSON line so that it keeps (or, duplicate-key, disputes) its parsed content:
    ``whitespace`` (a space after the first comma), ``reorder`` (keys in reverse order),
    ``escape`` (the first character of the ``tool`` value as a \\u escape), ``duplicate-key``
    (another ``"tool"`` key holding ``text``, default "innocent", put first: a parser keeping the
    first of two keys sees it, one keeping the last, like Python's, sees the original)."""
    path, line, how = given(step.path), given(step.line), given(step.how)
    target = arena.resolve(path, where)
    lines = arena.fs.read(target, where).splitlines(keepends=True)
    if line > len(lines):
        raise ScenarioError(f"{where}: {path} has no line {line}", path=arena.scenario)
    raw = lines[line - 1].rstrip(b"\n")
    if how == "whitespace":
        new = raw.replace(b",", b", ", 1)
    elif how == "reorder":
        record = json.loads(raw)
        new = json.dumps(dict(reversed(list(record.items()))), separators=(",", ":")).encode()
    elif how == "escape":
        at = raw.find(b'"tool":"') + len(b'"tool":"')
        if at < len(b'"tool":"') or raw[at] in b'"\\':
            raise ScenarioError(f"{where}: line {line} has no plain 'tool' value to escape", path=arena.scenario)
        new = raw[:at] + f"\\u{raw[at]:04x}".encode() + raw[at + 1 :]
    else:
        new = b'{"tool":' + json.dumps(step.text or "innocent").encode() + b"," + raw[1:]
    if new == raw:
        raise ScenarioError(f"{where}: tampering ({how}) left line {line} unchanged", path=arena.scenario)
    lines[line - 1] = new + b"\n"
    arena.fs.write(target, b"".join(lines), where)


def pin(arena: Arena, package: Path, builtins: tuple[BuiltinSpec, ...], where: str) -> None:
    """The user pins the package's current digest in their policy (``[pins] name = digest``)."""
    record = next((t for t in load(builtins).tools if t.path == str(package)), None)
    if record is None or record.digest is None:
        raise ScenarioError(f"{where}: cannot pin {package}: it does not load cleanly", path=arena.scenario)
    target = arena.config / "tooldir" / "policy.toml"
    held = arena.fs.lstat(target, where) is not None
    text = arena.fs.read(target, where).decode("utf-8") if held else ""
    line = f'{record.name} = "{record.digest}"\n'
    lines = text.splitlines(keepends=True)
    if "[pins]\n" in lines:
        lines.insert(lines.index("[pins]\n") + 1, line)
    else:
        lines += ["\n" if lines and not lines[-1].endswith("\n") else "", "[pins]\n", line]
    write_policy(arena, "".join(lines), where)


def write_policy(arena: Arena, text: str, where: str = "the scenario's policy") -> None:
    target = arena.config / "tooldir" / "policy.toml"
    arena.fs.write(target, arena.substitute(text).encode("utf-8"), where)


def write_managed_policy(arena: Arena, text: str) -> None:
    """The scenario's managed policy, where :func:`tooldir.drill.plant.isolated` points tooldir's
    managed path: ``etc/tooldir/policy.toml`` in the arena, outside every arena namespace, so no
    plant or step reaches it. Written by the runner (root, 0644, folders 0755)."""
    target = arena.managed_policy
    for folder in (target.parent.parent, target.parent):
        folder.mkdir(mode=0o755, exist_ok=True)
        folder.chmod(0o755)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(arena.substitute(text).encode("utf-8"))


def approve(arena: Arena, package: Path, builtins: tuple[BuiltinSpec, ...], state_dir: Path | None = None) -> None:
    """Record an approval of the package as it is now, in tooldir's own approval-state format
    (what ``tooldir allow`` records); with ``state_dir`` a forgery where the project can write."""
    from ..state import Approval, load_approvals, save_approvals

    record = next((t for t in load(builtins).tools if t.path == str(package)), None)
    if record is None or record.digest is None or (record.manifest is None and record.server is None):
        raise ScenarioError(f"cannot approve {package}: it does not load cleanly", path=arena.scenario)
    target = state_dir or arena.state
    approvals = load_approvals(target)
    approvals[str(package)] = Approval(
        path=str(package),
        name=record.name,
        digest=record.digest,
        time=datetime.now(UTC).isoformat(timespec="seconds"),
        files=tuple((f.path, f.sha256) for f in record.files),
    )
    save_approvals(target, approvals)


CLI_STEPS = frozenset(
    {
        "scan",
        "list",
        "show",
        "allow",
        "revoke",
        "lock",
        "keygen",
        "sign",
        "verify",
        "audit",
        "search",
        "catalog",
        "eval",
        "policy",
        "init",
        "adopt",
    }
)
"""The ``tooldir`` commands a step may run freely: none runs a tool (``adopt`` starts no server) (``serve``, ``watch`` would
use the scenario's policy outside the drill's ceiling; a tool runs through ``[[calls]]``)."""

RUN_STEP = "run"
"""``tooldir run`` as a step (e.g. a version used only through ``run``, for ``trust:rollback``):
allowed only with the user's own policy file, and only when that policy grants nothing the
drill's ceiling would take back, so the CLI's own policy load cannot loosen the drill."""

PROCESS_STEPS = frozenset({*CLI_STEPS, RUN_STEP, "serve"})
"""What a ``python-m-tooldir`` step may run: ``serve`` too (its stdin is closed, so it ends at
once; e.g. exec:entrypoint), under the same policy rule as ``run``."""

CEILING_STEPS = frozenset({RUN_STEP, "serve"})


def _check_run_step(arena: Arena, args: list[str], where: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            policy = arena.command_line.parser(args).parse_args(args).policy  # --pol, --policy=X: as tooldir reads it
        except SystemExit:  # tooldir stops at the same usage error; still, no spelling of --policy
            policy = next(
                (a for a in args if len(a.split("=")[0]) > 3 and "--policy".startswith(a.split("=")[0])), None
            )
    if policy is not None:
        raise ScenarioError(f"{where}: a 'tooldir {args[0]}' step may not pass --policy", path=arena.scenario)
    raw = raw_user_policy()
    if raw.secrets.grants:
        raise ScenarioError(
            f"{where}: a 'tooldir {args[0]}' step may not be used with [secrets.grants] in the policy "
            "(outside [[calls]] a secret's command would run on the host)",
            path=arena.scenario,
        )
    taken_back = clamped(raw)
    if taken_back:
        raise ScenarioError(
            f"{where}: a 'tooldir {args[0]}' step needs a policy within the drill's ceiling; "
            f"it grants {', '.join(taken_back)}",
            path=arena.scenario,
        )


def check_command(arena: Arena, args: list[str], where: str, allowed: frozenset[str]) -> None:
    """A ``tooldir`` command line a step may run: a command of ``allowed`` (``run`` and
    ``serve`` only within the drill's ceiling), and no option or path reaching outside the
    arena (:func:`tooldir.drill.cliargs.vet`)."""
    if args[0] not in arena.command_line.commands:
        raise NotRunnableError(f"'tooldir {args[0]}' does not exist in this build")
    if args[0] not in allowed:
        raise ScenarioError(
            f"{where}: 'tooldir {args[0]}' may not run as a step (allowed: {', '.join(sorted(allowed))}); "
            "tools run only through [[calls]], under the drill's ceiling",
            path=arena.scenario,
        )
    if args[0] in CEILING_STEPS:
        _check_run_step(arena, args, where)
    vet(args, cli=arena.command_line, base=arena.base, cwd=arena.project, scenario=arena.scenario, where=where)


def run_cli(arena: Arena, args: list[str], expected_exit: int, where: str) -> str:
    """Run one ``tooldir`` command in-process (the public CLI); returns its stdout."""
    check_command(arena, args, where, frozenset({*CLI_STEPS, RUN_STEP}))

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = arena.command_line.main(args)
        except SystemExit as exc:  # argparse usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    if code != expected_exit:
        if code == 2 and "invalid choice" in err.getvalue():
            raise NotRunnableError(f"'tooldir {args[0]}' does not exist in this build")
        detail = " ".join((err.getvalue() or out.getvalue()).split())[-300:]
        raise ScenarioError(
            f"{where}: 'tooldir {' '.join(args[:1])}' exited {code}, expected {expected_exit}: {detail}",
            path=arena.scenario,
        )
    return out.getvalue()


def run_python_m(
    arena: Arena, args: list[str], expected_exit: int, where: str, *, max_rss_mb: int | None = None
) -> str:
    """``python3 -m tooldir ARGS`` as a new process inside the project (the working directory),
    with the drill's environment and stdin closed; returns its stdout. With ``max_rss_mb``, the
    process's peak resident memory (its own ``ru_maxrss``, from ``wait4``) must stay within it."""
    import sys

    check_command(arena, args, where, PROCESS_STEPS)
    returncode, stdout, stderr, peak_kib = _run_measured([sys.executable, "-m", "tooldir", *args], arena.project)
    if returncode is None:
        raise ScenarioError(f"{where}: 'python3 -m tooldir {args[0]}' did not finish in 120 s", path=arena.scenario)
    if returncode != expected_exit:
        detail = " ".join((stderr or stdout).decode(errors="replace").split())[-300:]
        raise ScenarioError(
            f"{where}: 'python3 -m tooldir {args[0]}' exited {returncode}, expected {expected_exit}: {detail}",
            path=arena.scenario,
        )
    if max_rss_mb is not None and peak_kib > max_rss_mb * 1024:
        raise ScenarioError(
            f"{where}: 'python3 -m tooldir {args[0]}' peaked at {peak_kib // 1024} MiB resident, "
            f"over its bound of {max_rss_mb} MiB",
            path=arena.scenario,
        )
    return stdout.decode(errors="replace")


_MEASURE = """
import os, sys
report = int(sys.argv[1])
pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ, file_actions=[(os.POSIX_SPAWN_CLOSE, report)])
_, status, usage = os.wait4(pid, 0)
os.write(report, f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}".encode())
"""
"""Run argv[2:] and report its exit code and its own peak resident KiB on descriptor argv[1]. A child's
``ru_maxrss`` keeps the resident size its parent had when it forked (Linux carries it across
``execve``), so the target is started by this small process, never by the drill itself."""


def _run_measured(argv: list[str], cwd: Path, timeout: float = 120.0) -> tuple[int | None, bytes, bytes, int]:
    """Run ``argv`` with stdin closed and its output captured; ``(exit code, or None when it was
    killed at ``timeout`` seconds, stdout, stderr, its own peak resident KiB)``."""
    import sys

    report_r, report_w = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _MEASURE, str(report_w), *argv],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(report_w,),
            start_new_session=True,  # a timeout kills the target with its starter
        )
    finally:
        os.close(report_w)
    with os.fdopen(report_r, "rb") as report:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return None, b"", b"", 0
        code, _, peak = report.read().decode().partition(" ")
    if proc.returncode != 0 or not peak:
        raise RuntimeError(f"the measuring starter of {argv[0]} failed: {stderr.decode(errors='replace')[-300:]}")
    return int(code), stdout, stderr, int(peak)


def sign_ssh(arena: Arena, key: str, path: str, namespace: str, where: str) -> None:
    """``ssh-keygen -Y sign`` (the user's OpenSSH tooling) -> ``<path>.sig``."""
    program = shutil.which("ssh-keygen")
    if program is None:
        raise UnavailableError("needs ssh-keygen, which is not installed")
    fs = arena.fs
    key_path = arena.resolve(key, where)
    fs.chmod(key_path, 0o600, where)  # ssh-keygen refuses readable private keys
    target = arena.resolve(path, where)
    _require_no_link(arena, target, where)  # ssh-keygen opens both by name
    fs.clear(Path(f"{target}.sig"), where)  # the link itself, if one was planted there
    done = subprocess.run(
        [program, "-Y", "sign", "-f", str(key_path), "-n", namespace, str(target)],
        capture_output=True,
        timeout=30,
        check=False,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(arena.home)},
    )
    if done.returncode != 0:
        raise ScenarioError(
            f"{where}: ssh-keygen -Y sign failed: {done.stderr.decode(errors='replace')}", path=arena.scenario
        )


# ---------------------------------------------------------------------------------------------
# Calls


@dataclass(frozen=True, slots=True)
class CallOutcome:
    spec: CallSpec
    ok: bool
    content: Any
    code: str | None
    message: str | None
    audit_id: str | None
    leftovers: tuple[str, ...] = ()
    connections: int = 0
    seconds: float = 0.0
    most_live: int = 0  # with max_live_runs: most processes with the marker seen at once
    network: Any = None  # the connections of a run behind the egress proxy (CallResult.network)
    served: int = 0  # requests the scenario's HTTP server got during the call

    def shown(self) -> str:
        """Everything the call showed its caller: the content and the error message."""
        return json.dumps(self.content, ensure_ascii=False) + " " + (self.message or "")

    def describe(self) -> str:
        if self.ok:
            return f"call {self.spec.tool}: ok"
        return f"call {self.spec.tool}: {self.code}"


def sandbox_problem(policy: Policy) -> str | None:
    probe = need("sandbox", "probe")
    problem: str | None = probe(policy.sandbox)
    return problem


def memory_bound_problem(policy: Policy) -> str | None:
    """None when the sandbox bounds the memory of a process tree as a whole (a cgroup or a systemd
    scope) here, else why not (only per-process rlimits)."""
    choose_bound = need("sandbox.bubblewrap", "choose_bound")
    bound = choose_bound(policy.sandbox)
    return str(bound.why or "only per-process rlimits") if bound.kind == "rlimit+seccomp" else None


class Runtime:
    """What calls run against, wired as tooldir wires it (:func:`tooldir.toolbox.open_config`, the
    front door of ``tooldir run`` and ``serve``) over the drill's snapshot and under its ceiling:
    one store shared by the registry and, when a call goes through a conversation, one session;
    opened on first use. A scenario's secrets.toml is downloaded content: its commands never run
    on the host (``secret_commands=False``)."""

    def __init__(
        self,
        snapshot: Snapshot,
        state_dir: Path,
        builtins: tuple[BuiltinSpec, ...],
        handlers: Mapping[str, Callable[..., Any]] | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.state_dir = state_dir
        self.builtins = builtins
        self.handlers = dict(handlers or {})  # builtin name -> the handler the host registers
        self._box: Any = None
        self._session: Any = None
        self._upstream: Any = None  # the UpstreamHub of MCP server packages, as tooldir run/serve open it

    @property
    def box(self) -> Any:
        """The toolbox over the drill's snapshot (its registry, store and sessions)."""
        if self._box is None:
            open_config = need("toolbox", "open_config")
            builtin = need("toolbox", "Builtin")
            hosted = [
                builtin(spec.name, spec.input_schema, self.handlers[spec.name], spec.description, spec.risk)
                for spec in self.builtins
                if spec.name in self.handlers
            ]
            reserved = tuple(spec for spec in self.builtins if spec.name not in self.handlers)
            config = make_config(
                project=".", user_dirs=None, policy=user_policy(), state_dir=self.state_dir, builtins=reserved
            )
            snapshot = self.snapshot
            self._box = open_config(config, builtins=hosted, load=lambda _loader: snapshot, secret_commands=False)
            self._open_upstream()
        return self._box

    @property
    def store(self) -> Any:
        return self.box.store

    @property
    def registry(self) -> Any:
        return self.box.registry

    def _open_upstream(self) -> None:
        if any(t.server is not None for t in self.box.store.current.tools):
            open_upstream = need("upstream", "open_upstream")
            self._upstream = open_upstream(
                self.box.registry, policy=user_policy(), state_dir=self.state_dir, builtins=self.builtins
            )

    def _close_upstream(self) -> None:
        if self._upstream is not None:
            self._upstream.close()
            self._upstream = None

    def close(self) -> None:
        """Stop the MCP servers the calls started (if any), then the toolbox (its session, the
        registry's spare sandboxes)."""
        self._close_upstream()
        if self._box is not None:
            self._box.close()
            self._box = None
            self._session = None

    @property
    def session(self) -> Any:
        if self._session is None:
            # the scenario's builtins listed as a host lists them, usage priors kept nowhere
            self._session = self.box.session(builtins=self.builtins, state_dir=None, follower=None)
        return self._session

    def listing(self) -> Any:
        """What the session shows the model besides call results, as one ok result."""
        session = self.session
        content: dict[str, Any] = {fmt: session.tools(fmt) for fmt in need("deferred.catalog", "FORMATS")}
        content["directory"] = session.directory_text()
        content["deferred"] = session.anthropic_deferred_tools()
        content["tokens"] = session.token_report().to_json()
        content["defer"] = dict(session.defer_decision)
        if self._upstream is not None:  # what tooldir passes on of its MCP servers' instructions
            content["instructions"] = self._upstream.instructions()
        try:
            server = need("mcp.server", "ToolServer")
        except NotRunnableError:
            server = None  # a build without the MCP server: the rest is still checked
        if server is not None:
            content["mcp"] = server(store=self.store, registry=self.registry, session=session).list_tools_sync()
        result_cls = need("run.registry", "CallResult")
        return result_cls(ok=True, content=content, error=None, audit_id=None)

    def reload(self) -> None:
        """A fresh load published into the store (what the watcher does after a change); MCP
        servers the calls started are started afresh and listed again (as a new tooldir would)."""
        self.store.publish(load(self.builtins))
        if self._upstream is not None:
            self._close_upstream()
            self._open_upstream()


class Served:
    """The scenario's loopback HTTP server (``serve = true``): every GET is answered with
    ``served <path>`` and counted."""

    def __init__(self) -> None:
        import http.server

        counted = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with counted._lock:
                    counted.count += 1
                body = f"served {self.path}".encode("utf-8", "replace")
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        import threading

        self._lock = threading.Lock()
        self.count = 0
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="tooldir-drill-serve", daemon=True)
        self._thread.start()

    def requests(self) -> int:
        with self._lock:
            return self.count

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@contextlib.contextmanager
def served() -> Iterator[Served]:
    server = Served()
    try:
        yield server
    finally:
        server.close()


def call(runtime: Runtime, spec: CallSpec, arena: Arena) -> CallOutcome:
    before = arena.server.requests() if arena.server is not None else 0
    with contextlib.ExitStack() as stack:
        port = "0"
        listener = None
        if spec.listen:
            listener = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
            listener.setblocking(False)
            port = str(listener.getsockname()[1])
        text = json.dumps(spec.input)
        text = arena.substitute(text.replace("{port}", port) if listener is not None else text)
        target = runtime.session if spec.via == "session" else runtime.registry
        t0 = time.monotonic()
        most_live = 0
        if spec.via == "mcp":
            cancel_text = text if spec.cancel_input is None else arena.substitute(json.dumps(spec.cancel_input))
            result, most_live = _via_mcp(runtime, spec, json.loads(text), json.loads(cancel_text), arena.marker)
        elif spec.via == "listing":
            result = runtime.listing()
        else:
            if spec.disk_free is not None:
                stack.enter_context(_disk_free(runtime.state_dir, spec.disk_free))
            result = target.call(spec.name, json.loads(text))
        seconds = time.monotonic() - t0
        connections = _accepted(listener) if listener is not None else 0
    served_now = arena.server.requests() - before if arena.server is not None else 0
    leftovers = wait_for_no_processes(arena.marker, 5.0) if spec.check_processes else ()
    for pid in leftovers:  # the drill's own (escaped) descendants: stop them by id
        with contextlib.suppress(OSError):
            os.kill(int(pid), signal.SIGKILL)
    error = result.error
    return CallOutcome(
        spec,
        bool(result.ok),
        result.content,
        None if error is None else str(error.code),
        None if error is None else str(error.message),
        result.audit_id,
        leftovers,
        connections,
        seconds,
        most_live,
        getattr(result, "network", None),
        served_now,
    )


@contextlib.contextmanager
def _disk_free(state_dir: Path, free: int) -> Iterator[None]:
    """Only ``free`` bytes more for the audit log (and every other file) while the block runs:
    the soft RLIMIT_FSIZE at the log's size plus ``free``, restored afterwards."""
    try:
        size = os.stat(state_dir / "audit.jsonl").st_size
    except FileNotFoundError:
        size = 0
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    soft = size + free
    if old[1] != resource.RLIM_INFINITY:
        soft = min(soft, old[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)


def _via_mcp(runtime: Runtime, spec: CallSpec, arguments: Any, cancel_arguments: Any, marker: str) -> tuple[Any, int]:
    """``spec.cancelled`` call + cancel pairs, then the call, through the MCP front; (the call's
    result as a CallResult, the most processes with ``marker`` seen at once until all runs ended)."""
    import threading

    import anyio
    from anyio.from_thread import BlockingPortal

    front = need("mcp.server", "ToolServer")(store=runtime.store, registry=runtime.registry, session=runtime.session)
    most = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            most[0] = max(most[0], sum(1 for _ in _processes_with(marker)))
            stop.wait(0.02)

    async def attack() -> Any:
        async with BlockingPortal() as portal:
            front.attach(portal)
            try:
                for _ in range(spec.cancelled):
                    with anyio.CancelScope() as scope:
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(front.call_tool, spec.name, cancel_arguments)
                            await anyio.wait_all_tasks_blocked()  # the server holds it now
                            scope.cancel()  # notifications/cancelled
                result = await front.call_tool(spec.name, arguments)
                with anyio.move_on_after(spec.max_seconds):  # bounded: the check reports the time
                    while front.calls_running():
                        await anyio.sleep(0.02)
                return result
            finally:
                front.detach()

    sampler = threading.Thread(target=sample, name="tooldir-drill-live-runs", daemon=True)
    sampler.start()
    try:
        answer = anyio.run(attack)
    finally:
        stop.set()
        sampler.join()
    meta = answer.meta or {}
    error = None
    if answer.is_error:
        found = (answer.structured_content or {}).get("error", {})
        error = need("run.registry", "CallError")(str(found.get("code")), str(found.get("message")))
    content = answer.structured_content if not answer.is_error else None
    if content is None and not answer.is_error:
        content = "".join(getattr(c, "text", "") for c in answer.content)
    result = need("run.registry", "CallResult")(
        ok=not answer.is_error, content=content, error=error, audit_id=meta.get("tooldir/audit_id")
    )
    return result, most[0]


def accepted(listener: socket.socket) -> int:
    """Connections the non-blocking ``listener`` has accepted so far (each is closed)."""
    return _accepted(listener)


def _accepted(listener: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


def wait_for_no_processes(marker: str, bound_s: float) -> tuple[str, ...]:
    """Pids whose command line still holds ``marker`` after ``bound_s`` (a bounded poll)."""
    deadline = time.monotonic() + bound_s
    while True:
        found = tuple(_processes_with(marker))
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.05)


def _processes_with(marker: str) -> Iterator[str]:
    needle = marker.encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        if needle in cmdline:
            yield entry.name


def audit_lines(state_dir: Path) -> list[dict[str, Any]]:
    path = state_dir / need("run.audit", "AUDIT_FILE")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    lines = []
    for line in raw.splitlines():
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                lines.append(value)
    return lines


def verify_audit(state_dir: Path) -> tuple[bool, int | None, str | None, int]:
    """(ok, first broken line, reason, intact lines) from ``tooldir.run.audit.verify``."""
    verify = need("run.audit", "verify")
    report = verify(state_dir / need("run.audit", "AUDIT_FILE"))
    return bool(report.ok), report.broken_line, report.reason, int(report.lines)
