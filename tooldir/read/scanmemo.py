"""A memo of ``tooldir scan``'s *output*, layered on the content index (:mod:`tooldir.read.index`): an
unchanged set of roots scanned again by a new process with the same state, options and code prints
the bytes the last scan printed, after one ``lstat`` per recorded path, without importing the
library.

Only ``tooldir scan`` (:func:`tooldir._cli.inspect.cmd_scan`) reads a memo, and only to print it.
The :class:`~tooldir.snapshot.loader.Loader`, the registry, ``run``, ``serve``, ``watch``, ``list``,
``show`` and every other command never read it: nothing a memo says can decide what is trusted,
what is offered to a model or what runs (tests/unit/index/test_scanmemo.py checks who imports
this module). Standard library only (and nothing of tooldir that imports more), so a hit never
pays for pydantic, the validators or the policy model.

One file per scan request, ``<state>/index/scan-<id>.memo`` (0600, written atomically, in the
0700 index folder): ``MAGIC``, one JSON header line, the output text (UTF-8) and the **stat
table**. The header holds

- the **key**: a sha256 over every input of the output that is not a stat: the memo format; a
  digest of *all* of tooldir's code and data files but the drill scenarios (:func:`code_digest`);
  the Python version, executable, flags and ``sys.path``; the names of the installed
  distributions (``*.dist-info``, ``*.egg-info``, ``*.pth`` on ``sys.path``: the versions of
  jsonschema-rs, pydantic, whether the token-counting extra is installed, ...); the working
  directory; the resolved options (format, strict, every root as an absolute real path, the
  project, the state dir, the policy file's path); the whole environment but ``_``, ``PWD``,
  ``OLDPWD`` and ``SHLVL`` (so every ``TOOLDIR_*`` and ``XDG_*`` variable, the locale and what
  rich reads); the policy file's bytes, or its absence; the effective user and group ids and the
  groups; the encoding of stdout;
- the exit status, the length and sha256 of the output and of the stat table, when the scan
  started (``recorded_ns``) and the newest mtime/ctime in the table.

The **stat table** has one line per path, the index's stat key (device, inode, mode, links,
owner, group, size, mtime_ns, ctime_ns) or ``-`` for a path that must not exist:

- every root: its anchor (identity, type and owner; for a user root given as a folder its full
  key), every component below it (``lstat``; the first missing one is recorded as absent), the
  root folder and, recursively, every folder and file in it. A folder whose key is unchanged
  holds the same names (creating, removing or renaming an entry changes its mtime and ctime),
  so a hit stats the recorded paths and never lists a folder, as the index does;
- the state dir and every entry in it (approvals, high-water marks, the verified store, upstream
  state, ``.lock``), but the audit log and its head (a scan never reads them) and the ``index``
  folder, of which only the content index files of these roots count (:func:`index_file`);
- the config folder (``$XDG_CONFIG_HOME/tooldir``) and every entry in it, the policy file
  (followed, as it is read), ``/etc/passwd`` and ``/etc/group`` (they decide whether a
  group-writable file is safe), and every ``sys.path`` folder and installed distribution.

A memo is used only on an exact match of the key and of every line of the table, and only when
the newest recorded mtime/ctime is older than the start of the scan that wrote it by more than
:data:`RACY_NS` (git's racy-clean rule: a file changed in the same tick as it was read would keep
its stat); a racy scan writes no memo. On any mismatch or problem (missing, corrupt, truncated,
foreign-owned or group/world-writable memo or folder) the scan runs as usual, silently, and
writes the memo again.

What a scan must be for its output to be memoized (:func:`memoizable`, checked by the writer;
the hit path checks the structural ones again):

- the content index is enabled: not ``--no-index``, not ``TOOLDIR_NO_INDEX=1`` (nor
  ``TOOLDIR_NO_SCAN_MEMO=1``, which turns off only this memo), and the load is not read-only;
- stdout is not a terminal (there the output depends on its size; ``--json`` is indented);
- no root whose source requires trust (approval, pin or signature: project tools by default)
  has a tool, and no *project* root holds anything but regular files, whatever the policy: a
  project's package folder always makes the scan read everything (its digest decides trust);
- no tool is an MCP server package or one of its tools (their listings live in user state) and
  no tool is trusted by signature (a verdict that depends on the time);
- no diagnostic says the content index or the state could not be used (``index-ignored``,
  ``state-unwritable``): the next load behaves differently.
"""

# No ``from __future__ import annotations``: typing.NamedTuple would then compile() every field's
# annotation string on every import (about 1 ms of every hit).
import hashlib
import json
import os
import stat
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from .._internal.smallfile import MAX_POLICY_BYTES, Unreadable, read_private, read_small_file

FORMAT = "tooldir-scanmemo-v1"
MAGIC = b"tooldir-scanmemo-v1\n"
INDEX_DIR = "index"  # = tooldir.read.index.INDEX_DIR
#: = tooldir.read.index.RACY_NS: a table whose newest time is this close to the scan start is not used.
RACY_NS = 2_000_000_000
#: Either set to "1" turns the memo off (the first also the content index).
ENV_DISABLE = ("TOOLDIR_NO_INDEX", "TOOLDIR_NO_SCAN_MEMO")
#: A memo larger than this is neither read nor written.
MAX_MEMO_BYTES = 1 << 28
#: A scan whose table would hold more lines than this writes no memo.
MAX_LINES = 2_000_000
#: Environment variables left out of the key: shell bookkeeping that never shapes the output.
ENV_IGNORED = frozenset({"_", "PWD", "OLDPWD", "SHLVL"})
#: State files a scan never reads (= tooldir.run.audit.AUDIT_FILE and tooldir.state.AUDIT_HEAD).
STATE_IGNORED = frozenset({"audit.jsonl", "audit.head"})
#: Diagnostics after which the next load behaves differently: never memoized.
UNSTABLE_CODES = frozenset({"index-ignored", "state-unwritable"})
PROJECT_PARTS = (".tooldir", "tools")  # = tooldir.snapshot.loader.PROJECT_PARTS
#: They decide whether a group-writable file is safe (tooldir._internal.ownership.shared_group).
ACCOUNTS = ("/etc/passwd", "/etc/group")
ABSENT = "-"

_SHARED = stat.S_IWGRP | stat.S_IWOTH
_HERE = os.path.dirname(os.path.abspath(__file__))


def enabled(env: Mapping[str, str] | None = None, *, no_index: bool = False) -> bool:
    """False with ``--no-index`` or when ``$TOOLDIR_NO_INDEX`` or ``$TOOLDIR_NO_SCAN_MEMO`` is ``1``."""
    env = os.environ if env is None else env
    return not no_index and all(env.get(name, "") != "1" for name in ENV_DISABLE)


# -- where things are (the library's rules, restated without importing it; tests keep them equal) --


def config_home(env: Mapping[str, str]) -> str:
    """= tooldir.policy.config_home: ``$XDG_CONFIG_HOME``, or ``~/.config`` when unset or relative."""
    config = env.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(config):
        config = str(Path.home() / ".config")
    return config


def state_dir(given: str | None, env: Mapping[str, str]) -> str | None:
    """= the CLI's state dir (``--state-dir``, ``$TOOLDIR_STATE_DIR``, ``$XDG_STATE_HOME/tooldir``);
    None where the library would refuse it (a relative path): the normal path then says why."""
    explicit = given if given is not None else (env.get("TOOLDIR_STATE_DIR") or None)
    if explicit is not None:
        path = os.path.expanduser(explicit)
        return path if os.path.isabs(path) else None
    base = env.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):
        base = str(Path.home() / ".local" / "state")
    return os.path.join(base, "tooldir")


def index_file(state: str, source: str, root_path: str) -> str:
    """= tooldir.read.index.index_path: the content index file of one root."""
    ident = hashlib.sha256(f"{source}\0{root_path}".encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return os.path.join(state, INDEX_DIR, f"{ident}.idx")


class Root(NamedTuple):
    """A tool root as the loader builds it (:class:`tooldir.read.discover.RootSpec`)."""

    source: str  # "user" | "project"
    anchor: str
    parts: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        return os.path.join(self.anchor, *self.parts)


class Request(NamedTuple):
    """One ``tooldir scan`` as the memo sees it: what it resolves to, and where its memo lives."""

    fmt: str
    strict: bool
    roots: tuple[Root, ...]
    state: str
    config: str  # the user's config folder ($XDG_CONFIG_HOME/tooldir)
    policy: str  # the policy file read (the default location when none was given)
    policy_given: bool
    options: tuple[tuple[str, Any], ...]  # the raw options, as parsed

    @property
    def path(self) -> str:
        ident = _digest([self.fmt, self.strict, [list(_root_json(r)) for r in self.roots], self.state, self.policy])
        return os.path.join(self.state, INDEX_DIR, f"scan-{ident[:32]}.memo")


def _root_json(root: Root) -> tuple[str, str, list[str]]:
    return root.source, root.anchor, list(root.parts)


def request(
    *,
    fmt: str,
    strict: bool,
    project: str | None,
    user_dirs: Iterable[str] | None,
    policy: str | None,
    state: str | None,
    options: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
) -> Request | None:
    """The request of a scan with these options (as ``config_from_args`` and ``make_config``
    resolve them), or None where the normal path must run (it reports what is wrong)."""
    env = os.environ if env is None else env
    resolved_state = state_dir(state, env)
    if resolved_state is None:
        return None
    roots: list[Root] = []
    if user_dirs is None:
        roots.append(Root("user", os.path.realpath(config_home(env)), ("tooldir", "tools")))
    else:
        roots.extend(Root("user", os.path.realpath(d)) for d in user_dirs)
    if project is not None:
        if not os.path.isdir(project):
            return None
        roots.append(Root("project", os.path.realpath(project), PROJECT_PARTS))
    policy_path = policy if policy is not None else os.path.join(config_home(env), "tooldir", "policy.toml")
    return Request(
        fmt,
        strict,
        tuple(roots),
        resolved_state,
        os.path.join(config_home(env), "tooldir"),
        policy_path,
        policy is not None,
        tuple(sorted((k, _plain(v)) for k, v in options.items())),
    )


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value if value is None or isinstance(value, (str, int, float, bool)) else repr(value)


# -- the key (everything that is not a stat) ----------------------------------------------------

_CODE_SKIPPED = ("__pycache__",)
_DATA_SKIPPED = os.path.join("_data", "scenarios")  # drill scenarios: never read by a scan


def code_digest(top: str = _HERE) -> str:
    """sha256 over every file of the tooldir package (relative path and bytes), but compiled
    caches and the drill scenarios: any change to tooldir's code or data is another key."""
    h = hashlib.sha256(b"tooldir-code-v1\0")
    for folder, dirs, files in os.walk(top):
        rel_folder = os.path.relpath(folder, top)
        dirs[:] = sorted(
            d for d in dirs if d not in _CODE_SKIPPED and os.path.join(rel_folder, d).lstrip("./") != _DATA_SKIPPED
        )
        for name in sorted(files):
            rel = os.path.normpath(os.path.join(rel_folder, name))
            try:
                with open(os.path.join(folder, name), "rb") as fh:
                    data = fh.read()
            except OSError:
                data = b"\0unreadable"
            h.update(f"{rel}\0{len(data)}\0".encode("utf-8", "surrogateescape"))
            h.update(data)
    return h.hexdigest()


_DIST_SUFFIXES = (".dist-info", ".egg-info", ".egg-link", ".pth")


def _distributions() -> tuple[list[list[Any]], list[str]]:
    """([sys.path folder, [installed distribution names]] ..., the paths whose stats count)."""
    found: list[list[Any]] = []
    paths: list[str] = []
    for entry in sys.path:
        folder = os.path.abspath(entry or ".")
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(_DIST_SUFFIXES))
        except OSError:
            found.append([folder, None])
            continue
        found.append([folder, names])
        paths.extend(os.path.join(folder, n) for n in names)
    return found, paths


def _policy_bytes(path: str) -> str | None:
    """sha256 of the policy file's bytes, None when it does not exist; raises OSError otherwise,
    also for what the policy load refuses (not a regular file, too large), without blocking on a
    FIFO: then the normal path runs and reports it."""
    try:
        read = read_small_file(path, MAX_POLICY_BYTES, what="a policy file")
    except Unreadable as exc:
        raise OSError(f"{path}: not a policy file the load would read: {exc.why}") from None
    return None if read is None else hashlib.sha256(read).hexdigest()


def key_material(req: Request, code: str, dists: list[list[Any]], env: Mapping[str, str] | None = None) -> list[Any]:
    """What :func:`key` hashes (a list of plain values; raises OSError for an unreadable policy)."""
    env = os.environ if env is None else env
    out = sys.stdout
    return [
        FORMAT,
        code,
        [sys.version, sys.executable, sys.implementation.cache_tag, repr(sys.flags), list(sys.path)],
        dists,
        os.getcwd(),
        [req.fmt, req.strict, [list(_root_json(r)) for r in req.roots], req.state, req.config, req.policy],
        req.policy_given,
        [list(kv) for kv in req.options],
        sorted([k, v] for k, v in env.items() if k not in ENV_IGNORED),
        _policy_bytes(req.policy),
        [os.geteuid(), os.getegid(), sorted(os.getgroups())],
        [str(getattr(out, "encoding", None)), str(getattr(out, "errors", None))],
    ]


def _digest(value: Any) -> str:
    return hashlib.sha256(
        json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    ).hexdigest()


def key(req: Request, env: Mapping[str, str] | None = None) -> tuple[str, list[str]] | None:
    """(the key, the paths of the installed distributions whose stats the table holds); None when
    it cannot be computed (an unreadable policy file: the normal path reports it)."""
    dists, paths = _distributions()
    try:
        material = key_material(req, code_digest(), dists, env)
    except OSError:
        return None
    return _digest(material), paths


# -- the stat table ------------------------------------------------------------------------------


def _key(st: os.stat_result) -> str:
    return (
        f"{st.st_dev} {st.st_ino} {st.st_mode} {st.st_nlink} {st.st_uid} {st.st_gid} {st.st_size} "
        f"{st.st_mtime_ns} {st.st_ctime_ns}"
    )


def _anchor_key(st: os.stat_result) -> str:
    return f"{st.st_dev} {st.st_ino} {stat.S_IFMT(st.st_mode)} {st.st_uid}"


class Table:
    """The stat table as lines ``<kind><path>\\0<key>``: kind ``L`` (lstat), ``S`` (stat, links
    followed) or ``A`` (an anchor: stat followed, identity, type and owner only). (Plain classes
    and named tuples here, not dataclasses: their code generation is a cost of every hit.)"""

    __slots__ = ("lines", "newest_ns")

    def __init__(self, lines: list[str], newest_ns: int = 0) -> None:
        self.lines = lines
        self.newest_ns = newest_ns  # the newest mtime/ctime of any line

    def add(self, kind: str, path: str, st: os.stat_result | None) -> None:
        if st is None:
            self.lines.append(f"{kind}{path}\0{ABSENT}")
            return
        if kind == "A":
            self.lines.append(f"A{path}\0{_anchor_key(st)}")
            return
        newest = st.st_mtime_ns if st.st_mtime_ns > st.st_ctime_ns else st.st_ctime_ns
        self.newest_ns = max(self.newest_ns, newest)
        self.lines.append(f"{kind}{path}\0{_key(st)}")
        if len(self.lines) > MAX_LINES:
            raise OverflowError(f"more than {MAX_LINES} paths to record")

    def text(self) -> str:
        return "\n".join(self.lines)


def _stat(path: str, *, follow: bool) -> os.stat_result | None:
    """The stat, None when the path does not exist; raises OSError for anything else."""
    try:
        return os.stat(path) if follow else os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _walk(table: Table, top: str) -> None:
    """Every folder and file below ``top`` (already recorded), in sorted order, ``lstat``."""
    pending = [top]
    while pending:
        folder = pending.pop()
        with os.scandir(folder) as it:
            entries = sorted(it, key=_name)
        below = []
        for entry in entries:
            st = entry.stat(follow_symlinks=False)
            table.add("L", entry.path, st)
            if stat.S_ISDIR(st.st_mode):
                below.append(entry.path)
        pending.extend(reversed(below))


def _name(entry: os.DirEntry[str]) -> str:
    return entry.name


def _record_root(table: Table, root: Root) -> None:
    if not root.parts:
        st = _stat(root.anchor, follow=True)
        table.add("S", root.anchor, st)
        if st is not None and stat.S_ISDIR(st.st_mode):
            _walk(table, root.anchor)
        return
    st = _stat(root.anchor, follow=True)
    table.add("A", root.anchor, st)
    if st is None or not stat.S_ISDIR(st.st_mode):
        return
    current = root.anchor
    for part in root.parts:
        current = os.path.join(current, part)
        st = _stat(current, follow=False)
        table.add("L", current, st)
        if st is None or not stat.S_ISDIR(st.st_mode):
            return
    _walk(table, current)


def _record_folder(table: Table, folder: str, skip: frozenset[str] = frozenset()) -> list[str]:
    """The folder and every entry directly in it (not below), but ``skip``; the names seen."""
    st = _stat(folder, follow=False)
    table.add("L", folder, st)
    if st is None or not stat.S_ISDIR(st.st_mode):
        return []
    names = sorted(os.listdir(folder))
    for name in names:
        if name not in skip:
            table.add("L", os.path.join(folder, name), _stat(os.path.join(folder, name), follow=False))
    return names


def record_state(req: Request, dist_paths: Iterable[str]) -> Table:
    """The lines of everything but the roots: state, config, policy, accounts, installation."""
    table = Table([])
    _record_folder(table, req.state, STATE_IGNORED | {INDEX_DIR})
    for root in req.roots:
        path = index_file(req.state, root.source, root.path)
        table.add("L", path, _stat(path, follow=False))
    _record_folder(table, req.config)
    table.add("S", req.policy, _stat(req.policy, follow=True))
    for path in ACCOUNTS:
        table.add("S", path, _stat(path, follow=True))
    for path in dist_paths:
        table.add("L", path, _stat(path, follow=False))
    return table


def record(req: Request, dist_paths: Iterable[str]) -> Table | None:
    """The whole stat table of ``req`` as it is now (roots first, then :func:`record_state`), or
    None when it cannot be taken (an unreadable folder, too many entries)."""
    table = Table([])
    try:
        for root in req.roots:
            _record_root(table, root)
        rest = record_state(req, dist_paths)
    except (OSError, OverflowError):
        return None
    table.lines.extend(rest.lines)
    table.newest_ns = max(table.newest_ns, rest.newest_ns)
    return table


def project_clean(lines: Iterable[str], roots: Iterable[Root]) -> bool:
    """True when no project root holds anything but regular files (so no package folder)."""
    prefixes = tuple("L" + r.path + "/" for r in roots if r.source == "project")
    if not prefixes:
        return True
    for line in lines:
        if line.startswith(prefixes):
            fields = line.rpartition("\0")[2].split(" ")
            if len(fields) != 9 or not fields[2].isdigit() or not stat.S_ISREG(int(fields[2])):
                return False
    return True


def unchanged(table_text: str) -> bool:
    """Every line of a recorded table still holds: each path has exactly its recorded key (or is
    still absent). Folders are not listed: an unchanged folder key means unchanged names."""
    out: list[str] = []
    append = out.append
    lstat, stat_ = os.lstat, os.stat
    for line in table_text.split("\n"):
        kind, path = line[0], line[1 : line.rindex("\0")]
        try:
            st = stat_(path) if kind != "L" else lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            append(f"{kind}{path}\0{ABSENT}")
            continue
        except (OSError, ValueError):
            return False
        if kind == "A":
            append(f"A{path}\0{_anchor_key(st)}")
        else:
            append(
                f"{kind}{path}\0{st.st_dev} {st.st_ino} {st.st_mode} {st.st_nlink} {st.st_uid} {st.st_gid} "
                f"{st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}"
            )
    return "\n".join(out) == table_text


# -- the file ------------------------------------------------------------------------------------


class Hit(NamedTuple):
    text: str
    status: int


def encode(key_: str, table: Table, recorded_ns: int, *, text: str, status: int, req: Request) -> bytes:
    output = text.encode("utf-8", "surrogatepass")
    table_bytes = table.text().encode("utf-8", "surrogateescape")
    head = {
        "format": FORMAT,
        "key": key_,
        "recorded_ns": recorded_ns,
        "newest_ns": table.newest_ns,
        "status": status,
        "output": len(output),
        "output_sha256": hashlib.sha256(output).hexdigest(),
        "table": len(table_bytes),
        "table_sha256": hashlib.sha256(table_bytes).hexdigest(),
        "project_roots": [r.path for r in req.roots if r.source == "project"],
    }
    return b"".join([MAGIC, json.dumps(head, separators=(",", ":")).encode(), b"\n", output, table_bytes])


class Memo(NamedTuple):
    key: str
    recorded_ns: int
    newest_ns: int
    status: int
    text: str
    table: str


def decode(data: bytes) -> Memo | None:
    """The memo in ``data``, or None for anything malformed, truncated or overlong."""
    if not data.startswith(MAGIC):
        return None
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        return None
    try:
        head = json.loads(data[len(MAGIC) : end])
        fields = (head["key"], head["recorded_ns"], head["newest_ns"], head["status"], head["output"], head["table"])
        out_sha, table_sha, fmt = head["output_sha256"], head["table_sha256"], head["format"]
    except (ValueError, KeyError, TypeError):
        return None
    key_, recorded, newest, status, out_len, table_len = fields
    if fmt != FORMAT or type(key_) is not str or not all(type(v) is int for v in fields[1:]):
        return None
    start = end + 1
    if out_len < 0 or table_len <= 0 or len(data) != start + out_len + table_len:
        return None
    output = data[start : start + out_len]
    table = data[start + out_len :]
    if hashlib.sha256(output).hexdigest() != out_sha or hashlib.sha256(table).hexdigest() != table_sha:
        return None
    try:
        return Memo(
            key_,
            recorded,
            newest,
            status,
            output.decode("utf-8", "surrogatepass"),
            table.decode("utf-8", "surrogateescape"),
        )
    except UnicodeDecodeError:
        return None


def read(path: str) -> bytes | None:
    """The memo file's bytes, None when it is missing or must not be trusted: not a regular file,
    not the user's, writable by others (the file or its folder), or larger than the bound."""
    try:
        return read_private(path, MAX_MEMO_BYTES, what="a scan memo", folder="owned")
    except Unreadable:
        return None


def lookup(req: Request, key_: str) -> Hit | None:
    """The stored output of ``req`` when the memo matches exactly (see the module docstring)."""
    data = read(req.path)
    if data is None:
        return None
    memo = decode(data)
    if memo is None or memo.key != key_:
        return None
    if memo.newest_ns >= memo.recorded_ns - RACY_NS:  # racily clean: the content may have changed unseen
        return None
    lines = memo.table.split("\n")
    if not project_clean(lines, req.roots):
        return None
    if not unchanged(memo.table):
        return None
    return Hit(memo.text, memo.status)


def memoizable(
    *,
    tools: Iterable[Any],
    diagnostics: Iterable[Any],
    trust_required: Mapping[str, bool],
    read_only: bool,
) -> bool:
    """Whether a scan's snapshot may be memoized (the conditions of the module docstring that
    depend on what the load found). ``tools``: records with ``source``, ``server``, ``upstream``
    and ``trust.method``; ``trust_required``: per source value, whether the policy requires trust."""
    if read_only:
        return False
    for t in tools:
        if trust_required.get(str(t.source), True) or t.server is not None or t.upstream is not None:
            return False
        if str(t.trust.method).startswith("signed:"):
            return False
    return not any(d.code in UNSTABLE_CODES for d in diagnostics)


class Pending(NamedTuple):
    """A scan that missed: what :func:`save` needs, taken before the load."""

    req: Request
    key: str
    dist_paths: list[str]
    started_ns: int
    state: Table | None  # the state, config and installation lines as the load found them


def prepare(req: Request, key_: str, dist_paths: list[str]) -> Pending:
    """Note when the load starts and the state it starts from (a few stats). The roots are
    walked only after the load, by :func:`save`, and only if the state did not change meanwhile
    (on a first scan the load writes the content index, so that memo could never be used)."""
    started = time.time_ns()
    try:
        state = record_state(req, dist_paths)
    except (OSError, OverflowError):
        state = None
    return Pending(req, key_, dist_paths, started, state)


def save(pending: Pending, text: str, status: int) -> bool:
    """Write the memo of a scan that printed ``text`` and ends with ``status``; False when it may
    not be written or cannot be. Never raises for I/O.

    The stat table is taken now, after the load: it is sound because no recorded time may be
    newer than :data:`RACY_NS` before the load started. A file changed while the load ran (or
    just before) has a newer ctime, so that scan writes no memo; a file changed earlier was read
    by the load as it is now. It is not written either when the state, config or installation
    changed during the load (the load wrote the content index: the next scan sees another
    state), a project root holds a folder, or the table or memo is too large."""
    req = pending.req
    if pending.state is None:
        return False
    try:
        after = record_state(req, pending.dist_paths)
    except (OSError, OverflowError):
        return False
    if after.lines != pending.state.lines:
        return False
    table = record(req, pending.dist_paths)
    if table is None or table.newest_ns >= pending.started_ns - RACY_NS:
        return False
    if table.lines[len(table.lines) - len(after.lines) :] != after.lines or not project_clean(table.lines, req.roots):
        return False
    data = encode(pending.key, table, pending.started_ns, text=text, status=status, req=req)
    if len(data) > MAX_MEMO_BYTES:
        return False
    from .._internal.atomic import private_dirs, write_atomic  # standard library only

    path = Path(req.path)
    try:
        private_dirs(path.parent)
        write_atomic(path, data)
    except OSError:
        return False
    return True
