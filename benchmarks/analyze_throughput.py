"""Benchmark: `runbook analyze` on a bundle with a huge dmesg.txt and journal-kubelet.txt.

Builds (once, under --workdir) a bundle whose `dmesg.txt` and `journal-kubelet.txt` together
hold --size-mib of ordinary kernel and kubelet chatter with a few real signatures buried in
them (a memcg OOM, NVIDIA pinning failures, an Xid, a TaskOOM), then measures:
  * `runbook analyze BUNDLE --format json`: wall seconds and peak RSS (the child's ru_maxrss);
  * `grep -c -E` with the parsers' signature patterns over the same two files;
and checks the analysis found the buried signatures.

Run:  .venv/bin/python -m benchmarks.analyze_throughput [--size-mib 1024] [--workdir /tmp/rbk-big]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

DMESG_FILLER = [
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] IPv6: ADDRCONF(NETDEV_CHANGE): veth{n:x}: link becomes ready",
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] cni0: port {p}(veth{n:x}) entered forwarding state",
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] EXT4-fs (nvme1n1p{p}): mounted filesystem with ordered data mode. Quota mode: none.",
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] audit: type=1400 audit({n}.123:{p}): apparmor=\"STATUS\" operation=\"profile_replace\" profile=\"unconfined\" name=\"cri-containerd.apparmor.d\" pid={n} comm=\"apparmor_parser\"",
    "[Wed Mar  4 09:{m:02d}:{s:02d} 2026] nvidia-uvm: Loaded the UVM driver, major device number 509.",
]
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


def _write(path: Path, filler: list[str], signatures: list[str], size: int) -> None:
    """`size` bytes of filler with the signatures spread at 1/3 and 2/3 of the file."""
    block_lines = []
    for n in range(4000):
        template = filler[n % len(filler)]
        block_lines.append(template.format(m=n % 60, s=(n * 7) % 60, n=n + 1000, p=n % 8))
    block = ("\n".join(block_lines) + "\n").encode()
    marks = {size // 3, 2 * size // 3}
    written = 0
    with path.open("wb") as handle:
        while written < size:
            handle.write(block)
            written += len(block)
            for mark in sorted(marks):
                if written >= mark:
                    handle.write(("\n".join(signatures) + "\n").encode())
                    marks.discard(mark)


def build(workdir: Path, size_mib: int) -> Path:
    bundle = workdir / f"bundle-{size_mib}"
    stamp = bundle / ".complete"
    if stamp.exists():
        return bundle
    bundle.mkdir(parents=True, exist_ok=True)
    total = size_mib * 1024 * 1024
    (bundle / "bundle.yaml").write_text(
        "format: 1\nnode: gpu-node-07\ncollected_at: '2026-03-04T10:40:00+00:00'\n"
    )
    _write(bundle / "dmesg.txt", DMESG_FILLER, DMESG_SIGNATURES, total * 3 // 4)
    _write(bundle / "journal-kubelet.txt", JOURNAL_FILLER, JOURNAL_SIGNATURES, total // 4)
    stamp.write_text("ok\n")
    return bundle


def _timed(argv: list[str]) -> tuple[float, int, subprocess.CompletedProcess[str]]:
    """Wall seconds and the child's peak RSS in bytes (one child at a time, so RUSAGE_CHILDREN's
    max is this child's unless an earlier one was bigger; we run analyze first)."""
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    return wall, peak, proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/rbk-big"))
    args = parser.parse_args()
    started = time.perf_counter()
    bundle = build(args.workdir, args.size_mib)
    sizes = {p.name: p.stat().st_size for p in bundle.iterdir() if p.suffix == ".txt"}
    print(f"bundle {bundle}: " + ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in sizes.items())
          + f" (built in {time.perf_counter() - started:.1f} s)")  # fmt: skip

    wall, peak, proc = _timed(
        [sys.executable, "-m", "runbook", "analyze", str(bundle), "--format", "json"]
    )
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        return 1
    verdict = json.loads(proc.stdout)
    dmesg = next(s for s in verdict["stages"] if s["id"] == "kernel-logs")["facts"]["dmesg"]
    found = {
        "memcg_ooms": dmesg["totals"].get("memcg_ooms", 0),
        "pin_failures": dmesg["totals"].get("pin_failures", 0),
        "xids": dmesg["totals"].get("xids", 0),
    }
    print(f"runbook analyze: {wall:.2f} s, peak RSS {peak / 2**20:.0f} MiB, "
          f"root cause {verdict['root_cause']}, found {found}")  # fmt: skip

    grep_wall = 0.0
    for name, pattern in PATTERNS.items():
        start = time.perf_counter()
        out = subprocess.run(["grep", "-c", "-E", pattern, str(bundle / name)],
                             capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})  # fmt: skip
        grep_wall += time.perf_counter() - start
        print(f"  grep -c -E over {name}: {out.stdout.strip()} lines")
    print(f"grep -c -E (both files): {grep_wall:.2f} s")
    print(f"ratio analyze/grep: {wall / grep_wall:.2f}x (target <= 3x); peak RSS target < 300 MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
