import sys

chunk = b"A" * (1 << 20)
for _ in range(4096):  # 4 GiB
    sys.stdout.buffer.write(chunk)
