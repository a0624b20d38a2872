"""``tooldir adopt`` without ``--dry-run`` (issue 27 item 2): each stdio entry becomes a pending server
package in the user root, its version resolved and installed into it, its secrets moved to
secrets.toml with a grant; ``--write-client-config`` replaces the adopted entries with one ``tooldir
serve`` entry, keeping the rest of the file byte for byte. The registries are stood in for by a local
one that writes real package trees (tests/upstream/test_adopt_real_servers.py uses npm and PyPI)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tooldir._cli import command_line, main
from tooldir.adopt import install as adoption

TOKEN = "ghp_" + "Zq9Xw8Vu7T" * 4
NPM_VERSIONS = {"@acme/server-notes": ["1.0.0", "1.4.2"], "server-pinned": ["2.0.0"]}
PYPI_VERSIONS = {"acme-time": "2026.1.5"}


class LocalRegistry:
    """npm and PyPI as the installer sees them: versions, and a package tree written on install."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail: set[str] = set()

    def npm_versions(self, requested: str) -> str:
        self.calls.append(("npm view", requested))
        name = requested if requested.rfind("@") <= 0 else requested[: requested.rfind("@")]
        if name in self.fail or name not in NPM_VERSIONS:
            raise adoption.AdoptError("adopt-install-failed", f"npm view {requested} failed: 404 Not Found")
        return json.dumps(NPM_VERSIONS[name])

    def npm_install(self, prefix: Path, exact: str) -> None:
        self.calls.append(("npm install", exact))
        at = exact.rfind("@")
        name, version = exact[:at], exact[at + 1 :]
        pkg = prefix / "node_modules" / name
        (pkg / "dist").mkdir(parents=True)
        (pkg / "package.json").write_text(
            json.dumps({"name": name, "version": version, "bin": {name.rsplit("/", 1)[-1]: "dist/index.js"}})
        )
        (pkg / "dist" / "index.js").write_text("console.log(JSON.stringify(process.argv.slice(2)));\n")

    def pip_install(self, site: Path, requested: str, python_version: str, report: Path) -> None:
        self.calls.append(("pip install", requested))
        name = requested.split("==", maxsplit=1)[0].split("[", maxsplit=1)[0]
        if name in self.fail or name not in PYPI_VERSIONS:
            raise adoption.AdoptError(
                "adopt-install-failed", f"pip install {requested} failed: no matching distribution"
            )
        version = PYPI_VERSIONS[name]
        module = name.replace("-", "_")
        (site / module).mkdir(parents=True)
        (site / module / "__init__.py").write_text(
            "import json, os, sys\n"
            "def main():\n"
            "    print(json.dumps({'argv': sys.argv, 'env': {k: os.environ.get(k) for k in ('LOG_LEVEL', 'GITHUB_TOKEN')}}))\n"
            "    return 0\n"
        )
        info = site / f"{module}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(f"[console_scripts]\n{name} = {module}:main\n")
        (site / "bin").mkdir()
        (site / "bin" / name).write_text("#!/host/python\n")
        report.write_text(json.dumps({"install": [{"metadata": {"name": name, "version": version}}]}))


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> LocalRegistry:
    reg = LocalRegistry()
    monkeypatch.setattr(adoption, "npm_versions", reg.npm_versions)
    monkeypatch.setattr(adoption, "npm_install", reg.npm_install)
    monkeypatch.setattr(adoption, "pip_install", reg.pip_install)
    return reg


MCP_JSON = """{
  // no comments in JSON: this line is not here
}"""

# odd but valid formatting that a re-serialisation would lose: tabs, inline objects, key order
CLAUDE = (
    '{\n\t"theme": "dark",   "mcpServers": {\n'
    '\t\t"notes": {"command": "npx", "args": ["-y", "@acme/server-notes", "--root", "/data"]},\n'
    '\t\t"remote": {"type": "http", "url": "https://mcp.example.com/mcp"},\n'
    '\t\t"time": {\n\t\t\t"command": "uvx",\n\t\t\t"args": ["acme-time", "--token", "' + TOKEN + '"],\n'
    '\t\t\t"env": {"GITHUB_TOKEN": "' + TOKEN + '", "LOG_LEVEL": "debug", "HOME_DIR": "${HOME_DIR}"}\n\t\t},\n'
    '\t\t"pg": {"command": "docker", "args": ["run", "-i", "mcp/postgres@sha256:' + "a" * 64 + '"]}\n'
    '\t},\n\t"zz_last": [1,2,  3]\n}\n'
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / ".mcp.json").write_text(CLAUDE)
    return folder


def config_home() -> Path:
    return Path(os.environ["XDG_CONFIG_HOME"]) / "tooldir"


def adopt(project: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    code = main(["adopt", "--json", "--from", str(project / ".mcp.json"), "--project", str(project), *extra])
    return code, json.loads(capsys.readouterr().out)


def by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in doc["servers"]}


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_each_fetched_stdio_entry_becomes_a_pending_server_package_with_its_resolved_version(
    project: Path, registry: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc = adopt(project, capsys)
    assert code == 0
    assert doc["started"] == [] and doc["dry_run"] is False
    servers = by_name(doc)
    assert servers["notes"]["status"] == "adopted"
    assert servers["notes"]["requested"] == "@acme/server-notes" and servers["notes"]["version"] == "1.4.2"
    assert servers["time"]["version"] == "2026.1.5"
    assert ("npm install", "@acme/server-notes@1.4.2") in registry.calls  # the exact version, resolved first
    notes = config_home() / "tools" / "notes"
    manifest = json.loads((notes / "server.json").read_text())
    assert manifest["server"] == {"command": ["python3", "launch.py"], "network": False, "env": []}
    assert manifest["risk"] == "external-write"
    launcher = (notes / "launch.py").read_text()
    assert "ENTRY = 'node/node_modules/@acme/server-notes/dist/index.js'" in launcher
    assert "ARGS = ['--root', '/data']" in launcher
    marker = json.loads((notes / "adopted.json").read_text())
    assert marker["resolved"]["version"] == "1.4.2"
    # the installed tree is one zipped payload in the package (covered by its digest), listed file by file
    assert sorted(p.name for p in notes.iterdir()) == ["adopted.json", "launch.py", "payload.zip.000", "server.json"]
    listed = {path for path, _size, _sha in marker["payload"]["files"]}
    assert "node/node_modules/@acme/server-notes/dist/index.js" in listed
    time_manifest = json.loads((config_home() / "tools" / "time" / "server.json").read_text())
    assert time_manifest["server"]["command"] == ["python3", "launch.py"]
    assert time_manifest["server"]["env"] == ["HOME_DIR"]
    time_files = json.loads((config_home() / "tools" / "time" / "adopted.json").read_text())["payload"]["files"]
    assert not [f for f in time_files if f[0].startswith("site/bin/")]  # host-interpreter scripts dropped
    # pending: discovered, never started, waiting for `tooldir allow`
    assert main(["scan", "--json", "--project", str(project)]) in (0, 1)
    scan = json.loads(capsys.readouterr().out)
    pending = {t["name"]: t for t in scan["tools"]}
    assert pending["notes"]["status"] == "pending" and pending["time"]["status"] == "pending"


def test_entries_that_cannot_be_adopted_are_reported_with_a_code_and_skipped_and_the_others_go_on(
    project: Path, registry: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    registry.fail.add("@acme/server-notes")
    code, doc = adopt(project, capsys)
    servers = by_name(doc)
    assert servers["remote"]["status"] == "skipped" and servers["remote"]["code"] == "adopt-skipped"
    assert "remote http server" in servers["remote"]["message"]
    assert servers["pg"]["code"] == "adopt-skipped" and "container" in servers["pg"]["message"]
    assert servers["notes"]["code"] == "adopt-install-failed" and "404" in servers["notes"]["message"]
    assert servers["time"]["status"] == "adopted"
    assert code == 1  # an install failed
    assert not (config_home() / "tools" / "notes").exists()
    assert [p.name for p in config_home().iterdir() if p.name.startswith(".adopt-")] == []  # no staging left


def test_plain_text_secrets_move_to_secrets_toml_with_a_grant_and_never_into_the_package(
    project: Path, registry: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = config_home() / "policy.toml"
    policy.parent.mkdir(parents=True)
    policy.write_text('# my policy\n[sandbox]\ntimeout_s = 20\n\n[secrets.grants]\nother = ["X_TOKEN"]\n')
    code, doc = adopt(project, capsys)
    assert code == 0
    time = by_name(doc)["time"]
    assert time["secrets"] == ["GITHUB_TOKEN", "TIME_TOKEN"]
    secrets_file = config_home() / "secrets.toml"
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
    assert tomllib.loads(secrets_file.read_text())["secrets"] == {"GITHUB_TOKEN": TOKEN, "TIME_TOKEN": TOKEN}
    text = policy.read_text()
    assert text.startswith("# my policy\n[sandbox]\ntimeout_s = 20\n\n[secrets.grants]\n")
    assert tomllib.loads(text)["secrets"]["grants"] == {"other": ["X_TOKEN"], "time": ["GITHUB_TOKEN", "TIME_TOKEN"]}
    package = config_home() / "tools" / "time"
    manifest = json.loads((package / "server.json").read_text())
    assert manifest["server"]["secrets"] == ["GITHUB_TOKEN", "TIME_TOKEN"]
    assert all(TOKEN.encode() not in data for data in tree(package).values())
    assert TOKEN not in json.dumps(doc)


def test_the_launcher_sets_plain_env_values_and_fills_secret_arguments_from_the_environment(
    tmp_path: Path, project: Path, registry: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    adopt(project, capsys)
    launcher = config_home() / "tools" / "time" / "launch.py"
    env = {
        "PATH": os.environ["PATH"],
        "TMPDIR": str(tmp_path),
        "TIME_TOKEN": "from-tooldir",
        "GITHUB_TOKEN": "gh-from-tooldir",
    }
    done = subprocess.run(
        [sys.executable, "-I", str(launcher), "extra"], capture_output=True, text=True, env=env, check=True
    )
    shown = json.loads(done.stdout)
    assert shown["argv"] == ["acme-time", "--token", "from-tooldir", "extra"]
    assert shown["env"] == {"LOG_LEVEL": "debug", "GITHUB_TOKEN": "gh-from-tooldir"}
    missing = subprocess.run(
        [sys.executable, "-I", str(launcher)],
        capture_output=True,
        text=True,
        env={"TMPDIR": str(tmp_path)},
        check=False,
    )
    assert missing.returncode != 0 and "secret TIME_TOKEN was not given" in missing.stderr


def test_adopting_twice_changes_nothing_and_says_already_adopted(
    project: Path, registry: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    adopt(project, capsys)
    before = tree(config_home())
    calls = len(registry.calls)
    code, doc = adopt(project, capsys)
    assert code == 0
    assert by_name(doc)["notes"]["status"] == "already-adopted"
    assert by_name(doc)["time"]["status"] == "already-adopted"
    assert tree(config_home()) == before
    assert len(registry.calls) == calls  # nothing fetched again
    assert main(["adopt", "--from", str(project / ".mcp.json"), "--project", str(project)]) == 0
    assert "already adopted notes" in capsys.readouterr().out


def test_a_folder_of_that_name_that_adopt_did_not_write_is_a_conflict_and_kept(
    project: Path, registry: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = config_home() / "tools" / "notes"
    mine.mkdir(parents=True)
    (mine / "keep.txt").write_text("mine")
    _, doc = adopt(project, capsys)
    assert by_name(doc)["notes"]["code"] == "adopt-conflict"
    assert tree(mine) == {"keep.txt": b"mine"}


def test_a_secret_name_the_secrets_file_holds_with_another_value_is_a_conflict_before_anything_is_fetched(
    project: Path, registry: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    secrets_file = config_home() / "secrets.toml"
    secrets_file.parent.mkdir(parents=True)
    secrets_file.write_text('[secrets]\nGITHUB_TOKEN = "another"\n')
    secrets_file.chmod(0o600)
    _, doc = adopt(project, capsys)
    assert by_name(doc)["time"]["code"] == "adopt-conflict"
    assert "GITHUB_TOKEN" in by_name(doc)["time"]["message"]
    assert ("pip install", "acme-time") not in registry.calls
    assert secrets_file.read_text() == '[secrets]\nGITHUB_TOKEN = "another"\n'


def test_an_installed_package_over_the_package_limits_is_refused_naming_the_limit_and_nothing_is_written(
    project: Path, registry: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = config_home() / "policy.toml"
    policy.parent.mkdir(parents=True)
    policy.write_text("[limits]\nmax_package_files = 3\n")
    code, doc = adopt(project, capsys)
    assert code == 1
    notes = by_name(doc)["notes"]
    assert notes["code"] == "adopt-over-limit"
    assert "max_package_files = 3" in notes["message"] and "[limits] max_package_files = " in notes["message"]
    assert not (config_home() / "tools" / "notes").exists()
    assert not (config_home() / "secrets.toml").exists()  # time was over the limit too: its secrets stay out


def test_without_write_client_config_nothing_in_the_clients_file_changes(
    project: Path, registry: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    adopt(project, capsys)
    assert (project / ".mcp.json").read_text() == CLAUDE
    assert not list(project.glob("*.tooldir-backup*"))


def test_write_client_config_replaces_the_adopted_entries_with_one_tooldir_entry_keeping_the_rest_byte_for_byte(
    project: Path, registry: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc = adopt(project, capsys, "--write-client-config")
    assert code == 0
    file = project / ".mcp.json"
    text = file.read_text()
    assert (project / ".mcp.json.tooldir-backup").read_text() == CLAUDE
    assert doc["client_config"][0]["replaced"] == ["notes", "time"]
    servers = json.loads(text)["mcpServers"]
    assert list(servers) == ["tooldir", "remote", "pg"]  # tooldir where the first adopted entry was
    assert servers["tooldir"]["args"][0] == "serve"
    # every byte outside the replaced entries is the file's own
    assert text.startswith('{\n\t"theme": "dark",   "mcpServers": {\n\t\t"tooldir": {')
    assert '\t\t"remote": {"type": "http", "url": "https://mcp.example.com/mcp"},\n' in text
    assert text.endswith(
        '\t\t"pg": {"command": "docker", "args": ["run", "-i", "mcp/postgres@sha256:'
        + "a" * 64
        + '"]}\n\t},\n\t"zz_last": [1,2,  3]\n}\n'
    )
    assert TOKEN not in text
    # twice: nothing changes, no second backup
    code, doc = adopt(project, capsys, "--write-client-config")
    assert code == 0 and doc["client_config"] == []  # the adopted entries are gone from the file
    assert file.read_text() == text
    assert sorted(p.name for p in project.glob(".mcp.json.tooldir-backup*")) == [".mcp.json.tooldir-backup"]


def test_write_client_config_of_a_codex_file_keeps_every_other_line(
    tmp_path: Path, registry: LocalRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    codex = Path(os.environ["HOME"]) / ".codex" / "config.toml"
    codex.parent.mkdir(parents=True)
    original = (
        'model = "o3"  # keep me\n\n[mcp_servers.notes]\ncommand = "npx"\nargs = ["-y", "@acme/server-notes@1.0.0"]\n\n'
        '[mcp_servers.notes.env]\nLOG_LEVEL = "info"\n\n[mcp_servers.other]\ncommand = "/opt/other"\n\n[profiles.x]\nmodel = "y"\n'
    )
    codex.write_text(original)
    assert main(["adopt", "--json", "--from", "codex", "--project", str(tmp_path), "--write-client-config"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert by_name(doc)["notes"]["version"] == "1.0.0"  # pinned in the file: nothing to resolve
    assert ("npm view", "@acme/server-notes@1.0.0") not in registry.calls
    assert by_name(doc)["other"]["code"] == "adopt-skipped"
    text = codex.read_text()
    assert text.startswith(
        'model = "o3"  # keep me\n\n[mcp_servers.other]\ncommand = "/opt/other"\n\n[profiles.x]\nmodel = "y"\n'
    )
    parsed = tomllib.loads(text)
    assert set(parsed["mcp_servers"]) == {"other", "tooldir"}
    assert (codex.parent / "config.toml.tooldir-backup").read_text() == original
    assert main(["adopt", "--json", "--from", "codex", "--project", str(tmp_path), "--write-client-config"]) == 0
    capsys.readouterr()
    assert codex.read_text() == text


def test_adopt_refuses_write_client_config_with_dry_run(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["adopt", "--dry-run", "--write-client-config", "--project", str(project)]) == 2
    assert "leave out --dry-run" in capsys.readouterr().err
    assert (project / ".mcp.json").read_text() == CLAUDE


def test_a_drill_step_runs_adopt_only_with_dry_run(tmp_path: Path) -> None:
    """A downloaded scenario never makes tooldir fetch packages or write the user's root."""
    from tooldir.drill.cliargs import vet
    from tooldir.drill.confine import ScenarioError

    with pytest.raises(ScenarioError, match="only with --dry-run"):
        vet(["adopt"], base=tmp_path, cwd=tmp_path, scenario="s.toml", where="steps[0]", cli=command_line())
    vet(["adopt", "--dry-run"], base=tmp_path, cwd=tmp_path, scenario="s.toml", where="steps[0]", cli=command_line())
