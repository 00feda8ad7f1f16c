#!/usr/bin/python3
"""Test shim for ``all_reduce_perf`` on a node whose InfiniBand fails at communicator init.

Installed as ``all_reduce_perf`` in a test host's shim dir (first on its sessions' PATH) by
:func:`tests.ansible.shims.install_ab_all_reduce_perf`. It prints what nccl-tests 2.x over
NCCL 2.21 prints, in that format, and honours what the real binary would:

* ``-b/-e/-f`` pick the table's sizes, ``-g`` the number of GPUs (ranks, devices);
* NCCL's own lines appear only with ``NCCL_DEBUG=INFO`` (WARN lines with ``WARN`` too);
* ``NCCL_IB_DISABLE`` unset (or not ``1``): NCCL selects NET/IB, memory registration with the
  verbs library fails (``ibv_reg_mr``: the classic locked-memory limit of a container), the
  communicator init returns ``unhandled system error`` and the test exits 3 (testNcclError);
* ``NCCL_IB_DISABLE=1``: NCCL takes NET/Socket, the ranks connect over SHM, the table
  completes with ``#wrong`` 0 and the footer (``Out of bounds values : 0 OK``), exit 0.

The output is deterministic (fixed pid, timings from a bandwidth model) so that the same run
twice gives the same bytes: an idempotence check of what consumes it can pass. Each call is
appended as one JSON line (argv and the NCCL environment) to ``all_reduce_perf.calls`` next to
the shim, which is how a test knows whether, and how, the node ran it.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

PID = 4242
VERSION = "2.21.5+cuda12.4"
BUS_IDS = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
DEVICE = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
#: exit status of nccl-tests when an NCCL call fails (testNcclError)
TEST_NCCL_ERROR = 3


def parse_size(text: str) -> int:
    match = re.fullmatch(r"(\d+)([KMG]?)", text.upper())
    if not match:
        raise SystemExit(f"all_reduce_perf: bad size {text!r}")
    return int(match.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2)]


def parse_args(argv: list[str]) -> tuple[int, int, int, int]:
    opts = {"-b": "32M", "-e": "32M", "-f": "2", "-g": "1"}
    longs = {"--minbytes": "-b", "--maxbytes": "-e", "--stepfactor": "-f", "--ngpus": "-g"}
    it = iter(argv)
    for arg in it:
        key = longs.get(arg, arg)
        if key in opts:
            opts[key] = next(it, "")
    return parse_size(opts["-b"]), parse_size(opts["-e"]), int(opts["-f"]), int(opts["-g"])


def eth0_address() -> str:
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "dev", "eth0"], capture_output=True, text=True
    ).stdout
    match = re.search(r"inet (\d+\.\d+\.\d+\.\d+)", out)
    return match.group(1) if match else "127.0.0.1"


def main(argv: list[str]) -> int:
    shim_dir = os.path.dirname(os.path.abspath(__file__))
    env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    with open(os.path.join(shim_dir, "all_reduce_perf.calls"), "a") as calls:
        calls.write(json.dumps({"argv": argv, "env": env}) + "\n")
    min_bytes, max_bytes, factor, ngpus = parse_args(argv)
    host = socket.gethostname()
    debug = os.environ.get("NCCL_DEBUG", "").upper()
    info = debug in ("INFO", "TRACE")
    warn = info or debug == "WARN"
    ib = os.environ.get("NCCL_IB_DISABLE") != "1"
    addr = eth0_address()
    out: list[str] = []

    def nccl(tid: int, dev: int, msg: str, *, level: str = "INFO", loc: str = "") -> None:
        if (level == "INFO" and info) or (level == "WARN" and warn):
            where = f"{loc} " if loc else ""
            out.append(f"{host}:{PID}:{tid} [{dev}] {where}NCCL {level} {msg}")

    out += [
        f"# nThread 1 nGpus {ngpus} minBytes {min_bytes} maxBytes {max_bytes} "
        f"step: {factor}(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    for r in range(ngpus):
        bus = BUS_IDS[r % len(BUS_IDS)]
        out.append(
            f"#  Rank {r:2d} Group  0 Pid {PID:6d} on {host} device {r:2d} [0x{bus}] {DEVICE}"
        )
    nccl(PID, 0, f"Bootstrap : Using eth0:{addr}<0>")
    nccl(PID, 0, "NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such "
         "file or directory No plugin found (libnccl-net.so), using internal implementation")
    nccl(PID, 0, "cudaDriverVersion 12090")
    if info:
        out.append(f"NCCL version {VERSION}")
    tid0 = PID + 18
    if ib:
        nccl(tid0, 0, f"NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:{addr}<0>")
        nccl(tid0, 0, "Using non-device net plugin version 0")
        nccl(tid0, 0, "Using network IB")
    else:
        nccl(tid0, 0, "NCCL_IB_DISABLE set by environment to 1.")
        nccl(tid0, 0, f"NET/Socket : Using [0]eth0:{addr}<0>")
        nccl(tid0, 0, "Using non-device net plugin version 0")
        nccl(tid0, 0, "Using network Socket")
    for r in range(ngpus):
        bus = BUS_IDS[r % len(BUS_IDS)]
        nccl(tid0 + r, r, f"comm 0x55d0c1a{r:x}0 rank {r} nranks {ngpus} cudaDev {r} nvmlDev {r} "
             f"busId {bus}000 commId 0x5e2f0a1b3c4d5e6f - Init START")
    if ib:
        error = "Call to ibv_reg_mr failed with error Cannot allocate memory"
        proxy = tid0 + ngpus + 2
        nccl(proxy, 0, error, level="WARN", loc="misc/ibvwrap.cc:187")
        nccl(proxy, 0, "NET/IB : Unable to register memory for the proxy's host buffers",
             level="WARN", loc="transport/net_ib.cc:1085")
        nccl(proxy, 0, "transport/net_ib.cc:1086 -> 2")
        nccl(proxy, 0, "transport/net.cc:683 -> 2")
        nccl(tid0, 0, "init.cc:1374 -> 2")
        nccl(PID, 0, "init.cc:1741 -> 2")
        out.append(f"{host}: Test NCCL failure common.cu:1005 'unhandled system error (run with "
                   f"NCCL_DEBUG=INFO for details) / {error}'")
        out.append(f" .. {host} pid {PID}: Test failure common.cu:891")
        print("\n".join(out), flush=True)
        return TEST_NCCL_ERROR
    for channel in range(2):
        for r in range(ngpus):
            nxt = (r + 1) % ngpus
            nccl(tid0 + r, r, f"Channel {channel:02d}/0 : {r}[{r}] -> {nxt}[{nxt}] "
                 "via SHM/direct/direct")
    for r in range(ngpus):
        nccl(tid0 + r, r, "Connected all rings")
    for r in range(ngpus):
        bus = BUS_IDS[r % len(BUS_IDS)]
        nccl(tid0 + r, r, f"comm 0x55d0c1a{r:x}0 rank {r} nranks {ngpus} cudaDev {r} nvmlDev {r} "
             f"busId {bus}000 commId 0x5e2f0a1b3c4d5e6f - Init COMPLETE")
    out += [
        "#",
        "#                                                              out-of-place"
        "                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
        "     (us)  (GB/s)  (GB/s)       ",
    ]
    busbws = []
    size = min_bytes
    while size <= max_bytes:
        row = [f"{size:12d}  {size // 4:12d}  {'float':>8}  {'sum':>6}  {-1:6d}"]
        for extra_us in (1.5, 0.0):  # out-of-place is a little slower than in-place
            time_us = 60.0 + extra_us + size / 25.3e3  # ~25 GB/s algorithm bandwidth over SHM
            algbw = size / time_us / 1e3
            busbw = algbw * 2 * (ngpus - 1) / ngpus if ngpus > 1 else algbw
            busbws.append(busbw)
            row.append(f"{time_us:7.1f}  {algbw:6.2f}  {busbw:6.2f}  {0:5d}")
        out.append("  ".join(row))
        size *= max(factor, 2)
    avg = sum(busbws) / len(busbws) if busbws else 0.0
    out += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:.4f} ", "#"]
    print("\n".join(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
