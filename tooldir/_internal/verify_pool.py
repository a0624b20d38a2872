"""Minisign verifications of a large first load, done by a helper process while the loader reads.

``cryptography`` holds the GIL through Ed25519 verification (about 100 us each, two per signed
package: as long as reading, parsing and validating the package), so threads cannot overlap it
with discovery. For a root of at least :data:`MIN_PACKAGES` packages (the crossover measured by
benchmarks/bench_signed.py on 2 cores) the loader offers every package's signature files to a
:class:`MinisignPrefetch` as it reads them; one helper process (:mod:`.verify_worker`) verifies
while the loader goes on, and :meth:`MinisignPrefetch.close` puts the answers in the loader's own
:class:`~tooldir.signatures.VerificationCache`.

The prefetch decides nothing: the trust stage still checks every package step by step and only
finds the signature check's answer in the cache, under a hash of exactly the key, signature and
message verified. Anything the helper did not answer (it could not start, died, answered out of
order) is verified in-process as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import subprocess
import sys
from collections.abc import Collection, Mapping
from pathlib import Path

from ..discover import LOCK, MINISIG
from ..signatures import (
    MINISIGN_FAILURES,
    MinisignPublicKey,
    SignatureFormatError,
    minisign_digest,
    parse_minisig,
)
from ..trust import TrustCache

#: Fewest packages in one root for which the helper pays for its start (~50 ms of Python start-up
#: and imports, overlapped with reading): measured crossover on 2 cores, see the module docstring.
MIN_PACKAGES = 500
_HEAD = struct.Struct(">I")
_ANSWER = struct.Struct(">IB")
_FLUSH = 1 << 16
_BOOT = (
    "import sys, types; pkg = types.ModuleType('tooldir'); pkg.__path__ = [sys.argv[1]]; "
    "sys.modules['tooldir'] = pkg; from tooldir._internal.verify_worker import main; sys.exit(main())"
)


class MinisignPrefetch:
    """Verify the minisign signatures of offered packages in a helper process (see the module)."""

    def __init__(
        self,
        keys: Mapping[bytes, MinisignPublicKey],
        revoked: Collection[str],
        known: Collection[bytes],
        cache: TrustCache,
    ) -> None:
        """``known``: digests of verifications user state remembers (never re-done); ``cache``:
        the loader's own (its parse memo is shared with the trust stage, its answers filled)."""
        self._keys = keys
        self._revoked = revoked
        self._known = known
        self._cache = cache
        self._digests: list[bytes] = []
        self._out = bytearray()
        self._proc: subprocess.Popen[bytes] | None = None
        self._failed = False

    @property
    def offered(self) -> int:
        """Verifications handed to the helper so far."""
        return len(self._digests)

    def offer(self, contents: Mapping[str, bytes]) -> None:
        """Queue the minisign check of one package's lock, if it has one signed by a trusted key
        that is not revoked and not verified before."""
        data, lock = contents.get(MINISIG), contents.get(LOCK)
        if data is None or lock is None or self._failed:
            return
        try:
            sig = self._cache.parse(parse_minisig, data)
        except SignatureFormatError:
            return  # the trust stage reports it
        key = self._keys.get(sig.key_id)
        if key is None or sig.algorithm != b"ED" or sig.key_ident in self._revoked:
            return
        digest = minisign_digest(sig, key, lock)
        if digest in self._known or self._cache.verifications.get(digest)[0]:
            return
        frame = b"".join(
            (
                _HEAD.pack(len(self._digests)),
                key.public,
                sig.signature,
                hashlib.blake2b(lock, digest_size=64).digest(),
                sig.global_signature,
                sig.trusted_comment,
            )
        )
        self._out += _HEAD.pack(len(frame)) + frame
        self._digests.append(digest)
        if len(self._out) >= _FLUSH:
            self._flush()

    def _flush(self) -> None:
        if self._failed or not self._out:
            return
        try:
            if self._proc is None:
                self._proc = subprocess.Popen(
                    [sys.executable, "-I", "-c", _BOOT, str(Path(__file__).resolve().parents[1])],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    cwd="/",
                    close_fds=True,
                )
            stdin = self._proc.stdin
            if stdin is None:  # pragma: no cover - created with PIPE
                raise OSError("no pipe")
            stdin.write(self._out)
        except OSError:
            self._fail()
        self._out.clear()

    def _fail(self) -> None:
        self._failed = True
        proc = self._proc
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.kill()  # our own child, by its pid
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                proc.communicate(timeout=5)

    def close(self) -> int:
        """Wait for the helper's answers and put them in the cache. Returns how many were put
        (0 when the helper failed: the trust stage then verifies in-process)."""
        self._flush()
        proc = self._proc
        if proc is None or self._failed:
            self._fail()
            return 0
        try:
            answers, _ = proc.communicate()
        except OSError:
            self._fail()
            return 0
        expected = len(self._digests)
        if proc.returncode != 0 or len(answers) != expected * _ANSWER.size:
            return 0
        results: list[tuple[bytes, str | None]] = []
        for i, (index, code) in enumerate(_ANSWER.iter_unpack(answers)):
            if index != i or (code != 0 and code not in MINISIGN_FAILURES):
                return 0  # out of order or unreadable: trust none of it
            results.append((self._digests[i], None if code == 0 else MINISIGN_FAILURES[code]))
        put = self._cache.verifications.put
        for digest, result in results:
            put(digest, result)
        return expected

    def __enter__(self) -> MinisignPrefetch:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            self._fail()


def prefetch_for(packages: int, keys: Mapping[bytes, MinisignPublicKey]) -> bool:
    """Whether a root of ``packages`` packages, with these trusted minisign keys, is worth it."""
    return packages >= MIN_PACKAGES and bool(keys) and os.cpu_count() != 1
