"""Helpers for the trust tests: real minisign / ssh-keygen keys and signed tool packages."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from toolkit import scan as scan_package_folder

from tooldir.trust.lockfile import render_lock

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def need(binary: str) -> str:
    """The path of a required system binary (CI installs minisign and openssh-client)."""
    path = shutil.which(binary)
    if path is None:
        if os.environ.get("TOOLDIR_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"{binary} is required but not installed")
        pytest.skip(f"{binary} is not installed")
    return path


def run(*argv: str | Path, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(a) for a in argv], input=stdin, capture_output=True, timeout=30, check=False)


@dataclass(frozen=True)
class MinisignKey:
    secret: Path
    public: Path

    @property
    def line(self) -> str:
        return self.public.read_text().splitlines()[1]


def minisign_keypair(where: Path, name: str = "key") -> MinisignKey:
    """A passwordless key made by the real minisign CLI."""
    where.mkdir(parents=True, exist_ok=True)
    key = MinisignKey(where / f"{name}.sec", where / f"{name}.pub")
    done = run(need("minisign"), "-G", "-W", "-f", "-p", key.public, "-s", key.secret)
    assert done.returncode == 0, done.stderr
    return key


def minisign_sign(key: MinisignKey, file: Path, comment: str = "tooldir test", *, legacy: bool = False) -> Path:
    sig = file.with_name(file.name + ".minisig")
    argv = [need("minisign"), "-S", "-s", key.secret, "-m", file, "-x", sig, "-t", comment]
    if legacy:
        argv.append("-l")
    done = run(*argv)
    assert done.returncode == 0, done.stderr
    return sig


@dataclass(frozen=True)
class SshKey:
    private: Path
    public: Path

    @property
    def public_line(self) -> str:
        return self.public.read_text().strip()


def ssh_keypair(where: Path, kind: str = "ed25519", name: str = "id") -> SshKey:
    where.mkdir(parents=True, exist_ok=True)
    private = where / f"{name}_{kind}"
    argv: list[str | Path] = [
        need("ssh-keygen"),
        "-q",
        "-t",
        kind,
        "-N",
        "",
        "-C",
        f"{name}@example.com",
        "-f",
        private,
    ]
    if kind == "rsa":
        argv += ["-b", "2048"]
    done = run(*argv)
    assert done.returncode == 0, done.stderr
    return SshKey(private, private.with_name(private.name + ".pub"))


def ssh_sign(key: SshKey, file: Path, namespace: str = "tooldir") -> Path:
    sig = file.with_name(file.name + ".sig")
    sig.unlink(missing_ok=True)
    done = run(need("ssh-keygen"), "-Y", "sign", "-n", namespace, "-f", key.private, file)
    assert done.returncode == 0, done.stderr
    return sig


def write_lock(folder: Path, *, version: int = 1, name: str | None = None, expires: datetime | None = None) -> Path:
    """Write tool.lock for the package as it is now (read through discovery, like tooldir lock)."""
    scan = scan_package_folder(folder)
    assert not scan.diagnostics, scan.diagnostics
    lock = folder / "tool.lock"
    lock.write_bytes(render_lock(name or folder.name, version, expires, scan.files))
    return lock
