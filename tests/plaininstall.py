"""A plain (non-editable) install of this tree: build a wheel, install it with ``--no-deps`` into a
fresh virtualenv whose dependencies come from the test environment through a ``.pth`` line (no
index needed). Used by the wheel drill test and the issue-17 tests."""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class PlainInstall:
    wheel: Path
    bin: Path  # the venv's bin folder
    env: dict[str, str]  # PATH with the venv first, a throwaway HOME

    @property
    def tooldir(self) -> str:
        return str(self.bin / "tooldir")

    def run(
        self, argv: list[str], cwd: Path, *, input: str | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, cwd=cwd, env=self.env, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )


def _backend_is_here() -> bool:
    wanted = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["build-system"]["requires"]
    for text in wanted:
        requirement = Requirement(text)
        try:
            if not requirement.specifier.contains(version(requirement.name), prereleases=True):
                return False
        except PackageNotFoundError:
            return False
    return True


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


def build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "MANIFEST.in", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "tooldir", src / "tooldir", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp / "dist"
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)]
    if _backend_is_here():
        argv.append("--no-build-isolation")
    done = _run(argv, tmp)
    assert done.returncode == 0, done.stderr[-3000:]
    [wheel] = out.glob("tooldir-*.whl")
    return wheel


def install_wheel(tmp: Path) -> PlainInstall:
    wheel = build_wheel(tmp)
    venv = tmp / "venv"
    done = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp)
    assert done.returncode == 0, done.stderr
    python = venv / "bin" / "python"
    done = _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        tmp,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp).stdout.strip()
    Path(purelib, "zz_test_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    home = tmp / "home"
    home.mkdir()
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    return PlainInstall(wheel=wheel, bin=venv / "bin", env=env)
