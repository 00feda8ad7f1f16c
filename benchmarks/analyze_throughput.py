"""Benchmark: `runbook analyze` on a bundle with a huge dmesg.txt and journal-kubelet.txt.

Builds (once per shape, under --workdir) a bundle whose `dmesg.txt` (3/4) and
`journal-kubelet.txt` (1/4) together hold --size-mib of kernel and kubelet lines with the
article's incident buried in them (a memcg OOM, NVIDIA pinning failures, an Xid, a TaskOOM),
in three shapes of kernel log:
  * quiet    ordinary chatter (network, filesystems, audit) with few keyword hits;
  * chatter  about one line in ten is ordinary NVIDIA driver output (`NVRM: GPU at PCI:…`,
             `NVRM: loading NVIDIA UNIX …`), which holds the driver's keyword but no fault;
  * aer      a corrected-AER storm: a third of the lines are the four-line records a flapping
             PCIe link floods a node with (`AER: Corrected error received`, `PCIe Bus Error:
             severity=Corrected`, the status line, the error bit), from four devices;
  * aer-gpu  a corrected-AER storm reported by the GPUs' own device lines (`nvidia 0000:xx:00.0:
             PCIe Bus Error …`, `device [10de:2335]`): a quarter of the kernel's records are
             the four-line report, and the reporting GPU changes along the log (one after
             another of 256), so each 16 MiB block holds dozens of devices whose first and last
             reports lie deep inside it (what made a search per device per block cost 32× grep);
then measures, for each:
  * `runbook analyze BUNDLE --format json`: best wall seconds of --repeat, peak RSS (ru_maxrss);
  * `grep -c -E` with the parsers' signature patterns over the same two files;
and checks the analysis found the buried signatures and the verdict.

Run:  .venv/bin/python -m benchmarks.analyze_throughput [--size 1G] [--shape quiet chatter aer aer-gpu]
      [--workdir /tmp/rbk-big]      (--size 64M for a quick check; --size-mib N is the same)

Exit status 1 when a shape's verdict is not the expected one (host-memory-oom, the buried
OOM, pinning failures and Xid found twice each, the storms' corrected reports counted).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DMESG_FILLER = [
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] IPv6: ADDRCONF(NETDEV_CHANGE): veth{n:x}: link becomes ready",
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] cni0: port {p}(veth{n:x}) entered forwarding state",
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] EXT4-fs (nvme1n1p{p}): mounted filesystem with ordered data mode. Quota mode: none.",
    '[Wed Mar  4 09:{m:02d}:{s:02d} 2026] audit: type=1400 audit({n}.123:{p}): apparmor="STATUS" operation="profile_replace" profile="unconfined" name="cri-containerd.apparmor.d" pid={n} comm="apparmor_parser"',
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] nvidia-uvm: Loaded the UVM driver, major device number 509.",
]
DRIVER_CHATTER = [
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] NVRM: GPU at PCI:0000:{b:02x}:00: GPU-5d4f{n:04x}-7a2c-11ee-9b3d-0242ac120002",
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] NVRM: GPU Board Serial Number: 16523{n:05d}",
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024",
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] NVRM: Persistence mode is deprecated and will be removed in a future release. Please use nvidia-persistenced instead.",
]
AER_RECORD = [
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] pcieport 0000:{r:02x}:01.0: AER: Corrected error received: 0000:{b:02x}:00.0",
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] nvidia 0000:{b:02x}:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] nvidia 0000:{b:02x}:00.0:   device [10de:2330] error status/mask=00000001/0000e000",
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] nvidia 0000:{b:02x}:00.0:    [ 0] RxErr                  (First)",
]
#: the GPU's own report of a corrected error (the issue's storm); 3b is the device's bus, which
#: _write replaces in each repetition of the log's block (the storm moves across devices)
AER_GPU_RECORD = [
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] pcieport 0000:3a:01.0: AER: Corrected error received: 0000:3b:00.0",
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] nvidia 0000:3b:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] nvidia 0000:3b:00.0:   device [10de:2335] error status/mask=00000001/0000e000",
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] nvidia 0000:3b:00.0:    [ 0] RxErr                  (First)",
]
GPU_BUS = b"0000:3b:00.0"
JOURNAL_FILLER = [
    'Mar 04 09:{m:02d}:{s:02d} gpu-node-07 kubelet[2231]: I0304 09:{m:02d}:{s:02d}.118273    2231 kubelet.go:2453] "SyncLoop (probe)" probe="readiness" status="ready" pod="ml/svc-{n}"',
    'Mar 04 09:{m:02d}:{s:02d} gpu-node-07 kubelet[2231]: I0304 09:{m:02d}:{s:02d}.221904    2231 reconciler_common.go:258] "operationExecutor.VerifyControllerAttachedVolume started" volume="kube-api-access-{n:x}"',
    'Mar 04 09:{m:02d}:{s:02d} gpu-node-07 kubelet[2231]: I0304 09:{m:02d}:{s:02d}.330211    2231 pod_workers.go:1300] "Pod status sync" pod="ml/train-{p}"',
]
DMESG_SIGNATURES = [
    "[Wed Mar  4 10:11:58 2026] train_process: page allocation failure: order:0, mode:0x100cca(GFP_HIGHUSER_MOVABLE), nodemask=(null),cpuset=/,mems_allowed=0-1",
    "[Wed Mar  4 10:11:58 2026]  os_lock_user_pages+0xa6/0x190 [nvidia]",
    "[Wed Mar  4 10:11:58 2026] NVRM: Cannot map memory with base addr 0x7f1c80000000 and size of 0x100000 pages",
    "[Wed Mar  4 10:12:01 2026] train_process invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=-997",
    "[Wed Mar  4 10:12:01 2026] memory: usage 671088640kB, limit 671088640kB, failcnt 18342",
    "[Wed Mar  4 10:12:01 2026] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=x,mems_allowed=0-1,oom_memcg=/kubepods.slice/kubepods-podabc.slice,task_memcg=/kubepods.slice/kubepods-podabc.slice,task=train_process,pid=48233,uid=0",
    "[Wed Mar  4 10:12:01 2026] Memory cgroup out of memory: Killed process 48233 (train_process) total-vm:183472340kB, anon-rss:82114560kB, file-rss:204800kB, shmem-rss:0kB, UID:0 pgtables:165432kB oom_score_adj:-997",
    "[Wed Mar  4 10:30:00 2026] NVRM: Xid (PCI:0000:3b:00): 13, pid=48250, name=train_process, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
]
JOURNAL_SIGNATURES = [
    'Mar 04 10:12:01 gpu-node-07 containerd[1880]: time="2026-03-04T10:12:01.512345678Z" level=info msg="TaskOOM event container_id:\\"9a8b\\""',
    'Mar 04 10:12:34 gpu-node-07 kubelet[2231]: I0304 10:12:34.118273    2231 kubelet.go:2476] "SyncLoop (PLEG): event for pod" pod="ml/trainer-0" event={"ID":"abc","Type":"ContainerDied","Data":"9a8b"}',
]
PATTERNS = {
    "dmesg.txt": r"invoked oom-killer|Killed process|Kill process|memory: usage|oom-kill:|page allocation failure|"
    r"os_lock_user_pages|Cannot map memory|NVRM: Xid|fallen off the bus|AER:",
    "journal-kubelet.txt": r"TaskOOM|OOMKilled|ContainerDied|shim disconnected|Killing container",
}


def _templates(filler: list[str], shape: str, count: int) -> list[str]:
    """`count` line templates of the kernel log's `shape` (see the module docstring)."""
    out: list[str] = []
    n = 0
    while len(out) < count:
        if shape == "chatter" and n % 10 == 0:
            out.append(DRIVER_CHATTER[(n // 10) % len(DRIVER_CHATTER)])
        elif shape == "aer" and n % 12 == 0:
            out.extend(AER_RECORD)
            n += len(AER_RECORD)
            continue
        elif shape == "aer-gpu" and n % 4 == 0:  # one record in four
            out.extend(AER_GPU_RECORD)
            n += 1
            continue
        else:
            out.append(filler[n % len(filler)])
        n += 1
    return out[:count]


def shaped_lines(shape: str, count: int) -> list[str]:
    """`count` kernel-log lines of `shape` (quiet, chatter, aer, aer-gpu), times and devices filled in
    (the tests build their small logs of each shape from this too)."""
    return [
        template.format(
            m=n % 60, s=(n * 7) % 60, n=n + 1000, p=n % 8, b=0x1B + (n // 97) % 4, r=(n // 97) % 4
        )
        for n, template in enumerate(_templates(DMESG_FILLER, shape, count))
    ]


def _write(
    path: Path, lines: list[str], signatures: list[str], size: int, *, moving: bool = False
) -> None:
    """`size` bytes of `lines` repeated, with the signatures at 1/3 and 3/4 of the file; with
    `moving`, each repetition names another GPU (GPU_BUS replaced by bus k mod 256)."""
    block = ("\n".join(lines) + "\n").encode()
    marks = {size // 3, 3 * size // 4}
    written = k = 0
    with path.open("wb") as handle:
        while written < size:
            handle.write(block.replace(GPU_BUS, b"0000:%02x:00.0" % (k % 256)) if moving else block)
            written += len(block)
            k += 1
            for mark in sorted(marks):
                if written >= mark:
                    handle.write(("\n".join(signatures) + "\n").encode())
                    marks.discard(mark)


def build(workdir: Path, size_mib: int, shape: str = "quiet") -> Path:
    bundle = workdir / (f"bundle-{size_mib}" if shape == "quiet" else f"bundle-{shape}-{size_mib}")
    stamp = bundle / ".complete"
    if stamp.exists():
        return bundle
    bundle.mkdir(parents=True, exist_ok=True)
    total = size_mib * 1024 * 1024
    (bundle / "bundle.yaml").write_text(
        "format: 1\nnode: gpu-node-07\ncollected_at: '2026-03-04T10:40:00+00:00'\n"
    )
    # whole records in each repetition (the storm's cycle is 7 lines: a report and 3 others)
    count = 4802 if shape == "aer-gpu" else 4800
    _write(bundle / "dmesg.txt", shaped_lines(shape, count), DMESG_SIGNATURES, total * 3 // 4,
           moving=shape == "aer-gpu")  # fmt: skip
    journal = [t.format(m=n % 60, s=(n * 7) % 60, n=n + 1000, p=n % 8)
               for n, t in enumerate(_templates(JOURNAL_FILLER, "quiet", 4000))]  # fmt: skip
    _write(bundle / "journal-kubelet.txt", journal, JOURNAL_SIGNATURES, total // 4)
    stamp.write_text("ok\n")
    return bundle


def _grep(bundle: Path) -> tuple[float, float, dict[str, int]]:
    """`grep -c -E` of PATTERNS over their files: (wall s, CPU s, matching lines per file)."""
    wall = cpu = 0.0
    counts = {}
    env = {**os.environ, "LC_ALL": "C"}
    for name, pattern in PATTERNS.items():
        run = _run_measured(["grep", "-c", "-E", pattern, str(bundle / name)], env)
        wall += run.wall
        cpu += run.cpu
        counts[name] = int(run.stdout.strip() or 0)
    return wall, cpu, counts


@dataclass
class Measured:
    wall: float
    #: user + system seconds of the process (its threads together): less sensitive than the
    #: wall time to other work on a shared machine
    cpu: float
    #: its own peak RSS, KiB
    peak_kib: int
    stdout: str
    stderr: str
    code: int


def _run_measured(argv: list[str], env: dict[str, str]) -> Measured:
    """Run `argv`, reaped with wait4 so this one process's peak RSS and CPU are read
    (RUSAGE_CHILDREN is the largest of every child so far)."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=env)
        assert proc.stdout is not None
        stdout = proc.stdout.read()
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        return Measured(
            wall,
            usage.ru_utime + usage.ru_stime,
            usage.ru_maxrss,
            stdout.decode(),
            err.read().decode(errors="replace"),
            proc.returncode,
        )


def measure(bundle: Path, shape: str, repeat: int) -> dict[str, object]:
    """One shape, best of `repeat` each, both reading from the page cache (one untimed grep
    first): analyze's wall time, CPU time and peak RSS, its verdict, grep's wall and CPU
    time."""
    _grep(bundle)
    load_before = os.getloadavg()[0]
    # installed packages have their bytecode compiled; a checkout with PYTHONDONTWRITEBYTECODE
    # would recompile every module at each start
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    runs = []
    for _ in range(repeat):
        run = _run_measured(
            [sys.executable, "-m", "runbook", "analyze", str(bundle), "--format", "json"], env
        )
        if run.code != 0:
            raise SystemExit(f"analyze failed on {bundle}:\n{run.stderr}")
        runs.append(run)
    best = min(runs, key=lambda r: r.wall)
    verdict = json.loads(best.stdout)
    dmesg = next(s for s in verdict["stages"] if s["id"] == "kernel-logs")["facts"]["dmesg"]
    found = {k: dmesg["totals"].get(k, 0) for k in ("memcg_ooms", "pin_failures", "xids")}
    greps = [_grep(bundle) for _ in range(repeat)]
    grep_wall, _cpu, counts = min(greps)
    first = verdict.get("first_anomaly") or {}
    return {
        "shape": shape,
        "analyze_s": best.wall,
        "rss_mib": max(r.peak_kib for r in runs) / 1024,
        "grep_s": grep_wall,
        "ratio": best.wall / grep_wall,
        "analyze_cpu_s": min(r.cpu for r in runs),
        "grep_cpu_s": min(g[1] for g in greps),
        "grep_lines": counts,
        "root_cause": verdict["root_cause"],
        "first_anomaly": (first.get("source"), (first.get("text") or "")[27:]),
        "found": found,
        "aer": dmesg["totals"].get("aer_corrected", dmesg["totals"].get("aer", 0)),
        # the 1-minute load average before and after: what else ran on the machine (a shared
        # machine's other work moves the wall times more than the CPU times)
        "load": (load_before, os.getloadavg()[0]),
    }


#: what every shape's verdict must say: the incident buried twice, whatever surrounds it
EXPECTED = {
    "root_cause": "host-memory-oom",
    "found": {"memcg_ooms": 2, "pin_failures": 4, "xids": 2},
    # the first anomaly is the first buried line of the incident (its text less the stamp)
    "first_anomaly": ("dmesg.txt", DMESG_SIGNATURES[0][27:]),
}


def problems(row: dict[str, object]) -> list[str]:
    """How a shape's verdict differs from EXPECTED (the storms must also count their reports)."""
    out = [f"{k}: {row[k]!r}, expected {v!r}" for k, v in EXPECTED.items() if row[k] != v]
    if str(row["shape"]).startswith("aer") and not row["aer"]:
        out.append("aer: no corrected report counted")
    return out


def cpu_ratio(row: dict[str, Any]) -> float:
    """analyze's CPU seconds (its threads together) over grep's."""
    return float(row["analyze_cpu_s"]) / max(float(row["grep_cpu_s"]), 1e-9)


def size_mib(text: str) -> int:
    """`1G`, `64M`, `512` (MiB) as MiB."""
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"G": 1024, "M": 1}.get(text[-1:], None)
    try:
        value = int(text[:-1]) * scale if scale else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1G, 64M)") from None
    if value < 1:
        raise argparse.ArgumentTypeError("the size must be at least 1M")
    return value


SHAPES = ("quiet", "chatter", "aer", "aer-gpu")


def tally_costs(path: Path, repeat: int = 9) -> list[tuple[str, float]]:
    """What the corrected-AER tally's work over one block of `path` costs, beside other
    passes over the same bytes: (what, ms of this thread's CPU, best of `repeat`)."""
    from runbook.parsers import dmesg, scan  # only this mode needs the package

    with path.open("rb") as handle:
        data = bytearray(handle.read(scan.BLOCK_BYTES))
    del data[data.rfind(b"\n") + 1 :]  # whole lines, as the scanner hands them over
    pattern = re.compile(dmesg.CORRECTED_AER)

    def counted() -> None:
        keys = pattern.findall(data)
        collections.Counter(keys)
        dict(zip(keys, range(len(keys)), strict=True))

    def located(fast: Any) -> None:
        old, scan.FAST = scan.FAST, fast
        try:
            scan.Tally(dmesg.CORRECTED_AER_LITERALS).locate(data, 0, len(data))
        finally:
            scan.FAST = old

    work = {
        "the tally in Python (Tally.locate: finditer, first and last match per key)": lambda: (
            located(None)
        ),
        "findall of the tally's pattern alone": lambda: pattern.findall(data),
        "findall, Counter, last index per key": counted,
        "newline count (bytearray.count)": lambda: data.count(b"\n"),
        "count of the literal 'AER: Correct'": lambda: data.count(b"AER: Correct"),
    }
    if scan._fast is not None:  # built from runbook/parsers/_scanfast.c
        work["the tally in C (Tally.locate: _scanfast.tally)"] = lambda: located(scan._fast)
        work["newline count in C (_scanfast.newlines)"] = lambda: scan._fast.newlines(
            data, 0, len(data)
        )
    out = []
    for name, run in work.items():
        best = float("inf")
        for _ in range(repeat):
            start = time.thread_time()
            run()
            best = min(best, time.thread_time() - start)
        out.append((name, best * 1000))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--size",
        "--size-mib",
        dest="size_mib",
        type=size_mib,
        default=1024,
        help="of the bundle's logs: 1G (the default), 64M for a quick check",
    )
    parser.add_argument("--shape", nargs="+", choices=SHAPES, default=list(SHAPES))  # fmt: skip
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/rbk-big"))
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    parser.add_argument(
        "--tally-costs",
        action="store_true",
        help="instead: the tally's work over one block of each shape's dmesg.txt, beside a "
        "newline count (thread CPU ms, best of 9)",
    )
    args = parser.parse_args()
    if args.tally_costs:
        for shape in args.shape:
            dmesg_txt = build(args.workdir, args.size_mib, shape) / "dmesg.txt"
            for name, ms in tally_costs(dmesg_txt):
                print(f"[{shape}] {name}: {ms:.1f} ms", flush=True)
        return 0
    rows = []
    for shape in args.shape:
        started = time.perf_counter()
        bundle = build(args.workdir, args.size_mib, shape)
        sizes = {p.name: p.stat().st_size for p in bundle.iterdir() if p.suffix == ".txt"}
        print(f"[{shape}] bundle {bundle}: "
              + ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in sizes.items())
              + f" (ready in {time.perf_counter() - started:.1f} s)", flush=True)  # fmt: skip
        row = measure(bundle, shape, args.repeat)
        print(f"[{shape}] runbook analyze {row['analyze_s']:.2f} s, peak RSS "
              f"{row['rss_mib']:.0f} MiB; grep -c -E {row['grep_s']:.2f} s "
              f"({row['grep_lines']}); ratio {row['ratio']:.2f}x; root cause "
              f"{row['root_cause']}, found {row['found']}", flush=True)  # fmt: skip
        rows.append(row)
    print()
    print("| shape | analyze s | grep s | ratio | CPU s: analyze, grep | CPU ratio "
          "| peak RSS MiB | load avg | root cause | verdict as expected |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---|---|---|")
    wrong = 0
    for row in rows:
        bad = problems(row)
        wrong += bool(bad)
        print(f"| {row['shape']} | {row['analyze_s']:.2f} | {row['grep_s']:.2f} | "
              f"{row['ratio']:.2f}x | {row['analyze_cpu_s']:.2f}, {row['grep_cpu_s']:.2f} | "
              f"{cpu_ratio(row):.2f}x | {row['rss_mib']:.0f} | "
              f"{row['load'][0]:.1f}-{row['load'][1]:.1f} | {row['root_cause']} | "
              f"{'; '.join(bad) or 'yes'} |")  # fmt: skip
    print("targets: ratio <= 1.5x, peak RSS < 300 MiB, the expected verdict in every shape")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
