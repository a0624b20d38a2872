"""The helper process of :mod:`tooldir.trust.verify_pool`: minisign and SSHSIG verifications.

Started as ``python -I`` with a bare package standing in for ``tooldir/__init__``, so it imports
only this module and PyNaCl or ``cryptography`` (and :mod:`tooldir.signatures`, which imports
nothing else of tooldir, for the first SSH frame). It reads frames from stdin until end of input and answers
each one, in order, in small batches as it goes: the parent drains the answers without blocking
while it writes (so neither side can block the other on a full pipe) and, at the end, verifies
the last unanswered frames itself while this process works from the front.

Frame: ``>I`` length, then ``>I`` index and a kind byte.
``M`` (minisign): public key (32), signature (64), BLAKE2b-512 of the lock (64), global signature
(64), trusted comment (the rest). ``S`` (SSHSIG): ``>I`` length of the ``.sshsig`` file, the file,
the lock (the rest). Answer: ``>IB`` index and 0 (valid), 1 (minisign: the lock's signature is
not valid), 2 (minisign: the trusted comment's is not) or 3 (not valid or not verifiable here:
the parent verifies it itself, to report the exact reason).

Minisign's Ed25519 checks use libsodium (PyNaCl) when it imports: about half the CPU of
``cryptography``'s OpenSSL (measured: ~60 vs ~110 us a verification on this machine), and this
helper does all but a few of a large signed root's verifications. libsodium is the stricter of the
two (it also refuses non-canonical and small-order keys and ``R`` points; the equation is the same
and ``S`` must be canonical in both), so what it accepts OpenSSL accepts too; whatever it refuses
is answered 3, and the parent then verifies it with ``cryptography``: verdicts are exactly those of
in-process verification, whichever process verified.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable

_HEAD = struct.Struct(">I")
_ANSWER = struct.Struct(">IB")
_FIXED = 4 + 1 + 32 + 64 + 64 + 64
#: Answers written at once (the parent steals from the tail in steps no finer than this).
BATCH = 16


def verify_frame(frame: bytes) -> bytes:
    """The answer to one frame (raises ValueError on a malformed one)."""
    if len(frame) < 5:
        raise ValueError("short frame")
    (index,) = _HEAD.unpack_from(frame)
    kind = frame[4:5]
    if kind == b"S":
        return _ANSWER.pack(index, _verify_ssh(frame[5:]))
    if kind != b"M" or len(frame) < _FIXED:
        raise ValueError("malformed frame")
    public, signature, prehash = frame[5:37], frame[37:101], frame[101:165]
    global_signature, comment = frame[165:229], frame[229:]
    verify = _minisign_verifier()
    return _ANSWER.pack(index, verify(public, signature, prehash, global_signature, comment))


_Verify = Callable[[bytes, bytes, bytes, bytes, bytes], int]
_verifier: list[_Verify] = []


def _minisign_verifier() -> _Verify:
    """libsodium's Ed25519 (PyNaCl) if it imports, else ``cryptography``'s (chosen once)."""
    if not _verifier:
        try:
            _verifier.append(_sodium_verifier())
        except ImportError:
            _verifier.append(_openssl_verifier())
    return _verifier[0]


def _sodium_verifier() -> _Verify:
    from nacl.bindings import crypto_sign_open
    from nacl.exceptions import CryptoError

    def verify(public: bytes, signature: bytes, prehash: bytes, global_signature: bytes, comment: bytes) -> int:
        try:
            crypto_sign_open(signature + prehash, public)
            crypto_sign_open(global_signature + signature + comment, public)
        except CryptoError:  # BadSignatureError, or a size PyNaCl refuses
            return 3  # refused by the stricter check: the parent verifies it with cryptography
        return 0

    return verify


def _openssl_verifier() -> _Verify:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric import ed25519

    keys: dict[bytes, ed25519.Ed25519PublicKey] = {}  # a root is signed by a few keys

    def verify(public: bytes, signature: bytes, prehash: bytes, global_signature: bytes, comment: bytes) -> int:
        pub = keys.get(public)
        if pub is None:
            pub = keys[public] = ed25519.Ed25519PublicKey.from_public_bytes(public)
        try:
            pub.verify(signature, prehash)
        except InvalidSignature:
            return 1
        try:
            pub.verify(global_signature, signature + comment)
        except InvalidSignature:
            return 2
        return 0

    return verify


def _verify_ssh(body: bytes) -> int:
    from tooldir.signatures import SignatureFormatError, parse_sshsig, verify_sshsig

    if len(body) < 4:
        raise ValueError("short frame")
    (size,) = _HEAD.unpack_from(body)
    if len(body) < 4 + size:
        raise ValueError("short frame")
    try:
        sig = parse_sshsig(body[4 : 4 + size])
    except SignatureFormatError:
        return 3
    return 0 if verify_sshsig(sig, body[4 + size :]) is None else 3


def main() -> int:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    answers = bytearray()
    while True:
        head = stdin.read(4)
        if not head:
            break
        (length,) = _HEAD.unpack(head) if len(head) == 4 else (0,)
        frame = stdin.read(length)
        if len(head) != 4 or len(frame) != length:
            return 2  # a torn frame: answer no more (the parent verifies the rest itself)
        answers += verify_frame(frame)
        if len(answers) >= BATCH * _ANSWER.size:
            stdout.write(answers)
            stdout.flush()
            answers.clear()
    stdout.write(answers)
    stdout.flush()
    return 0
