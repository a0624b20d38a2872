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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from .errors import ConfigError

if TYPE_CHECKING:
    from .drill import Plant

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


@dataclass(frozen=True, slots=True)
class Arena:
    base: Path
    scenario: str  # the scenario folder, for messages
    secret: str  # a fresh token planted in the fake home; it must never show up in tool output

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

    def copy_tree(self, tree: Path) -> None:
        """Copy ``tree/<namespace>/...`` into the arena: regular files and folders only, with
        placeholders substituted in UTF-8 files and safe modes (0755 folders, 0644/0755 files)."""
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


def apply_plant(plant: Plant, arena: Arena) -> None:
    path = arena.resolve(plant.path)
    path.parent.mkdir(parents=True, exist_ok=True)
    kind = plant.kind
    try:
        if kind == "symlink":
            _replace(path)
            os.symlink(arena.substitute(plant.target or ""), path)
        elif kind == "fifo":
            _replace(path)
            os.mkfifo(path, 0o644)
        elif kind == "socket":
            _replace(path)
            _bind_socket(path)
        elif kind == "device":
            _replace(path)
            os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 3))  # like /dev/null
        elif kind == "hardlink":
            _replace(path)
            os.link(arena.resolve(plant.target or ""), path)
        elif kind == "mode":
            path.chmod(int(plant.mode or "0", 8))
        elif kind == "owner":
            os.lchown(path, plant.uid if plant.uid is not None else -1, plant.gid if plant.gid is not None else -1)
        elif kind == "file":
            _replace(path)
            path.write_bytes(arena.payload(plant.text, plant.hex))
            path.chmod(0o644)
        elif kind == "big-file":
            _replace(path)
            with path.open("wb") as fh:
                fh.truncate(plant.size or 0)  # sparse: costs no disk
            path.chmod(0o644)
        elif kind == "many-entries":
            _many_entries(path, plant.count or 0, plant.entry)
        elif kind == "deep-json":
            depth = plant.depth or 0
            nest = "[" * depth + "]" * depth if plant.shape == "array" else '{"a":' * depth + "1" + "}" * depth
            _replace(path)
            path.write_bytes(arena.substitute(plant.template or "").replace("{deep}", nest).encode("utf-8"))
            path.chmod(0o644)
    except PermissionError as exc:
        raise UnavailableError(
            f"{kind} plant at {plant.path} needs a privilege this process lacks ({exc.strerror})"
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


@contextlib.contextmanager
def isolated(arena: Arena) -> Iterator[None]:
    """HOME, XDG dirs, umask and working directory of the drill; restored afterwards."""
    keys = (
        "HOME",
        "XDG_CONFIG_HOME",
        "XDG_STATE_HOME",
        "XDG_DATA_HOME",
        "XDG_CACHE_HOME",
        "TOOLDIR_STATE_DIR",
        SECRET_ENV,
    )
    saved = {k: os.environ.get(k) for k in keys}
    cwd = os.getcwd()
    os.environ.update(
        HOME=str(arena.home),
        XDG_CONFIG_HOME=str(arena.config),
        XDG_STATE_HOME=str(arena.home / ".local" / "state"),
        XDG_DATA_HOME=str(arena.home / ".local" / "share"),
        XDG_CACHE_HOME=str(arena.home / ".cache"),
    )
    os.environ[SECRET_ENV] = arena.secret  # a secret in the user's environment; no tool may see it
    os.environ.pop("TOOLDIR_STATE_DIR", None)
    os.chdir(arena.project)
    umask = os.umask(0o022)  # folders the drill creates must not look group-writable
    try:
        yield
    finally:
        os.umask(umask)
        os.chdir(cwd)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def make_removable(base: Path) -> None:
    """Undo modes a scenario planted (e.g. a read-only folder) so the temp dir can be deleted."""
    for dirpath, dirnames, _ in os.walk(base):
        for name in dirnames:
            path = Path(dirpath) / name
            if not path.is_symlink():
                with contextlib.suppress(OSError):
                    path.chmod(0o700)
