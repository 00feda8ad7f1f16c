"""Sanitized output: a recorded incident sanitized (`runbook collect --sanitize`, `runbook
report --sanitize`, the library's `sanitize_bundle`) keeps no byte of any identifier the original
bundle names — taken here from the original's own files, independently of the sanitizer — gives
each one the same placeholder in every file and in the report, and still analyses to the same
verdict. The mapping is written only where asked, readable by its owner only."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from runbook.cli.app import cli
from runbook.report.incident import sanitize_bundle
from runbook.report.sanitize import PLACEHOLDER, Sanitizer
from tests.tools import bundles

REPO = Path(__file__).resolve().parents[2]
BUNDLES = bundles.root()  # every bundle composed (tests/tools/bundles.py), read-only
ALL_BUNDLES = [n for n in bundles.names() if (BUNDLES / n / "expected.yaml").is_file()]
#: the article's incident (pod.json, node.json, journals, nvidia-smi, lspci) and two with NCCL
#: logs whose lines carry host names
SAMPLES = ["article-incident", "network-socket", "gpu-memory-oom"]


def _files(root: Path) -> Iterator[Path]:
    return (p for p in sorted(root.rglob("*")) if p.is_file())


def _text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


def _json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else {}


def identifiers(bundle: Path) -> set[str]:
    """Every identifier the original bundle names, read from its files the plain way (not by
    the sanitizer under test). Each must be gone from a sanitized copy, in every spelling."""
    found: set[str] = set()
    meta = yaml.safe_load((bundle / "bundle.yaml").read_text())
    found |= {str(meta[k]) for k in ("node", "pod", "namespace") if meta.get(k)}
    pods = _json(bundle / "pod.json")
    for pod in pods.get("items", [pods]) if pods else []:
        md, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
        found |= {md.get("name"), md.get("namespace"), md.get("uid"), spec.get("nodeName")}
        found |= {md.get("uid", "").replace("-", "_")}
        found |= {v for k, v in md.get("labels", {}).items() if k.endswith("job-name")}
        for c in spec.get("containers", []) + status.get("containerStatuses", []):
            found |= {c.get("image"), c.get("containerID", "").removeprefix("containerd://")}
        found |= {status.get("hostIP"), status.get("podIP")}
    node = _json(bundle / "node.json")
    if node:
        found.add(node["metadata"]["name"])
        found |= {a["address"] for a in node.get("status", {}).get("addresses", [])}
    for path in _files(bundle):
        text = _text(path)
        found |= set(re.findall(r"\b(?:GPU|MIG)-[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}", text))
        for bus in re.findall(r"\b([0-9A-Fa-f]{8}):([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\b", text):
            found |= {":".join(bus), ":".join(bus).lower(), "0000:" + bus[1].lower()}
        found |= {
            ip
            for ip in re.findall(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])", text)
            if not ip.startswith(("127.", "0.", "255."))
        }
        found |= set(re.findall(r"\b[0-9a-f]{64}\b", text))
        if path.parts[-2] == "nccl":
            found |= set(re.findall(r"^([^\s:]+):\d+:\d+ \[", text, re.MULTILINE))
    found.discard(None)
    found.discard("")
    return {str(i) for i in found}


def _is_word(identifier: str) -> bool:
    """A plain word (namespace `ml`, `dev`, job `trainer`) is replaced where it is named, not
    in every `/dev/shm` or container called `trainer`: checked in its fields instead."""
    return identifier.isalpha()


def assert_no_identifier(original: Path, sanitized_texts: dict[str, str]) -> None:
    wanted = {i for i in identifiers(original) if not _is_word(i)}
    assert len(wanted) >= 5, wanted  # the test reads real identifiers, not nothing
    leaks = {
        name: sorted(i for i in wanted if i.lower() in (name + "\n" + text).lower())
        for name, text in sanitized_texts.items()
    }
    leaks = {name: found for name, found in leaks.items() if found}
    assert not leaks, f"identifiers left: {leaks}"
    if "bundle.yaml" in sanitized_texts:
        meta = yaml.safe_load(sanitized_texts["bundle.yaml"])
        named = [meta[k] for k in ("node", "pod", "namespace") if k in meta]
        assert all(PLACEHOLDER.fullmatch(v) for v in named), named
    if "pod.json" in sanitized_texts:
        metadata = json.loads(sanitized_texts["pod.json"])["metadata"]
        named = [metadata["name"], metadata["namespace"], metadata["uid"]]
        named += [v for k, v in metadata.get("labels", {}).items() if k.endswith("job-name")]
        assert all(PLACEHOLDER.fullmatch(v) for v in named), named


def _sanitized_tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): _text(p) for p in _files(root)}


def _analyze(path: Path, *variables: str) -> dict[str, Any]:
    args = ["analyze", str(path), "--format", "json"]
    for item in variables:
        args += ["--var", item]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    verdict: dict[str, Any] = json.loads(result.stdout)
    return verdict


def _shape(verdict: dict[str, Any], sanitizer: Sanitizer | None = None) -> dict[str, Any]:
    """What a verdict concludes: the same for an incident (its file names sanitized with
    `sanitizer`) and for its sanitized copy."""
    first = verdict.get("first_anomaly") or {}
    source = str(first.get("source"))
    return {
        "root_cause": verdict["root_cause"],
        "confidence": verdict["confidence"],
        "first_anomaly": (sanitizer.path(source) if sanitizer else source, first.get("line")),
        "chain": [(c["stage"], c.get("cause"), len(c["evidence"])) for c in verdict["chain"]],
        "ruled_out": sorted(o["cause"] for o in verdict["ruled_out"]),
        "proposals": sorted(p["kind"] for p in verdict["proposals"]),
        "stages": [(s["id"], s["status"]) for s in verdict["stages"]],
    }


def _vars(name: str, sanitizer: Sanitizer | None = None) -> list[str]:
    expected = yaml.safe_load((BUNDLES / name / "expected.yaml").read_text())
    items = (expected.get("vars") or {}).items()
    return [f"{k}={sanitizer.text(str(v)) if sanitizer else v}" for k, v in items]


@pytest.mark.parametrize("name", SAMPLES)
def test_a_sanitized_bundle_keeps_no_byte_of_any_identifier_and_analyses_the_same(
    name: str, tmp_path: Path
) -> None:
    out = tmp_path / "sanitized"
    sanitizer = sanitize_bundle(BUNDLES / name, out)
    texts = _sanitized_tree(out)
    assert_no_identifier(BUNDLES / name, texts)
    assert _shape(_analyze(out)) == _shape(_analyze(BUNDLES / name), sanitizer)


def test_every_recorded_bundle_analyses_to_the_same_verdict_once_sanitized(
    tmp_path: Path,
) -> None:
    differ = {}
    for name in ALL_BUNDLES:
        out = tmp_path / name
        sanitizer = sanitize_bundle(BUNDLES / name, out)
        before = _shape(_analyze(BUNDLES / name, *_vars(name)), sanitizer)
        after = _shape(_analyze(out, *_vars(name, sanitizer)))
        if before != after:
            differ[name] = (before, after)
    assert not differ


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "RUNBOOK_STATE_DIR": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    return subprocess.run(
        [sys.executable, "-m", "runbook", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("name", ["article-incident", "network-socket"])
def test_collect_and_report_sanitized_keep_no_identifier_and_agree_on_placeholders(
    name: str, tmp_path: Path
) -> None:
    original = BUNDLES / name
    meta = yaml.safe_load((original / "bundle.yaml").read_text())
    out, mapping = tmp_path / "bundle", tmp_path / "private" / "map.json"
    collected = _run(
        tmp_path, "collect", "--target", f"replay://{original}", "--output", str(out),
        "--pod", meta["pod"], "--namespace", meta["namespace"],
        "--sanitize", "--sanitize-map", str(mapping),
    )  # fmt: skip
    assert collected.returncode == 0, collected.stderr
    assert "(sanitized)" in collected.stdout
    texts = _sanitized_tree(out)
    reports = {}
    for fmt in ("markdown", "json"):
        report = _run(tmp_path, "report", str(original), "--sanitize", "--format", fmt)
        assert report.returncode == 0, report.stderr
        reports[f"report.{fmt}"] = report.stdout
    assert_no_identifier(original, {**texts, **reports})
    # the collected copy is a bundle and reaches the same verdict as the original
    after, before = _analyze(out), _analyze(original)
    assert after["root_cause"] == before["root_cause"]
    assert _shape(after)["chain"] == _shape(before)["chain"]

    # the mapping: only where asked, owner-only, never inside the output
    assert stat.S_IMODE(mapping.stat().st_mode) == 0o600
    placeholders = json.loads(mapping.read_text())
    assert meta["pod"] in placeholders["<POD_1>"]
    assert meta["namespace"] in placeholders["<NAMESPACE_1>"]
    assert not any("map" in p for p in texts)
    # one original, one placeholder: the report names the pod as the bundle does
    assert yaml.safe_load(texts["bundle.yaml"])["pod"] == "<POD_1>"
    assert json.loads(reports["report.json"])["sanitized"] is True
    assert "_Sanitized:" in reports["report.markdown"]


def test_the_same_original_gets_the_same_placeholder_in_every_file_and_the_report(
    tmp_path: Path,
) -> None:
    out = tmp_path / "sanitized"
    sanitize_bundle(BUNDLES / "article-incident", out)
    t = _sanitized_tree(out)
    pod = json.loads(t["pod.json"])
    uid = pod["metadata"]["uid"]
    assert uid == "<POD_UID_1>"
    # the pod UID: pod.json, the kubelet journal (hyphens), dmesg's systemd slice (underscores)
    assert f'podUID="{uid}"' in t["journal-kubelet.txt"]
    assert f"kubepods-pod{uid}.slice" in t["dmesg.txt"]
    # the container ID: pod.json, containerd, kubelet, dmesg's cpuset
    cid = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    assert PLACEHOLDER.fullmatch(cid)
    for name in ("journal-containerd.txt", "journal-kubelet.txt", "dmesg.txt"):
        assert cid in t[name], name
    # the node: bundle.yaml, pod.json, node.json, every journal line
    node = yaml.safe_load(t["bundle.yaml"])["node"]
    assert node == "<NODE_1>" == pod["spec"]["nodeName"]
    assert json.loads(t["node.json"])["metadata"]["name"] == node
    assert all(f" {node} " in line for line in t["journal-kubelet.txt"].splitlines())
    # GPU i: the same UUID placeholder in nvidia-smi -L and the query, the same bus ID in the
    # query (00000000:18:00.0), lspci (18:00.0) and the application log (0000:18:00.0)
    listed = re.findall(r"UUID: (<GPU_UUID_\d+>)", t["nvidia-smi-L.txt"])
    rows = [line.split(", ") for line in t["nvidia-smi-query.csv"].splitlines()]
    assert listed == [row[2] for row in rows] and len(set(listed)) == 8
    buses = [row[3] for row in rows]
    assert all(re.fullmatch(r"<BUS_ID_\d+>", b) for b in buses) and len(set(buses)) == 8
    lspci_gpus = [ln.split()[0] for ln in t["lspci.txt"].splitlines() if "3D controller" in ln]
    assert lspci_gpus == buses
    assert f"pci bus id: {buses[0]}," in t["app/rank-0.log"]
    # the report of the original, sanitized, uses the bundle's placeholders
    report = CliRunner().invoke(
        cli, ["report", str(BUNDLES / "article-incident"), "--sanitize", "--format", "json"]
    )
    verdict = json.loads(report.stdout)
    assert verdict["node"] == node
    assert f"cri-containerd-{cid}.scope" in verdict["first_anomaly"]["text"]


def test_sanitizing_a_sanitized_bundle_changes_nothing(tmp_path: Path) -> None:
    once, twice = tmp_path / "once", tmp_path / "twice"
    sanitize_bundle(BUNDLES / "article-incident", once)
    sanitize_bundle(once, twice)
    assert _sanitized_tree(once) == _sanitized_tree(twice)


def test_a_run_directory_reports_sanitized(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    original = BUNDLES / "article-incident"
    ran = _run(
        tmp_path, "run", "nccl-init-failure", "--target", f"replay://{original}",
        "--run-dir", str(run_dir), "--no-input", "--format", "json",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    output = tmp_path / "incident.md"
    report = _run(tmp_path, "report", str(run_dir), "--sanitize", "--output", str(output))
    assert report.returncode == 0, report.stderr
    text = output.read_text()
    # the placeholder escaped as Markdown text, as all evidence is outside code (a raw
    # <REDACTED> would be an HTML tag there)
    assert text.startswith("# &lt;NODE_1&gt;: host-memory-oom")
    assert_no_identifier(original, {"incident.md": text})


def test_the_mapping_is_refused_without_sanitize_and_inside_the_output(tmp_path: Path) -> None:
    target = f"replay://{BUNDLES / 'article-incident'}"
    out = tmp_path / "bundle"
    without = _run(tmp_path, "collect", "-t", target, "-o", str(out), "--sanitize-map", "m.json")
    inside = _run(
        tmp_path, "collect", "-t", target, "-o", str(out), "--sanitize",
        "--sanitize-map", str(out / "map.json"),
    )  # fmt: skip
    for refused in (without, inside):
        assert refused.returncode == 2
        assert refused.stderr.startswith("runbook: ") and len(refused.stderr.splitlines()) == 1
    assert not out.exists()


# -- shapes, one at a time -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kept", "gone"),
    [
        ("Bootstrap : Using eth0:10.20.3.17<0>", "eth0:<IP_1><0>", "10.20.3.17"),
        ("peer fe80::1c2b:3aff:fe4d:5e6f%ib0 and 2001:db8::42", "%ib0", "2001:db8::42"),
        ("link/ether 0c:42:a1:2b:3c:4d brd ff:ff:ff:ff:ff:ff", "link/ether <MAC_1>", "0c:42:a1"),
        ("MIG-GPU-5a6b7c8d-9e0f-1a2b-3c4d-5e6f7a8b9c0d/1/0 ok", "<MIG_UUID_1> ok", "5a6b7c8d"),
        ("uid 4b1f6d6e-2f7c-4c1e-9d7a-1e2f3a4b5c6d", "uid <UUID_1>", "4b1f6d6e"),
        ("mail alice@example.org from /home/alice/x", "<EMAIL_1>", "alice"),
    ],
)
def test_an_identifier_found_by_its_shape_is_replaced(text: str, kept: str, gone: str) -> None:
    out = Sanitizer().text(text)
    assert kept in out and gone not in out


@pytest.mark.parametrize(
    "text",
    [
        "std::bad_alloc in c10::cuda::CUDACachingAllocator",
        "[Wed Mar  4 10:11:58 2026] Linux version 5.15.0-105-generic (buildd@lcy02-amd64-007)",
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  575.57.08",
        "NCCL version 2.21.5+cuda12.4 on 127.0.0.1 and 0.0.0.0",
        "base addr 0x7f1c80000000 and size of 0x100000 pages",
    ],
)
def test_what_only_looks_like_an_identifier_is_kept(text: str) -> None:
    assert Sanitizer().text(text) == text


def test_a_short_namespace_is_replaced_where_named_and_dev_shm_survives() -> None:
    sanitizer = Sanitizer()
    sanitizer.observe("bundle.yaml", "format: 1\nnode: ws-gpu-02\npod: ddp-0\nnamespace: dev\n")
    out = sanitizer.text('namespace: dev\npod="dev/ddp-0"\n"namespace": "dev"\ndf /dev/shm\n')
    assert out == (
        'namespace: <NAMESPACE_1>\npod="<NAMESPACE_1>/<POD_1>"\n'
        '"namespace": "<NAMESPACE_1>"\ndf /dev/shm\n'
    )
    assert sanitizer.data({"namespace": "dev", "mount": "dev"}) == {
        "namespace": "<NAMESPACE_1>",
        "mount": "dev",
    }


def test_an_identifier_cut_short_in_a_verdict_is_replaced_too() -> None:
    sanitizer = Sanitizer()
    sanitizer.learn("NODE", "gpu-node-07")
    hex64 = "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b"
    sanitizer.observe("journal-containerd.txt", f"id={hex64}\n")
    out = sanitizer.data({"finding": "on gpu-node-0... containers (9a8b7c6d5e4f...)"})
    assert out == {"finding": "on <NODE_1>... containers (<CONTAINER_ID_1>...)"}


texts = st.lists(
    st.one_of(
        st.text(max_size=10),
        st.sampled_from(
            [
                "gpu-node-07", "trainer-0", "10.0.7.17", "::1", "fe80::1", " ", "\n", ":", "-",
                "00000000:18:00.0", "18:00.0", "PCI:0000:18:00", "GPU-", "pod",
                "3f9c2d1e-8b7a-4c55-9e21-6a1b2c3d4e5f", "3f9c2d1e_8b7a_4c55_9e21_6a1b2c3d4e5f",
                "0c:42:a1:2b:3c:4d", "a" * 64, "<NODE_1>", "namespace: ", "dev", "/home/",
                "HF_TOKEN=hf_abcdefghijklmnopqrstu12", "...",
            ]
        ),
    ),
    max_size=12,
).map("".join)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(texts)
def test_sanitizing_never_raises_and_is_idempotent(text: str) -> None:
    sanitizer = Sanitizer()
    sanitizer.observe(
        "bundle.yaml", "format: 1\nnode: gpu-node-07\npod: trainer-0\nnamespace: dev\n"
    )
    once = sanitizer.text(text)
    assert sanitizer.text(once) == once
    assert sanitizer.data({"namespace": once}) == sanitizer.data({"namespace": once})
