"""The content-addressed store of verified package copies (no sandbox needed)."""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

import pytest
from toolkit import make_tool

from tooldir.errors import SandboxError
from tooldir.model import ToolRecord
from tooldir.sandbox import store
from tooldir.snapshot.loader import Loader, make_config


def records(tmp_path: Path, count: int) -> list[ToolRecord]:
    user = tmp_path / "user"
    for n in range(count):
        make_tool(user, f"tool{n}", script=f"print({n})\n")
    snapshot = Loader(make_config(project=None, user_dirs=[user], state_dir=tmp_path / "state")).load()
    return [snapshot.get(f"tool{n}") for n in range(count)]  # type: ignore[misc]


def test_the_copy_holds_exactly_the_verified_bytes_read_only(tmp_path: Path) -> None:
    (record,) = records(tmp_path, 1)
    target, contents = store.verified_files(record, tmp_path / "store")
    assert target.name == record.digest.removeprefix("sha256:")  # type: ignore[union-attr]
    for f, data in zip(record.files, contents, strict=True):
        assert hashlib.sha256(data).hexdigest() == f.sha256
        assert (target / f.path).read_bytes() == data
        assert not stat.S_IMODE((target / f.path).stat().st_mode) & 0o222
    assert not stat.S_IMODE(target.stat().st_mode) & 0o222


def test_a_record_without_files_cannot_be_materialized(tmp_path: Path) -> None:
    (record,) = records(tmp_path, 1)
    from dataclasses import replace

    with pytest.raises(SandboxError) as caught:
        store.verified_files(replace(record, files=()), tmp_path / "store")
    assert caught.value.code == "sandbox-failed"


def test_the_store_keeps_a_bounded_number_of_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "MAX_COPIES", 3)
    for record in records(tmp_path, 5):
        store.verified_files(record, tmp_path / "store")
    assert len([p for p in (tmp_path / "store").iterdir() if not p.name.startswith(".")]) == 3


def test_a_good_copy_a_concurrent_run_just_made_is_kept_not_replaced_as_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (record,) = records(tmp_path, 1)
    base = tmp_path / "store"
    real = store._read_verified
    made: list[int] = []

    def racing(*args: object, **kwargs: object) -> bytes:
        data = real(*args, **kwargs)  # type: ignore[arg-type]
        if not made:  # another run finishes its copy while this one is still reading
            with monkeypatch.context() as inner:
                inner.setattr(store, "_read_verified", real)
                made.append(store.verified_files(record, base)[0].stat().st_ino)
        return data

    monkeypatch.setattr(store, "_read_verified", racing)
    target, contents = store.verified_files(record, base)
    # removing it would pull the copy from under a third run that is reading it (sandbox-failed)
    assert target.stat().st_ino == made[0]
    assert [hashlib.sha256(c).hexdigest() for c in contents] == [f.sha256 for f in record.files]
