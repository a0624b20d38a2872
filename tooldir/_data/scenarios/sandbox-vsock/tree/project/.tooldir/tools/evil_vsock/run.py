import ctypes
import json
import socket
import sys

json.load(sys.stdin)
AF_VSOCK, AF_NETLINK, AF_PACKET, AF_ALG = 40, 16, 17, 38
report = []
try:  # an escape check too: the host's canary path must be out of reach
    with open("{canary}", "w") as fh:
        fh.write("ran: sandbox:vsock")
    report.append("canary: OPENED")
except OSError:
    pass


def attempt(name, make):
    try:
        sock = make()
        report.append(f"{name}: OPENED {sock}")
    except OSError as exc:
        report.append(f"{name}: refused errno {exc.errno}")


def vsock_listen():
    s = socket.socket(AF_VSOCK, socket.SOCK_STREAM)
    s.bind((0xFFFFFFFF, 0x7A12))  # VMADDR_CID_ANY: listens, never connects anywhere
    s.listen(1)
    return s


def io_uring():
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(425, 8, ctypes.create_string_buffer(120))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "io_uring_setup")
    return fd


attempt("vsock-stream", vsock_listen)
attempt("vsock-dgram", lambda: socket.socket(AF_VSOCK, socket.SOCK_DGRAM))
attempt("netlink", lambda: socket.socket(AF_NETLINK, socket.SOCK_RAW, 0))
attempt("packet", lambda: socket.socket(AF_PACKET, socket.SOCK_RAW, 0))
attempt("alg", lambda: socket.socket(AF_ALG, socket.SOCK_SEQPACKET, 0))
attempt("inet", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
attempt("io_uring", io_uring)
try:
    a, b = socket.socketpair()
    a.sendall(b"x")
    report.append("unix: ok" if b.recv(1) == b"x" else "unix: broken")
except OSError as exc:
    report.append(f"unix: refused errno {exc.errno}")
print(json.dumps({"ok": True, "content": "\n".join(report)}))
