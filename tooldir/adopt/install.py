"""``tooldir adopt`` without ``--dry-run``: each stdio server entry of a client's configuration becomes
a pending MCP server package in the user root (issue 27 item 2).

For an entry that fetches a package at start (``npx -y pkg``, ``uvx pkg``, ``pipx run``, ``uv tool
run``), the exact version is resolved now and the package is installed *into* the package folder,
so its bytes (covered by the package digest, approved by ``tooldir allow``) hold the code:

* npm: ``npm install --prefix <pkg>/node NAME@X --ignore-scripts --no-bin-links --omit=dev``.
  ``--ignore-scripts`` because an install script would run now, on the host, as you, unsandboxed:
  the very thing adopting is meant to stop (a package that needs a build step then fails to start
  in the sandbox, and says so). ``--no-bin-links``: a package may hold no symbolic link.
* PyPI: ``python -m pip install --target <pkg>/site --only-binary=:all: --python-version M.m``
  for the ``python3`` the sandbox runs (wheels only: building an sdist runs its code now).

``server.command`` is then an allowed interpreter and a launcher file written here (``launch.mjs``
or ``launch.py``), which sets the entry's plain environment values, fills the secret arguments from
the environment and runs the package's bin or console script. ``adopted.json`` records where the
entry came from (file, pointer, a digest of the entry) -- never a secret's value -- so a second run
says ``already adopted`` and changes nothing, and ``--write-client-config`` knows which entries
tooldir now serves. Secrets in plain text (env values, whole arguments) move into ``secrets.toml``
with a grant for the package in the user's policy (``[secrets.grants]``); ``network`` is ``false``.
The package is written to a hidden staging folder beside the user root, checked with discovery's
own limits, and renamed into place whole: nothing half-written is ever a package.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from .._internal.atomic import write_atomic
from ..codes import DiagnosticCode
from ..model import Source
from ..policy import Limits
from ..read.discover import RootSpec, scan_one
from ..trust.assess import ADOPTED_MARKER
from .entries import ServerEntry, is_reference, looks_secret, package_name, secret_args

MARKER = ADOPTED_MARKER
"""The file of an adopted package that says where it came from (and makes it wait for approval)."""
INSTALL_TIMEOUT_S = 600.0
RISK = "external-write"
"""An adopted server's risk ceiling: nothing here knows what its tools do (``readOnlyHint`` lowers
it to ``external-read``; edit ``risk`` in server.json after review)."""

_NPX = ("npx", "bunx", "pnpx")
_NPX_FLAGS = frozenset({"-y", "--yes", "-q", "--quiet"})
_PY = ("uvx", "pipx", "uv")
_NPM_NAME = re.compile(r"^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$")
_PY_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_EXACT_NPM = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")


class AdoptError(Exception):
    """One entry that is not adopted: its code (``tooldir.codes``) and the reason."""

    def __init__(self, code: DiagnosticCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Plan:
    """What adopting one entry means, decided from the entry alone (nothing fetched)."""

    entry: ServerEntry
    package: str
    ecosystem: str  # "npm" | "pypi"
    name: str  # the registry's package name
    spec: str  # the version part as written ("" = newest, "latest", "^1", "1.2.3")
    command: str | None  # the bin / console script to run; None: the package's own
    args: tuple[str | dict[str, str], ...]  # after the package; {"secret": NAME} for a secret argument
    env: Mapping[str, str]  # plain values the launcher sets
    passed: tuple[str, ...]  # ${VAR} references: server.env (given only if sandbox.env_allow lists them)
    secrets: Mapping[str, str]  # NAME -> value, moved to secrets.toml
    digest: str  # sha256 of the entry as written

    @property
    def requested(self) -> str:
        if self.ecosystem == "npm":
            return f"{self.name}@{self.spec}" if self.spec else self.name
        return f"{self.name}{self.spec}" if self.spec else self.name


@dataclass(frozen=True, slots=True)
class Installed:
    version: str
    folder: str  # what was installed, relative to the package folder ("node", "site")
    entry: str  # npm: the bin file, relative to the package folder; PyPI: the console script's "module:attr"
    script: str  # the name it runs as (argv[0])


@dataclass(slots=True)
class Outcome:
    """What adopting one entry did: ``adopted``, ``already-adopted`` or ``skipped`` (with a code)."""

    entry: ServerEntry
    package: str
    status: str
    code: DiagnosticCode | None = None
    message: str = ""
    version: str | None = None
    requested: str | None = None
    secrets: tuple[str, ...] = ()
    files: int = 0
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.entry.name,
            "client": self.entry.client,
            "file": self.entry.file,
            "line": self.entry.line,
            "pointer": self.entry.pointer,
            "package": self.package,
            "status": self.status,
            "code": self.code,
            "message": self.message,
            "requested": self.requested,
            "version": self.version,
            "secrets": list(self.secrets),
            "files": self.files,
            "notes": list(self.notes),
        }


def entry_digest(entry: ServerEntry) -> str:
    body = json.dumps(entry.entry, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(body.encode("utf-8")).hexdigest()


# -- planning --------------------------------------------------------------------------------------


def plan(entry: ServerEntry, *, interpreters: Sequence[str]) -> Plan:
    """How ``entry`` is adopted.

    Raises:
        AdoptError: ``adopt-skipped`` -- not a stdio server tooldir can adopt (remote, container,
            unknown launcher, a secret inside an argument, ...), with the reason.
    """
    body = entry.entry
    if not isinstance(body, Mapping):
        raise AdoptError(DiagnosticCode.ADOPT_SKIPPED, "the entry is not an object")
    if entry.transport != "stdio":
        raise AdoptError(
            DiagnosticCode.ADOPT_SKIPPED,
            f"a remote {entry.transport} server: nothing to install or sandbox; leave it to the client",
        )
    command, args = body.get("command"), body.get("args", [])
    if not isinstance(command, str) or not command:
        raise AdoptError(DiagnosticCode.ADOPT_SKIPPED, "the entry has no command")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise AdoptError(DiagnosticCode.ADOPT_SKIPPED, "args is not an array of strings")
    base = PurePosixPath(command).name
    if entry.name == "tooldir" and "serve" in args:
        raise AdoptError(DiagnosticCode.ADOPT_SKIPPED, "tooldir's own entry: it serves the adopted packages")
    if base in ("docker", "podman"):
        raise AdoptError(
            DiagnosticCode.ADOPT_SKIPPED, f"a {base} container: tooldir sandboxes packages, not container images"
        )
    if base in _NPX:
        runtime, (name, spec, cmd, rest) = "node", _npx(base, args)
    elif base in _PY:
        runtime, (name, spec, cmd, rest) = "python3", _pylaunch(base, args)
    else:
        raise AdoptError(
            DiagnosticCode.ADOPT_SKIPPED,
            f"command {command!r} is not a package launcher tooldir adopts (npx, bunx, pnpx, uvx, pipx run, "
            "uv tool run); make a server package of it by hand (see 'Guarding a project's MCP servers')",
        )
    if runtime not in interpreters:
        raise AdoptError(
            DiagnosticCode.ADOPT_SKIPPED, f"{base} runs on {runtime}, which is not in your policy's exec.interpreters"
        )
    env_raw = body.get("env", {})
    if not isinstance(env_raw, Mapping) or not all(isinstance(v, str) for v in env_raw.values()):
        raise AdoptError(DiagnosticCode.ADOPT_SKIPPED, "env is not an object of strings")
    env: dict[str, str] = {}
    passed: list[str] = []
    secrets: dict[str, str] = {}
    for key, value in env_raw.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", key):
            raise AdoptError(DiagnosticCode.ADOPT_SKIPPED, f"env {key!r} is not a variable name")
        if is_reference(value):
            ref = value.strip("${}")
            if ref != key:
                raise AdoptError(
                    DiagnosticCode.ADOPT_SKIPPED,
                    f"env {key} = {value!r} renames a variable; tooldir passes a variable as itself",
                )
            passed.append(key)
        elif looks_secret(key, value):
            if not re.fullmatch(r"[A-Z][A-Z0-9_]{0,127}", key):
                raise AdoptError(
                    DiagnosticCode.ADOPT_SKIPPED,
                    f"env {key} holds a secret, but a secret's name is [A-Z][A-Z0-9_]*: rename it",
                )
            secrets[key] = value
        else:
            env[key] = value
    out_args: list[str | dict[str, str]] = list(rest)
    offset = len(args) - len(rest)
    for index, where, value, secret in secret_args(entry.name, args):
        if index < offset:
            raise AdoptError(DiagnosticCode.ADOPT_SKIPPED, f"the launcher's own argument {index} looks like a secret")
        if where is None:
            from .entries import url_has_secret

            if url_has_secret(value):
                raise AdoptError(
                    DiagnosticCode.ADOPT_SKIPPED,
                    f"argument {index} is a URL with a secret inside: move the secret into an env variable "
                    "the server reads, then adopt it",
                )
            continue
        flag, eq, _ = args[index].partition("=")
        if eq and flag.startswith("-"):
            raise AdoptError(
                DiagnosticCode.ADOPT_SKIPPED,
                f"argument {flag}=... holds a secret: write it as two arguments ({flag} VALUE)",
            )
        if secret in secrets and secrets[secret] != value:
            raise AdoptError(DiagnosticCode.ADOPT_SKIPPED, f"two different secrets would be named {secret}")
        secrets[secret] = value
        out_args[index - offset] = {"secret": secret}
    return Plan(
        entry,
        package_name(entry.name),
        "npm" if runtime == "node" else "pypi",
        name,
        spec,
        cmd,
        tuple(out_args),
        env,
        tuple(passed),
        secrets,
        entry_digest(entry),
    )


def _launcher_options(
    base: str, args: list[str], *, flags: frozenset[str] | tuple[str, ...] = (), valued: tuple[str, ...]
) -> tuple[str | None, int]:
    """Read a launcher's own options up to the package: ``flags`` are skipped, the last of
    ``valued`` (``--x VALUE`` or ``--x=VALUE``) is returned, any other option is refused. Returns
    (that value or None, the index of the package argument)."""
    value: str | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, given = arg.partition("=")
        if arg in flags:
            i += 1
        elif eq and name.startswith("--") and name in valued:
            value = given
            i += 1
        elif arg in valued and i + 1 < len(args):
            value = args[i + 1]
            i += 2
        elif arg.startswith("-"):
            raise AdoptError(
                DiagnosticCode.ADOPT_SKIPPED, f"{base} option {arg!r} is not one tooldir knows how to keep"
            )
        else:
            break
    if i >= len(args):
        raise AdoptError(DiagnosticCode.ADOPT_SKIPPED, f"{base} names no package")
    return value, i


def _npx(base: str, args: list[str]) -> tuple[str, str, str | None, list[str]]:
    package, i = _launcher_options(base, args, flags=_NPX_FLAGS, valued=("-p", "--package"))
    if package is None:
        spec, cmd = args[i], None
    else:
        spec, cmd = package, args[i]
    at = spec.rfind("@")
    name, version = (spec[:at], spec[at + 1 :]) if at > 0 else (spec, "")
    if not _NPM_NAME.match(name):
        raise AdoptError(
            DiagnosticCode.ADOPT_SKIPPED,
            f"{spec!r} is not an npm registry package (a path, URL or git spec is not adopted)",
        )
    return name, version, cmd, args[i + 1 :]


def _pylaunch(base: str, args: list[str]) -> tuple[str, str, str | None, list[str]]:
    rest = list(args)
    if base == "pipx":
        if not rest or rest[0] != "run":
            raise AdoptError(DiagnosticCode.ADOPT_SKIPPED, "pipx without 'run' starts nothing tooldir can adopt")
        rest = rest[1:]
    elif base == "uv":
        if rest[:2] != ["tool", "run"]:
            raise AdoptError(DiagnosticCode.ADOPT_SKIPPED, "uv without 'tool run' starts nothing tooldir can adopt")
        rest = rest[2:]
    source, i = _launcher_options(base, rest, valued=("--from", "--spec"))
    target = rest[i]
    spec_text = source if source is not None else target
    found = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[A-Za-z0-9,._-]+\])?(.*)$", spec_text)
    if found is None or not _PY_NAME.match(found.group(1)):
        raise AdoptError(
            DiagnosticCode.ADOPT_SKIPPED,
            f"{spec_text!r} is not a PyPI package (a path, URL or git spec is not adopted)",
        )
    name, extras, version = found.group(1), found.group(2) or "", found.group(3).strip()
    if version.startswith("@"):
        version = "" if version[1:] == "latest" else "==" + version[1:]
    if version and not re.fullmatch(r"(==|>=|<=|~=|!=|<|>)[A-Za-z0-9.*+!,<>=~ -]+", version):
        raise AdoptError(
            DiagnosticCode.ADOPT_SKIPPED, f"{spec_text!r}: version {version!r} is not a PyPI version specifier"
        )
    command = target if source is not None else re.split(r"[=@<>~!\[]", target)[0]
    return name + extras, version, command, rest[i + 1 :]


# -- installing ------------------------------------------------------------------------------------


def _run(argv: list[str], *, what: str, cwd: str | None = None) -> str:
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError:
        raise AdoptError(DiagnosticCode.ADOPT_INSTALL_FAILED, f"{what}: {argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise AdoptError(
            DiagnosticCode.ADOPT_INSTALL_FAILED, f"{what}: no answer within {INSTALL_TIMEOUT_S:.0f} s"
        ) from None
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        last = " | ".join(lines[-3:]) if lines else f"exit status {done.returncode}"
        raise AdoptError(DiagnosticCode.ADOPT_INSTALL_FAILED, f"{what} failed: {last}")
    return done.stdout


@dataclass(frozen=True, slots=True)
class Registry:
    """The registry side of an install: the real clients by default (npm, pip)."""

    npm_versions: Callable[[str], str] = field(default_factory=lambda: npm_versions)
    npm_install: Callable[[Path, str], None] = field(default_factory=lambda: npm_install)
    pip_install: Callable[[Path, str, str, Path], None] = field(default_factory=lambda: pip_install)


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise AdoptError(
            DiagnosticCode.ADOPT_INSTALL_FAILED, "npm is not installed (it resolves and installs npm packages)"
        )
    return npm


def npm_versions(requested: str) -> str:
    """``npm view REQUESTED version --json``: the version(s) the registry has for it, as JSON."""
    return _run([_npm(), "view", requested, "version", "--json"], what=f"npm view {requested}")


def npm_install(prefix: Path, exact: str) -> None:
    """``npm install`` of ``NAME@VERSION`` under ``prefix``, running none of its scripts."""
    _run(
        [
            _npm(),
            "install",
            "--prefix",
            str(prefix),
            "--ignore-scripts",
            "--no-bin-links",
            "--omit=dev",
            "--no-audit",
            "--no-fund",
            "--save-exact",
            "--loglevel=error",
            exact,
        ],
        what=f"npm install {exact}",
    )


def pip_install(site: Path, requested: str, python_version: str, report: Path) -> None:
    """``pip install --target SITE`` of ``requested`` and its dependencies, wheels for that python only."""
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-input",
            "--disable-pip-version-check",
            "--no-compile",
            "--only-binary=:all:",
            "--python-version",
            python_version,
            "--target",
            str(site),
            "--report",
            str(report),
            requested,
        ],
        what=f"pip install {requested}",
    )


def install_npm(p: Plan, folder: Path, registry: Registry | None = None) -> Installed:
    """Resolve ``p``'s npm package to an exact version now and install it under ``folder/node``."""
    reg = registry or Registry()
    if _EXACT_NPM.match(p.spec):
        version = p.spec
    else:
        out = reg.npm_versions(p.requested)
        try:
            found = json.loads(out)
        except ValueError:
            raise AdoptError(DiagnosticCode.ADOPT_INSTALL_FAILED, f"npm view {p.requested}: not JSON") from None
        versions = found if isinstance(found, list) else [found]
        if not versions or not all(isinstance(v, str) and _EXACT_NPM.match(v) for v in versions):
            raise AdoptError(DiagnosticCode.ADOPT_INSTALL_FAILED, f"npm view {p.requested}: no version matches")
        version = versions[-1]  # npm lists the matching versions oldest first
    prefix = folder / "node"
    prefix.mkdir()
    reg.npm_install(prefix, f"{p.name}@{version}")
    where = prefix / "node_modules" / p.name
    meta = _json_file(where / "package.json", f"{p.name}'s package.json")
    if meta.get("version") != version:
        raise AdoptError(
            DiagnosticCode.ADOPT_INSTALL_FAILED, f"npm installed {p.name} {meta.get('version')!r}, not {version}"
        )
    bins = meta.get("bin")
    short = p.name.rsplit("/", 1)[-1]
    if isinstance(bins, str):
        bins = {short: bins}
    if not isinstance(bins, dict) or not bins:
        raise AdoptError(
            DiagnosticCode.ADOPT_SKIPPED, f"{p.name}@{version} has no bin to run (npx would not start it either)"
        )
    if p.command is not None:
        chosen = bins.get(p.command)
    elif len(bins) == 1:
        chosen = next(iter(bins.values()))
    else:
        chosen = bins.get(short)
    if not isinstance(chosen, str):
        raise AdoptError(
            DiagnosticCode.ADOPT_SKIPPED, f"{p.name}@{version}: which of its bins ({', '.join(sorted(bins))}) to run?"
        )
    rel = PurePosixPath("node/node_modules", p.name, PurePosixPath(chosen.removeprefix("./")))
    if ".." in rel.parts or not (folder / rel).is_file():
        raise AdoptError(
            DiagnosticCode.ADOPT_SKIPPED, f"{p.name}@{version}: its bin {chosen!r} is not a file of the package"
        )
    return Installed(version, "node", str(rel), short if p.command is None else p.command)


def sandbox_python() -> tuple[str, str]:
    """(path, "M.m") of the ``python3`` the sandbox runs (the trusted PATH's, under the system folders)."""
    from ..sandbox.bubblewrap import resolve_interpreter

    python = resolve_interpreter("python3")
    if python is None:
        raise AdoptError(
            DiagnosticCode.ADOPT_INSTALL_FAILED, "no python3 under the system folders: the sandbox could not run it"
        )
    out = _run([python, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], what=f"{python} --version")
    return python, out.strip()


def install_pypi(p: Plan, folder: Path, registry: Registry | None = None) -> Installed:
    """Resolve ``p``'s PyPI package now and install it (with its dependencies) under ``folder/site``,
    as wheels for the sandbox's python3."""
    reg = registry or Registry()
    _, version_mm = sandbox_python()
    site = folder / "site"
    report = folder.parent / "pip-report.json"
    reg.pip_install(site, p.requested, version_mm, report)
    doc = _json_file(report, "pip's install report")
    report.unlink()
    base = re.split(r"\[", p.name)[0]
    wanted = _canonical(base)
    version = None
    for item in doc.get("install", []):
        meta = item.get("metadata", {}) if isinstance(item, dict) else {}
        if _canonical(str(meta.get("name", ""))) == wanted:
            version = str(meta.get("version"))
    if version is None:
        raise AdoptError(DiagnosticCode.ADOPT_INSTALL_FAILED, f"pip's report does not name {base}")
    shutil.rmtree(site / "bin", ignore_errors=True)  # scripts with the host's interpreter in their #! line
    scripts = _console_scripts(site, wanted)
    command = p.command or base
    target = scripts.get(command) or (next(iter(scripts.values())) if len(scripts) == 1 else None)
    if target is None:
        raise AdoptError(
            DiagnosticCode.ADOPT_SKIPPED,
            f"{base} {version} has no console script {command!r} (it has: {', '.join(sorted(scripts)) or 'none'})",
        )
    return Installed(version, "site", target, command)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _console_scripts(site: Path, dist: str) -> dict[str, str]:
    for info in sorted(site.glob("*.dist-info")):
        stem = info.name[: -len(".dist-info")].rsplit("-", 1)[0]
        if _canonical(stem) != dist:
            continue
        text = (info / "entry_points.txt").read_text("utf-8") if (info / "entry_points.txt").is_file() else ""
        parsed: dict[str, str] = {}
        section = ""
        for raw in text.splitlines():
            line = raw.strip()
            if line.startswith("["):
                section = line.strip("[]").strip()
            elif "=" in line and section == "console_scripts":
                key, _, value = line.partition("=")
                parsed[key.strip()] = value.split("[", 1)[0].strip()
        return parsed
    return {}


def _json_file(path: Path, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise AdoptError(DiagnosticCode.ADOPT_INSTALL_FAILED, f"{what} cannot be read: {exc}") from None
    if not isinstance(doc, dict):
        raise AdoptError(DiagnosticCode.ADOPT_INSTALL_FAILED, f"{what} is not a JSON object")
    return doc


def _header(p: Plan, version: str) -> str:
    e = p.entry
    return (
        f"Generated by tooldir adopt: server {e.name!r} of {e.file} ({e.client}), "
        f"{p.ecosystem} {p.name} {version} (asked: {p.requested!r})."
    )


PAYLOAD = "payload.zip"
"""The installed tree, zipped into the package (its parts ``payload.zip.000``, ...): the sandbox
recreates a package file by file from memory (one memfd and bubblewrap option each), so thousands
of files (a node_modules tree, a site-packages) cannot be carried one by one; one archive can,
covered by the package digest like any file."""
LAUNCHER = "launch.py"


def pack(work: Path, folder: str, *, part_bytes: int) -> tuple[list[str], list[list[Any]]]:
    """Zip ``work/folder`` into ``work/payload.zip.NNN`` parts of at most ``part_bytes`` and remove
    the tree; returns the part names and the listing (path, size, sha256) of every file in it."""
    import io
    import zipfile

    root = work / folder
    listing: list[list[Any]] = []
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for path in sorted(root.rglob("*")):
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                raise AdoptError(
                    DiagnosticCode.ADOPT_INSTALL_FAILED, f"{path.relative_to(work)}: not a regular file or folder"
                )
            if path.is_dir():
                continue
            rel = str(path.relative_to(work))
            data = path.read_bytes()
            info = zipfile.ZipInfo(rel, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
            listing.append([rel, len(data), hashlib.sha256(data).hexdigest()])
    shutil.rmtree(root)
    blob = buffer.getvalue()
    parts = []
    for n, start in enumerate(range(0, len(blob), part_bytes)):
        name = f"{PAYLOAD}.{n:03d}"
        (work / name).write_bytes(blob[start : start + part_bytes])
        parts.append(name)
    return parts, listing


_LAUNCHER = '''"""@HEADER@

Unpacks this package's payload (@PARTS@: the installed files, listed with their sha256 in
adopted.json) into a new folder under $TMPDIR, sets the entry's plain environment values, fills
secret arguments from the environment (tooldir gives granted secrets as variables) and runs
@SCRIPT@ (@ENTRY@).
"""

import importlib
import io
import os
import shutil
import sys
import tempfile
import zipfile

KIND = @KIND_R@
ENTRY = @ENTRY_R@
SCRIPT = @SCRIPT_R@
PARTS = @PARTS_J@
ENV = @ENV_J@
ARGS = @ARGS_J@

here = os.path.dirname(os.path.abspath(__file__))
data = b"".join(open(os.path.join(here, part), "rb").read() for part in PARTS)
dest = tempfile.mkdtemp(prefix="tooldir-adopted-")
with zipfile.ZipFile(io.BytesIO(data)) as archive:
    for name in archive.namelist():
        if name.startswith("/") or ".." in name.split("/"):
            sys.exit("payload holds an unsafe name: " + name)
    archive.extractall(dest)
del data
for key, value in ENV.items():
    os.environ.setdefault(key, value)
args = []
for arg in ARGS:
    if isinstance(arg, str):
        args.append(arg)
    elif arg["secret"] in os.environ:
        args.append(os.environ[arg["secret"]])
    else:
        sys.exit("secret " + arg["secret"] + " was not given to this server")
if KIND == "npm":
    node = shutil.which("node")
    if node is None:
        sys.exit("node is not installed")
    os.execv(node, [node, os.path.join(dest, ENTRY), *args, *sys.argv[1:]])
sys.path[:0] = [os.path.join(dest, "site")]
sys.argv = [SCRIPT, *args, *sys.argv[1:]]
module, _, attr = ENTRY.partition(":")
target = importlib.import_module(module)
for part in attr.split(".") if attr else ():
    target = getattr(target, part)
sys.exit(target())
'''


def launcher_text(p: Plan, got: Installed, parts: Sequence[str]) -> str:
    """``launch.py``: unpacks the payload into a fresh folder under $TMPDIR (the sandbox's own
    tmpfs), then runs the server: npm -- ``node BIN``; PyPI -- the console script, the unpacked
    site-packages first on sys.path."""
    values = {
        "@HEADER@": _header(p, got.version).replace('"""', "'''"),
        "@PARTS@": ", ".join(parts),
        "@SCRIPT@": json.dumps(got.script),
        "@ENTRY@": json.dumps(got.entry),
        "@KIND_R@": repr(p.ecosystem),
        "@ENTRY_R@": repr(got.entry),
        "@SCRIPT_R@": repr(got.script),
        "@PARTS_J@": repr(list(parts)),
        "@ENV_J@": repr(dict(p.env)),
        "@ARGS_J@": repr(list(p.args)),
    }
    text = _LAUNCHER
    for key, value in values.items():
        text = text.replace(key, value)
    return text


def install(p: Plan, folder: Path, registry: Registry | None = None) -> Installed:
    """Install ``p`` into the package folder ``folder`` (npm or PyPI, from ``registry``)."""
    return install_npm(p, folder, registry) if p.ecosystem == "npm" else install_pypi(p, folder, registry)


# -- writing ---------------------------------------------------------------------------------------


def marker_of(folder: Path) -> dict[str, Any] | None:
    """The ``adopted.json`` of an adopted package folder, or None."""
    try:
        doc = json.loads((folder / MARKER).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def is_adopted_here(entry: ServerEntry, folder: Path) -> bool:
    """``folder`` is the package adopted from exactly this entry (file, place and content)."""
    doc = marker_of(folder)
    origin = doc.get("origin") if doc else None
    return (
        isinstance(origin, dict)
        and origin.get("file") == entry.file
        and origin.get("pointer") == entry.pointer
        and origin.get("entry_digest") == entry_digest(entry)
    )


@dataclass(frozen=True, slots=True)
class Target:
    """Where adoption writes: the user root, the secrets file and the user's policy file."""

    root: Path
    secrets_file: Path
    policy_file: Path
    limits: Limits


def adopt_all(
    entries: Sequence[ServerEntry],
    target: Target,
    *,
    interpreters: Sequence[str],
    existing: Sequence[str] = (),
    registry: Registry | None = None,
    report: Callable[[str], None] | None = None,
) -> list[Outcome]:
    """Adopt each entry; one that fails is reported and skipped, the others go on."""
    out: list[Outcome] = []
    taken = set(existing)
    for entry in entries:
        try:
            outcome = _adopt_one(
                entry, target, interpreters=interpreters, taken=taken, registry=registry, report=report
            )
        except AdoptError as exc:
            outcome = Outcome(entry, package_name(entry.name), "skipped", exc.code, exc.message)
        except OSError as exc:
            outcome = Outcome(
                entry, package_name(entry.name), "skipped", DiagnosticCode.ADOPT_INSTALL_FAILED, f"cannot write: {exc}"
            )
        taken.add(outcome.package)
        out.append(outcome)
    return out


def _adopt_one(
    entry: ServerEntry,
    target: Target,
    *,
    interpreters: Sequence[str],
    taken: set[str],
    registry: Registry | None,
    report: Callable[[str], None] | None,
) -> Outcome:
    pkg = package_name(entry.name)
    folder = target.root / pkg
    if folder.exists() or folder.is_symlink():
        if is_adopted_here(entry, folder):
            return Outcome(entry, pkg, "already-adopted", message=f"already adopted as {folder}")
        raise AdoptError(
            DiagnosticCode.ADOPT_CONFLICT,
            f"{folder} exists and is not the package adopted from this entry; rename the server in the client's "
            "file, or remove that folder, then adopt again",
        )
    if pkg in taken or any(t.startswith(pkg + "__") for t in taken):
        raise AdoptError(
            DiagnosticCode.ADOPT_CONFLICT, f"package name {pkg!r} is taken by a tool you have or another server"
        )
    p = plan(entry, interpreters=interpreters)
    _check_secrets(p, target)
    if report is not None:
        report(f"{entry.name}: resolving and installing {p.ecosystem} {p.requested} ...")
    target.root.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = Path(tempfile.mkdtemp(prefix=f".adopt-{pkg}-", dir=target.root.parent))
    try:
        os.chmod(staging, 0o755)  # noqa: S103 - a package folder is readable, as any tool folder
        work = staging / pkg
        work.mkdir(mode=0o755)
        old_umask = os.umask(0o022)
        try:
            got = install(p, work, registry)
            _write_package(p, got, work, target.limits)
        finally:
            os.umask(old_umask)
        files = _check_limits(staging, pkg, target.limits)
        _store_secrets(p, target)
        os.rename(work, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    notes = []
    if p.secrets:
        notes.append(
            "this version starts no server package that declares secrets (they would not be given to it): "
            "it stays adopted, and will not start until that lands"
        )
    if p.passed:
        notes.append(f"env {', '.join(p.passed)} come from your environment only if sandbox.env_allow lists them")
    return Outcome(
        entry,
        pkg,
        "adopted",
        message=f"pending server package {folder}",
        version=got.version,
        requested=p.requested,
        secrets=tuple(sorted(p.secrets)),
        files=files,
        notes=notes,
    )


def _write_package(p: Plan, got: Installed, work: Path, limits: Limits) -> None:
    e = p.entry
    parts, listing = pack(work, got.folder, part_bytes=min(4 << 20, limits.max_file_bytes))
    manifest = {
        "name": p.package,
        "description": f"MCP server {e.name!r} adopted from {e.file} ({e.client}): {p.ecosystem} "
        f"{p.name.split('[', 1)[0]} {got.version}, installed in this folder.",
        "risk": RISK,
        "keywords": [p.ecosystem],
        "server": {
            "command": ["python3", LAUNCHER],
            "network": False,
            "env": list(p.passed),
            **({"secrets": sorted(p.secrets)} if p.secrets else {}),
        },
    }
    (work / "server.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", "utf-8")
    (work / LAUNCHER).write_text(launcher_text(p, got, parts), "utf-8")
    marker = {
        "origin": {
            "client": e.client,
            "file": e.file,
            "pointer": e.pointer,
            "name": e.name,
            "entry_digest": p.digest,
        },
        "resolved": {"ecosystem": p.ecosystem, "package": p.name, "asked": p.requested, "version": got.version},
        "secrets": sorted(p.secrets),
        "payload": {"parts": parts, "files": listing},
    }
    (work / MARKER).write_text(json.dumps(marker, indent=2, ensure_ascii=False) + "\n", "utf-8")


def _check_limits(staging: Path, pkg: str, limits: Limits) -> int:
    """The package's file count, after discovery's own checks of it (with the user's limits)."""
    scan = scan_one(RootSpec(Source.USER, str(staging)), pkg, limits)
    if scan.digest is not None:
        return len(scan.files)
    files, size, depth, largest = _measure(staging / pkg)
    problems = sorted({d.code for d in scan.diagnostics})
    over = []
    if files > limits.max_package_files:
        over.append(f"max_package_files = {files + 64}")
    if size > limits.max_package_bytes:
        over.append(f"max_package_bytes = {size + (8 << 20)}")
    if depth > limits.max_package_depth:
        over.append(f"max_package_depth = {depth + 2}")
    if largest > limits.max_file_bytes:
        over.append(f"max_file_bytes = {largest + (1 << 20)}")
    if over:
        raise AdoptError(
            DiagnosticCode.ADOPT_OVER_LIMIT,
            f"the installed package has {files} files, {size} bytes, folders {depth} deep, its largest file "
            f"{largest} bytes; your limits are max_package_files = {limits.max_package_files}, "
            f"max_package_bytes = {limits.max_package_bytes}, max_package_depth = {limits.max_package_depth}, "
            f"max_file_bytes = {limits.max_file_bytes}. Set [limits] {', '.join(over)} in your policy and "
            "adopt again (nothing was written)",
        )
    first = next(iter(scan.diagnostics), None)
    raise AdoptError(
        DiagnosticCode.ADOPT_INSTALL_FAILED,
        f"the installed package would be refused by discovery ({', '.join(problems)}): "
        f"{first.message if first else 'unknown'}",
    )


def _measure(folder: Path) -> tuple[int, int, int, int]:
    files = size = depth = largest = 0
    for here, _dirs, names in os.walk(folder):
        level = len(Path(here).relative_to(folder).parts) + 1
        depth = max(depth, level)
        for name in names:
            files += 1
            with contextlib.suppress(OSError):
                one = os.lstat(os.path.join(here, name)).st_size
                size += one
                largest = max(largest, one)
    return files, size, depth, largest


# -- secrets.toml and the policy's grants (textual edits: the rest of each file kept) ---------------


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text("utf-8")
    except FileNotFoundError:
        return None


def _check_secrets(p: Plan, target: Target) -> None:
    """Refuse, before anything is fetched, what cannot be stored: a name the secrets file already
    holds with another value, an unreadable secrets file, a grant the policy cannot take."""
    if not p.secrets:
        return
    from ..run.secrets import RESERVED_ENV, SecretsFileError, read_secrets_file

    for name in p.secrets:
        if name in RESERVED_ENV:
            raise AdoptError(
                DiagnosticCode.ADOPT_CONFLICT, f"secret {name} takes the name of a variable the sandbox sets itself"
            )
    try:
        held = read_secrets_file(target.secrets_file) or {}
    except SecretsFileError as exc:
        raise AdoptError(DiagnosticCode.ADOPT_CONFLICT, exc.diagnostics()) from None
    for name, value in p.secrets.items():
        have = held.get(name)
        if have is not None and have.value != value:
            raise AdoptError(
                DiagnosticCode.ADOPT_CONFLICT,
                f"{target.secrets_file} already holds {name} with another value; rename one of them "
                "(the client's env key), then adopt again",
            )
    _granted_text(p, target)  # raises when the policy cannot take the grant


_SECRETS_HEADER = re.compile(r"^\s*\[\s*secrets\s*\]\s*(#.*)?$")
_GRANTS_HEADER = re.compile(r"^\s*\[\s*secrets\s*\.\s*grants\s*\]\s*(#.*)?$")


def _insert_after_header(text: str, header: re.Pattern[str], lines: Sequence[str], table: str) -> str:
    rows = text.splitlines(keepends=True)
    for i, row in enumerate(rows):
        if header.match(row.rstrip("\r\n")):
            if not row.endswith("\n"):
                rows[i] = row + "\n"
            return "".join(rows[: i + 1]) + "".join(line + "\n" for line in lines) + "".join(rows[i + 1 :])
    glue = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
    return text + glue + f"[{table}]\n" + "".join(line + "\n" for line in lines)


def _store_secrets(p: Plan, target: Target) -> None:
    if not p.secrets:
        return
    from ..mcp.clients import _toml_string

    text = _read_text(target.secrets_file) or ""
    doc = tomllib.loads(text) if text else {}
    table = doc.get("secrets", {})
    new = [f"{name} = {_toml_string(value)}" for name, value in sorted(p.secrets.items()) if name not in table]
    if new:
        merged = _insert_after_header(text, _SECRETS_HEADER, new, "secrets")
        check = tomllib.loads(merged)
        if {k: v for k, v in check.get("secrets", {}).items() if k not in p.secrets} != {
            k: v for k, v in table.items() if k not in p.secrets
        } or any(check["secrets"][k] != v for k, v in p.secrets.items()):
            raise AdoptError(
                DiagnosticCode.ADOPT_CONFLICT, f"{target.secrets_file}: the secrets could not be added safely"
            )
        target.secrets_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(target.secrets_file, merged.encode("utf-8"), mode=0o600, sync_dir=True)
    granted = _granted_text(p, target)
    if granted is not None:
        mode = 0o600
        with contextlib.suppress(OSError):
            mode = target.policy_file.stat().st_mode & 0o777
        target.policy_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(target.policy_file, granted.encode("utf-8"), mode=mode, sync_dir=True)


def _granted_text(p: Plan, target: Target) -> str | None:
    """The policy file's text with ``[secrets.grants] <package> = [...]`` added (None: it is there)."""
    text = _read_text(target.policy_file) or ""
    try:
        doc = tomllib.loads(text) if text else {}
    except tomllib.TOMLDecodeError as exc:
        raise AdoptError(
            DiagnosticCode.ADOPT_CONFLICT, f"{target.policy_file}: not valid TOML ({exc}); fix it first"
        ) from None
    names = sorted(p.secrets)
    grants = doc.get("secrets", {}).get("grants", {})
    have = grants.get(p.package)
    if have is not None:
        if isinstance(have, list) and set(names) <= set(have):
            return None
        raise AdoptError(
            DiagnosticCode.ADOPT_CONFLICT,
            f"{target.policy_file}: [secrets.grants] {p.package} is there without {', '.join(names)}; add them by hand",
        )
    line = f"{p.package} = [{', '.join(json.dumps(n) for n in names)}]"
    has_header = any(_GRANTS_HEADER.match(row) for row in text.splitlines())
    if "grants" in doc.get("secrets", {}) and not has_header:
        raise AdoptError(
            DiagnosticCode.ADOPT_CONFLICT,
            f"{target.policy_file}: its secrets.grants is not a [secrets.grants] table; add {line} to it by hand",
        )
    merged = _insert_after_header(text, _GRANTS_HEADER, [line], "secrets.grants")
    try:
        check = tomllib.loads(merged)
    except tomllib.TOMLDecodeError:
        raise AdoptError(
            DiagnosticCode.ADOPT_CONFLICT, f"{target.policy_file}: add [secrets.grants] {line} by hand"
        ) from None
    if check.get("secrets", {}).get("grants", {}).get(p.package) != names:
        raise AdoptError(DiagnosticCode.ADOPT_CONFLICT, f"{target.policy_file}: add [secrets.grants] {line} by hand")
    return merged
