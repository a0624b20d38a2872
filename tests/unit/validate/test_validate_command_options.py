"""exec:args holes (issue 11 item 8): an argv entry starting with '-' never names a package file,
so a decoy file called '-c' or '-m' cannot make an interpreter run inline code or a module."""

from __future__ import annotations

from pathlib import Path

import pytest
from toolkit import make_tool

import tooldir
from tooldir import Snapshot, Status


def load_user(root: Path) -> Snapshot:
    return tooldir.load(project=None, user_dirs=[root], state_dir=root.parent / "state")


def unsafe_pointers(snap: Snapshot, tool: str) -> set[str | None]:
    return {d.pointer for d in snap.diagnostics if d.tool == tool and d.code == "unsafe-command"}


@pytest.mark.parametrize(
    ("command", "decoy"),
    [
        (["python3", "-c", "__import__('os').system('id')"], "-c"),
        (["python3", "-m", "http.server"], "-m"),
        (["node", "-e", "require('child_process')"], "-e"),
        (["python3", "--", "run.py"], "--"),
    ],
    ids=["python-c", "python-m", "node-e", "double-dash"],
)
def test_a_decoy_package_file_named_like_an_option_does_not_count_as_the_script(
    root: Path, command: list[str], decoy: str
) -> None:
    make_tool(root, "decoy", execute={"command": command}, extra_files={decoy: "print('decoy')\n"})
    make_tool(root, "fine_tool")
    snap = load_user(root)
    assert unsafe_pointers(snap, "decoy") == {"/execute/command/1"}
    assert snap.records("decoy")[0].status is Status.REJECTED
    assert snap.records("fine_tool")[0].status is Status.ACTIVE


def test_an_executable_package_file_named_like_an_option_is_never_argv0(root: Path) -> None:
    folder = make_tool(root, "dash_head", execute={"command": ["-x", "run.py"]}, extra_files={"-x": "#!/bin/sh\n"})
    (folder / "-x").chmod(0o755)
    snap = load_user(root)
    assert unsafe_pointers(snap, "dash_head") == {"/execute/command/0"}
    assert snap.records("dash_head")[0].status is Status.REJECTED


def test_options_after_the_script_are_still_accepted_even_if_a_file_has_that_name(root: Path) -> None:
    make_tool(root, "opts", execute={"command": ["python3", "run.py", "-c", "--verbose"]}, extra_files={"-c": "x"})
    snap = load_user(root)
    assert unsafe_pointers(snap, "opts") == set()
    assert snap.records("opts")[0].status is Status.ACTIVE
