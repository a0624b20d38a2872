"""Issue 17 item 7: the wheel carries a LICENSE that matches its metadata, and the installed
``tooldir --version`` works from any directory."""

from __future__ import annotations

import email
import tomllib
import zipfile
from pathlib import Path

from plaininstall import REPO, PlainInstall


def test_the_license_file_is_the_license_the_metadata_names_and_ships_in_the_wheel(plain: PlainInstall) -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]["license"]
    assert declared == "MIT"
    text = (REPO / "LICENSE").read_text("utf-8")
    assert text.startswith("MIT License\n")
    assert "Permission is hereby granted, free of charge" in text
    with zipfile.ZipFile(plain.wheel) as wheel:
        [meta] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(wheel.read(meta))
        [shipped] = [n for n in wheel.namelist() if n.endswith("/LICENSE") and ".dist-info/" in n]
        assert wheel.read(shipped).decode("utf-8") == text
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]


def test_the_installed_tooldir_prints_its_version_from_an_unrelated_folder(
    plain: PlainInstall, elsewhere: Path
) -> None:
    done = plain.run([plain.tooldir, "--version"], elsewhere)
    assert done.returncode == 0, done.stderr
    version = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]["version"]
    assert done.stdout == f"tooldir {version}\n"
    module = plain.run([str(plain.bin / "python"), "-m", "tooldir", "--version"], elsewhere)
    assert module.stdout == done.stdout
    assert list(elsewhere.iterdir()) == []
