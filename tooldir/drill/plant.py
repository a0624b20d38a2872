"""Materialising drill scenarios: the arena (an isolated fake home, project and outside world in a
temporary directory), placeholder substitution, and plants for what git cannot store.

Arena paths are '/'-separated and start with one of ``project/`` (the project directory, the
drill's working directory), ``home/`` (HOME; ``home/.config`` is XDG_CONFIG_HOME), ``user/`` (the
default user tool root, ``home/.config/tooldir/tools``) or ``outside/`` (files outside every root,
e.g. targets of hostile links). Nothing can be written outside the arena: every file operation goes
through :mod:`tooldir.drill.confine` (descriptor-relative, never through a link), and every planted
link must lead inside the arena.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from .confine import (
    ArenaEscapeError,
    Confined,
    NotRunnableError,
    ScenarioError,
    UnavailableError,
)

if TYPE_CHECKING:
    from . import Plant
    from .cliargs import CommandLine

NAMESPACES = ("project", "home", "user", "outside")
SECRET_ENV = "TOOLDIR_DRILL_SECRET_TOKEN"  # noqa: S105 - the name of a fake secret


__all__ = [
    "ArenaEscapeError",
    "NotRunnableError",
    "ScenarioError",
    "UnavailableError",
]


PlantedKind = str  # "file" | "dir" | "symlink" | "fifo" | "socket" | "device" | "" (any type: a mode/owner plant)


@dataclass(frozen=True, slots=True)
class Planted:
    """What materialisation put at one arena path; the ``planted`` check compares it with the disk."""

    path: Path
    kind: PlantedKind
    sha256: str | None = None  # a file's content
    size: int | None = None  # a (sparse) big file's size
    target: str | None = None  # a symlink's text
    same_as: Path | None = None  # a hardlink: the file whose inode it shares
    mode: int | None = None  # permission bits a mode plant set
    uid: int | None = None  # the owner an owner plant set
    gid: int | None = None  # the group an owner plant set
    entries: int | None = None  # a many-entries folder holds at least this many entries


def record(planted: dict[Path, Planted], item: Planted) -> None:
    """Add ``item`` to what a drill planted: a later plant replaces what was at its path (and,
    unless it is a folder, everything below it); mode and owner plants refine the entry there."""
    before = planted.get(item.path)
    if item.kind == "" and before is not None:
        item = replace(
            before,
            mode=item.mode if item.mode is not None else before.mode,
            uid=item.uid if item.uid is not None else before.uid,
            gid=item.gid if item.gid is not None else before.gid,
        )
    elif item.kind not in ("", "dir"):  # anything else replaced what was there, folder contents included
        for path in [p for p in planted if item.path in p.parents]:
            del planted[path]
    planted[item.path] = item


@dataclass(frozen=True, slots=True)
class Arena:
    base: Path
    scenario: str  # the scenario folder, for messages
    secret: str  # a fresh token planted in the fake home; it must never show up in tool output
    port: str = "0"  # the scenario's 127.0.0.1 listener ({port}), when it declares listen = true
    serve_port: str = "0"  # the scenario's 127.0.0.1 HTTP server ({serve_port}), when it declares serve = true
    server: Any = field(default=None, compare=False, repr=False)  # that server (its request count)
    beyond: Path | None = None  # a folder outside the arena ({beyond}) that nothing may change
    links: set[Path] = field(default_factory=set, compare=False, repr=False)  # the links planted so far
    cli: CommandLine | None = field(default=None, compare=False, repr=False)  # what tooldir steps run through

    @property
    def command_line(self) -> CommandLine:
        """The ``tooldir`` command line the drill's steps run (given to :func:`make_arena`).

        Raises:
            ScenarioError: none was given (an arena made only to plant in).
        """
        if self.cli is None:
            raise ScenarioError(
                "this arena was made without a tooldir command line (make_arena(cli=...))", path=self.scenario
            )
        return self.cli

    @property
    def fs(self) -> Confined:
        """The arena's file operations: descriptor-relative, never through a link."""
        return Confined(self.base, self.scenario, self.links)

    @property
    def marker(self) -> str:
        """A token a drill tool puts on the command line of processes it leaves behind."""
        return "tooldir-drill-marker-" + self.secret.rsplit("-", 1)[-1]

    @property
    def home(self) -> Path:
        return self.base / "home"

    @property
    def config(self) -> Path:
        return self.home / ".config"

    @property
    def state(self) -> Path:
        return self.home / ".local" / "state" / "tooldir"

    @property
    def user_root(self) -> Path:
        return self.config / "tooldir" / "tools"

    @property
    def project(self) -> Path:
        return self.base / "project"

    @property
    def outside(self) -> Path:
        return self.base / "outside"

    @property
    def managed_policy(self) -> Path:
        """The managed policy the drill's tooldir reads (``/etc/tooldir/policy.toml`` on a machine):
        outside the namespaces, written only by the runner (a scenario's ``managed_policy``)."""
        return self.base / "etc" / "tooldir" / "policy.toml"

    @property
    def canary_dir(self) -> Path:
        return self.base / "canary"

    @property
    def canary(self) -> Path:
        return self.canary_dir / "ran"

    def resolve(self, arena_path: str, where: str = "") -> Path:
        """The absolute path of an arena path (lexically: ``Arena.fs`` never follows a link on it)."""
        pure = PurePosixPath(arena_path)
        parts = pure.parts
        if pure.is_absolute() or not parts or ".." in parts or parts[0] not in NAMESPACES:
            raise ArenaEscapeError(
                f"path {arena_path!r} must be relative, without '..', and start with one of {', '.join(NAMESPACES)}",
                path=self.scenario,
                where=where or "a plant or step",
                target=arena_path,
            )
        if parts[0] == "user":
            return self.user_root.joinpath(*parts[1:])
        return self.base.joinpath(*parts)

    def package_of(self, path: Path) -> Path | None:
        """The tool package folder ``path`` lies inside (below a tool root), or None."""
        for root in (self.project / ".tooldir" / "tools", self.user_root):
            if root in path.parents and path.parent != root:
                return root / path.relative_to(root).parts[0]
        return None

    def substitute(self, text: str) -> str:
        tokens = {
            "{canary}": str(self.canary),
            "{canary_dir}": str(self.canary_dir),
            "{home}": str(self.home),
            "{outside}": str(self.outside),
            "{project}": str(self.project),
            "{user_root}": str(self.user_root),
            "{state}": str(self.state),
            "{secret}": self.secret,
            "{marker}": self.marker,
            "{port}": self.port,
            "{serve_port}": self.serve_port,
        }
        if self.beyond is not None:
            tokens["{beyond}"] = str(self.beyond)
        for token, value in tokens.items():
            text = text.replace(token, value)
        return text

    def payload(self, text: str | None, hex_text: str | None) -> bytes:
        if text is not None:
            return self.substitute(text).encode("utf-8")
        try:
            return bytes.fromhex(hex_text or "")
        except ValueError:
            raise ScenarioError(f"hex content {hex_text!r} is not hexadecimal", path=self.scenario) from None

    def copy_tree(self, tree: Path) -> list[Planted]:
        """Copy ``tree/<namespace>/...`` into the arena: regular files and folders only, with
        placeholders substituted in UTF-8 files and safe modes (0755 folders, 0644/0755 files).
        Returns what it planted."""
        planted: list[Planted] = []
        fs = self.fs
        for top in sorted(tree.iterdir()):
            if top.name not in NAMESPACES or not top.is_dir() or top.is_symlink():
                raise ScenarioError(
                    f"tree/{top.name}: the tree may only hold the folders {', '.join(NAMESPACES)}", path=self.scenario
                )
            dest_top = self.resolve(top.name)
            for dirpath, dirnames, filenames in os.walk(top):
                src_dir = Path(dirpath)
                dest_dir = dest_top / src_dir.relative_to(top)
                where = f"tree/{src_dir.relative_to(tree)}"
                fs.makedirs(dest_dir, where)
                fs.chmod(dest_dir, 0o755, where)
                planted.append(Planted(dest_dir, "dir"))
                for name in dirnames + filenames:
                    src = src_dir / name
                    st = src.lstat()
                    if stat.S_ISDIR(st.st_mode):
                        continue
                    if not stat.S_ISREG(st.st_mode):
                        raise ScenarioError(
                            f"{src} is not a regular file; declare links, FIFOs and modes as [[plant]] entries",
                            path=self.scenario,
                        )
                    data = src.read_bytes()
                    with contextlib.suppress(UnicodeDecodeError):  # broken bytes are copied as they are
                        data = self.substitute(data.decode("utf-8")).encode("utf-8")
                    target = dest_dir / name
                    fs.write(target, data, where, mode=0o755 if st.st_mode & stat.S_IXUSR else 0o644)
                    planted.append(Planted(target, "file", sha256=hashlib.sha256(data).hexdigest()))
        return planted


def make_arena(base: Path, scenario: str, beyond: Path | None = None, *, cli: CommandLine | None = None) -> Arena:
    """A fresh arena in ``base`` (``cli``: the command line its ``tooldir`` steps run through)."""
    arena = Arena(base, scenario, "TOOLDIR-DRILL-SECRET-" + secrets.token_hex(8), beyond=beyond, cli=cli)
    for folder in (arena.project, arena.outside, arena.canary_dir, arena.home / ".ssh", arena.state):
        folder.mkdir(parents=True, exist_ok=True)
    (arena.home / ".ssh").chmod(0o700)
    # things a hostile tool would love to read
    key = arena.home / ".ssh" / "id_ed25519"
    key.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{arena.secret}\n-----END OPENSSH PRIVATE KEY-----\n")
    key.chmod(0o600)
    return arena


CONTROL_SCRIPT = """\
import json
import sys

request = json.load(sys.stdin)
print(json.dumps({"ok": True, "content": request["input"].get("text", "")}))
"""


BEYOND_TOOL = "real_tool"
"""The tool package in ``{beyond}/tools`` that ``{beyond}/state`` approves (the user's real approval)."""


def make_beyond(folder: Path) -> Path:
    """The world outside the arena, as a drill's ``{beyond}``: what an escaping scenario would
    change (a file, a folder with a file, a tool package, a policy file, and a state dir holding
    an approval of that package, as ``tooldir allow`` records it). Nothing may change it."""
    from ..state import APPROVALS, Approval

    package = folder / "tools" / BEYOND_TOOL
    package.mkdir(parents=True)
    manifest, script = control_files(BEYOND_TOOL)
    (package / "schema.json").write_text(manifest)
    (package / "run.py").write_text(script)
    (folder / "folder").mkdir()
    (folder / "folder" / "inside.txt").write_text("outside the arena: nothing may change this file\n")
    (folder / "canary.txt").write_text("outside the arena: nothing may change this file\n")
    (folder / "policy.toml").write_text('preset = "strict"\n')
    (folder / "state").mkdir(mode=0o700)
    approval = Approval(
        path=str(package), name=BEYOND_TOOL, digest="sha256:" + "0" * 64, time="2026-01-01T00:00:00+00:00"
    )
    document = {"version": 1, "approvals": {approval.path: approval.to_json()}}
    (folder / "state" / APPROVALS).write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    return folder


def control_files(name: str) -> tuple[str, str]:
    """(schema.json, run.py) of a known-good tool."""
    manifest = {
        "name": name,
        "description": f"Echo the given text back ({name}). A control tool of the drill.",
        "input_schema": {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "text to echo"}},
            "required": ["text"],
            "additionalProperties": False,
        },
        "risk": "read",
        "keywords": ["echo", "control"],
        "execute": {"command": ["python3", "run.py"], "timeout_s": 10, "network": False, "env": []},
    }
    return json.dumps(manifest, indent=2) + "\n", CONTROL_SCRIPT


def write_control(fs: Confined, folder: Path, name: str) -> None:
    """A known-good tool: it must still load next to the hostile ones."""
    manifest, script = control_files(name)
    where = f"control tool {name}"
    fs.write(folder / "schema.json", manifest.encode(), where, mode=0o644)
    fs.write(folder / "run.py", script.encode(), where, mode=0o644)


def apply_plant(plant: Plant, arena: Arena, where: str = "") -> Planted:
    """Create one plant; returns what the ``planted`` check must find there. ``where`` names it
    in errors (``plant[2] (symlink)``).

    Missing folders on the way are created, except a tool package's own folder: a plant inside
    a tool root (``project/.tooldir/tools/<pkg>/...``, ``user/<pkg>/...``) needs ``<pkg>`` to
    exist already (from tree/ or an earlier plant), so a scenario whose tree/ is missing fails
    instead of planting a lone manifest into a package that is not there. Nothing is done
    through a link, and a planted link must lead inside the arena (:mod:`tooldir.drill.confine`).

    Raises:
        ArenaEscapeError: the plant would act outside the arena.
        ScenarioError: it cannot be planted.
    """
    kind = plant.kind
    where = where or f"{kind} plant at {plant.path}"
    fs = arena.fs
    path = arena.resolve(plant.path, where)
    package = arena.package_of(path)
    if package is not None and fs.lstat(package, where) is None:
        raise ScenarioError(
            f"{where}: {plant.path}: its tool folder {package.relative_to(arena.base)} does not "
            "exist; tree/ (or an earlier plant) must create it",
            path=arena.scenario,
        )
    try:
        planted = _plant(plant, arena, fs, path, where)
        fs.check_links(where)
        return planted
    except PermissionError as exc:
        raise UnavailableError(
            f"needs a privilege this process lacks: {kind} plant at {plant.path} ({exc.strerror})"
        ) from None
    except OSError as exc:
        raise ScenarioError(
            f"{where}: cannot plant {kind} at {plant.path}: {exc.strerror or exc}", path=arena.scenario
        ) from None


def _plant(plant: Plant, arena: Arena, fs: Confined, path: Path, where: str) -> Planted:
    kind = plant.kind
    if kind == "symlink":
        fs.clear(path, where)
        text = arena.substitute(plant.target or "")
        fs.symlink(path, text, where)
        return Planted(path, "symlink", target=text)
    if kind == "fifo":
        fs.clear(path, where)
        fs.mkfifo(path, where)
        return Planted(path, "fifo")
    if kind == "socket":
        fs.clear(path, where)
        fs.bind_socket(path, where)
        return Planted(path, "socket")
    if kind == "device":
        fs.clear(path, where)
        fs.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 3), where)  # like /dev/null
        return Planted(path, "device")
    if kind == "hardlink":
        source = arena.resolve(plant.target or "", where)
        fs.clear(path, where)
        fs.hardlink(path, source, where)
        return Planted(path, "file", same_as=source)
    if kind == "mode":
        mode = int(plant.mode or "0", 8)
        fs.chmod(path, mode, where)
        return Planted(path, "", mode=stat.S_IMODE(mode))
    if kind == "owner":
        fs.chown(path, plant.uid if plant.uid is not None else -1, plant.gid if plant.gid is not None else -1, where)
        return Planted(path, "", uid=plant.uid, gid=plant.gid)
    if kind == "file":
        data = arena.payload(plant.text, plant.hex)
        fs.clear(path, where)
        fs.write(path, data, where, mode=0o644)
        return Planted(path, "file", sha256=hashlib.sha256(data).hexdigest())
    if kind == "big-file":
        fs.clear(path, where)
        fs.create_file(path, where, size=plant.size or 0)  # sparse: costs no disk
        return Planted(path, "file", size=plant.size or 0)
    if kind == "many-entries":
        _many_entries(fs, path, plant.count or 0, plant.entry, where)
        return Planted(path, "dir", entries=plant.count or 0)
    depth = plant.depth or 0  # deep-json
    nest = "[" * depth + "]" * depth if plant.shape == "array" else '{"a":' * depth + "1" + "}" * depth
    data = arena.substitute(plant.template or "").replace("{deep}", nest).encode("utf-8")
    fs.clear(path, where)
    fs.write(path, data, where, mode=0o644)
    return Planted(path, "file", sha256=hashlib.sha256(data).hexdigest())


def _many_entries(fs: Confined, folder: Path, count: int, entry: str, where: str) -> None:
    with fs.folder(folder, where, create=True) as fd:
        width = len(str(count))
        for i in range(count):
            name = f"e{i:0{width}d}"
            if entry == "dir":
                os.mkdir(name, 0o755, dir_fd=fd)
            else:
                os.close(os.open(name, os.O_CREAT | os.O_WRONLY | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=fd))


#: The user's trust state inside the state dir; everything else there (audit log, verified-copy
#: store, lock files) is tooldir's own bookkeeping and may change during a drill.
TRUST_STATE_FILES = ("approvals.json", "versions.json")


def fingerprint(arena: Arena) -> dict[str, str]:
    """(mode, owner, content hash or link text) of everything in HOME and outside the project,
    except the user tool root's contents and tooldir's own bookkeeping in the state dir."""
    result: dict[str, str] = {}
    for top in (arena.home, arena.outside):
        for dirpath, dirnames, filenames in os.walk(top):
            here = Path(dirpath)
            if here == arena.user_root:  # tool content, not user state: scenarios mutate it on purpose
                dirnames[:] = []
                continue
            names = dirnames + filenames
            if here == arena.state:
                dirnames[:] = []
                names = [f for f in filenames if f in TRUST_STATE_FILES]
            for name in names:
                path = here / name
                st = path.lstat()
                digest = ""
                if stat.S_ISREG(st.st_mode):
                    digest = hashlib.sha256(path.read_bytes()).hexdigest()
                elif stat.S_ISLNK(st.st_mode):
                    digest = os.readlink(path)
                result[str(path.relative_to(arena.base))] = f"{st.st_mode:o}:{st.st_uid}:{digest}"
    return result


DRILL_ENV_PREFIX = "TOOLDIR_DRILL_"
"""Environment variables the drill itself owns (its secret token); the only names a scenario's
policy may pass to a tool (``sandbox.env_allow``)."""


def drill_environment(arena: Arena, caller: Mapping[str, str]) -> dict[str, str]:
    """The whole environment a drill runs with: the caller's PATH and LANG, the arena's HOME and
    XDG folders and the drill's secret token. Nothing else of the caller's (their cloud keys,
    tokens, ``TOOLDIR_STATE_DIR``) is visible to the drill, its steps or its tools."""
    return {
        "PATH": caller.get("PATH") or "/usr/local/bin:/usr/bin:/bin",
        "LANG": caller.get("LANG") or "C.UTF-8",
        "HOME": str(arena.home),
        "XDG_CONFIG_HOME": str(arena.config),
        "XDG_STATE_HOME": str(arena.home / ".local" / "state"),
        "XDG_DATA_HOME": str(arena.home / ".local" / "share"),
        "XDG_CACHE_HOME": str(arena.home / ".cache"),
        SECRET_ENV: arena.secret,  # a secret in the user's environment; no tool may see it
    }


@contextlib.contextmanager
def isolated(arena: Arena) -> Iterator[dict[str, str]]:
    """The drill's environment (see :func:`drill_environment`; ``os.environ`` is replaced whole),
    umask, working directory and managed policy path (:attr:`Arena.managed_policy`); all restored
    afterwards. Yields the caller's environment."""
    from .. import policy

    caller = dict(os.environ)
    cwd = os.getcwd()
    env = drill_environment(arena, caller)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(arena.project)
    umask = os.umask(0o022)  # folders the drill creates must not look group-writable
    # the machine's managed policy is never read by a drill: only the scenario's, in the arena
    managed = policy.MANAGED_POLICY_PATH
    policy.MANAGED_POLICY_PATH = arena.managed_policy
    try:
        yield caller
    finally:
        policy.MANAGED_POLICY_PATH = managed
        os.umask(umask)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(caller)


def make_removable(base: Path) -> None:
    """Undo modes a scenario planted (e.g. a read-only folder) so the temp dir can be deleted."""
    for dirpath, dirnames, _ in os.walk(base):
        for name in dirnames:
            path = Path(dirpath) / name
            if not path.is_symlink():
                with contextlib.suppress(OSError):
                    path.chmod(0o700)
