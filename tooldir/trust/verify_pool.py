"""Signature verifications of a large first load, done by a helper process while the loader reads.

``cryptography`` holds the GIL through Ed25519 verification (about 110 us each on this machine,
two per minisign-signed package: as long as reading, parsing and validating the package), so
threads cannot overlap it with discovery. The helper verifies with libsodium (PyNaCl, about 60 us
each) and leaves what libsodium refuses to this process (:mod:`.verify_worker`), so it keeps ahead
of the reading of a 10k root and this process seldom verifies anything itself. For a root of at least :data:`MIN_PACKAGES` packages
(the crossover measured by benchmarks/bench_signed.py on 2 cores) the loader offers every
package's signature files to a :class:`SignaturePrefetch` as it reads them; one helper process
(:mod:`.verify_worker`), started as the root's reading starts, verifies minisign and SSHSIG
signatures while the loader goes on, answering as it goes; :meth:`SignaturePrefetch.close`
collects the answers and, while the helper is still behind, verifies the last unanswered
signatures in this process (work from both ends, so a starved helper never leaves this process
idle), then puts the answers in the loader's own :class:`~tooldir.signatures.VerificationCache`.

The prefetch decides nothing: the trust stage still checks every package step by step and only
finds the signature check's answer in the cache, under a hash of exactly the key, signature and
message verified. Anything the helper did not answer (it could not start, died, answered out of
order, or found a signature not valid: then the trust stage re-verifies it for the exact reason)
is verified in-process as before.

Why a helper process of its own and not :mod:`tooldir._internal.forkpool`'s workers (issue 25
item 5, measured by benchmarks/bench_pools.py: whole cold ``tooldir scan --json`` processes of a
10k signed root, 2 cores, paired rounds, medians with min-max, at a load average of 8-12): forked
workers run only in a one-shot command that asked for them, on Linux, in a process with one
thread, so a library host (``LoadConfig.workers`` is 1 by default), ``tooldir serve`` and
``tooldir watch`` never have them. This helper is a subprocess started with ``python -I``, safe
from any process, and for them it is the only other core the Ed25519 work can use: without forked
readers, a load with it took 0.88x the wall (0.74-1.55) and 0.89x the CPU (0.87-0.97) of the same
load verifying in this process. Where both run (a one-shot command), verifying in the forked
readers instead (each verifies the packages it read with this helper's own libsodium code and
sends the answers with them; no helper) took 1.39x the wall (1.05-1.72) and 1.19x the CPU
(0.98-1.24) of readers plus helper, and a fork-context ``ProcessPoolExecutor`` reading and
verifying 1.12x the wall (0.78-1.29) and 1.14x the CPU (1.07-1.26).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import select
import struct
import subprocess
from collections.abc import Callable, Collection, Mapping

from .._internal.helper import start_helper
from ..read.discover import LOCK, MINISIG, SSHSIG
from ..signatures import (
    MINISIGN_FAILURES,
    SignatureFormatError,
    minisign_digest,
    parse_minisig,
    parse_sshsig,
    sshsig_digest,
    verify_minisign,
    verify_sshsig,
)
from .assess import Keyring, TrustCache

#: Fewest packages in one root for which the helper pays for its start (~50 ms of Python start-up
#: and imports, overlapped with reading): measured crossover on 2 cores, see the module docstring.
MIN_PACKAGES = 500
#: At the end, this process waits for the helper instead of verifying from the tail itself only
#: once at most this many are unanswered (0: never waits; a real load reaches the end with the
#: helper running for seconds, and one verification here costs less than a wait for its answer).
STEAL_ABOVE = 0
_HEAD = struct.Struct(">I")
_ANSWER = struct.Struct(">IB")
_FLUSH = 1 << 15
_WAIT = 0.05  # s: how long a silent helper is waited for at the end, once
_PIPE_BYTES = 1 << 20  # asked of the kernel (best effort): the writes of a 10k root never block
_BOOT = (
    "import sys, types; pkg = types.ModuleType('tooldir'); pkg.__path__ = [sys.argv[1]]; "
    "sys.modules['tooldir'] = pkg; from tooldir.trust.verify_worker import main; sys.exit(main())"
)


class SignaturePrefetch:
    """Verify the signatures of offered packages in a helper process (see the module)."""

    def __init__(self, keyring: Keyring, known: Collection[bytes], cache: TrustCache) -> None:
        """``keyring``: trusted and revoked keys (only signatures by trusted keys are offered);
        ``known``: digests of verifications user state remembers (never re-done); ``cache``:
        the loader's own (its parse memo is shared with the trust stage, its answers filled)."""
        self._keys = keyring.minisign
        self._ssh_keys = frozenset(s.key_blob for s in keyring.ssh)
        self._revoked = keyring.revoked
        self._known = known
        self._cache = cache
        self._digests: list[bytes] = []
        self._steal: list[Callable[[], object]] = []  # verifies job i in this process (into the cache)
        self._out = bytearray()
        self._answers = bytearray()
        self._proc: subprocess.Popen[bytes] | None = None
        self._failed = False
        self.stolen = 0  # verified by this process at the end (for benchmarks and tests)

    @property
    def offered(self) -> int:
        """Verifications handed to the helper so far."""
        return len(self._digests)

    def start(self) -> None:
        """Start the helper now, so its start-up overlaps the first packages' reading."""
        if self._proc is not None or self._failed:
            return
        try:
            self._proc = start_helper(_BOOT, bufsize=0)
        except OSError:
            self._fail()
            return
        stdin, stdout = self._proc.stdin, self._proc.stdout
        if stdin is None or stdout is None:  # pragma: no cover - created with PIPE
            self._fail()
            return
        for pipe in (stdin, stdout):
            with contextlib.suppress(OSError, AttributeError):  # F_SETPIPE_SZ: Linux only
                fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        os.set_blocking(stdout.fileno(), False)

    def offer(self, contents: Mapping[str, bytes]) -> None:
        """Queue the signature checks of one package's lock: minisign and SSHSIG signatures by a
        trusted key that is not revoked, not verified before."""
        lock = contents.get(LOCK)
        if lock is None or self._failed:
            return
        data = contents.get(MINISIG)
        if data is not None:
            self._offer_minisig(data, lock)
        data = contents.get(SSHSIG)
        if data is not None and self._ssh_keys:
            self._offer_sshsig(data, lock)
        if len(self._out) >= _FLUSH:
            self._flush()

    def _offer_minisig(self, data: bytes, lock: bytes) -> None:
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
        self._queue(
            digest,
            b"M"
            + key.public
            + sig.signature
            + hashlib.blake2b(lock, digest_size=64).digest()
            + sig.global_signature
            + sig.trusted_comment,
            lambda: verify_minisign(sig, key, lock, cache=self._cache.verifications),
        )

    def _offer_sshsig(self, data: bytes, lock: bytes) -> None:
        try:
            sig = self._cache.parse(parse_sshsig, data)
        except SignatureFormatError:
            return  # the trust stage reports it
        if sig.public_key not in self._ssh_keys or sig.key_ident in self._revoked:
            return
        digest = sshsig_digest(sig, lock)
        if digest in self._known or self._cache.verifications.get(digest)[0]:
            return
        self._queue(
            digest,
            b"S" + _HEAD.pack(len(data)) + data + lock,
            lambda: verify_sshsig(sig, lock, cache=self._cache.verifications),
        )

    def _queue(self, digest: bytes, body: bytes, steal: Callable[[], object]) -> None:
        if not self._digests:
            self.start()  # at the first signature: its start-up overlaps the reading that follows
        frame = _HEAD.pack(len(self._digests)) + body
        self._out += _HEAD.pack(len(frame)) + frame
        self._digests.append(digest)
        self._steal.append(steal)

    def _drain(self) -> bool:
        """Read the answers the helper has written so far, without waiting; False at its end."""
        proc = self._proc
        if proc is None or proc.stdout is None:
            return False
        while True:
            try:
                chunk = os.read(proc.stdout.fileno(), 1 << 16)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not chunk:
                return False
            self._answers += chunk

    def _flush(self) -> None:
        if self._failed or not self._out:
            return
        self.start()
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        data = bytes(self._out)
        self._out.clear()
        try:
            # drain first: the helper never waits on a full answer pipe while we wait on it
            self._drain()
            view = memoryview(data)
            while view:
                view = view[proc.stdin.write(view) or 0 :]
        except OSError:
            self._fail()

    def _fail(self) -> None:
        self._failed = True
        self._stop()

    def _stop(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(OSError):
                proc.kill()  # our own child, by its pid: done, or verifying what we already have
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def close(self) -> int:
        """Collect the helper's answers (verifying the last unanswered ones here while it is
        behind) and put them in the cache. Returns how many the helper answered (0 when it
        failed: the trust stage then verifies in-process)."""
        self._flush()
        proc = self._proc
        if proc is None or self._failed or proc.stdin is None:
            self._fail()
            return 0
        with contextlib.suppress(OSError):
            proc.stdin.close()
        expected = len(self._digests)
        tail = expected  # jobs [tail, expected) were verified here
        results: list[tuple[bytes, str | None]] = []
        alive = patient = True
        while len(results) < tail:
            alive = self._drain() and alive
            if not self._take(results, tail):
                break  # out of order or unreadable: trust none of the helper's answers
            if len(results) >= tail:
                break
            if alive and patient and tail - len(results) <= STEAL_ABOVE:
                patient = self._wait_readable()  # one silent for _WAIT is not waited for again
                continue
            tail -= 1  # behind (or gone): verify the last unanswered one here
            self._steal[tail]()
            self.stolen += 1
        ok = len(results) == tail
        self._stop()
        if not ok:
            return 0
        put = self._cache.verifications.put
        for digest, result in results:
            if result is not _UNKNOWN:  # 3: not valid; the trust stage re-verifies it for the reason
                put(digest, result)
        return len(results)

    def _take(self, results: list[tuple[bytes, str | None]], tail: int) -> bool:
        """Move complete answers from the buffer to ``results``; False on a bad one."""
        whole = len(self._answers) - len(self._answers) % _ANSWER.size
        for index, code in _ANSWER.iter_unpack(bytes(self._answers[:whole])):
            i = len(results)
            if i >= tail:
                break  # verified here meanwhile
            if index != i or code not in (0, 3, *MINISIGN_FAILURES):
                return False
            results.append((self._digests[i], _UNKNOWN if code == 3 else MINISIGN_FAILURES.get(code)))
        del self._answers[:whole]
        return True

    def _wait_readable(self) -> bool:
        """Wait up to ``_WAIT`` for the helper's next answers; False if none came."""
        proc = self._proc
        if proc is None or proc.stdout is None:
            return False
        try:
            readable, _, _ = select.select([proc.stdout], [], [], _WAIT)
        except (OSError, ValueError):
            return False
        return bool(readable)

    def __enter__(self) -> SignaturePrefetch:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            self._fail()
        else:
            self._stop()


_UNKNOWN = "\0unknown"  # a placeholder result never put in the cache


def prefetch_for(packages: int, keyring: Keyring) -> bool:
    """Whether a root of ``packages`` packages, with these trusted keys, is worth it."""
    return packages >= MIN_PACKAGES and bool(keyring.minisign or keyring.ssh) and os.cpu_count() != 1
