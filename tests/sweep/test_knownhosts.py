"""A sweep parses each known_hosts file once and gives each host only its own entries: the
same trust as the whole file, hashed names (`ssh-keygen -H`) and `[host]:port` included."""

from __future__ import annotations

import subprocess
from pathlib import Path

import paramiko

from runbook.sweep.knownhosts import KnownHosts


def _key(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return " ".join(path.with_name(path.name + ".pub").read_text().split()[:2])


def test_each_host_gets_exactly_its_entries_hashed_or_not(tmp_path: Path) -> None:
    a, b, c = (_key(tmp_path / name) for name in ("a", "b", "c"))
    known = tmp_path / "known_hosts"
    known.write_text(f"10.0.0.1 {a}\n[10.0.0.2]:2222 {b}\nbastion {c}\n")
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(known)], check=True, capture_output=True)
    assert "10.0.0.1" not in known.read_text()  # every name hashed now
    cache = KnownHosts(tmp_path / "private")
    (tmp_path / "private").mkdir()
    one = paramiko.HostKeys(str(cache.for_host(known, ["10.0.0.1", "bastion"])))
    assert set(one.keys()) == {"10.0.0.1", "bastion"}
    assert one.lookup("10.0.0.1")["ssh-ed25519"].get_base64() == a.split()[1]  # type: ignore[index]
    two = paramiko.HostKeys(str(cache.for_host(known, ["[10.0.0.2]:2222"])))
    assert list(two.keys()) == ["[10.0.0.2]:2222"]
    none = paramiko.HostKeys(str(cache.for_host(known, ["10.0.0.9"])))
    assert list(none.keys()) == []  # unknown stays unknown: the host will be refused
    assert cache.for_host(tmp_path / "absent", ["x"]) == tmp_path / "absent"


def test_aliases_of_one_address_never_read_a_half_written_file(tmp_path: Path) -> None:
    """Inventory aliases sharing one address share one per-host file: while threads of a
    sweep ask for it, every other thread reading it sees the whole entry (it is written once,
    and replaced by rename, never truncated under a reader)."""
    import threading

    key = _key(tmp_path / "k")
    known = tmp_path / "known_hosts"
    known.write_text("".join(f"10.0.0.{i} {key}\n" for i in range(1, 200)))
    cache = KnownHosts(tmp_path / "private")
    (tmp_path / "private").mkdir()
    path = cache.for_host(known, ["10.0.0.7"])
    seen: list[int] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.append(len(paramiko.HostKeys(str(path)).keys()))

    def asker() -> None:
        for _ in range(200):
            assert cache.for_host(known, ["10.0.0.7"]) == path

    readers = [threading.Thread(target=reader) for _ in range(4)]
    askers = [threading.Thread(target=asker) for _ in range(8)]
    for thread in readers + askers:
        thread.start()
    for thread in askers:
        thread.join()
    stop.set()
    for thread in readers:
        thread.join()
    assert seen and set(seen) == {1}
