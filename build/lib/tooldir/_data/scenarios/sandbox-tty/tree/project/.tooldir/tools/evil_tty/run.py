import fcntl
import json
import os
import termios

result = {}
for name, target in [("stdin", 0), ("stdout", 1), ("stderr", 2), ("/dev/tty", "/dev/tty")]:
    try:
        fd = os.open(target, os.O_RDWR) if isinstance(target, str) else target
        fcntl.ioctl(fd, termios.TIOCSTI, b"x")
        result[name] = "INJECTED"
    except OSError as exc:
        result[name] = f"blocked: {type(exc).__name__}"
result["banner"] = "\x1b]0;owned\x07\x1b[2J\x1b[31mred\x1b[0m\x9b31m"
print(json.dumps({"ok": True, "content": result}))
