"""Making minisign keys and signing locks (``tooldir keygen`` and ``tooldir sign``).

Secret keys are written in minisign's own format *without* a password (like ``minisign -G -W``):
protect the file with its mode (0600) or keep it on a token/CI secret store. Password-protected
minisign keys are refused with an explanation (sign those with ``minisign -S`` itself). Signatures
are prehashed ``ED`` signatures with a trusted comment, exactly what ``minisign -V`` verifies.
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric import ed25519

from ..signatures import _ED, _ED_PREHASHED, _TRUSTED, _UNTRUSTED, MinisignPublicKey, SignatureFormatError, _b64


@dataclass(frozen=True, slots=True)
class MinisignSecretKey:
    key_id: bytes
    seed: bytes  # 32-byte Ed25519 seed

    def public_key(self) -> MinisignPublicKey:
        pub = ed25519.Ed25519PrivateKey.from_private_bytes(self.seed).public_key()
        return MinisignPublicKey(self.key_id, pub.public_bytes_raw())


def _secret_checksum(key_id: bytes, sk: bytes) -> bytes:
    return hashlib.blake2b(_ED + key_id + sk, digest_size=32).digest()


def parse_minisign_secret_key(text: str) -> MinisignSecretKey:
    """An *unencrypted* minisign secret key (``tooldir keygen`` or ``minisign -G -W``).

    Raises:
        SignatureFormatError: malformed, or encrypted with a password.
    """
    lines = [ln.strip() for ln in text.strip().splitlines()]
    if len(lines) != 2 or not lines[0].startswith(_UNTRUSTED.strip()):
        raise SignatureFormatError("a minisign secret key is an untrusted comment line and one base64 line")
    raw = _b64(lines[1], "minisign secret key")
    if len(raw) != 158 or raw[:2] != _ED or raw[4:6] != b"B2":
        raise SignatureFormatError("not a minisign Ed25519 secret key (expected 158 bytes, 'Ed' ... 'B2')")
    if raw[2:4] != b"\0\0":
        raise SignatureFormatError(
            "this minisign secret key is password-protected; tooldir signs only with unencrypted keys "
            "('tooldir keygen' or 'minisign -G -W'), or sign with 'minisign -S -m tool.lock -x tool.lock.minisig'"
        )
    key_id, sk, chk = raw[54:62], raw[62:126], raw[126:158]
    if chk != bytes(32) and chk != _secret_checksum(key_id, sk):  # minisign -W writes a zero checksum
        raise SignatureFormatError("the secret key's checksum does not match (corrupted key file)")
    seed = sk[:32]
    derived = ed25519.Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()
    if derived != sk[32:]:
        raise SignatureFormatError("the secret key's public half does not match its seed (corrupted key file)")
    return MinisignSecretKey(key_id, seed)


def generate_minisign_key() -> tuple[MinisignSecretKey, str, str]:
    """A new key: (key, secret key file text, public key file text). The secret key file is
    *unencrypted* (protect it with file permissions), in the format ``minisign -G -W`` writes."""
    key_id = os.urandom(8)
    private = ed25519.Ed25519PrivateKey.generate()
    seed = private.private_bytes_raw()
    sk = seed + private.public_key().public_bytes_raw()
    raw = _ED + b"\0\0" + b"B2" + bytes(32 + 8 + 8) + key_id + sk + _secret_checksum(key_id, sk)
    key = MinisignSecretKey(key_id, seed)
    pub = key.public_key()
    secret_text = f"{_UNTRUSTED}tooldir unencrypted secret key {pub.id_hex}\n{base64.b64encode(raw).decode()}\n"
    public_text = f"{_UNTRUSTED}minisign public key {pub.id_hex}\n{pub.line()}\n"
    return key, secret_text, public_text


def minisign_sign(key: MinisignSecretKey, message: bytes, trusted_comment: str) -> bytes:
    """A prehashed ``.minisig`` file for ``message`` that ``minisign -V`` accepts."""
    if "\n" in trusted_comment or "\r" in trusted_comment:
        raise ValueError("a trusted comment is one line")
    private = ed25519.Ed25519PrivateKey.from_private_bytes(key.seed)
    signature = private.sign(hashlib.blake2b(message, digest_size=64).digest())
    comment = trusted_comment.encode("utf-8")
    glob = private.sign(signature + comment)
    sig_line = base64.b64encode(_ED_PREHASHED + key.key_id + signature).decode()
    return (
        f"{_UNTRUSTED}signature from tooldir secret key {key.public_key().id_hex}\n{sig_line}\n"
        f"{_TRUSTED}{trusted_comment}\n{base64.b64encode(glob).decode()}\n"
    ).encode()
