"""The pure parts of tooldir.mcp.http: the bind address, the token file, the request guard."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tooldir.mcp.http import Bind, HttpSetupError, check_request, parse_bind, read_token

TOKEN = b"s3cret-token-0123456789"
BIND = Bind("127.0.0.1", 8765)


def _headers(**values: str) -> dict[bytes, list[bytes]]:
    return {k.replace("_", "-").encode(): [v.encode()] for k, v in values.items()}


@pytest.mark.parametrize(
    ("text", "host", "port", "loopback"),
    [
        ("8765", "127.0.0.1", 8765, True),
        ("127.0.0.1:8765", "127.0.0.1", 8765, True),
        ("[::1]:9000", "::1", 9000, True),
        ("localhost:1", "localhost", 1, True),
        ("0.0.0.0:8765", "0.0.0.0", 8765, False),  # noqa: S104 - parsed, never bound
        ("127.0.0.1:0", "127.0.0.1", 0, True),
    ],
)
def test_a_bind_address_is_host_port_or_a_port_on_loopback(text: str, host: str, port: int, loopback: bool) -> None:
    bind = parse_bind(text)
    assert (bind.host, bind.port, bind.is_loopback()) == (host, port, loopback)


@pytest.mark.parametrize("text", ["", "host", "::1:80", "[::1]80", "127.0.0.1:99999", "127.0.0.1:x", "example.com:80"])
def test_a_malformed_bind_address_or_a_host_name_is_refused(text: str) -> None:
    with pytest.raises(HttpSetupError):
        parse_bind(text)


def test_an_ipv6_bind_is_written_in_brackets_in_host_and_url() -> None:
    bind = parse_bind("[::1]:9000")
    assert (bind.authority, bind.url) == ("[::1]:9000", "http://[::1]:9000/mcp")


def test_a_request_passes_only_with_the_exact_host_a_matching_origin_and_the_token() -> None:
    good = {"host": "127.0.0.1:8765", "authorization": "Bearer " + TOKEN.decode()}
    assert check_request(_headers(**good), bind=BIND, token=TOKEN) is None
    assert check_request(_headers(**good, origin="http://127.0.0.1:8765"), bind=BIND, token=TOKEN) is None
    assert (
        check_request(_headers(**good | {"authorization": "bearer " + TOKEN.decode()}), bind=BIND, token=TOKEN) is None
    )
    assert check_request(_headers(**good | {"host": "localhost:8765"}), bind=BIND, token=TOKEN) == (
        421,
        "Host must be 127.0.0.1:8765",
    )
    assert check_request(_headers(authorization=good["authorization"]), bind=BIND, token=TOKEN)[0] == 421  # type: ignore[index]
    assert check_request(_headers(**good, origin="http://evil.example"), bind=BIND, token=TOKEN)[0] == 403  # type: ignore[index]
    for auth in ("", "Bearer", "Bearer x", "Basic " + TOKEN.decode(), "Bearer " + TOKEN.decode() + "x"):
        assert check_request(_headers(**good | {"authorization": auth}), bind=BIND, token=TOKEN)[0] == 401  # type: ignore[index]
    twice = _headers(**good)
    twice[b"authorization"].append(twice[b"authorization"][0])
    assert check_request(twice, bind=BIND, token=TOKEN)[0] == 401  # type: ignore[index]


def test_a_private_token_file_gives_its_stripped_token(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_bytes(b"  " + TOKEN + b"\n")
    path.chmod(0o600)
    assert read_token(path) == TOKEN


@pytest.mark.parametrize(
    ("content", "mode", "words"),
    [
        (TOKEN, 0o644, "chmod 600"),
        (TOKEN, 0o620, "chmod 600"),
        (b"\n", 0o600, "empty"),
        (b"short", 0o600, "fewer than 16"),
        (b"two words here and more", 0o600, "printable ASCII without spaces"),
        (b"x" * 5000, 0o600, r"it is 5000 bytes; a token file \(one line\) is at most 4096"),
    ],
)
def test_a_token_file_that_others_can_read_or_that_holds_no_usable_token_is_refused(
    tmp_path: Path, content: bytes, mode: int, words: str
) -> None:
    path = tmp_path / "token"
    path.write_bytes(content)
    path.chmod(mode)
    with pytest.raises(HttpSetupError, match=words):
        read_token(path)


def test_a_missing_or_symlinked_token_file_or_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(HttpSetupError, match="No such file"):
        read_token(tmp_path / "absent")
    real = tmp_path / "real"
    real.write_bytes(TOKEN)
    real.chmod(0o600)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(HttpSetupError):
        read_token(tmp_path / "link")
    with pytest.raises(HttpSetupError, match="not a regular file"):
        read_token(tmp_path)
    assert os.path.exists(real)
