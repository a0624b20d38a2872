"""Signature formats, parsed by hand and verified with ``cryptography`` (no shelling out).

- **minisign**: public keys (``RW...`` base64 lines), ``.minisig`` files with the prehashed ``ED``
  algorithm (BLAKE2b-512 of the message, Ed25519), including the *global* signature over the
  signature and the trusted comment. The legacy non-prehashed ``Ed`` algorithm is refused.
- **OpenSSH** ``SSHSIG`` (``ssh-keygen -Y sign``): Ed25519, ECDSA (nistp256/384/521) and RSA with
  SHA-2 signatures, namespace checked by the caller (``tooldir``).
- Keys are made and lock files signed in :mod:`tooldir.trust.keys`.
- **allowed_signers** files (``principals [options] keytype key [comment]``) with ``namespaces``,
  ``valid-after`` and ``valid-before``; ``cert-authority`` lines are not supported (reported). A
  line OpenSSH refuses (an option twice, an unquoted value, ``valid-before`` not after
  ``valid-after``) is refused here too, that line only, reported as ``<file> line N: ...``.

Key identities are strings used in state and revocation lists: ``minisign:<16 hex key id>`` and
``ssh:SHA256:<base64 fingerprint>``. Verification results are remembered by a hash of key, signature
and message in a :class:`VerificationCache` the caller owns (one per ``Loader``; nothing is shared
through module state), so a rebuild never re-verifies unchanged packages. No I/O here: parsing and
verification are pure, and the allowed_signers file is read by the loader (the I/O edge).
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hashlib
import re
import struct
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

# ``cryptography`` (~15-35 ms to import) is loaded by the functions that verify, on first use: a
# load of unsigned packages (``scan --json`` of a user root) never needs it.
if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

NAMESPACE = "tooldir"


class SignatureFormatError(ValueError):
    """A key, signature or allowed_signers entry that cannot be parsed."""


def _b64(text: str | bytes, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureFormatError(f"{what} is not valid base64") from None


# ---------------------------------------------------------------------------------------------
# minisign

_ED = b"Ed"  # key algorithm, and the legacy (non-prehashed) signature algorithm
_ED_PREHASHED = b"ED"
_UNTRUSTED = "untrusted comment: "
_TRUSTED = "trusted comment: "


def _minisign_id_hex(key_id: bytes) -> str:
    """A key id as minisign prints it (a little-endian 64-bit number in hex)."""
    return key_id[::-1].hex().upper()


@dataclass(frozen=True, slots=True)
class MinisignPublicKey:
    key_id: bytes  # 8 bytes as stored
    public: bytes  # 32-byte Ed25519 key

    @property
    def id_hex(self) -> str:
        return _minisign_id_hex(self.key_id)

    @property
    def ident(self) -> str:
        return f"minisign:{self.id_hex}"

    def line(self) -> str:
        return base64.b64encode(_ED + self.key_id + self.public).decode()


def parse_minisign_public_key(text: str) -> MinisignPublicKey:
    """A public key: the base64 line (``RW...``) or a whole ``.pub`` file.

    Raises:
        SignatureFormatError
    """
    lines = [ln.strip() for ln in text.strip().splitlines()]
    if len(lines) == 2 and lines[0].startswith(_UNTRUSTED.strip()):
        lines = lines[1:]
    if len(lines) != 1:
        raise SignatureFormatError("a minisign public key is one base64 line (optionally after an untrusted comment)")
    raw = _b64(lines[0], "minisign public key")
    if len(raw) != 42 or raw[:2] != _ED:
        raise SignatureFormatError("not a minisign Ed25519 public key (expected 42 bytes starting with 'Ed')")
    return MinisignPublicKey(raw[2:10], raw[10:])


@dataclass(frozen=True, slots=True)
class MinisignSignature:
    algorithm: bytes
    key_id: bytes
    signature: bytes
    trusted_comment: bytes
    global_signature: bytes

    @property
    def key_ident(self) -> str:
        return f"minisign:{_minisign_id_hex(self.key_id)}"


def parse_minisig(data: bytes) -> MinisignSignature:
    """A ``.minisig`` file: untrusted comment, signature, trusted comment, global signature.

    Raises:
        SignatureFormatError
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SignatureFormatError("signature file is not UTF-8 text") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [ln.removesuffix("\r") for ln in lines]
    if len(lines) != 4:
        raise SignatureFormatError(f"a minisign signature has 4 lines, this one has {len(lines)}")
    if not lines[0].startswith(_UNTRUSTED):
        raise SignatureFormatError("line 1 must start with 'untrusted comment: '")
    if not lines[2].startswith(_TRUSTED):
        raise SignatureFormatError("line 3 must start with 'trusted comment: '")
    raw = _b64(lines[1], "line 2 (the signature)")
    if len(raw) != 74:
        raise SignatureFormatError(f"line 2 must decode to 74 bytes, not {len(raw)}")
    if raw[:2] not in (_ED, _ED_PREHASHED):
        raise SignatureFormatError(f"unknown signature algorithm {raw[:2]!r}")
    glob = _b64(lines[3], "line 4 (the trusted comment signature)")
    if len(glob) != 64:
        raise SignatureFormatError(f"line 4 must decode to 64 bytes, not {len(glob)}")
    return MinisignSignature(raw[:2], raw[2:10], raw[10:], lines[2][len(_TRUSTED) :].encode("utf-8"), glob)


def verify_minisign(
    sig: MinisignSignature,
    key: MinisignPublicKey,
    message: bytes,
    known: Collection[bytes] = frozenset(),
    cache: VerificationCache | None = None,
) -> str | None:
    """None if ``sig`` is a valid prehashed signature of ``message`` by ``key`` with a valid trusted
    comment; otherwise the reason. ``known``: digests of verifications that succeeded before;
    ``cache``: where results are remembered (none: verify every time)."""
    if sig.key_id != key.key_id:
        return f"signed by key {sig.key_ident}, not {key.ident}"
    if sig.algorithm != _ED_PREHASHED:
        return "legacy non-prehashed minisign signature ('Ed'); only prehashed 'ED' signatures are accepted"
    return _cached(
        b"minisign",
        key.public,
        _minisig_bytes(sig),
        message,
        lambda: _verify_minisign(sig, key, message),
        known=known,
        cache=cache,
    )


def _minisig_bytes(sig: MinisignSignature) -> bytes:
    return sig.algorithm + sig.key_id + sig.signature + b"\n" + sig.trusted_comment + b"\n" + sig.global_signature


#: Why a minisign verification failed, by the step that failed (1: the lock, 2: the trusted
#: comment); the helper process of :mod:`tooldir.trust.verify_pool` answers these numbers.
MINISIGN_FAILURES = {
    1: "the signature does not match the lock (tampered lock or signature)",
    2: "the trusted comment's signature does not match (tampered trusted comment)",
}


def minisign_digest(sig: MinisignSignature, key: MinisignPublicKey, message: bytes) -> bytes:
    """The verification-cache digest of checking ``sig`` by ``key`` over ``message``."""
    return verification_digest(b"minisign", key.public, _minisig_bytes(sig), message)


def _verify_minisign(sig: MinisignSignature, key: MinisignPublicKey, message: bytes) -> str | None:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric import ed25519

    pub = ed25519.Ed25519PublicKey.from_public_bytes(key.public)
    try:
        pub.verify(sig.signature, hashlib.blake2b(message, digest_size=64).digest())
    except InvalidSignature:
        return MINISIGN_FAILURES[1]
    try:
        pub.verify(sig.global_signature, sig.signature + sig.trusted_comment)
    except InvalidSignature:
        return MINISIGN_FAILURES[2]
    return None


# ---------------------------------------------------------------------------------------------
# OpenSSH SSHSIG

_ARMOR_BEGIN = "-----BEGIN SSH SIGNATURE-----"
_ARMOR_END = "-----END SSH SIGNATURE-----"
_MAGIC = b"SSHSIG"
#: SSH key or signature type -> the name of its hash in ``cryptography.hazmat.primitives.hashes``
_ECDSA_HASH = {"ecdsa-sha2-nistp256": "SHA256", "ecdsa-sha2-nistp384": "SHA384", "ecdsa-sha2-nistp521": "SHA512"}
_RSA_HASH = {"rsa-sha2-256": "SHA256", "rsa-sha2-512": "SHA512"}
KEY_TYPES = frozenset({"ssh-ed25519", "ssh-rsa", *_ECDSA_HASH})


class _Wire:
    """Reader for the SSH wire encoding (RFC 4251), bounds-checked."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise SignatureFormatError(f"{self.what} is truncated")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def uint32(self) -> int:
        value: int = struct.unpack(">I", self.take(4))[0]
        return value

    def string(self) -> bytes:
        return self.take(self.uint32())

    def text(self) -> str:
        try:
            return self.string().decode("ascii")
        except UnicodeDecodeError:
            raise SignatureFormatError(f"{self.what} has a non-ASCII name") from None

    def mpint(self) -> int:
        return int.from_bytes(self.string(), "big", signed=True)

    def end(self) -> None:
        if self.pos != len(self.data):
            raise SignatureFormatError(f"{self.what} has {len(self.data) - self.pos} trailing bytes")


def _ssh_string(value: bytes) -> bytes:
    return struct.pack(">I", len(value)) + value


@dataclass(frozen=True, slots=True)
class SshSignature:
    public_key: bytes  # the wire blob of the signer's key
    namespace: str
    hash_algorithm: str
    sig_format: str
    sig_blob: bytes
    signed_prefix: bytes  # the signed data without H(message)

    @property
    def key_type(self) -> str:
        return _Wire(self.public_key, "public key").text()

    @property
    def fingerprint(self) -> str:
        return ssh_fingerprint(self.public_key)

    @property
    def key_ident(self) -> str:
        return f"ssh:{self.fingerprint}"


def ssh_fingerprint(blob: bytes) -> str:
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def parse_sshsig(data: bytes) -> SshSignature:
    """An armored ``ssh-keygen -Y sign`` signature.

    Raises:
        SignatureFormatError
    """
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise SignatureFormatError("SSH signature file is not ASCII text") from None
    lines = [ln.strip() for ln in text.strip().splitlines()]
    if len(lines) < 3 or lines[0] != _ARMOR_BEGIN or lines[-1] != _ARMOR_END:
        raise SignatureFormatError(f"an SSH signature is armored between {_ARMOR_BEGIN} and {_ARMOR_END}")
    blob = _b64("".join(lines[1:-1]), "SSH signature")
    w = _Wire(blob, "SSH signature")
    if w.take(6) != _MAGIC:
        raise SignatureFormatError("SSH signature does not start with SSHSIG")
    version = w.uint32()
    if version != 1:
        raise SignatureFormatError(f"SSH signature version {version} is not supported (only 1)")
    public_key, namespace_raw, reserved, hash_alg_raw, signature = (
        w.string(),
        w.string(),
        w.string(),
        w.string(),
        w.string(),
    )
    w.end()
    try:
        namespace, hash_alg = namespace_raw.decode("ascii"), hash_alg_raw.decode("ascii")
    except UnicodeDecodeError:
        raise SignatureFormatError("SSH signature namespace or hash name is not ASCII") from None
    if hash_alg not in ("sha256", "sha512"):
        raise SignatureFormatError(f"SSH signature hash {hash_alg!r} is not sha256 or sha512")
    sw = _Wire(signature, "SSH signature blob")
    sig_format, sig_blob = sw.text(), sw.string()
    sw.end()
    key_type = _Wire(public_key, "SSH public key").text()
    if key_type not in KEY_TYPES:
        raise SignatureFormatError(f"SSH key type {key_type!r} is not supported (ed25519, ecdsa, rsa)")
    prefix = _MAGIC + _ssh_string(namespace_raw) + _ssh_string(reserved) + _ssh_string(hash_alg_raw)
    return SshSignature(public_key, namespace, hash_alg, sig_format, sig_blob, prefix)


def load_ssh_key(blob: bytes) -> ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey | rsa.RSAPublicKey:
    """A public key from its wire blob.

    Raises:
        SignatureFormatError
    """
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    key_type = _Wire(blob, "SSH public key").text()
    line = key_type.encode() + b" " + base64.b64encode(blob)
    try:
        key = serialization.load_ssh_public_key(line)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise SignatureFormatError(f"bad {key_type} public key: {exc}") from None
    if not isinstance(key, ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey | rsa.RSAPublicKey):
        raise SignatureFormatError(f"SSH key type {key_type!r} is not supported")
    return key


def verify_sshsig(
    sig: SshSignature, message: bytes, known: Collection[bytes] = frozenset(), cache: VerificationCache | None = None
) -> str | None:
    """None if ``sig`` is a valid signature of ``message`` by its embedded key; otherwise the reason.
    The caller checks the namespace and whether the key is trusted."""
    return _cached(
        b"sshsig", sig.public_key, _sshsig_bytes(sig), message,
        lambda: _verify_sshsig(sig, message), known=known, cache=cache,
    )  # fmt: skip


def _sshsig_bytes(sig: SshSignature) -> bytes:
    return sig.signed_prefix + sig.sig_format.encode() + sig.sig_blob


def sshsig_digest(sig: SshSignature, message: bytes) -> bytes:
    """The verification-cache digest of checking ``sig`` over ``message``."""
    return verification_digest(b"sshsig", sig.public_key, _sshsig_bytes(sig), message)


def _verify_sshsig(sig: SshSignature, message: bytes) -> str | None:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    try:
        key = load_ssh_key(sig.public_key)
    except SignatureFormatError as exc:
        return str(exc)
    digest = (hashlib.sha256 if sig.hash_algorithm == "sha256" else hashlib.sha512)(message).digest()
    signed = sig.signed_prefix + _ssh_string(digest)
    key_type = sig.key_type
    try:
        if isinstance(key, ed25519.Ed25519PublicKey):
            if sig.sig_format != "ssh-ed25519":
                return f"signature format {sig.sig_format!r} does not fit an Ed25519 key"
            key.verify(sig.sig_blob, signed)
        elif isinstance(key, ec.EllipticCurvePublicKey):
            if sig.sig_format != key_type:
                return f"signature format {sig.sig_format!r} does not fit a {key_type} key"
            w = _Wire(sig.sig_blob, "ECDSA signature")
            r, s = w.mpint(), w.mpint()
            w.end()
            key.verify(encode_dss_signature(r, s), signed, ec.ECDSA(getattr(hashes, _ECDSA_HASH[key_type])()))
        else:
            if sig.sig_format not in _RSA_HASH:
                return f"RSA signature format {sig.sig_format!r} is not accepted (rsa-sha2-256 or rsa-sha2-512)"
            if key.key_size < 2048:
                return f"RSA key of {key.key_size} bits is too small (at least 2048)"
            key.verify(sig.sig_blob, signed, padding.PKCS1v15(), getattr(hashes, _RSA_HASH[sig.sig_format])())
    except InvalidSignature:
        return "the signature does not match the lock (tampered lock or signature)"
    except ValueError as exc:  # SignatureFormatError, or a malformed ECDSA/RSA signature value
        return f"malformed signature: {exc}"
    return None


# ---------------------------------------------------------------------------------------------
# allowed_signers


@dataclass(frozen=True, slots=True)
class AllowedSigner:
    principals: tuple[str, ...]
    key_blob: bytes
    namespaces: tuple[str, ...] | None  # None: every namespace (OpenSSH semantics)
    valid_after: datetime | None
    valid_before: datetime | None
    line: int

    @property
    def fingerprint(self) -> str:
        return ssh_fingerprint(self.key_blob)

    def allows_namespace(self, namespace: str) -> bool:
        if self.namespaces is None:
            return True
        allowed = False
        for pattern in self.namespaces:
            negated = pattern.startswith("!")
            if fnmatch.fnmatchcase(namespace, pattern.removeprefix("!")):
                if negated:
                    return False
                allowed = True
        return allowed

    def valid_at(self, now: datetime) -> str | None:
        """None if valid at ``now``; otherwise why not."""
        if self.valid_after is not None and now < self.valid_after:
            return f"allowed_signers line {self.line}: key is valid only after {self.valid_after.isoformat()}"
        if self.valid_before is not None and now >= self.valid_before:
            return f"allowed_signers line {self.line}: key was valid only before {self.valid_before.isoformat()}"
        return None


_TOKEN = re.compile(r'(?:[^\s"]+|"[^"]*")+')
_OPTION_SPLIT = re.compile(r',(?=(?:[^"]*"[^"]*")*[^"]*$)')
_SSH_TIME = re.compile(r"^(\d{8})(\d{4}(\d{2})?)?(Z?)$")


def _ssh_time(value: str) -> datetime:
    m = _SSH_TIME.match(value)
    if not m:
        raise SignatureFormatError(f"time {value!r} is not YYYYMMDD[HHMM[SS]][Z]")
    digits = m.group(1) + (m.group(2) or "0000") + ("" if m.group(3) else "00")
    try:
        parsed = datetime.strptime(digits, "%Y%m%d%H%M%S")
    except ValueError:
        raise SignatureFormatError(f"time {value!r} is not a valid date") from None
    # like OpenSSH: 'Z' means UTC, otherwise the local time zone
    return parsed.replace(tzinfo=UTC) if m.group(4) else parsed.astimezone(UTC)


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


_SIGNER_OPTIONS = ("namespaces", "valid-after", "valid-before")


def _signer_options(field: str) -> dict[str, str]:
    """The options field of an allowed_signers line, refused the way OpenSSH's ``sshsigopt_parse``
    refuses it: an option given twice (``multiple "namespaces" clauses``: which one would count?),
    a value without double quotes, an unknown option. Names compare case-insensitively. The
    refusal is for the whole line, as in ``ssh-keygen -Y verify``: that line's key is not trusted,
    the other lines still count.

    Raises:
        SignatureFormatError
    """
    options: dict[str, str] = {}
    for option in _OPTION_SPLIT.split(field):
        name, eq, value = option.partition("=")
        name = name.lower()
        if name == "cert-authority" and not eq:
            raise SignatureFormatError("cert-authority lines are not supported")
        if name not in _SIGNER_OPTIONS or not eq:
            raise SignatureFormatError(f"bad options: unknown key option {option!r}")
        if name in options:
            raise SignatureFormatError(f'bad options: multiple "{name}" clauses')
        if len(value) < 2 or value[0] != '"' or value[-1] != '"' or '"' in value[1:-1]:
            raise SignatureFormatError(f"bad options: {name} needs a double-quoted value, not {value!r}")
        options[name] = value[1:-1]
    return options


def parse_allowed_signer_line(line: str, number: int) -> AllowedSigner | None:
    """One line of an allowed_signers file; None for blank lines and comments.

    Raises:
        SignatureFormatError
    """
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return None
    tokens = _TOKEN.findall(stripped)
    if len(tokens) < 3:
        raise SignatureFormatError("expected: principals [options] keytype base64-key [comment]")
    principals = tuple(p for p in _unquote(tokens[0]).split(",") if p)
    if not principals:
        raise SignatureFormatError("no principals")
    rest = tokens[1:]
    options: dict[str, str] = {}
    if rest[0] not in KEY_TYPES and not rest[0].startswith(("ssh-", "ecdsa-", "sk-")):
        options = _signer_options(rest[0])
        rest = rest[1:]
    if len(rest) < 2:
        raise SignatureFormatError("missing key type or key")
    key_type, key_b64 = rest[0], rest[1]
    if key_type not in KEY_TYPES:
        raise SignatureFormatError(f"key type {key_type!r} is not supported (ssh-ed25519, ecdsa-sha2-*, ssh-rsa)")
    blob = _b64(key_b64, "key")
    if _Wire(blob, "key").text() != key_type:
        raise SignatureFormatError(f"the key does not match its type {key_type!r}")
    load_ssh_key(blob)
    namespaces = None
    if "namespaces" in options:
        namespaces = tuple(ns.strip() for ns in options["namespaces"].split(",") if ns.strip())
    after = _ssh_time(options["valid-after"]) if "valid-after" in options else None
    before = _ssh_time(options["valid-before"]) if "valid-before" in options else None
    if after is not None and before is not None and before <= after:
        raise SignatureFormatError('bad options: "valid-before" time is before "valid-after"')
    return AllowedSigner(principals, blob, namespaces, after, before, number)


def parse_allowed_signers(text: str, path: str) -> tuple[tuple[AllowedSigner, ...], tuple[str, ...]]:
    """(signers, problems): a malformed line is skipped (its key is not trusted) and reported as
    ``"<path> line N: reason"``."""
    signers: list[AllowedSigner] = []
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            signer = parse_allowed_signer_line(line, number)
        except SignatureFormatError as exc:
            problems.append(f"{path} line {number}: {exc}")
            continue
        if signer is not None:
            signers.append(signer)
    return tuple(signers), tuple(problems)


# ---------------------------------------------------------------------------------------------
# revocation identities


def key_ident(entry: str) -> str:
    """The identity of a policy key or revocation entry: a minisign public key (``RW...``) or a
    minisign key id (hex, as ``minisign`` prints it) -> ``minisign:<16 hex digits>``; ``SHA256:...`` -> ``ssh:SHA256:...``.

    Raises:
        SignatureFormatError
    """
    entry = entry.strip()
    if entry.startswith("SHA256:"):
        if not re.fullmatch(r"SHA256:[A-Za-z0-9+/]{43}", entry):
            raise SignatureFormatError("an SSH fingerprint is 'SHA256:' followed by 43 base64 characters")
        return f"ssh:{entry}"
    if re.fullmatch(r"[0-9A-Fa-f]{1,16}", entry):  # minisign prints key ids without leading zeros
        return f"minisign:{entry.upper().zfill(16)}"
    return parse_minisign_public_key(entry).ident


# ---------------------------------------------------------------------------------------------
# verification cache

_CACHE_MAX = 1 << 16


class VerificationCache:
    """Results of signature verifications, by a hash of (kind, key, signature, message). Owned by
    one ``Loader`` (through its ``TrustCache``): two loaders never see each other's results."""

    def __init__(self, max_entries: int = _CACHE_MAX) -> None:
        self._results: dict[bytes, str | None] = {}
        self._lock = threading.Lock()
        self._max = max_entries

    def get(self, digest: bytes) -> tuple[bool, str | None]:
        with self._lock:
            if digest in self._results:
                return True, self._results[digest]
        return False, None

    def put(self, digest: bytes, result: str | None) -> None:
        with self._lock:
            if len(self._results) >= self._max:
                self._results.clear()
            self._results[digest] = result

    def clear(self) -> None:
        with self._lock:
            self._results.clear()

    def __len__(self) -> int:
        return len(self._results)

    def verified_digests(self) -> list[bytes]:
        """Digests of the verifications that succeeded here (to persist, see tooldir.state)."""
        with self._lock:
            return [d for d, result in self._results.items() if result is None]


def verification_digest(kind: bytes, key: bytes, signature: bytes, message: bytes) -> bytes:
    """What a verification result is remembered by: a hash of kind, key, signature and message."""
    h = hashlib.sha256(b"tooldir-verification-v1\0" + kind)
    for part in (key, signature, message):
        h.update(struct.pack(">Q", len(part)))
        h.update(part)
    return h.digest()


def _cached(
    kind: bytes,
    key: bytes,
    signature: bytes,
    message: bytes,
    verify: Callable[[], str | None],
    *,
    known: Collection[bytes],
    cache: VerificationCache | None,
) -> str | None:
    digest = verification_digest(kind, key, signature, message)
    if digest in known:
        return None
    if cache is None:
        return verify()
    found, result = cache.get(digest)
    if found:
        return result
    result = verify()
    cache.put(digest, result)
    return result
