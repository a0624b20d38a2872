"""Run the escape battery in a separate process (as another user, or on a real terminal).

python drive.py battery WORKDIR OUT.json        run every attack; write {attack: [problems]}
python drive.py tty WORKDIR OUT.json PTY_SLAVE  make PTY_SLAVE the controlling terminal, run the
                                                TIOCSTI attack, report bytes queued on the tty
"""

from __future__ import annotations

import fcntl
import json
import os
import struct
import sys
import termios
import tty
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import battery


def battery_mode(workdir: Path, out: Path) -> None:
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    os.environ.update({"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")})
    result = {"uid": os.getuid(), "problems": battery.run_all(workdir)}
    out.write_text(json.dumps(result))


def queued(fd: int) -> int:
    value: int = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    return value


def tty_mode(workdir: Path, out: Path, slave: str) -> None:
    os.setsid()
    fd = os.open(slave, os.O_RDWR)  # a session leader opening a tty: it becomes the controlling terminal
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    os.environ.update({"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")})
    tty.setraw(fd)  # non-canonical: one injected byte is readable at once
    control: str
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b"x")
        control = "injected" if queued(fd) == 1 else "no effect"
        termios.tcflush(fd, termios.TCIFLUSH)
    except OSError as exc:
        control = f"blocked outside the sandbox too: {exc}"
    root = workdir / "tools"
    root.mkdir(parents=True, exist_ok=True)
    host = battery.Host(workdir, workdir / "state")
    try:
        battery.build(root, host)
        reg = battery.registry(root, host)
        outcome = battery.run_attack(reg, host, "tiocsti")
        problems = battery.problems("tiocsti", outcome, host)
    finally:
        host.close()
    out.write_text(json.dumps({"control": control, "queued": queued(fd), "problems": problems}))


def main() -> None:
    mode, workdir, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    if mode == "battery":
        battery_mode(workdir, out)
    elif mode == "tty":
        tty_mode(workdir, out, sys.argv[4])
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
