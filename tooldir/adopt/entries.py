"""What an MCP client's configuration starts, judged without starting any of it (issue 27, DESIGN §13).

Pure: the caller reads the files (:mod:`tooldir._cli.adopt`); this module parses their text into
:class:`ServerEntry` values (each with its file, line and JSON Pointer) and judges each entry:

* ``adopt-unpinned`` -- a package fetched at start without an exact version (``npx -y pkg``,
  ``uvx pkg@latest``, a container image without a digest);
* ``adopt-secret`` -- a secret in plain text in ``env``, ``args``, ``headers`` or a URL (its value is
  never shown: its name, its length and at most :data:`SHOWN` characters);
* ``adopt-runtime`` -- a command outside the runtimes the policy allows (``exec.interpreters`` and
  the package launchers of those runtimes);
* ``adopt-no-tls`` -- a remote server over plain ``http://``;
* ``adopt-collision`` -- a server whose package name would be a tool or package you already have;
* ``adopt-invalid-entry`` -- an entry that is not a server tooldir could adopt.

Which files each client reads: :data:`CLIENT_FILES`.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from .._internal import jsonlines, strictjson, tomllines
from ..codes import DiagnosticCode
from ..errors import ConfigError
from ..model import Diagnostic, error, warning

CLIENTS = ("claude-code", "cursor", "vscode", "codex")

#: Per client: (where, relative path, format). ``home`` files are the user's, ``project`` files the
#: open folder's. ``json-mcpServers``: ``{"mcpServers": {NAME: entry}}`` (Claude Code's
#: ``~/.claude.json`` also holds ``projects.<folder>.mcpServers``); ``json-servers``: VS Code's
#: ``{"servers": {...}}``; ``toml``: Codex's ``[mcp_servers.NAME]``.
CLIENT_FILES: Mapping[str, tuple[tuple[str, str, str], ...]] = {
    "claude-code": (("home", ".claude.json", "json-mcpServers"), ("project", ".mcp.json", "json-mcpServers")),
    "cursor": (("home", ".cursor/mcp.json", "json-mcpServers"), ("project", ".cursor/mcp.json", "json-mcpServers")),
    "vscode": (("project", ".vscode/mcp.json", "json-servers"),),
    "codex": (("home", ".codex/config.toml", "toml"),),
}

SHOWN = 3
"""Characters of a secret's value a finding may show (its first ones)."""
MAX_CONFIG_BYTES = 16 * 1024 * 1024
"""A client's configuration file is read up to this size (``~/.claude.json`` holds history too)."""

#: Launchers that fetch a package and run it on a runtime, by the runtime they need.
LAUNCHERS: Mapping[str, str] = {
    "npx": "node",
    "bunx": "node",
    "pnpx": "node",
    "uvx": "python3",
    "pipx": "python3",
    "uv": "python3",
    "docker": "docker",
    "podman": "podman",
}
_RUNTIME_ALIASES: Mapping[str, str] = {"python": "python3", "nodejs": "node"}

_SECRET_NAME = re.compile(
    r"(secret|token|passw|pwd|credential|private|api[_-]?key|access[_-]?key|auth|session|cookie|bearer|pat\b)", re.I
)
_SECRET_VALUE = re.compile(
    r"^(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{16,}|sk-[A-Za-z0-9_-]{16,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}|ya29\.[0-9A-Za-z_-]{20,}"
    r"|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{5,}|(?i:bearer)\s+\S{8,})$"
)
_REFERENCE = re.compile(r"^\$\{[^}]+\}$|^\$[A-Za-z_][A-Za-z0-9_]*$")
_EXACT_NPM = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
_EXACT_PY = re.compile(r"^\d+(\.\d+)*([a-z]+\d*)?(\.post\d+)?(\.dev\d+)?$")


class AdoptConfigError(ConfigError):
    """A client configuration file that cannot be read as its client's format (file and line)."""

    def __init__(self, message: str, *, path: str, line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line

    def diagnostics(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"invalid client configuration {where}: {self.message}"


@dataclass(frozen=True, slots=True)
class ServerEntry:
    """One MCP server entry of a client's configuration, as written."""

    client: str
    file: str
    name: str
    pointer: str  # JSON Pointer (TOML: the key path as a pointer) of the entry
    line: int | None
    entry: Mapping[str, Any]
    lines: Mapping[str, int] = field(default_factory=dict)
    """Pointer (relative to the entry, ``/env/TOKEN``) -> line, for the places findings name."""

    @property
    def transport(self) -> str:
        kind = self.entry.get("type")
        if isinstance(kind, str) and kind:
            return kind
        return "http" if "url" in self.entry or "serverUrl" in self.entry else "stdio"

    def line_of(self, sub: str) -> int | None:
        while True:
            if sub in self.lines:
                return self.lines[sub]
            if not sub:
                return self.line
            sub = sub.rsplit("/", 1)[0]


@dataclass(frozen=True, slots=True)
class Finding:
    """One finding: a diagnostic (code, severity, message, file, pointer), its line and its fix."""

    diagnostic: Diagnostic
    server: str
    client: str
    line: int | None
    fix: str

    def to_json(self) -> dict[str, Any]:
        d = self.diagnostic
        return {
            "code": d.code,
            "severity": str(d.severity),
            "server": self.server,
            "client": self.client,
            "file": d.path,
            "line": self.line,
            "pointer": d.pointer,
            "message": d.message,
            "fix": self.fix,
        }


# -- parsing ---------------------------------------------------------------------------------------


def parse_config(text: str, *, path: str, client: str, form: str) -> list[ServerEntry]:
    """The server entries of one configuration file's text.

    Raises:
        AdoptConfigError: not valid JSON/TOML, or the server table is not a table (file and line).
    """
    if form == "toml":
        return _parse_toml(text, path=path, client=client)
    try:
        doc = strictjson.loads(text.encode("utf-8"), max_depth=64, freeze_arrays=False)
    except strictjson.StrictJSONError as exc:
        raise AdoptConfigError(f"not valid JSON: {exc}", path=path) from None
    if not isinstance(doc, dict):
        raise AdoptConfigError("not a JSON object", path=path)
    key = "servers" if form == "json-servers" else "mcpServers"
    tables: list[tuple[str, Any]] = [("/" + key, doc.get(key))]
    if form == "json-mcpServers" and isinstance(doc.get("projects"), dict):
        for folder, settings in doc["projects"].items():
            if isinstance(settings, dict) and "mcpServers" in settings:
                tables.append((f"/projects/{jsonlines.escape_token(folder)}/mcpServers", settings["mcpServers"]))
    raw: list[tuple[str, str, Any]] = []
    for base, table in tables:
        if table is None:
            continue
        if not isinstance(table, dict):
            line = jsonlines.pointer_lines(text, [base]).get(base)
            raise AdoptConfigError(f"{base} is not an object of servers", path=path, line=line)
        raw += [(f"{base}/{jsonlines.escape_token(name)}", name, entry) for name, entry in table.items()]
    wanted = [p for p, _, entry in raw for p in (p, *_sub_pointers(p, entry))]
    lines = jsonlines.pointer_lines(text, wanted) if raw else {}
    out = []
    for pointer, name, entry in raw:
        sub = {p[len(pointer) :]: line for p, line in lines.items() if p.startswith(pointer + "/")}
        body = strictjson.thaw(entry) if isinstance(entry, dict) else entry
        out.append(ServerEntry(client, path, name, pointer, lines.get(pointer), body, sub))
    return out


def _sub_pointers(pointer: str, entry: Any) -> list[str]:
    if not isinstance(entry, dict):
        return []
    out = []
    for key in ("command", "args", "env", "headers", "http_headers", "url", "serverUrl"):
        if key not in entry:
            continue
        out.append(f"{pointer}/{key}")
        value = entry[key]
        if isinstance(value, dict):
            out += [f"{pointer}/{key}/{jsonlines.escape_token(k)}" for k in value]
        elif isinstance(value, list):
            out += [f"{pointer}/{key}/{i}" for i in range(len(value))]
    return out


def _parse_toml(text: str, *, path: str, client: str) -> list[ServerEntry]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"line (\d+)", str(exc))
        raise AdoptConfigError(
            f"not valid TOML: {exc}", path=path, line=int(found.group(1)) if found else None
        ) from None
    except RecursionError:
        raise AdoptConfigError("not valid TOML: nested too deeply", path=path) from None
    table = doc.get("mcp_servers")
    if table is None:
        return []
    lines = tomllines.key_lines(text)
    if not isinstance(table, dict):
        raise AdoptConfigError("mcp_servers is not a table", path=path, line=tomllines.line_of(lines, ("mcp_servers",)))
    out = []
    for name, entry in table.items():
        base = ("mcp_servers", name)
        sub: dict[str, int] = {}
        if isinstance(entry, dict):
            for key, value in entry.items():
                line = tomllines.line_of(lines, (*base, key))
                if line is not None:
                    sub[f"/{key}"] = line
                if isinstance(value, dict):
                    for inner in value:
                        at = tomllines.line_of(lines, (*base, key, inner))
                        if at is not None:
                            sub[f"/{key}/{jsonlines.escape_token(inner)}"] = at
        pointer = f"/mcp_servers/{jsonlines.escape_token(name)}"
        out.append(ServerEntry(client, path, name, pointer, tomllines.line_of(lines, base), entry, sub))
    return out


# -- judging ---------------------------------------------------------------------------------------


def package_name(server: str) -> str:
    """The server package name an entry would be adopted as: its name in tooldir's name alphabet."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", server).strip("_-") or "server"
    return name[:64]


def judge(
    entries: Iterable[ServerEntry], *, interpreters: Sequence[str], existing: Iterable[str] = ()
) -> list[Finding]:
    """Every finding of ``entries``, in file and line order."""
    have = set(existing)
    seen: dict[str, ServerEntry] = {}
    out: list[Finding] = []
    for entry in entries:
        out += _judge_one(entry, interpreters)
        pkg = package_name(entry.name)
        other = seen.get(pkg)
        if pkg in have or any(t.startswith(pkg + "__") for t in have):
            out.append(
                _finding(
                    warning,
                    DiagnosticCode.ADOPT_COLLISION,
                    entry,
                    "",
                    f"server {entry.name!r} would become package {pkg!r}, which you already have",
                    fix="rename the server in the client's file (or remove your tool of that name) before adopting it",
                )
            )
        elif other is not None and other is not entry:
            out.append(
                _finding(
                    warning,
                    DiagnosticCode.ADOPT_COLLISION,
                    entry,
                    "",
                    f"server {entry.name!r} would become package {pkg!r}, as would {other.name!r} "
                    f"({other.file}:{other.line})",
                    fix="rename one of the two servers in the client's file",
                )
            )
        seen.setdefault(pkg, entry)
    return out


def _finding(make: Any, code: DiagnosticCode, entry: ServerEntry, sub: str, message: str, *, fix: str) -> Finding:
    diagnostic: Diagnostic = make(code, f"{entry.name}: {message}", path=entry.file, pointer=entry.pointer + sub)
    return Finding(diagnostic, entry.name, entry.client, entry.line_of(sub), fix)


def _judge_one(entry: ServerEntry, interpreters: Sequence[str]) -> list[Finding]:
    body = entry.entry
    if not isinstance(body, Mapping):
        return [
            _finding(
                error,
                DiagnosticCode.ADOPT_INVALID_ENTRY,
                entry,
                "",
                "the entry is not an object",
                fix="make it a server object",
            )
        ]
    out: list[Finding] = []
    url = body.get("url", body.get("serverUrl"))
    command = body.get("command")
    args = body.get("args", [])
    if command is None and url is None:
        return [
            _finding(
                error,
                DiagnosticCode.ADOPT_INVALID_ENTRY,
                entry,
                "",
                "the entry has neither a command nor a url",
                fix="give it a command (stdio) or a url (HTTP)",
            )
        ]
    if command is not None and (not isinstance(command, str) or not command):
        out.append(
            _finding(
                error, DiagnosticCode.ADOPT_INVALID_ENTRY, entry, "/command", "command is not a string", fix="fix it"
            )
        )
        command = None
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        out.append(
            _finding(
                error,
                DiagnosticCode.ADOPT_INVALID_ENTRY,
                entry,
                "/args",
                "args is not an array of strings",
                fix="fix it",
            )
        )
        args = []
    if isinstance(command, str):
        out += _command_findings(entry, command, list(args), interpreters)
    env = body.get("env", {})
    if isinstance(env, Mapping):
        for name, value in env.items():
            if isinstance(value, str) and _looks_secret(name, value):
                out.append(_secret(entry, f"/env/{jsonlines.escape_token(name)}", f"env {name}", value, name))
    for key in ("headers", "http_headers"):
        headers = body.get(key, {})
        if isinstance(headers, Mapping):
            for name, value in headers.items():
                if isinstance(value, str) and _looks_secret(name, value):
                    out.append(
                        _secret(
                            entry,
                            f"/{key}/{jsonlines.escape_token(name)}",
                            f"header {name}",
                            value,
                            secret_name(entry.name, name),
                        )
                    )
    if isinstance(url, str):
        out += _url_findings(entry, url, "/url" if "url" in body else "/serverUrl")
    return out


def _command_findings(entry: ServerEntry, command: str, args: list[str], interpreters: Sequence[str]) -> list[Finding]:
    out: list[Finding] = []
    base = PurePosixPath(command).name
    runtime = _RUNTIME_ALIASES.get(base, base)
    allowed = set(interpreters)
    launcher = LAUNCHERS.get(base)
    if not (runtime in allowed or (launcher is not None and launcher in allowed)):
        out.append(
            _finding(
                warning,
                DiagnosticCode.ADOPT_RUNTIME,
                entry,
                "/command",
                f"command {command!r} is not a runtime your policy allows ({', '.join(sorted(allowed))}"
                f"{' and their launchers' if allowed else ''})",
                fix="run the server with an allowed runtime, or add it to exec.interpreters in your policy if you trust it",
            )
        )
    spec = _package_spec(base, args)
    if spec is not None:
        index, text, pinned, how = spec
        if not pinned:
            out.append(
                _finding(
                    warning,
                    DiagnosticCode.ADOPT_UNPINNED,
                    entry,
                    f"/args/{index}",
                    f"{base} fetches {text!r} at every start without an exact version{how}",
                    fix=f"pin an exact version ({_pin_example(base, text)}); adoption resolves and shows it",
                )
            )
    for index, where, value, name in secret_args(entry.name, args):
        if where is None:
            out += _url_secrets(entry, args[index], f"/args/{index}")
        else:
            out.append(_secret(entry, f"/args/{index}", where, value, name))
    return out


def secret_args(server: str, args: Sequence[str]) -> list[tuple[int, str | None, str, str]]:
    """The arguments of ``server`` that hold a secret: (index, where (None: a URL that may hold one
    in a part), the secret's value, its secrets.toml name). A whole argument that is the value
    (``--token X``, a token-shaped value) or ``--flag=VALUE``."""
    out: list[tuple[int, str | None, str, str]] = []
    for index, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if eq and flag.startswith("-") and _SECRET_NAME.search(flag) and value and not _REFERENCE.match(value):
            out.append((index, f"argument {flag}", value, secret_name(server, flag)))
        elif (
            index > 0
            and args[index - 1].startswith("-")
            and "=" not in args[index - 1]
            and _SECRET_NAME.search(args[index - 1])
            and not arg.startswith("-")
            and not _REFERENCE.match(arg)
        ):
            out.append((index, f"argument after {args[index - 1]}", arg, secret_name(server, args[index - 1])))
        elif _SECRET_VALUE.match(arg):
            out.append((index, f"argument {index}", arg, secret_name(server, f"arg {index}")))
        elif "://" in arg:
            out.append((index, None, arg, ""))
    return out


def url_has_secret(url: str) -> bool:
    """A URL with a password, a token-shaped user name or a secret-looking query parameter."""
    try:
        parts = urlsplit(url)
        password, username = parts.password, parts.username
    except ValueError:
        return False
    if password or (username and _SECRET_VALUE.match(username)):
        return True
    return any(value and _looks_secret(key, value) for key, value in parse_qsl(parts.query))


def looks_secret(name: str, value: str) -> bool:
    """An env value (or header) that is a secret in plain text (never a ``${VAR}`` reference)."""
    return _looks_secret(name, value)


def is_reference(value: str) -> bool:
    """``${VAR}`` or ``$VAR``: the client fills it in from its environment."""
    return _REFERENCE.match(value) is not None


def _package_spec(launcher: str, args: list[str]) -> tuple[int, str, bool, str] | None:
    """(index in args, the package spec, pinned?, why not) of what a launcher fetches, or None."""
    if launcher in ("npx", "bunx", "pnpx"):
        for i, arg in enumerate(args):
            if arg.startswith("--package="):
                return i, arg.split("=", 1)[1], _npm_pinned(arg.split("=", 1)[1]), ""
            if arg in ("-p", "--package") and i + 1 < len(args):
                return i + 1, args[i + 1], _npm_pinned(args[i + 1]), ""
            if not arg.startswith("-"):
                return i, arg, _npm_pinned(arg), " (npm resolves the newest release)"
        return None
    if launcher in ("uvx", "pipx", "uv"):
        rest = args
        offset = 0
        if launcher in {"pipx", "uv"}:
            if not args or args[0] not in ("run", "tool"):
                return None
            offset = 1 if args[0] == "run" else 2
            if launcher == "uv" and args[:2] != ["tool", "run"]:
                return None
            rest = args[offset:]
        for i, arg in enumerate(rest):
            if arg.startswith("--from="):
                return offset + i, arg.split("=", 1)[1], _py_pinned(arg.split("=", 1)[1]), ""
            if arg == "--from" and i + 1 < len(rest):
                return offset + i + 1, rest[i + 1], _py_pinned(rest[i + 1]), ""
            if arg.startswith("--spec") and i + 1 < len(rest):
                return offset + i + 1, rest[i + 1], _py_pinned(rest[i + 1]), ""
            if not arg.startswith("-"):
                return offset + i, arg, _py_pinned(arg), " (PyPI resolves the newest release)"
        return None
    if launcher in ("docker", "podman"):
        if not args or args[0] != "run":
            return None
        takes_value = {"-e", "--env", "-v", "--volume", "--name", "-p", "--publish", "--network", "-u", "--user", "-w"}
        i = 1
        while i < len(args):
            arg = args[i]
            if arg in takes_value:
                i += 2
                continue
            if arg.startswith("-"):
                i += 1
                continue
            return i, arg, "@sha256:" in arg, " (a tag can be moved to another image)"
        return None
    return None


def _npm_pinned(spec: str) -> bool:
    at = spec.rfind("@")
    if at <= 0:  # "pkg" or "@scope/pkg"
        return False
    return _EXACT_NPM.match(spec[at + 1 :]) is not None


def _py_pinned(spec: str) -> bool:
    if "==" in spec:
        version = spec.split("==", 1)[1]
        return _EXACT_PY.match(version) is not None
    if "@" in spec and "://" not in spec:
        return _EXACT_PY.match(spec.rsplit("@", 1)[1]) is not None
    return False


def _pin_example(launcher: str, spec: str) -> str:
    if launcher in ("docker", "podman"):
        return f"{spec.split(':', maxsplit=1)[0]}@sha256:<digest>"
    if launcher in ("uvx", "pipx", "uv"):
        return f"{re.split(r'[=@<>~!]', spec)[0]}==<version>"
    name = spec if spec.rfind("@") <= 0 else spec[: spec.rfind("@")]
    return f"{name}@<version>"


def _looks_secret(name: str, value: str) -> bool:
    if not value or _REFERENCE.match(value) or value.startswith("${"):
        return False
    return bool(_SECRET_NAME.search(name)) or _SECRET_VALUE.match(value) is not None


def shown(value: str) -> str:
    """A secret as a finding may show it: its first :data:`SHOWN` characters and its length."""
    return f"{value[:SHOWN]}… ({len(value)} characters)" if len(value) > 2 * SHOWN else f"({len(value)} characters)"


def _secret(entry: ServerEntry, sub: str, where: str, value: str, env_name: str | None) -> Finding:
    target = env_name if env_name is not None else secret_name(entry.name, where)
    scheme, _, rest = value.partition(" ")
    visible = f"{scheme} {shown(rest)}" if scheme.lower() in {"bearer", "basic", "token"} and rest else shown(value)
    return _finding(
        error,
        DiagnosticCode.ADOPT_SECRET,
        entry,
        sub,
        f"a secret in plain text in {where}: {visible}",
        fix=f"move it out of the file: tooldir adopt puts it in secrets.toml (as {target}) with a grant for this "
        "server; rotate it if the file was ever shared",
    )


def secret_name(server: str, label: str) -> str:
    """The secrets.toml name a secret found at ``label`` (a flag, header or URL part) is moved to."""
    words = re.sub(r"[^A-Za-z0-9]+", "_", f"{server}_{label}").strip("_").upper()
    name = words if words[:1].isalpha() else f"S_{words}"
    return name[:64]


def _url_findings(entry: ServerEntry, url: str, sub: str) -> list[Finding]:
    out = _url_secrets(entry, url, sub)
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return [
            *out,
            _finding(
                error, DiagnosticCode.ADOPT_INVALID_ENTRY, entry, sub, "the url cannot be parsed", fix="fix the url"
            ),
        ]
    if parts.scheme == "http" and not _loopback(host):
        out.append(
            _finding(
                error,
                DiagnosticCode.ADOPT_NO_TLS,
                entry,
                sub,
                f"remote server {host!r} over plain http: its traffic (and any token) can be read and changed on the way",
                fix="use its https:// address",
            )
        )
    return out


def _url_secrets(entry: ServerEntry, url: str, sub: str) -> list[Finding]:
    try:
        parts = urlsplit(url)
        password = parts.password
        username = parts.username
    except ValueError:
        return []
    out = []
    if username and _SECRET_VALUE.match(username):  # https://TOKEN@host
        out.append(_secret(entry, sub, "the url's user name", username, secret_name(entry.name, "token")))
    if password:
        out.append(_secret(entry, sub, "the url's password", password, secret_name(entry.name, "password")))
    for key, value in parse_qsl(parts.query):
        if value and _looks_secret(key, value):
            out.append(_secret(entry, sub, f"the url's {key} parameter", value, secret_name(entry.name, key)))
    return out


def _loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.") or host.endswith(".localhost")


def report_json(
    files: Sequence[Mapping[str, Any]], entries: Sequence[ServerEntry], found: Sequence[Finding]
) -> dict[str, Any]:
    """The ``adopt --dry-run --json`` document."""
    return {
        "dry_run": True,
        "started": [],
        "files": list(files),
        "servers": [
            {
                "name": e.name,
                "client": e.client,
                "file": e.file,
                "line": e.line,
                "pointer": e.pointer,
                "transport": e.transport,
                "package": package_name(e.name),
                "findings": [
                    f.diagnostic.code
                    for f in found
                    if f.diagnostic.path == e.file
                    and (f.diagnostic.pointer == e.pointer or (f.diagnostic.pointer or "").startswith(e.pointer + "/"))
                ],
            }
            for e in entries
        ],
        "findings": [f.to_json() for f in found],
    }


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
