"""Coverage against the source of truth: every error text NCCL (WARN formats, return-code
traces, ncclGetErrorString at seven release tags), PyTorch's c10d (1.13, 2.6), the CUDA runtime
(cudaGetErrorString, 11.8 and 12.9) and the kernel formats can print is classified, and the
product's own reader reads a sample of each as its class says (tests/tools/coverage.py; the
lists under runbook/data/coverage/ were extracted by tests/tools/coverage_extract.py)."""

from __future__ import annotations

import collections
import re
from typing import Any

import pytest
import yaml

from runbook import signatures
from tests.tools import coverage, coverage_extract


def _raw(source: str) -> Any:
    return yaml.safe_load((coverage.DATA / f"{source}.yaml").read_text())


@pytest.mark.parametrize("source", coverage.SOURCES)
def test_every_extracted_string_has_a_class_or_a_reason(source: str) -> None:
    missing = [r.entry.text for r in coverage.table() if r.entry.source == source and not r.rule]
    assert missing == []
    for row in coverage.table():
        if row.entry.source == source and row.rule and row.rule.unclassified:
            assert len(row.rule.unclassified) > 20, row.rule  # a reason, not a placeholder


def test_a_string_from_a_part_of_nccl_no_rule_knows_has_no_class() -> None:
    # no catch-all: a WARN in a directory a future release adds is reported, not absorbed
    new = coverage.Entry(
        "nccl", "warn", "Something new happened %d", ("v9",), ("src/newpart/x.cc",)
    )
    assert coverage.classify(new).rule is None
    warn_in_known_file = coverage.Entry("nccl", "warn", "x %d", ("v9",), ("src/init.cc",))
    assert coverage.classify(warn_in_known_file).signature == "nccl-warn"


@pytest.mark.parametrize("source", coverage.SOURCES)
def test_the_reader_reads_each_sample_as_its_rule_says(source: str) -> None:
    wrong = [p for p in coverage.problems() if p.startswith(f"{source} ")]
    assert wrong == []


def test_a_socket_failure_warn_is_read_as_network_socket_not_as_a_generic_nccl_warn() -> None:
    rows = {
        r.entry.text: r
        for r in coverage.table()
        if r.entry.source == "nccl" and r.entry.kind == "warn"
    }
    for text, sig in [
        ("socketPollConnect: exceeded timeouts (%d)", "socket-connect-failed"),
        ("NET/Socket : No usable listening interface found", "socket-no-interface"),
        ("no device found matching %s%s, verify NCCL_OOB_NET_IFNAME", "socket-no-interface"),
        ("Net : Connect to %s failed : %s", "socket-connect-failed"),
        ("Error while %s shared memory segment %s (size %d)", "shm-exhausted"),
    ]:
        row = rows[text]
        assert row.read is not None and row.read[0] == sig, (text, row.sample, row.read)
        assert row.cause in ("network-socket", "shm-exhausted")


def test_every_rule_is_well_formed_and_used() -> None:
    catalog_ids = {s.id for s in signatures.catalog().signatures} | {"generic-error"}
    used = collections.Counter((r.entry.source, r.rule.index) for r in coverage.table() if r.rule)
    for source, rules in coverage.rules().items():
        for rule in rules:
            assert used[(source, rule.index)], f"{source} rule {rule.index} classifies nothing"
            if rule.unclassified:
                continue
            assert rule.why, f"{source} rule {rule.index}: say why"
            if source == "kernel" or rule.signature == "none":
                assert rule.role in signatures.ROLES, rule
                assert rule.cause is None or rule.cause in signatures.ROOT_CAUSES, rule
            else:
                assert rule.signature in catalog_ids, rule


def test_signature_rows_take_their_class_from_the_catalog() -> None:
    for row in coverage.table():
        sig = row.signature
        if sig and sig != "none" and not row.rule.unclassified:  # type: ignore[union-attr]
            assert (row.role, row.cause) == coverage.catalog_role(sig)


@pytest.mark.parametrize("source", coverage.SOURCES)
def test_the_counts_are_the_extracted_lists_counts(source: str) -> None:
    raw = _raw(source)
    listed = [r["release"] for r in raw["releases"]]
    per_release = collections.Counter(
        (rel, s["kind"]) for s in raw["strings"] for rel in s["releases"]
    )
    assert set(r for r, _ in per_release) == set(listed)  # every release has strings
    counted = coverage.counts()
    for (rel, kind), n in per_release.items():
        c = counted[(source, rel, kind)]
        assert c["strings"] == n
        assert c["classified"] + c["unclassified"] == n
    # and the generated document says the same numbers
    doc = coverage.DOC.read_text()
    for (rel, kind), n in per_release.items():
        row = re.search(rf"^\| {source} \| {re.escape(rel)} \| {kind} \| (\d+) \|", doc, re.M)
        assert row is not None and int(row.group(1)) == n


def test_nccl_is_covered_at_every_release_tag_the_extractor_names() -> None:
    raw = _raw("nccl")
    assert [r["release"] for r in raw["releases"]] == list(coverage_extract.NCCL_RELEASES)
    assert all(re.fullmatch(r"[0-9a-f]{40}", r["commit"]) for r in raw["releases"])
    warns = collections.Counter(
        rel for s in raw["strings"] if s["kind"] == "warn" for rel in s["releases"]
    )
    # each release prints WARNs, and a newer line never prints fewer than 2.4 did
    assert all(warns[rel] >= warns["v2.4.8-1"] > 0 for rel in coverage_extract.NCCL_RELEASES)


def test_the_checked_in_doc_is_the_generated_one() -> None:
    assert coverage.DOC.read_text() == coverage.render(), "run tests/tools/coverage.py"


# ---- the extractor itself -----------------------------------------------------------------------
NCCL_SNIPPET = r"""
#define WARN(...) ncclDebugLog(NCCL_LOG_WARN, __VA_ARGS__)
#define SYSCHECK(call, name) do { if (call == -1) { \
    WARN("Call to " name " failed : %s", strerror(errno)); } } while (0)
static ncclResult_t f(int fd) {
  // WARN("commented out %d", 1);
  /* WARN("also commented"); */
  WARN("Net : Connect to %s failed : %s", addr,
       strerror(errno));
  WARN("size %" PRIu64 " too big, (%s)", size, "a,b)");
  WARN(msg);
  INFO(NCCL_ALL, "not an error %d", 1);
  return ncclSuccess;
}
const char* ncclGetErrorString(ncclResult_t code) {
  switch (code) {
    case ncclSuccess : return "no error";
    case ncclSystemError : return "unhandled system error";
  }
}
"""


def test_the_extractor_reads_warn_formats_as_the_compiler_would() -> None:
    found = list(coverage_extract.nccl_file("src/misc/socket.cc", NCCL_SNIPPET))
    assert found == [
        ("warn", "Call to {name} failed : %s"),
        ("warn", "Net : Connect to %s failed : %s"),
        ("warn", "size %lu too big, (%s)"),
        ("warn", "<dynamic: msg>"),
        ("error-string", "no error"),
        ("error-string", "unhandled system error"),
    ]


def test_the_extractor_reads_c10d_messages_with_computed_parts_marked() -> None:
    source = r"""
    TORCH_CHECK(x > 0, "Invalid rank ", rank, " of ", size);
    C10_THROW_ERROR(DistBackendError, c10::str("NCCL error in: ", file, ":", line));
    LOG(ERROR) << logPrefix() << "Watchdog caught " << e.what();
    LOG(INFO) << "not an error";
    auto exitMsg = c10::str(logPrefix(), "Process group watchdog thread terminated");
    TORCH_CHECK(ok);
    """
    assert list(coverage_extract.pytorch_file(source)) == [
        ("check", "Invalid rank {} of {}", "Error"),
        ("throw", "NCCL error in: {}:{}", "DistBackendError"),
        ("log-error", "{}Watchdog caught {}", None),
        ("message", "{}Process group watchdog thread terminated", None),
    ]


def test_a_format_is_filled_with_given_values_then_defaults() -> None:
    assert coverage.fill("Connect to %s failed : %s (%d%%)", ["10.0.0.2<1>"]) == (
        "Connect to 10.0.0.2<1> failed : x (3%)"
    )
    assert coverage.fill("Call to {name} failed, %-22s %5.2f %lu", ["ibv_open_device"]) == (
        "Call to ibv_open_device failed, x 1.0 3"
    )


def test_a_kernel_sample_is_held_to_the_record_the_parser_makes_of_it() -> None:
    xid = "[ 1.0] NVRM: Xid (PCI:0000:86:00): 79, pid=1, name=p, GPU has fallen off the bus."
    assert coverage.kernel_record(xid, "xids")
    assert not coverage.kernel_record(xid, "aer")
    assert not coverage.kernel_record("[ 1.0] NVRM: loading NVIDIA UNIX Open Kernel Module", "xids")
