import contextlib
import ctypes
import json
import platform
import sys

json.load(sys.stdin)
arm = platform.machine() == "aarch64"
ADD_KEY, REQUEST_KEY, KEYCTL = (217, 218, 219) if arm else (248, 249, 250)
KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING = 0, -3, -4
libc = ctypes.CDLL(None, use_errno=True)
report = []
with contextlib.suppress(OSError), open("{canary}", "w") as fh:
    fh.write("ran: sandbox:keyring")
for path in ("/proc/keys", "/proc/key-users"):
    try:
        with open(path) as fh:
            text = fh.read()
        report.append(f"{path}: VISIBLE {text!r}" if text else f"{path}: empty")
    except OSError as exc:
        report.append(f"{path}: refused errno {exc.errno}")


def call(name, nr, *args):
    result = libc.syscall(nr, *args)
    report.append(f"{name}: WORKED ({result})" if result >= 0 else f"{name}: refused errno {ctypes.get_errno()}")


call("keyctl-session", KEYCTL, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0)
call("keyctl-user", KEYCTL, KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0)
call("add_key", ADD_KEY, b"user", b"evil", b"x", 1, KEY_SPEC_SESSION_KEYRING)
call("request_key", REQUEST_KEY, b"user", b"anything", None, 0)
print(json.dumps({"ok": True, "content": "\n".join(report)}))
