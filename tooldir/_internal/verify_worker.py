"""The helper process of :mod:`tooldir._internal.verify_pool`: minisign and SSHSIG verifications.

Started as ``python -I`` with a bare package standing in for ``tooldir/__init__``, so it imports
only this module and ``cryptography`` (and :mod:`tooldir.signatures`, which imports nothing else
of tooldir, for the first SSH frame). It reads frames from stdin until end of input and answers
each one, in order, in small batches as it goes: the parent drains the answers without blocking
while it writes (so neither side can block the other on a full pipe) and, at the end, verifies
the last unanswered frames itself while this process works from the front.

Frame: ``>I`` length, then ``>I`` index and a kind byte.
``M`` (minisign): public key (32), signature (64), BLAKE2b-512 of the lock (64), global signature
(64), trusted comment (the rest). ``S`` (SSHSIG): ``>I`` length of the ``.sshsig`` file, the file,
the lock (the rest). Answer: ``>IB`` index and 0 (valid), 1 (minisign: the lock's signature is
not valid), 2 (minisign: the trusted comment's is not) or 3 (not valid or not verifiable here:
the parent verifies it itself, to report the exact reason).
"""

from __future__ import annotations

import struct
import sys

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
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric import ed25519

    pub = ed25519.Ed25519PublicKey.from_public_bytes(frame[5:37])
    signature, prehash, global_signature, comment = frame[37:101], frame[101:165], frame[165:229], frame[229:]
    code = 0
    try:
        pub.verify(signature, prehash)
    except InvalidSignature:
        code = 1
    else:
        try:
            pub.verify(global_signature, signature + comment)
        except InvalidSignature:
            code = 2
    return _ANSWER.pack(index, code)


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
