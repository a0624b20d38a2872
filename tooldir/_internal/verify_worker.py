"""The helper process of :mod:`tooldir._internal.verify_pool`: minisign (Ed25519) verifications.

Started as ``python -I`` with a bare package standing in for ``tooldir/__init__``, so it imports
only this module and ``cryptography``. It reads frames from stdin until end of input and then
writes one answer per frame, in order (all at the end: the parent reads only after it has written
everything, so neither side can block the other on a full pipe).

Frame: ``>I`` length, then ``>I`` index, public key (32), signature (64), BLAKE2b-512 of the lock
(64), global signature (64), trusted comment (the rest). Answer: ``>IB`` index and 0 (both
signatures valid), 1 (the lock's signature is not) or 2 (the trusted comment's is not).
"""

from __future__ import annotations

import struct
import sys

_HEAD = struct.Struct(">I")
_ANSWER = struct.Struct(">IB")
_FIXED = 4 + 32 + 64 + 64 + 64


def verify_frame(frame: bytes) -> bytes:
    """The answer to one frame (raises ValueError on a malformed one)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric import ed25519

    if len(frame) < _FIXED:
        raise ValueError("short frame")
    (index,) = _HEAD.unpack_from(frame)
    pub = ed25519.Ed25519PublicKey.from_public_bytes(frame[4:36])
    signature, prehash, global_signature, comment = frame[36:100], frame[100:164], frame[164:228], frame[228:]
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
            return 2  # a torn frame: answer nothing (the parent then verifies everything itself)
        answers += verify_frame(frame)
    stdout.write(answers)
    stdout.flush()
    return 0
