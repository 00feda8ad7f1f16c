"""Every read of a bundle is confined to it and bounded (runbook/bundle_files.py).

A hostile bundle plants links to files outside it (as multi-file members, as `.err`/`.rc` side
files, as `bundle.yaml`), FIFOs, sparse multi-gigabyte files, a file without a newline, a huge
`bundle.yaml`, a small archive that unpacks to a large file. Each gets a one-line refusal or a
bounded read — never a secret from outside quoted in a verdict or copied into a run directory,
never a hang, and peak memory under 300 MB (measured in a child process)."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from tests.hardening.runs import run_now

DEMO = Path(__file__).resolve().parents[2] / "runbook" / "demo" / "incident"
SECRET = "s3cr3t-outside-the-bundle-7f1d"
RSS_LIMIT_MIB = 300

def runbook(tmp: Path, *args: str, timeout: float = 120) -> tuple[int, str, str, float]:
    """`runbook ARGS` in a child process (its state under `tmp`): exit code, stdout, stderr
    and the CLI's own peak RSS in MiB (runs.run_now)."""
    work = Path(tempfile.mkdtemp(prefix="cli-", dir=tmp))
    done = run_now(list(args), {**os.environ, "RUNBOOK_STATE_DIR": str(tmp / "state")}, work,
                   timeout=timeout)  # fmt: skip
    return done.rc, done.stdout, done.stderr, done.max_rss_mib


def bundle(tmp_path: Path) -> Path:
    target = tmp_path / "bundle"
    shutil.copytree(DEMO, target)
    return target


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside every bundle, holding a secret and error-looking lines."""
    path = tmp_path / "outside" / "shadow"
    path.parent.mkdir()
    path.write_text(f"root:{SECRET}:19000:0:99999:7:::\nRuntimeError: {SECRET}\n")
    return path


def one_line_refusal(rc: int, stderr: str) -> None:
    assert rc == 2, stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr


@pytest.mark.parametrize(
    "member", ["app/zz-stolen.log", "nccl/stolen.log", "dmesg.txt.err", "app/rank-0.log.err"]
)
def test_a_link_out_of_the_bundle_is_never_read(
    tmp_path: Path, outside: Path, member: str
) -> None:
    root = bundle(tmp_path)
    link = root / member
    link.parent.mkdir(exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(outside)
    if member.endswith(".err"):  # a failed probe: its standard error is what a verdict quotes
        (root / member.replace(".err", ".rc")).write_text("1\n")
    rc, stdout, stderr, _ = runbook(tmp_path, "analyze", str(root), "--format", "json")
    assert rc == 0, stderr
    assert SECRET not in stdout and SECRET not in stderr
    json.loads(stdout)  # a verdict all the same


def test_a_replayed_run_copies_nothing_from_outside_into_its_run_directory(
    tmp_path: Path, outside: Path
) -> None:
    root = bundle(tmp_path)
    (root / "app" / "zz-stolen.log").symlink_to(outside)
    (root / "nccl").mkdir(exist_ok=True)
    (root / "nccl" / "stolen.log").symlink_to(outside)
    (root / "dmesg.txt.err").symlink_to(outside)  # a side file, copied with its evidence
    runs = tmp_path / "runs"
    rc, _, stderr, _ = runbook(
        tmp_path, "run", "nccl-init-failure", "--target", f"replay://{root}", "--no-input",
        "--run-dir", str(runs),
    )  # fmt: skip
    assert rc == 0, stderr
    copied = [p for p in runs.rglob("*") if p.is_file() and SECRET in p.read_text(errors="replace")]
    assert copied == []


def test_bundle_yaml_that_points_outside_is_refused_in_one_line(
    tmp_path: Path, outside: Path
) -> None:
    root = bundle(tmp_path)
    (root / "bundle.yaml").unlink()
    (root / "bundle.yaml").symlink_to(outside)
    rc, _, stderr, _ = runbook(tmp_path, "analyze", str(root))
    one_line_refusal(rc, stderr)
    assert "outside the bundle" in stderr and SECRET not in stderr


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    root = bundle(tmp_path)
    os.mkfifo(root / "app" / "rank-9.log")
    os.mkfifo(root / "dmesg.txt.err")
    started = time.monotonic()
    rc, stdout, stderr, _ = runbook(tmp_path, "analyze", str(root), "--format", "json", timeout=60)
    assert rc == 0, stderr
    assert time.monotonic() - started < 30
    json.loads(stdout)


def test_a_huge_bundle_yaml_is_refused_quickly_in_one_line(tmp_path: Path) -> None:
    root = bundle(tmp_path)
    with (root / "bundle.yaml").open("a") as handle:
        handle.write("# padding\n" * (6 * 1024 * 1024))  # 60 MiB of comments
    started = time.monotonic()
    rc, _, stderr, rss = runbook(tmp_path, "analyze", str(root))
    one_line_refusal(rc, stderr)
    assert "bundle.yaml" in stderr and time.monotonic() - started < 20
    assert rss < RSS_LIMIT_MIB


def test_a_sparse_2_gib_app_log_is_read_by_its_tail_in_bounded_memory(tmp_path: Path) -> None:
    root = bundle(tmp_path)
    big = root / "app" / "rank-7.log"
    with big.open("wb") as handle:
        handle.truncate(2 * 1024**3)  # sparse: no disk used, 2 GiB of NULs to a reader
        handle.seek(2 * 1024**3 - 200)
        handle.write(b"\nRuntimeError: the tail of a huge log is still read\n")
    rc, stdout, stderr, rss = runbook(tmp_path, "analyze", str(root), "--format", "json",
                                      timeout=300)  # fmt: skip
    assert rc == 0, stderr
    assert rss < RSS_LIMIT_MIB, f"peak RSS {rss:.0f} MiB"
    verdict = json.loads(stdout)
    app = next(s for s in verdict["stages"] if s["id"] == "app-error")
    assert "the tail of a huge log is still read" in json.dumps(app["facts"])


def test_a_sparse_dmesg_without_a_newline_is_scanned_in_bounded_memory(tmp_path: Path) -> None:
    root = bundle(tmp_path)
    dmesg = root / "dmesg.txt"
    with dmesg.open("wb") as handle:
        handle.truncate(3 * 1024**3)  # one 3 GiB "line"
    rc, stdout, stderr, rss = runbook(tmp_path, "analyze", str(root), "--format", "json",
                                      timeout=300)  # fmt: skip
    assert rc == 0, stderr
    assert rss < RSS_LIMIT_MIB, f"peak RSS {rss:.0f} MiB"
    json.loads(stdout)


def test_a_small_archive_of_a_large_file_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """A decompression bomb within the unpack bound (here 512 MiB from well under 1 MiB): the
    member is unpacked, then read by its tail."""
    size = 512 * 1024**2
    archive = tmp_path / "bomb.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(DEMO.rglob("*")):
            tar.add(path, arcname=f"b/{path.relative_to(DEMO)}", recursive=False)
        info = tarfile.TarInfo("b/app/rank-5.log")
        info.size = size

        class Zeros(io.RawIOBase):
            left = size

            def readable(self) -> bool:
                return True

            def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
                n = min(len(buffer), self.left)
                buffer[:n] = bytes(n)
                self.left -= n
                return n

        tar.addfile(info, io.BufferedReader(Zeros()))
    assert archive.stat().st_size < 1024**2
    rc, stdout, stderr, rss = runbook(tmp_path, "analyze", str(archive), "--format", "json",
                                      timeout=300)  # fmt: skip
    assert rc == 0, stderr
    assert rss < RSS_LIMIT_MIB, f"peak RSS {rss:.0f} MiB"
    json.loads(stdout)


def test_a_deep_directory_tree_is_a_one_line_refusal_not_a_recursion_error(
    tmp_path: Path,
) -> None:
    """The walk is a loop with a depth bound (1500 deep was a RecursionError; 300 here, so
    the test's own clean-up, recursive in this Python, stays within its limit)."""
    root = bundle(tmp_path)
    fd = os.open(root / "app", os.O_RDONLY)
    try:
        for _ in range(300):  # by directory descriptors
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    rc, _, stderr, _ = runbook(tmp_path, "report", str(root), "--sanitize")
    one_line_refusal(rc, stderr)
    assert "nested more than" in stderr


def test_a_bundle_of_30000_log_files_reads_the_first_1024_and_keeps_its_verdict(
    tmp_path: Path,
) -> None:
    """A flood of files in app/ (more than a bundle listing walks): a replayed run reads the
    first MAX_MULTI_FILES of them by name, says so in the evidence, and reaches the verdict
    of the bundle without the flood, in bounded memory."""
    from runbook.bundle import MAX_MULTI_FILES

    clean = bundle(tmp_path / "clean")
    rc, stdout, stderr, _ = runbook(tmp_path, "analyze", str(clean), "--format", "json")
    assert rc == 0, stderr
    expected = json.loads(stdout)["root_cause"]
    root = bundle(tmp_path)
    for i in range(30000):
        (root / "app" / f"zz-{i:05d}.log").write_bytes(b"step 1 ok\n")
    run_dir = tmp_path / "run"
    rc, stdout, stderr, rss = runbook(
        tmp_path, "run", "nccl-init-failure", "--target", f"replay://{root}", "--no-input",
        "--format", "json", "--run-dir", str(run_dir), timeout=300,
    )  # fmt: skip
    assert rc == 0, stderr
    assert rss < RSS_LIMIT_MIB, f"peak RSS {rss:.0f} MiB"
    assert json.loads(stdout)["root_cause"] == expected == "host-memory-oom"
    copied = [p for p in (run_dir / "bundle" / "app").iterdir() if p.suffix == ".log"]
    assert len(copied) == MAX_MULTI_FILES
    # the cut is said once, with the last file read; the files read whole are not "truncated"
    errs = {p.name: p.read_text() for p in (run_dir / "bundle" / "app").glob("*.err")}
    assert list(errs) == [f"{sorted(copied)[-1].name}.err"], list(errs)[:5]
    assert f"app/*.log: 30008 files, only the first {MAX_MULTI_FILES} read" in "".join(
        errs.values()
    )
