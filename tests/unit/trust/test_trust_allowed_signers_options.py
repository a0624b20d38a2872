"""allowed_signers options as OpenSSH reads them: a line OpenSSH refuses is refused here too."""

from __future__ import annotations

from pathlib import Path

import pytest
from trustkit import need, run, ssh_keypair, ssh_sign

from tooldir import signatures as sg

BAD_OPTIONS = {
    "namespaces-twice": 'namespaces="tooldir",namespaces="git"',
    "namespaces-twice-same": 'namespaces="tooldir",namespaces="tooldir"',
    "namespaces-twice-case": 'namespaces="git",NAMESPACES="tooldir"',
    "valid-after-twice": 'valid-after="20200101",valid-after="20210101"',
    "valid-before-twice": 'valid-before="20990101",valid-before="20980101"',
    "unquoted": "namespaces=tooldir",
    "before-not-after-after": 'valid-after="20300101",valid-before="20200101"',
    "unknown": 'namespaces="tooldir",no-touch-required',
}


@pytest.fixture
def signed(tmp_path: Path) -> tuple[str, Path, Path]:
    key = ssh_keypair(tmp_path / "keys")
    message = tmp_path / "tool.lock"
    message.write_bytes(b'{"format": "tooldir-lock/1"}\n')
    kt, b64 = key.public_line.split()[:2]
    return f"{kt} {b64}", message, ssh_sign(key, message)


@pytest.mark.parametrize("options", BAD_OPTIONS.values(), ids=BAD_OPTIONS.keys())
def test_a_line_openssh_refuses_is_reported_with_file_and_line_and_trusts_nothing(
    signed: tuple[str, Path, Path], options: str
) -> None:
    key, _, _ = signed
    text = f"# team\nalice@example.com {options} {key}\n"
    signers, problems = sg.parse_allowed_signers(text, "/home/u/allowed_signers")
    assert signers == ()
    assert len(problems) == 1 and problems[0].startswith("/home/u/allowed_signers line 2: ")


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ('namespaces="tooldir",namespaces="git"', 'multiple "namespaces" clauses'),
        ('valid-after="20200101",valid-after="20210101"', 'multiple "valid-after" clauses'),
        ('valid-before="20990101",valid-before="20980101"', 'multiple "valid-before" clauses'),
    ],
)
def test_a_duplicate_option_is_named_like_openssh_names_it(
    signed: tuple[str, Path, Path], options: str, reason: str
) -> None:
    key, _, _ = signed
    _, problems = sg.parse_allowed_signers(f"alice@example.com {options} {key}\n", "f")
    assert reason in problems[0]


def test_only_the_bad_line_is_refused_and_the_other_lines_still_count(signed: tuple[str, Path, Path]) -> None:
    key, _, _ = signed
    text = (
        f'alice@example.com namespaces="git",namespaces="tooldir" {key}\nbob@example.com namespaces="tooldir" {key}\n'
    )
    signers, problems = sg.parse_allowed_signers(text, "f")
    assert [s.principals for s in signers] == [("bob@example.com",)] and signers[0].line == 2
    assert [p.split(":")[0] for p in problems] == ["f line 1"]


def test_well_formed_options_still_parse(signed: tuple[str, Path, Path]) -> None:
    key, _, _ = signed
    line = f'alice@example.com Namespaces="git,tooldir",valid-after="20200101",valid-before="20990101Z" {key}'
    (signer,), problems = sg.parse_allowed_signers(line, "f")
    assert problems == () and signer.allows_namespace("tooldir") and signer.valid_before is not None


@pytest.mark.parametrize("options", BAD_OPTIONS.values(), ids=BAD_OPTIONS.keys())
def test_ssh_keygen_verify_refuses_the_same_lines(tmp_path: Path, signed: tuple[str, Path, Path], options: str) -> None:
    key, message, sig = signed
    signers = tmp_path / "allowed_signers"
    signers.write_text(f"alice@example.com {options} {key}\n")
    done = run(
        need("ssh-keygen"), "-Y", "verify", "-f", signers, "-I", "alice@example.com", "-n", "tooldir", "-s", sig,
        stdin=message.read_bytes(),
    )  # fmt: skip
    assert done.returncode != 0, done.stdout
    signers.write_text(f'alice@example.com namespaces="tooldir" {key}\n')  # the control: a good line verifies
    done = run(
        need("ssh-keygen"), "-Y", "verify", "-f", signers, "-I", "alice@example.com", "-n", "tooldir", "-s", sig,
        stdin=message.read_bytes(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sg.parse_allowed_signers(signers.read_text(), "f")[1] == ()
