"""`runbook analyze` on damaged evidence: truncated, garbage, non-UTF-8 and enormous files get
an answer (a verdict) or a one-line error (exit 2), never a traceback."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from runbook.spec.models import ROOT_CAUSES

DEMO = Path(__file__).resolve().parents[2] / "runbook" / "demo" / "incident"
EVIDENCE = sorted(
    p.relative_to(DEMO).as_posix()
    for p in DEMO.rglob("*")
    if p.is_file() and p.name != "bundle.yaml" and p.suffix not in (".rc", ".err")
)


def _copy(tmp_path: Path) -> Path:
    target = tmp_path / "bundle"
    shutil.copytree(DEMO, target)
    return target


def _damage(path: Path, how: str, rng: random.Random) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2 - 7])
    elif how == "garbage":
        path.write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
    elif how == "latin1":
        path.write_bytes(
            data.decode("utf-8", "replace").encode("latin-1", "replace") + b"\xff\xfe\xc3("
        )
    elif how == "huge-line":
        path.write_bytes(data + b"A" * (20 * 1024 * 1024) + b"\n")
    elif how == "empty":
        path.write_bytes(b"")


def _verdict_or_one_line(result) -> None:  # type: ignore[no-untyped-def]
    assert "Traceback" not in result.stderr
    if result.rc == 0:
        verdict = json.loads(result.stdout)
        assert verdict["root_cause"] in ROOT_CAUSES
        assert isinstance(verdict["stages"], list)
    else:
        assert result.rc == 2
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("how", ["truncated", "garbage", "latin1", "empty"])
def test_every_evidence_file_damaged_at_once_still_gets_an_answer(cli, tmp_path, how) -> None:  # type: ignore[no-untyped-def]
    bundle = _copy(tmp_path)
    rng = random.Random(how)
    for name in EVIDENCE:
        _damage(bundle / name, how, rng)
    result = cli("analyze", str(bundle), "--format", "json")
    _verdict_or_one_line(result)
    assert result.rc == 0


@pytest.mark.parametrize("name", ["dmesg.txt", "pod.json", "cgroup/memory.stat", "app/rank-0.log"])
def test_an_enormous_line_is_survived(cli, tmp_path, name) -> None:  # type: ignore[no-untyped-def]
    bundle = _copy(tmp_path)
    _damage(bundle / name, "huge-line", random.Random(0))
    result = cli("analyze", str(bundle), "--format", "json", timeout=120)
    _verdict_or_one_line(result)
    assert result.rc == 0


@pytest.mark.parametrize(
    "content",
    [b"", b"\xff\xfe garbage", b"format: 1\nnode: [unclosed\n", b"- a list\n", b"format: 2\n"],
)
def test_a_damaged_bundle_yaml_is_a_one_line_error(cli, tmp_path, content) -> None:  # type: ignore[no-untyped-def]
    bundle = _copy(tmp_path)
    (bundle / "bundle.yaml").write_bytes(content)
    result = cli("analyze", str(bundle), "--format", "json")
    assert result.rc == 2
    _verdict_or_one_line(result)


def test_a_truncated_archive_is_a_one_line_error(cli, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import tarfile

    archive = tmp_path / "b.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(DEMO, arcname="incident")
    archive.write_bytes(archive.read_bytes()[:2000])
    result = cli("analyze", str(archive))
    assert result.rc == 2
    _verdict_or_one_line(result)
