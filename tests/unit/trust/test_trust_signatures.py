"""minisign and OpenSSH formats against the real CLIs, both directions."""

from __future__ import annotations

import base64
import contextlib
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trustkit import minisign_keypair, minisign_sign, need, run, ssh_keypair, ssh_sign

from tooldir import signatures as sg
from tooldir.signatures import SignatureFormatError
from tooldir.snapshot.loader import read_allowed_signers
from tooldir.trust import keys


@pytest.fixture
def message(tmp_path: Path) -> Path:
    file = tmp_path / "tool.lock"
    file.write_bytes(b'{"format": "tooldir-lock/1"}\n')
    return file


def test_minisign_cli_signature_verifies_and_reports_the_key_id_minisign_prints(tmp_path: Path, message: Path) -> None:
    key = minisign_keypair(tmp_path)
    sig = sg.parse_minisig(minisign_sign(key, message, "release 3").read_bytes())
    pub = sg.parse_minisign_public_key(key.public.read_text())
    printed = key.public.read_text().splitlines()[0].rsplit(" ", 1)[-1]  # "minisign public key <ID>"
    assert int(pub.id_hex, 16) == int(printed, 16)
    assert sg.key_ident(printed) == pub.ident
    assert sig.trusted_comment == b"release 3"
    assert sg.verify_minisign(sig, pub, message.read_bytes()) is None
    assert sg.verify_minisign(sig, pub, message.read_bytes() + b" ") is not None


def test_tampered_trusted_comment_fails_the_global_signature(tmp_path: Path, message: Path) -> None:
    key = minisign_keypair(tmp_path)
    lines = minisign_sign(key, message, "version:1").read_text().splitlines()
    lines[2] = "trusted comment: version:9"
    sig = sg.parse_minisig(("\n".join(lines) + "\n").encode())
    reason = sg.verify_minisign(sig, sg.parse_minisign_public_key(key.line), message.read_bytes())
    assert reason is not None and "trusted comment" in reason


def test_legacy_non_prehashed_minisign_signature_is_refused(tmp_path: Path, message: Path) -> None:
    key = minisign_keypair(tmp_path)
    sig = sg.parse_minisig(minisign_sign(key, message, legacy=True).read_bytes())
    assert sig.algorithm == b"Ed"
    reason = sg.verify_minisign(sig, sg.parse_minisign_public_key(key.line), message.read_bytes())
    assert reason is not None and "legacy" in reason


def test_our_keys_and_signatures_are_accepted_by_the_minisign_cli(tmp_path: Path, message: Path) -> None:
    key, secret_text, public_text = keys.generate_minisign_key()
    (tmp_path / "k.pub").write_text(public_text)
    (tmp_path / "k.sec").write_text(secret_text)
    sig = tmp_path / "tool.lock.minisig"
    sig.write_bytes(keys.minisign_sign(key, message.read_bytes(), "timestamp:1\tfile:tool.lock"))
    done = run(need("minisign"), "-V", "-p", tmp_path / "k.pub", "-m", message, "-x", sig)
    assert done.returncode == 0, done.stderr
    assert b"timestamp:1\tfile:tool.lock" in done.stdout
    # and minisign can sign with the unencrypted secret key tooldir wrote
    other = tmp_path / "other.minisig"
    done = run(need("minisign"), "-S", "-s", tmp_path / "k.sec", "-m", message, "-x", other)
    assert done.returncode == 0, done.stderr
    assert keys.parse_minisign_secret_key(secret_text).public_key() == sg.parse_minisign_public_key(public_text)


def test_passwordless_minisign_cli_secret_key_can_sign_with_tooldir(tmp_path: Path, message: Path) -> None:
    key = minisign_keypair(tmp_path)
    secret = keys.parse_minisign_secret_key(key.secret.read_text())
    sig = tmp_path / "ours.minisig"
    sig.write_bytes(keys.minisign_sign(secret, message.read_bytes(), "ok"))
    done = run(need("minisign"), "-V", "-p", key.public, "-m", message, "-x", sig)
    assert done.returncode == 0, done.stderr


# A key the real minisign CLI encrypted with a password, made once and checked in (its first line
# says how): making one costs minisign's scrypt (1 GiB, ~15 s) at every run, and tooldir never
# derives the password's key (it refuses such keys before any KDF).
PASSWORD_PROTECTED_KEY = Path(__file__).parent / "data" / "minisign-password-protected.key"


def test_the_checked_in_key_is_one_minisign_encrypted_with_scrypt_at_its_real_cost() -> None:
    raw = base64.b64decode(PASSWORD_PROTECTED_KEY.read_text().splitlines()[1])
    assert len(raw) == 158 and raw[:2] == b"Ed" and raw[4:6] == b"B2"
    assert raw[2:4] == b"Sc"  # scrypt, minisign's only KDF: the key is encrypted
    opslimit, memlimit = int.from_bytes(raw[38:46], "little"), int.from_bytes(raw[46:54], "little")
    assert (opslimit, memlimit) == (33_554_432, 1_073_741_824)  # what minisign -G writes (sensitive scrypt)


def test_password_protected_minisign_key_is_refused_with_an_explanation() -> None:
    with pytest.raises(SignatureFormatError, match="password-protected"):
        keys.parse_minisign_secret_key(PASSWORD_PROTECTED_KEY.read_text())


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("RWQ", id="short-base64"),
        pytest.param("not base64 at all!", id="not-base64"),
        pytest.param(base64.b64encode(b"Xx" + bytes(40)).decode(), id="wrong-algorithm"),
        pytest.param("untrusted comment: x\nRWQ\nextra", id="three-lines"),
    ],
)
def test_malformed_minisign_public_keys_raise_a_format_error(text: str) -> None:
    with pytest.raises(SignatureFormatError):
        sg.parse_minisign_public_key(text)


@given(st.binary(max_size=400))
def test_arbitrary_signature_files_never_crash_the_parsers(data: bytes) -> None:
    for parse in (sg.parse_minisig, sg.parse_sshsig):
        with contextlib.suppress(SignatureFormatError):
            parse(data)


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa", "rsa"])
def test_ssh_keygen_signatures_verify_for_each_key_type(tmp_path: Path, message: Path, kind: str) -> None:
    key = ssh_keypair(tmp_path, kind)
    sig = sg.parse_sshsig(ssh_sign(key, message).read_bytes())
    assert sig.namespace == "tooldir"
    fingerprint = run(need("ssh-keygen"), "-lf", key.public).stdout.split()[1].decode()
    assert sig.fingerprint == fingerprint
    assert sg.verify_sshsig(sig, message.read_bytes()) is None
    assert sg.verify_sshsig(sig, message.read_bytes() + b"x") is not None


def test_ssh_signature_keeps_the_namespace_it_was_made_for(tmp_path: Path, message: Path) -> None:
    key = ssh_keypair(tmp_path)
    sig = sg.parse_sshsig(ssh_sign(key, message, namespace="git").read_bytes())
    assert sig.namespace == "git"
    assert sg.verify_sshsig(sig, message.read_bytes()) is None  # valid, but for git: the caller refuses it


def test_tampered_ssh_signature_does_not_verify(tmp_path: Path, message: Path) -> None:
    key = ssh_keypair(tmp_path)
    sig = sg.parse_sshsig(ssh_sign(key, message).read_bytes())
    blob = bytearray(sig.sig_blob)
    blob[-1] ^= 1
    forged = sg.SshSignature(
        sig.public_key, sig.namespace, sig.hash_algorithm, sig.sig_format, bytes(blob), sig.signed_prefix
    )
    assert sg.verify_sshsig(forged, message.read_bytes()) is not None


def test_allowed_signers_lines_parse_principals_namespaces_and_validity(tmp_path: Path) -> None:
    key = ssh_keypair(tmp_path)
    kt, b64 = key.public_line.split()[:2]
    text = "\n".join(
        [
            "# team keys",
            "",
            f"alice@example.com,ops@example.com {kt} {b64} comment here",
            f'bob@example.com namespaces="git,tooldir",valid-after="20260101",valid-before="20270101Z" {kt} {b64}',
            f'"carol@example.com" namespaces="git" {kt} {b64}',
            f"dave@example.com cert-authority {kt} {b64}",
            f"erin@example.com valid-after=20261399 {kt} {b64}",
            f"frank@example.com {kt} AAAAnotakey",
            "only-a-principal",
        ]
    )
    signers, problems = sg.parse_allowed_signers(text, "signers")
    assert [s.principals for s in signers] == [
        ("alice@example.com", "ops@example.com"),
        ("bob@example.com",),
        ("carol@example.com",),
    ]
    alice, bob, carol = signers
    assert alice.namespaces is None and alice.allows_namespace("tooldir")
    assert bob.allows_namespace("tooldir") and not carol.allows_namespace("tooldir")
    assert bob.valid_before == datetime(2027, 1, 1, tzinfo=UTC)
    assert bob.valid_at(datetime(2026, 6, 1, tzinfo=UTC)) is None
    assert bob.valid_at(datetime(2027, 6, 1, tzinfo=UTC)) is not None
    assert [p.split(":")[0] for p in problems] == [
        "signers line 6",
        "signers line 7",
        "signers line 8",
        "signers line 9",
    ]
    assert "cert-authority" in problems[0]


def test_missing_allowed_signers_file_trusts_nobody_and_says_so(tmp_path: Path) -> None:
    signers, problems = read_allowed_signers(str(tmp_path / "nope"))
    assert signers == ()
    assert len(problems) == 1 and "cannot read" in problems[0]


def test_allowed_signers_path_expands_the_users_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    key = ssh_keypair(tmp_path / "keys")
    (tmp_path / "signers").write_text(f"a@example.com {key.public_line}\n")
    signers, problems = read_allowed_signers("~/signers")
    assert len(signers) == 1 and problems == ()


@pytest.mark.parametrize("path", ["allowed_signers", "./keys/allowed_signers", ".tooldir/allowed_signers"])
def test_a_relative_allowed_signers_path_is_refused_since_it_would_be_read_from_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    from tooldir.errors import PolicyError
    from tooldir.policy import parse_policy

    attacker = ssh_keypair(tmp_path / "attacker")
    project = tmp_path / "project"
    (project / "keys").mkdir(parents=True)
    (project / ".tooldir").mkdir()
    (project / path).write_text(f"evil@example.com {attacker.public_line}\n")  # planted by the project
    monkeypatch.chdir(project)  # tooldir runs in the project it loads
    with pytest.raises(PolicyError, match="absolute"):
        parse_policy(f'[keys]\nallowed_signers = "{path}"\n')
    assert parse_policy('[keys]\nallowed_signers = "~/.config/tooldir/allowed_signers"\n').keys.allowed_signers


@pytest.mark.parametrize(
    ("entry", "ident"),
    [
        ("SHA256:" + "A" * 43, "ssh:SHA256:" + "A" * 43),
        ("7cf55ae0bde797a1", "minisign:7CF55AE0BDE797A1"),
        ("DE02EF1E6594640", "minisign:0DE02EF1E6594640"),
        ("RWShl+e94Fr1fNE1JYpQFTVhZfiJPposikzOoEQbgeKCpvKA5sQ7gAYL", "minisign:7CF55AE0BDE797A1"),
    ],
)
def test_revocation_entries_name_key_identities(entry: str, ident: str) -> None:
    assert sg.key_ident(entry) == ident


def test_verification_results_are_cached_by_content(tmp_path: Path, message: Path) -> None:
    key = minisign_keypair(tmp_path)
    sig = sg.parse_minisig(minisign_sign(key, message).read_bytes())
    pub = sg.parse_minisign_public_key(key.line)
    cache = sg.VerificationCache()
    assert sg.verify_minisign(sig, pub, message.read_bytes(), cache=cache) is None
    assert len(cache) == 1
    assert sg.verify_minisign(sig, pub, message.read_bytes(), cache=cache) is None
    assert len(cache) == 1
    assert sg.verify_minisign(sig, pub, b"other", cache=cache) is not None
    assert len(cache) == 2


@given(
    st.lists(
        st.sampled_from(["alice", "a,b", '"x y"', 'namespaces="tooldir"', "valid-after=2026", "ssh-ed25519", "ssh-rsa"])
        | st.text(max_size=40),
        max_size=6,
    )
)
def test_arbitrary_allowed_signers_lines_become_problems_never_crashes(tokens: list[str]) -> None:
    text = " ".join(tokens) + "\n" + " ".join(tokens)
    signers, problems = sg.parse_allowed_signers(text, "f")
    assert len(signers) + len(problems) <= len(text.splitlines())
    assert all(p.startswith("f line ") for p in problems)


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa", "rsa"])
def test_corrupted_ssh_signature_blobs_give_reasons_never_exceptions(tmp_path: Path, message: Path, kind: str) -> None:
    sig = sg.parse_sshsig(ssh_sign(ssh_keypair(tmp_path, kind), message).read_bytes())

    @settings(max_examples=60, deadline=None)
    @given(st.integers(min_value=0, max_value=len(sig.sig_blob) - 1), st.integers(min_value=1, max_value=255))
    def flip(index: int, mask: int) -> None:
        blob = bytearray(sig.sig_blob)
        blob[index] ^= mask
        forged = sg.SshSignature(
            sig.public_key, sig.namespace, sig.hash_algorithm, sig.sig_format, bytes(blob), sig.signed_prefix
        )
        assert isinstance(sg.verify_sshsig(forged, message.read_bytes()), str)

    flip()
