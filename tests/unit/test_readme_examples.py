"""Every README example that claims an output is run as written and its output compared (issue 28
items 1 and 2).

The marker convention (also described at the end of README.md, "Running the tests"): an HTML
comment on the line before a fenced block.

* ``<!-- readme-test -->`` before a ```` ```console ```` block: a transcript. Each line starting
  with ``$ `` is a command; the lines after it, up to the next command, are what it prints (stdout
  and stderr together). Before a ```` ```python ```` block: the block is run with ``python``, and
  the ```` ```text ```` block right after it (if any) is what it prints.
* ``<!-- readme-test: file PATH -->`` before any block: its text is appended to ``PATH`` (``~`` is
  the session's home), as the README tells the reader to do.
* ``<!-- readme-test: same-as PATH -->`` before a ```` ```json ```` block (every one has it): the
  block is the repository's file ``PATH`` (compared as JSON), so the manifests the README shows are
  ones that ship.

All marked blocks run in README order in one bash session, as a reader typing them top to bottom
in one terminal: a fresh home (no XDG variables, no TOOLDIR_* variables), the working directory a
copy of the repository's ``fixtures/`` and ``policies/`` with ``.venv`` linking to this checkout's,
and this checkout's ``.venv/bin`` first on ``PATH``. A command that exits non-zero fails the test
unless it shows its status (``$?``) itself.

Expected output may use ``...``: alone on a line it matches any number of lines, inside a line any
text. Before comparing, the session's home is shown as ``/home/me``, its working directory as
``/home/me/tooldir``, and every run of 32 or more hex digits as ``<hex-N>`` (N counting distinct
values in order of appearance within the block), so that hashes and audit ids that change from run
to run still have to agree with each other where the README says they do.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MARK = re.compile(r"^<!-- readme-test(?:: (?P<what>.*?))? -->$")
FENCE = re.compile(r"^```(?P<lang>\w*)\s*$")
HEX = re.compile(r"[0-9a-f]{32,}")
STEP = "@@readme-step@@"


@dataclass
class Step:
    kind: str  # "command", "python" or "file"
    text: str  # the command line, the program, or the file's text
    expected: list[str]
    line: int  # where it is in README.md
    path: str = ""  # kind "file": where the text goes


@dataclass
class Block:
    line: int
    steps: list[Step] = field(default_factory=list)


def _fenced(lines: list[str], start: int) -> tuple[str, list[str], int]:
    """The block whose opening fence is at ``start``: its language, its lines, the index after it."""
    match = FENCE.match(lines[start])
    assert match, f"README.md:{start + 1}: a readme-test marker must be followed by a fenced block"
    end = start + 1
    while end < len(lines) and lines[end] != "```":
        end += 1
    assert end < len(lines), f"README.md:{start + 1}: unterminated block"
    return match.group("lang"), lines[start + 1 : end], end + 1


def parse_readme(text: str) -> list[Block]:
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        mark = MARK.match(lines[i])
        if not mark:
            i += 1
            continue
        what = mark.group("what") or ""
        lang, body, after = _fenced(lines, i + 1)
        block = Block(line=i + 1)
        if what.startswith("file "):
            block.steps.append(Step("file", "\n".join(body) + "\n", [], i + 2, path=what.removeprefix("file ")))
        elif what.startswith("same-as "):  # a shipped file's copy: compared, not run (test below)
            i += 1
            continue
        elif what:
            raise AssertionError(f"README.md:{i + 1}: unknown readme-test marker {what!r}")
        elif lang == "console":
            for number, line in enumerate(body, i + 3):
                if line.startswith("$ "):
                    block.steps.append(Step("command", line[2:], [], number))
                else:
                    assert block.steps, f"README.md:{number}: output before the first command"
                    block.steps[-1].expected.append(line)
        elif lang == "python":
            expected: list[str] = []
            if after < len(lines) and lines[after] == "```text":
                _, expected, after = _fenced(lines, after)
            block.steps.append(Step("python", "\n".join(body) + "\n", expected, i + 3))
        else:
            raise AssertionError(f"README.md:{i + 1}: a readme-test block is console or python, not {lang!r}")
        blocks.append(block)
        i = after
    return blocks


def canonical(lines: list[str], home: str, cwd: str, seen: dict[str, str] | None = None) -> list[str]:
    """``lines`` with the session's folders shown as the README shows them, hex runs named (in
    ``seen``, shared by the steps of one block)."""
    seen = {} if seen is None else seen

    def name(match: re.Match[str]) -> str:
        return seen.setdefault(match.group(), f"<hex-{len(seen) + 1}>")

    places = {cwd: "/home/me/tooldir", home: "/home/me"}
    where = re.compile("|".join(re.escape(k) for k in sorted(places, key=len, reverse=True)))
    return [HEX.sub(name, where.sub(lambda m: places[m.group()], line).rstrip()) for line in lines]


def _line_matches(pattern: str, line: str) -> bool:
    return re.fullmatch(".*".join(re.escape(part) for part in pattern.split("...")), line) is not None


def matches(expected: list[str], actual: list[str]) -> bool:
    """``expected`` against ``actual``, with ``...`` lines matching any number of lines."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head == "...":
        return any(matches(rest, actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and _line_matches(head, actual[0]) and matches(rest, actual[1:])


def _script(blocks: list[Block], work: Path) -> str:
    parts = ["exec 2>&1", 'cd "$READMETEST_CWD"']
    for b, block in enumerate(blocks):
        for s, step in enumerate(block.steps):
            parts.append(f"printf '\\n{STEP} {b} {s}\\n'")
            if step.kind == "command":
                parts.append(step.text)
            elif step.kind == "python":
                program = work / f"block-{b}-{s}.py"
                program.write_text(step.text, encoding="utf-8")
                parts.append(f"python {program}")
            else:
                data = work / f"block-{b}-{s}.txt"
                data.write_text(step.text, encoding="utf-8")
                target = step.path.replace("~", '"$HOME"', 1) if step.path.startswith("~") else step.path
                parts.append(f'mkdir -p "$(dirname {target})" && cat {data} >> {target}')
            parts.append(f"printf '\\n{STEP} status %s\\n' \"$?\"")
    return "\n".join(parts) + "\n"


def _session(tmp: Path) -> tuple[dict[str, str], Path, Path]:
    home = tmp / "home"
    home.mkdir(mode=0o700)
    cwd = home / "tooldir"
    cwd.mkdir()
    for name in ("fixtures", "policies"):
        shutil.copytree(REPO / name, cwd / name, symlinks=True)
    (cwd / ".venv").symlink_to(REPO / ".venv")
    (tmp / "tmp").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "TOOLDIR_"))}
    if "TOOLDIR_SEMANTIC" in os.environ:  # the ranker pass of this test
        env["TOOLDIR_SEMANTIC"] = os.environ["TOOLDIR_SEMANTIC"]
    env.pop("COLUMNS", None)
    env.update(
        HOME=str(home),
        TMPDIR=str(tmp / "tmp"),
        PATH=f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        LANG="C.UTF-8",
        READMETEST_CWD=str(cwd),
    )
    return env, home, cwd


def test_the_marker_convention_is_parsed_as_documented() -> None:
    text = "\n".join(
        [
            "<!-- readme-test -->",
            "```console",
            "$ echo hi   # a comment",
            "hi",
            "$ true",
            "```",
            "<!-- readme-test: file ~/x.toml -->",
            "```toml",
            "a = 1",
            "```",
            "<!-- readme-test -->",
            "```python",
            "print(1)",
            "```",
            "```text",
            "1",
            "```",
        ]
    )
    [console, file, python] = parse_readme(text)
    assert [(s.kind, s.text, s.expected) for s in console.steps] == [
        ("command", "echo hi   # a comment", ["hi"]),
        ("command", "true", []),
    ]
    assert [(s.kind, s.path, s.text) for s in file.steps] == [("file", "~/x.toml", "a = 1\n")]
    assert [(s.kind, s.text, s.expected) for s in python.steps] == [("python", "print(1)\n", ["1"])]


def test_an_ellipsis_matches_lines_or_text_and_nothing_else_is_loose() -> None:
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["a", "...", "d"], ["a", "d"])
    assert matches(["audit id: ..."], ["audit id: 1234"])
    assert not matches(["a", "d"], ["a", "b", "d"])
    assert not matches(["audit id: ..."], ["audit: 1234"])
    assert not matches(["1.3.0"], ["1.3.0", "more"])


def test_hashes_are_named_by_order_so_equal_ones_must_stay_equal() -> None:
    a, b = "a" * 64, "b" * 64
    assert canonical([f"{a} {b} {a}"], "/h", "/h/t") == ["<hex-1> <hex-2> <hex-1>"]
    assert canonical([f"{a} {a}"], "/h", "/h/t") != canonical([f"{a} {b}"], "/h", "/h/t")
    assert canonical(["/h/t/x /h/y"], "/h", "/h/t") == ["/home/me/tooldir/x /home/me/y"]


def test_every_console_block_of_the_readme_is_a_tested_transcript() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    untested = [n + 1 for n, line in enumerate(lines) if line == "```console" and not (n and MARK.match(lines[n - 1]))]
    assert untested == [], f"README.md lines {untested}: a console block claims an output; mark it <!-- readme-test -->"


# a block whose output the search ranker decides: it runs in both ranker passes
RANKER = re.compile(r"\btooldir (?:search|eval|catalog)\b|\btool_search\(")


def for_ranker_pass(blocks: list[Block], mode: str) -> list[Block]:
    """Every block in the semantic pass; in the BM25F pass the blocks whose output the ranker
    decides, after the README's first block (the try-out: it sets ``$O`` and approves the tool they
    search). A ranker block that needed another block's state would fail here, not pass unseen."""
    if mode == "semantic":
        return blocks
    return blocks[:1] + [b for b in blocks[1:] if any(RANKER.search(step.text) for step in b.steps)]


def test_the_bm25f_pass_runs_the_try_out_and_every_block_that_searches() -> None:
    blocks = parse_readme(README.read_text(encoding="utf-8"))
    chosen = for_ranker_pass(blocks, "bm25f")
    texts = ["\n".join(step.text for step in b.steps) for b in chosen]
    assert "$O" in texts[0]  # the try-out, which the search examples build on, comes first
    # the README's examples whose output the ranker decides are all in it ...
    assert any('tooldir search "bump version"' in t for t in texts)
    assert any("tooldir eval --tools" in t for t in texts)
    assert any("session.tool_search(" in t for t in texts)
    # ... and the ones it does not decide are left to the semantic pass
    assert not any("tooldir init word_stats" in t or "tooldir audit head" in t for t in texts)
    assert for_ranker_pass(blocks, "semantic") == blocks


@pytest.mark.both_rankers
def test_every_readme_example_that_claims_an_output_prints_it(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    every = parse_readme(README.read_text(encoding="utf-8"))
    assert len(every) >= 5, "the README's tested examples went missing"
    blocks = for_ranker_pass(every, request.node.callspec.params["ranker_pass"])
    env, home, cwd = _session(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    script = work / "readme.sh"
    script.write_text(_script(blocks, work), encoding="utf-8")
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", str(script)],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    # the output, cut at the step markers: [(block, step, lines, status)]
    chunks = done.stdout.split(f"\n{STEP} ")[1:]
    results: dict[tuple[int, int], tuple[list[str], int]] = {}
    current: tuple[int, int] | None = None
    for chunk in chunks:
        head, _, body = chunk.partition("\n")
        words = head.split()
        if words[0] == "status":
            assert current is not None
            lines, _ = results[current]
            results[current] = (lines, int(words[1]))
        else:
            current = (int(words[0]), int(words[1]))
            results[current] = (body.split("\n") if body else [], -1)
    failures = []
    for b, block in enumerate(blocks):
        seen_actual: dict[str, str] = {}
        seen_expected: dict[str, str] = {}
        for s, step in enumerate(block.steps):
            if (b, s) not in results:
                failures.append(f"README.md:{step.line}: never ran (the session ended early):\n{done.stdout[-2000:]}")
                continue
            raw, status = results[(b, s)]
            while raw and raw[-1] == "":
                raw.pop()
            actual = canonical(raw, str(home), str(cwd), seen_actual)
            expected = canonical(step.expected, "/home/me", "/home/me/tooldir", seen_expected)
            if status != 0 and "$?" not in step.text:
                failures.append(f"README.md:{step.line}: {step.text!r} exited {status}:\n" + "\n".join(actual))
            elif step.kind != "file" and not matches(expected, actual):
                failures.append(
                    f"README.md:{step.line}: {step.text.splitlines()[0]!r}\n--- README says\n"
                    + "\n".join(expected)
                    + "\n--- it printed\n"
                    + "\n".join(actual)
                )
    assert failures == [], "\n\n".join(failures)


def test_every_manifest_the_readme_shows_is_a_file_the_repository_ships() -> None:
    """Each ```json block is preceded by ``<!-- readme-test: same-as PATH -->`` and equals PATH."""
    lines = README.read_text(encoding="utf-8").splitlines()
    compared: list[str] = []
    for n, line in enumerate(lines):
        if line == "```json":
            marker = re.fullmatch(r"<!-- readme-test: same-as (\S+) -->", lines[n - 1])
            assert marker is not None, f"README line {n + 1}: a json block without a same-as marker"
            _, body, _ = _fenced(lines, n)
            shipped = REPO / marker.group(1)
            assert json.loads("\n".join(body)) == json.loads(shipped.read_text("utf-8")), f"README line {n + 1}"
            compared.append(marker.group(1))
    assert "fixtures/example/project/.tooldir/tools/jira_get_issue/schema.json" in compared
    assert "fixtures/example/project/.tooldir/tools/notes/server.json" in compared
