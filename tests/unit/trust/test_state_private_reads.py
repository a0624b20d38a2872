"""A state file is read through one private read (tooldir._internal.smallfile.read_private): the
folders on the way are walked once per state folder, not on every read, and a folder that changed
(a chmod, another folder put in its place) is walked again and refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tooldir._internal import smallfile
from tooldir.errors import StateError
from tooldir.state import read_json, write_json_atomic


def counted_walks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    walks: list[Any] = []
    real = smallfile.path_problem

    def counting(path: Any, **kwargs: Any) -> Any:
        walks.append(path)
        return real(path, **kwargs)

    monkeypatch.setattr(smallfile, "path_problem", counting)
    return walks


def test_reading_state_files_walks_the_state_folder_once_not_on_every_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    write_json_atomic(state / "a.json", {"n": 1})
    write_json_atomic(state / "b.json", {"n": 2})
    walks = counted_walks(monkeypatch)
    for _ in range(3):
        assert read_json(state / "a.json", {}) == {"n": 1}
        assert read_json(state / "b.json", {}) == {"n": 2}
    assert walks == [str(state)]


def test_a_state_folder_made_writable_by_others_after_a_read_is_walked_again_and_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    write_json_atomic(state / "a.json", {"n": 1})
    walks = counted_walks(monkeypatch)
    assert read_json(state / "a.json", {}) == {"n": 1}
    state.chmod(0o777)  # what another user could then replace the file in
    with pytest.raises(StateError, match=r"refused: .*, on the way to the state file, is writable by others"):
        read_json(state / "a.json", {})
    assert len(walks) == 2


def test_a_state_folder_put_in_place_of_a_checked_one_is_walked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    write_json_atomic(state / "a.json", {"n": 1})
    walks = counted_walks(monkeypatch)
    assert read_json(state / "a.json", {}) == {"n": 1}
    state.rename(tmp_path / "old")
    write_json_atomic(state / "a.json", {"n": 2})
    assert read_json(state / "a.json", {}) == {"n": 2}
    assert len(walks) == 2


def test_a_state_file_that_is_a_symbolic_link_or_writable_by_others_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    write_json_atomic(state / "real.json", {"n": 1})
    (state / "link.json").symlink_to(state / "real.json")
    with pytest.raises(StateError, match="it is a symbolic link"):
        read_json(state / "link.json", {})
    (state / "real.json").chmod(0o666)
    with pytest.raises(StateError, match=r"refused: the state file is writable by others \(mode 666\)"):
        read_json(state / "real.json", {})
