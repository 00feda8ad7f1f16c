"""A process tree shaped like a training pod, to capture real /proc samples (see README.md).

argv: MODE (named | same-comm) READY_FILE

named: launcher (comm `torchrun`) -> `pause` and 2 ranks (`python3`) -> 2 workers each
(`pt_data_worker`); rank 0's first worker maps a 16 MiB /dev/shm segment.
same-comm: `python3` -> one rank -> 2 forked workers keeping its name (older PyTorch).
"""

import ctypes
import mmap
import os
import sys
import threading
import time

libc = ctypes.CDLL(None)
MiB = 1 << 20
mode, ready = sys.argv[1], sys.argv[2]
keep: list[object] = []


def set_name(name: str) -> None:
    libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME: what /proc/PID/status Name shows


def touch(n: int) -> bytearray:
    b = bytearray(n)
    for i in range(0, n, 4096):
        b[i] = 1
    return b


def worker(shm: bool) -> None:
    if mode == "named":
        set_name("pt_data_worker")
    keep.append(touch(16 * MiB))
    if shm:
        path = f"/dev/shm/rbk-cap-{os.getpid()}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT)
        os.ftruncate(fd, 16 * MiB)
        m = mmap.mmap(fd, 16 * MiB)
        for i in range(0, 16 * MiB, 4096):
            m[i] = 1
        keep.append(m)
        os.unlink(path)
    time.sleep(120)
    os._exit(0)


def rank(r: int) -> None:
    keep.append(touch((48 + 8 * r) * MiB))
    threading.Thread(target=time.sleep, args=(120,), daemon=True).start()
    for k in range(2):
        if os.fork() == 0:
            worker(mode == "named" and r == 0 and k == 0)
    time.sleep(120)
    os._exit(0)


if mode == "named":
    if os.fork() == 0:
        set_name("pause")
        time.sleep(120)
        os._exit(0)
    set_name("torchrun")
    for r in range(2):
        if os.fork() == 0:
            set_name("python3")
            rank(r)
else:
    set_name("python3")
    if os.fork() == 0:
        rank(0)
time.sleep(2)
with open(ready, "w") as f:
    f.write("ready\n")
time.sleep(120)
