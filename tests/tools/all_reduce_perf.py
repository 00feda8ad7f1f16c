#!/usr/bin/python3
"""Test shim for ``all_reduce_perf`` (and ``mpirun`` running it) on a GPU node that is not here.

The one copy of this program: installed under both names in a test host's shim dir (first on
its sessions' PATH) by :mod:`tests.tools.collective` (the recovery check's hosts through
:func:`tests.recovery.shims.install`, the Ansible A/B remedy's through
:func:`tests.tools.collective.install_ab_all_reduce_perf`). It prints what nccl-tests 2.x over
NCCL 2.21 prints, in that format, and honours what the real programs would:

* ``-b/-e/-f/-g`` (or ``--minbytes/--maxbytes/--stepfactor/--ngpus``) pick the table's sizes
  and the GPUs of the (single) process;
* NCCL's own lines appear only with ``NCCL_DEBUG=INFO`` (in the environment, or ``-x`` of
  mpirun), its WARN lines with ``WARN`` too: ``NCCL version``, ``NCCL_IB_DISABLE set by
  environment to …`` when it is set, ``Init START``/``Init COMPLETE`` per rank, one ``Channel
  NN/0 : a[a] -> b[b] via <transport>`` line per ring edge;
* ``mpirun -np N -H a,b --map-by ppr:K:node -x VAR=VALUE … all_reduce_perf … -g 1``: N ranks,
  K per host, each line prefixed with its rank's host; ring edges between hosts go over the
  network (``NET/IB/0/GDRDMA`` over the NICs in ``NCCL_IB_HCA``, ``NET/Socket/0`` with
  ``NCCL_IB_DISABLE=1`` or ``network: Socket``).

The node's behaviour comes from ``all_reduce_perf.json`` next to the shim (absent: a healthy
H100 node over IB):

* ``model`` (the device name), ``transport`` (intra-node, e.g. ``P2P/CUMEM/read`` or
  ``SHM/direct/direct``), ``version``, ``network``, ``nics``;
* ``peak_busbw``: GB/s at the plateau, a number or a list taken one per call (repeats differ);
* ``mode``: ``healthy``; ``wrong`` (a row with wrong values, the FAILED footer, exit 1 as
  nccl-tests does); ``unfinished`` (the test fails mid-table with ``Test NCCL failure``, exit 3);
  ``hang`` (stops printing mid-table and sleeps: the run timeout must kill it);
* ``ib_fault: reg_mr``: whenever NCCL selects NET/IB, memory registration with the verbs
  library fails (``ibv_reg_mr``: the classic locked-memory limit of a container), the
  communicator init returns ``unhandled system error`` and the test exits 3 (testNcclError);
  with ``NCCL_IB_DISABLE=1`` NCCL takes NET/Socket and the run behaves as ``mode`` says;
* ``local_only`` (mpirun): the ranks all start on the first host whatever ``-H`` says.

The bandwidth of a row follows ``busbw = peak × size / (size + 16 MiB)``: small messages are
latency-bound, so ``# Avg bus bandwidth`` over 8 MiB … 1 GiB sits well below the peak, as on a
real node. The output is deterministic for a fixed peak (fixed pids, timings from that model),
so the same run twice gives the same bytes. Each call is appended as one JSON line (its name,
argv and NCCL environment) to ``all_reduce_perf.calls``, which is how a test knows whether, and
how, the node ran it.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time

BASE_PID = 51234
HALF_BYTES = 16 << 20
#: exit status of nccl-tests when an NCCL call fails (testNcclError)
TEST_NCCL_ERROR = 3
CONFIG = "all_reduce_perf.json"
LONG_OPTIONS = {"--minbytes": "-b", "--maxbytes": "-e", "--stepfactor": "-f", "--ngpus": "-g"}


def parse_size(text: str) -> int:
    match = re.fullmatch(r"(\d+)([KMG]?)", text.upper())
    if not match:
        raise SystemExit(f"all_reduce_perf: bad size {text!r}")
    return int(match.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2)]


def test_args(argv: list[str]) -> tuple[int, int, int, int]:
    opts = {"-b": "32M", "-e": "32M", "-f": "2", "-g": "1"}
    it = iter(argv)
    for arg in it:
        key = LONG_OPTIONS.get(arg, arg)
        if key in opts:
            opts[key] = next(it, "")
    return parse_size(opts["-b"]), parse_size(opts["-e"]), int(opts["-f"]), int(opts["-g"])


def mpirun_args(argv: list[str]) -> tuple[int, list[str], int | None, list[str]]:
    """-np, -H hosts, ppr per node, and the command after the options; -x sets os.environ."""
    np_, hosts, per_node = 1, [socket.gethostname()], None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-np", "-n"):
            np_, i = int(argv[i + 1]), i + 2
        elif arg in ("-H", "--host"):
            hosts, i = [h.split(":")[0] for h in argv[i + 1].split(",") if h], i + 2
        elif arg == "--map-by":
            m = re.match(r"ppr:(\d+):node", argv[i + 1])
            per_node = int(m.group(1)) if m else None
            i += 2
        elif arg == "-x":
            name, _, value = argv[i + 1].partition("=")
            if value or "=" in argv[i + 1]:
                os.environ[name] = value
            i += 2
        elif arg.startswith("-"):
            i += 1
        else:
            break
    return np_, hosts, per_node, argv[i:]


def main(prog: str, argv: list[str]) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        with open(os.path.join(here, CONFIG)) as f:
            cfg = json.load(f)
    except FileNotFoundError:
        cfg = {}
    calls_path = os.path.join(here, "all_reduce_perf.calls")
    env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    if prog == "mpirun":
        np_, hosts, per_node, command = mpirun_args(argv)
        env = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
        argv = command[1:]
        per_node = per_node or max(1, np_ // max(1, len(hosts)))
        if cfg.get("local_only"):
            hosts = hosts[:1]
            per_node = np_
    else:
        hosts = [socket.gethostname()]
    try:
        with open(calls_path) as f:
            call = sum(1 for _ in f)
    except FileNotFoundError:
        call = 0
    with open(calls_path, "a") as f:
        f.write(json.dumps({"prog": prog, "argv": argv, "env": env}) + "\n")

    min_bytes, max_bytes, factor, ngpus = test_args(argv)
    nranks = np_ if prog == "mpirun" else ngpus
    per_node = per_node if prog == "mpirun" else ngpus
    rank_host = [hosts[min(r // per_node, len(hosts) - 1)] for r in range(nranks)]
    nnodes = len(set(rank_host))
    debug = os.environ.get("NCCL_DEBUG", "").upper()
    info = debug in ("INFO", "TRACE")
    warn = info or debug == "WARN"
    peaks = cfg.get("peak_busbw", 480.0)
    peak = float(peaks[call % len(peaks)] if isinstance(peaks, list) else peaks)
    mode = cfg.get("mode", "healthy")
    model = cfg.get("model", "NVIDIA H100 80GB HBM3")
    version = cfg.get("version", "2.21.5+cuda12.4")
    ib = cfg.get("network", "IB") == "IB" and os.environ.get("NCCL_IB_DISABLE") != "1"
    nics = [n for n in os.environ.get("NCCL_IB_HCA", ",".join(cfg.get("nics", ["mlx5_0"])))
            .split(",") if n]
    out: list[str] = []

    def pid(r: int) -> int:
        return BASE_PID + (r if prog == "mpirun" else 0)

    def nccl(r: int, msg: str, *, level: str = "INFO", loc: str = "", tid: int = 7) -> None:
        if (level == "INFO" and info) or (level == "WARN" and warn):
            where = f"{loc} " if loc else ""
            out.append(f"{rank_host[r]}:{pid(r)}:{pid(r) + tid} [{r % per_node}] "
                       f"{where}NCCL {level} {msg}")

    out += [
        f"# nThread 1 nGpus {ngpus} minBytes {min_bytes} maxBytes {max_bytes} "
        f"step: {factor}(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    for r in range(nranks):
        dev = r % per_node
        out.append(f"#  Rank {r:2d} Group  0 Pid {pid(r):6d} on {rank_host[r]} device {dev:2d} "
                   f"[0x{0x18 + 0x11 * dev:02x}] {model}")
    for r in range(nranks):
        if r % per_node == 0:
            nccl(r, "Bootstrap : Using eth0:10.0.0.1<0>")
            if r == 0 and info:
                out.append(f"NCCL version {version}")
            if "NCCL_IB_DISABLE" in os.environ:
                nccl(r, f"NCCL_IB_DISABLE set by environment to {os.environ['NCCL_IB_DISABLE']}.")
            if ib:
                nccl(r, "NET/IB : Using " + " ".join(f"[{i}]{n}:1/IB" for i, n in enumerate(nics))
                     + " ; OOB eth0:10.0.0.1<0>")
                nccl(r, "Using network IB")
            else:
                nccl(r, "NET/Socket : Using [0]eth0:10.0.0.1<0>")
                nccl(r, "Using network Socket")
    for r in range(nranks):
        nccl(r, f"comm 0x55d0c1a{r:x}0 rank {r} nranks {nranks} cudaDev {r % per_node} "
             f"nvmlDev {r % per_node} busId {0x18 + 0x11 * (r % per_node):x}000 "
             "commId 0x5e2f0a1b3c4d5e6f - Init START")
    if ib and cfg.get("ib_fault") == "reg_mr":
        error = "Call to ibv_reg_mr failed with error Cannot allocate memory"
        proxy = 7 + nranks + 2
        nccl(0, error, level="WARN", loc="misc/ibvwrap.cc:187", tid=proxy)
        nccl(0, "NET/IB : Unable to register memory for the proxy's host buffers",
             level="WARN", loc="transport/net_ib.cc:1085", tid=proxy)
        nccl(0, "transport/net_ib.cc:1086 -> 2", tid=proxy)
        nccl(0, "transport/net.cc:683 -> 2", tid=proxy)
        nccl(0, "init.cc:1374 -> 2")
        nccl(0, "init.cc:1741 -> 2", tid=0)
        out.append(f"{rank_host[0]}: Test NCCL failure common.cu:1005 'unhandled system error "
                   f"(run with NCCL_DEBUG=INFO for details) / {error}'")
        out.append(f" .. {rank_host[0]} pid {pid(0)}: Test failure common.cu:891")
        print("\n".join(out), flush=True)
        return TEST_NCCL_ERROR
    for r in range(nranks):
        nccl(r, f"comm 0x55d0c1a{r:x}0 rank {r} nRanks {nranks} nNodes {nnodes} "
             f"localRanks {per_node} localRank {r % per_node} MNNVL 0")
    for channel in range(2):
        for r in range(nranks):
            nxt = (r + 1) % nranks
            via = cfg.get("transport", "P2P/CUMEM/read")
            if rank_host[nxt] != rank_host[r]:
                via = "NET/IB/0/GDRDMA" if ib else "NET/Socket/0"
            nccl(r, f"Channel {channel:02d}/0 : {r}[{r % per_node}] -> {nxt}[{nxt % per_node}] "
                 f"via {via}")
    for r in range(nranks):
        nccl(r, "Connected all rings")
        nccl(r, f"comm 0x55d0c1a{r:x}0 rank {r} nranks {nranks} cudaDev {r % per_node} "
             f"nvmlDev {r % per_node} busId {0x18 + 0x11 * (r % per_node):x}000 "
             "commId 0x5e2f0a1b3c4d5e6f - Init COMPLETE")
    out += [
        "#",
        "#                                                              out-of-place"
        "                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
        "     (us)  (GB/s)  (GB/s)       ",
    ]
    busbws: list[float] = []
    errors = 0
    size, row = min_bytes, 0
    while size <= max_bytes:
        if mode in ("unfinished", "hang") and row == 3:
            if mode == "hang":
                print("\n".join(out), flush=True)
                time.sleep(3600)
            out.append(f"{rank_host[0]}: Test NCCL failure common.cu:1005 'unhandled cuda error "
                       "(run with NCCL_DEBUG=INFO for details)'")
            out.append(f" .. {rank_host[0]} pid {pid(0)}: Test failure common.cu:891")
            print("\n".join(out), flush=True)
            return TEST_NCCL_ERROR
        cells = [f"{size:12d}  {size // 4:12d}  {'float':>8}  {'sum':>6}  {-1:6d}"]
        for place in (0, 1):
            busbw = peak * size / (size + HALF_BYTES) * (0.995 if place == 0 else 1.0)
            algbw = busbw * nranks / (2 * (nranks - 1)) if nranks > 1 else busbw
            time_us = size / (algbw * 1e3)
            wrong = 3 if mode == "wrong" and row == 4 and place == 1 else 0
            errors += wrong
            busbws.append(busbw)
            cells.append(f"{time_us:7.1f}  {algbw:6.2f}  {busbw:6.2f}  {wrong:5d}")
        out.append("  ".join(cells))
        size *= max(factor, 2)
        row += 1
    avg = sum(busbws) / len(busbws) if busbws else 0.0
    out += [f"# Out of bounds values : {errors} {'FAILED' if errors else 'OK'}",
            f"# Avg bus bandwidth    : {avg:.4f} ", "#"]
    print("\n".join(out), flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(os.path.basename(sys.argv[0]), sys.argv[1:]))
