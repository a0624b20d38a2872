"""Materialising drill scenarios: the arena (an isolated fake home, project and outside world in a
temporary directory), placeholder substitution, and plants for what git cannot store.

Arena paths are '/'-separated and start with one of ``project/`` (the project directory, the
drill's working directory), ``home/`` (HOME; ``home/.config`` is XDG_CONFIG_HOME), ``user/`` (the
default user tool root, ``home/.config/tooldir/tools``) or ``outside/`` (files outside every root,
e.g. targets of hostile links). Nothing can be written outside the arena.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import socket
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    from . import Plant

NAMESPACES = ("project", "home", "user", "outside")
SECRET_ENV = "TOOLDIR_DRILL_SECRET_TOKEN"  # noqa: S105 - the name of a fake secret


class NotRunnableError(Exception):
    """The tooldir machinery a drill needs does not exist in this build (the drill fails)."""


class UnavailableError(Exception):
    """A system facility the drill needs is missing on this machine (root, namespaces, ...)."""


class ScenarioError(ConfigError):
    """A scenario is unusable (the drill author's mistake, exit code 2)."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path

    def diagnostics(self) -> str:
        return f"invalid scenario {self.path}: {self.message}"


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
    def canary_dir(self) -> Path:
        return self.base / "canary"

    @property
    def canary(self) -> Path:
        return self.canary_dir / "ran"

    def resolve(self, arena_path: str) -> Path:
        pure = PurePosixPath(arena_path)
        parts = pure.parts
        if pure.is_absolute() or not parts or ".." in parts or parts[0] not in NAMESPACES:
            raise ScenarioError(
                f"path {arena_path!r} must be relative, without '..', and start with one of {', '.join(NAMESPACES)}",
                path=self.scenario,
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
        }
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
        for top in sorted(tree.iterdir()):
            if top.name not in NAMESPACES or not top.is_dir() or top.is_symlink():
                raise ScenarioError(
                    f"tree/{top.name}: the tree may only hold the folders {', '.join(NAMESPACES)}", path=self.scenario
                )
            dest_top = self.resolve(top.name)
            for dirpath, dirnames, filenames in os.walk(top):
                src_dir = Path(dirpath)
                dest_dir = dest_top / src_dir.relative_to(top)
                dest_dir.mkdir(parents=True, exist_ok=True)
                dest_dir.chmod(0o755)
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
                    target.write_bytes(data)
                    target.chmod(0o755 if st.st_mode & stat.S_IXUSR else 0o644)
                    planted.append(Planted(target, "file", sha256=hashlib.sha256(data).hexdigest()))
        return planted


def make_arena(base: Path, scenario: str) -> Arena:
    arena = Arena(base, scenario, "TOOLDIR-DRILL-SECRET-" + secrets.token_hex(8))
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


def write_control(folder: Path, name: str) -> None:
    """A known-good tool: it must still load next to the hostile ones."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
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
    (folder / "schema.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (folder / "run.py").write_text(CONTROL_SCRIPT)
    for path in (folder / "schema.json", folder / "run.py"):
        path.chmod(0o644)


def apply_plant(plant: Plant, arena: Arena) -> Planted:
    """Create one plant; returns what the ``planted`` check must find there.

    Missing folders on the way are created, except a tool package's own folder: a plant inside
    a tool root (``project/.tooldir/tools/<pkg>/...``, ``user/<pkg>/...``) needs ``<pkg>`` to
    exist already (from tree/ or an earlier plant), so a scenario whose tree/ is missing fails
    instead of planting a lone manifest into a package that is not there.
    """
    path = arena.resolve(plant.path)
    package = arena.package_of(path)
    if package is not None and not os.path.lexists(package):
        raise ScenarioError(
            f"{plant.kind} plant at {plant.path}: its tool folder {package.relative_to(arena.base)} does not "
            "exist; tree/ (or an earlier plant) must create it",
            path=arena.scenario,
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    kind = plant.kind
    try:
        if kind == "symlink":
            _replace(path)
            text = arena.substitute(plant.target or "")
            os.symlink(text, path)
            return Planted(path, "symlink", target=text)
        if kind == "fifo":
            _replace(path)
            os.mkfifo(path, 0o644)
            return Planted(path, "fifo")
        if kind == "socket":
            _replace(path)
            _bind_socket(path)
            return Planted(path, "socket")
        if kind == "device":
            _replace(path)
            os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 3))  # like /dev/null
            return Planted(path, "device")
        if kind == "hardlink":
            _replace(path)
            source = arena.resolve(plant.target or "")
            os.link(source, path)
            return Planted(path, "file", same_as=source)
        if kind == "mode":
            mode = int(plant.mode or "0", 8)
            path.chmod(mode)
            return Planted(path, "", mode=stat.S_IMODE(mode))
        if kind == "owner":
            os.lchown(path, plant.uid if plant.uid is not None else -1, plant.gid if plant.gid is not None else -1)
            return Planted(path, "", uid=plant.uid, gid=plant.gid)
        if kind == "file":
            _replace(path)
            data = arena.payload(plant.text, plant.hex)
            path.write_bytes(data)
            path.chmod(0o644)
            return Planted(path, "file", sha256=hashlib.sha256(data).hexdigest())
        if kind == "big-file":
            _replace(path)
            with path.open("wb") as fh:
                fh.truncate(plant.size or 0)  # sparse: costs no disk
            path.chmod(0o644)
            return Planted(path, "file", size=plant.size or 0)
        if kind == "many-entries":
            _many_entries(path, plant.count or 0, plant.entry)
            return Planted(path, "dir", entries=plant.count or 0)
        depth = plant.depth or 0  # deep-json
        nest = "[" * depth + "]" * depth if plant.shape == "array" else '{"a":' * depth + "1" + "}" * depth
        _replace(path)
        data = arena.substitute(plant.template or "").replace("{deep}", nest).encode("utf-8")
        path.write_bytes(data)
        path.chmod(0o644)
        return Planted(path, "file", sha256=hashlib.sha256(data).hexdigest())
    except PermissionError as exc:
        raise UnavailableError(
            f"needs a privilege this process lacks: {kind} plant at {plant.path} ({exc.strerror})"
        ) from None
    except OSError as exc:
        raise ScenarioError(
            f"cannot plant {kind} at {plant.path}: {exc.strerror or exc}", path=arena.scenario
        ) from None


def _replace(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _bind_socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # bind relative to the parent folder: AF_UNIX paths are limited to ~108 bytes
        parent_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            sock.bind(f"/proc/self/fd/{parent_fd}/{path.name}")
        finally:
            os.close(parent_fd)
    finally:
        sock.close()


def _many_entries(folder: Path, count: int, entry: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        width = len(str(count))
        for i in range(count):
            name = f"e{i:0{width}d}"
            if entry == "dir":
                os.mkdir(name, 0o755, dir_fd=fd)
            else:
                os.close(os.open(name, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


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
    umask and working directory; all restored afterwards. Yields the caller's environment."""
    caller = dict(os.environ)
    cwd = os.getcwd()
    env = drill_environment(arena, caller)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(arena.project)
    umask = os.umask(0o022)  # folders the drill creates must not look group-writable
    try:
        yield caller
    finally:
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
