"""A policy file is a regular file of bounded size, read without blocking (issue 23 item 9):
every refusal a one-line PolicyError naming the file, never a hang, a MemoryError or a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tooldir._cli import main
from tooldir.errors import PolicyError
from tooldir.policy import MAX_POLICY_BYTES, load_policy
from tooldir.read import scanmemo


def refusal(path: Path | str) -> str:
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    message = str(caught.value)
    assert "\n" not in message and caught.value.path == str(path), (message, caught.value.path)
    return message


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "policy.toml")
    assert "it is a FIFO, not a regular file" in refusal(tmp_path / "policy.toml")


def test_a_character_device_is_refused_without_reading_it(tmp_path: Path) -> None:
    assert "it is a character device, not a regular file" in refusal("/dev/zero")


def test_a_directory_is_refused(tmp_path: Path) -> None:
    assert "it is a directory, not a regular file" in refusal(tmp_path)


def test_a_300_mib_file_is_refused_by_its_size_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "policy.toml"
    with big.open("wb") as fh:
        fh.truncate(300 * 1024 * 1024)  # sparse
    assert f"it is {300 * 1024 * 1024} bytes; a policy file is at most {MAX_POLICY_BYTES}" in refusal(big)


def test_a_file_at_the_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text("# " + "x" * (MAX_POLICY_BYTES - 3) + "\n")
    assert path.stat().st_size == MAX_POLICY_BYTES
    assert load_policy(path)[1] == str(path)


@pytest.mark.parametrize(
    "text",
    ["a = " + "[" * 20_000 + "]" * 20_000 + "\n", "a = " + "{b = " * 20_000 + "1" + "}" * 20_000 + "\n"],
    ids=["arrays", "inline-tables"],
)
def test_toml_nested_20000_deep_is_a_one_line_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    assert "not valid TOML: arrays or tables nested too deeply" in refusal(path)


def test_invalid_utf8_names_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_bytes(b"preset = '\xff'\n")
    assert "invalid UTF-8 at byte 10" in refusal(path)


@pytest.mark.parametrize("command", [["policy", "check"], ["scan", "--policy"]])
def test_the_cli_refuses_a_fifo_policy_with_exit_2_and_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    os.mkfifo(tmp_path / "p.toml")
    extra = ["--project", str(tmp_path), "--state-dir", str(tmp_path / "state")] if command[0] == "scan" else []
    assert main([*command, str(tmp_path / "p.toml"), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "it is a FIFO, not a regular file" in err, err


def test_the_scan_memo_key_does_not_block_on_a_fifo_or_read_a_device() -> None:
    assert scanmemo.MAX_POLICY_BYTES == MAX_POLICY_BYTES
    with pytest.raises(OSError, match="not a policy file the load would read"):
        scanmemo._policy_bytes("/dev/zero")
