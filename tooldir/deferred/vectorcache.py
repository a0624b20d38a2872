"""A persistent cache of embedding vectors in the state folder (issue 26 item 2).

One file per model, ``<state>/vectors/<sha256(model id)[:24]>.bin``: a header line
(``tooldir-vectors-v1 <dim> <model id>``) then records of a 32-byte key (the SHA-256 of the
embedded text) and ``dim`` little-endian float32. Written atomically, 0600, in a 0700 folder
(:func:`tooldir._internal.atomic.write_atomic`), under the state folder's lock; read with
:func:`tooldir._internal.smallfile.read_private` (the user's own file in a trusted folder, at most
:data:`MAX_BYTES`). It is trusted for vectors only: a file of another model or width, a length
that is not whole records or a non-finite number makes the whole file count as empty; a vector
read is re-normalised; a file another user could have written is ignored (``problem`` says why)
and never overwritten. Size-bounded: the newest records are kept up to :data:`MAX_BYTES`.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt

from .._internal.atomic import private_dirs, write_atomic
from .._internal.smallfile import Unreadable, read_private

__all__ = ["MAX_BYTES", "VectorCache"]

log = logging.getLogger(__name__)

MAGIC = b"tooldir-vectors-v1"
KEY = 32
MAX_BYTES = 64 * 1024 * 1024  # per model file: ~30k tools at 512 dimensions
FOLDER = "vectors"

Vector = npt.NDArray[np.float32]


class VectorCache:
    """The vectors of one state folder, per model id."""

    def __init__(self, state_dir: Path, *, max_bytes: int = MAX_BYTES) -> None:
        self.state_dir = Path(state_dir)
        self.max_bytes = max_bytes
        self.problem: str | None = None  # why a file was ignored (another user's, unreadable)
        self._lock = threading.Lock()

    def path(self, model: str) -> Path:
        digest = hashlib.sha256(model.encode("utf-8", "surrogatepass")).hexdigest()[:24]
        return self.state_dir / FOLDER / f"{digest}.bin"

    def _header(self, model: str, dim: int) -> bytes:
        return MAGIC + f" {dim} ".encode() + model.encode("utf-8", "surrogatepass") + b"\n"

    def _read(self, model: str, dim: int) -> tuple[bytes, bool]:
        """(the records' bytes, whether the file may be replaced)."""
        path = self.path(model)
        try:
            data = read_private(path, self.max_bytes + 4096, what="a vector cache", owner="user", folder="trusted")
        except Unreadable as exc:
            self.problem = f"{path}: {exc.why}"
            log.warning("vector cache ignored: %s", self.problem)
            return b"", exc.problem is None  # another user's file is left alone
        if data is None:
            return b"", True
        header = self._header(model, dim)
        body = data[len(header) :]
        if not data.startswith(header) or len(body) % (KEY + 4 * dim):
            return b"", True
        return body, True

    def load(self, model: str, dim: int) -> dict[bytes, Vector]:
        """Every vector stored for ``model`` (unit rows, by text digest); {} when there is none."""
        with self._lock:
            body, _ = self._read(model, dim)
        return _parse(body, dim)

    def store(self, model: str, dim: int, vectors: Mapping[bytes, Vector]) -> None:
        """Add ``vectors`` (replacing the same keys), the newest kept within the bound. An OS error
        is logged, never raised: the cache only saves time."""
        if not vectors:
            return
        from ..state import locked  # the state folder's lock (and its trust check)

        record = KEY + 4 * dim
        try:
            with self._lock, locked(self.state_dir):
                body, writable = self._read(model, dim)
                if not writable:
                    return
                fresh = {k: np.asarray(v, dtype="<f4").reshape(dim) for k, v in vectors.items() if len(k) == KEY}
                if not all(np.isfinite(v).all() for v in fresh.values()):
                    return
                kept = [body[i : i + record] for i in range(0, len(body), record) if body[i : i + KEY] not in fresh]
                new = [k + v.tobytes() for k, v in fresh.items()]
                records = (kept + new)[-max(1, self.max_bytes // record) :]
                private_dirs(self.path(model).parent)
                write_atomic(self.path(model), [self._header(model, dim), *records])
        except OSError as exc:
            self.problem = f"{self.path(model)}: {exc.strerror or exc}"
            log.warning("vector cache not written: %s", self.problem)
        except Exception as exc:  # StateError: an untrusted state folder is not written to
            self.problem = f"{self.state_dir}: {exc}"
            log.warning("vector cache not written: %s", self.problem)


def _parse(body: bytes, dim: int) -> dict[bytes, Vector]:
    record = KEY + 4 * dim
    n = len(body) // record
    if not n:
        return {}
    raw = np.frombuffer(body, dtype=np.uint8).reshape(n, record)
    keys = raw[:, :KEY].tobytes()
    rows = np.ascontiguousarray(raw[:, KEY:]).view("<f4").reshape(n, dim).astype(np.float32)
    if not np.isfinite(rows).all():
        return {}
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    np.divide(rows, norms, out=rows, where=norms > 0)
    return {keys[i * KEY : (i + 1) * KEY]: rows[i] for i in range(n)}
