from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tooldir.model import PackageFile
from tooldir.trust.lockfile import LockError, compare_files, parse_expiry, parse_lock, render_lock

HEX = "ab" * 32
FILES = (PackageFile("run.py", HEX, 10, False), PackageFile("schema.json", "cd" * 32, 20, False))


def lock_doc(**overrides: object) -> bytes:
    doc: dict[str, object] = {
        "format": "tooldir-lock/1",
        "name": "echo",
        "version": 3,
        "expires": None,
        "files": {"run.py": f"sha256:{HEX}"},
    }
    doc.update(overrides)
    return json.dumps(doc).encode()


def test_rendered_lock_round_trips_and_leaves_out_the_lock_and_its_signatures() -> None:
    files = (*FILES, PackageFile("tool.lock", HEX, 1, False), PackageFile("tool.lock.minisig", HEX, 1, False))
    expires = datetime(2027, 1, 31, tzinfo=UTC)
    lock = parse_lock(render_lock("echo", 7, expires, files))
    assert (lock.name, lock.version, lock.expires) == ("echo", 7, expires)
    assert dict(lock.files) == {"run.py": f"sha256:{HEX}", "schema.json": f"sha256:{'cd' * 32}"}


@pytest.mark.parametrize(
    ("data", "pointer"),
    [
        pytest.param(b"[]", "", id="not-an-object"),
        pytest.param(b'{"format": "x", "format": "y"}', "", id="duplicate-key"),
        pytest.param(b'{"version": NaN}', "", id="nan"),
        pytest.param(b"\xef\xbb\xbf{}", "", id="bom"),
        pytest.param(b'{"name": "\xff"}', "", id="invalid-utf8"),
        pytest.param(b"[" * 100_000, "", id="deep-nesting"),
        pytest.param(b"{} {}", "", id="trailing-data"),
        pytest.param(lock_doc(files={"\ud800": f"sha256:{HEX}"}), "/files/\ud800", id="lone-surrogate"),
        pytest.param(lock_doc(extra=1), "/extra", id="unknown-key"),
        pytest.param(lock_doc(format="tooldir-lock/2"), "/format", id="wrong-format"),
        pytest.param(lock_doc(name="../etc"), "/name", id="bad-name"),
        pytest.param(lock_doc(version=-1), "/version", id="negative-version"),
        pytest.param(lock_doc(version=True), "/version", id="boolean-version"),
        pytest.param(lock_doc(version=1.5), "/version", id="float-version"),
        pytest.param(lock_doc(expires="2027-01-01T00:00:00"), "/expires", id="expiry-without-zone"),
        pytest.param(lock_doc(expires="soon"), "/expires", id="expiry-not-a-date"),
        pytest.param(lock_doc(files={}), "/files", id="no-files"),
        pytest.param(lock_doc(files={"../x": f"sha256:{HEX}"}), "/files/..~1x", id="traversal"),
        pytest.param(lock_doc(files={"/abs": f"sha256:{HEX}"}), "/files/~1abs", id="absolute"),
        pytest.param(lock_doc(files={"tool.lock": f"sha256:{HEX}"}), "/files/tool.lock", id="lists-itself"),
        pytest.param(lock_doc(files={"run.py": "sha256:XYZ"}), "/files/run.py", id="bad-hash"),
        pytest.param(lock_doc(files={"run.py": HEX}), "/files/run.py", id="hash-without-prefix"),
    ],
)
def test_malformed_lock_is_refused_with_a_pointer_to_the_problem(data: bytes, pointer: str) -> None:
    with pytest.raises(LockError) as caught:
        parse_lock(data)
    assert caught.value.pointer == pointer
    assert caught.value.message


@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_crash_the_lock_parser(data: bytes) -> None:
    with contextlib.suppress(LockError):
        parse_lock(data)


def test_file_comparison_names_unlisted_missing_and_changed_files() -> None:
    lock = parse_lock(
        lock_doc(files={"run.py": f"sha256:{HEX}", "gone.py": f"sha256:{HEX}", "lib.py": f"sha256:{HEX}"})
    )
    now = (
        PackageFile("run.py", HEX, 1, False),
        PackageFile("lib.py", "00" * 32, 1, False),
        PackageFile("new.py", HEX, 1, False),
    )
    mismatch = compare_files(lock, now)
    assert (mismatch.unlisted, mismatch.missing, mismatch.changed) == (("new.py",), ("gone.py",), ("lib.py",))
    assert not mismatch.clean


def test_expiry_accepts_dates_and_zoned_times_and_compares_with_now() -> None:
    assert parse_expiry("2027-01-31") == datetime(2027, 1, 31, tzinfo=UTC)
    assert parse_expiry("2027-01-31T14:00:00+02:00") == datetime(2027, 1, 31, 12, tzinfo=UTC)
    lock = parse_lock(lock_doc(expires="2027-01-31T00:00:00Z"))
    assert lock.expires is not None
    assert not lock.expired(lock.expires - timedelta(seconds=1))
    assert lock.expired(lock.expires)
