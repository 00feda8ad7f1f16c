"""Bus-bandwidth thresholds for the recovery check: the table (runbook/data/busbw-thresholds.yaml,
package data read once) and the lookup by GPU model, intra-node topology and GPU count.

`topology_of` and `lookup` are pure; `load_table` is the one read of the shipped file. An
operator's figure (`--var min_busbw=GBPS`) always wins over the table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from runbook.errors import RunbookError
from runbook.once import once

TABLE = "busbw-thresholds.yaml"
TOPOLOGIES = ("nvlink", "pcie")


class ThresholdError(RunbookError):
    """The shipped thresholds table is missing or malformed (a packaging bug)."""

    exit_code = 2


@dataclass(frozen=True)
class Entry:
    model: str
    topology: str
    gpus: int
    busbw_gbps: float
    source: str
    nodes: int = 1

    def matches(self, model: str, topology: str, gpus: int, nodes: int) -> bool:
        return (
            self.topology == topology
            and self.gpus == gpus
            and self.nodes == nodes
            and re.search(self.model, model, re.IGNORECASE) is not None
        )


@dataclass(frozen=True)
class Threshold:
    """What the bandwidth criterion compares with, and why that figure."""

    busbw_gbps: float | None
    source: str
    model: str | None
    topology: str | None
    gpus: int | None
    nodes: int = 1

    @property
    def known(self) -> bool:
        return self.busbw_gbps is not None

    def as_dict(self) -> dict[str, Any]:
        return {
            "busbw_gbps": self.busbw_gbps,
            "source": self.source,
            "model": self.model,
            "topology": self.topology,
            "gpus": self.gpus,
            "nodes": self.nodes,
        }


def parse_table(data: Any, *, source: str = TABLE) -> tuple[Entry, ...]:
    """The table's entries; ThresholdError naming the first bad one."""
    if not isinstance(data, Mapping) or data.get("format") != 1:
        raise ThresholdError(f"{source}: expected a mapping with format: 1")
    rows = data.get("thresholds")
    if not isinstance(rows, list):
        raise ThresholdError(f"{source}: thresholds must be a list")
    entries = []
    for index, row in enumerate(rows):
        where = f"{source}: thresholds[{index}]"
        if not isinstance(row, Mapping):
            raise ThresholdError(f"{where}: expected a mapping")
        try:
            entry = Entry(
                model=str(row["model"]),
                topology=str(row["topology"]),
                gpus=int(row["gpus"]),
                busbw_gbps=float(row["busbw_gbps"]),
                source=str(row.get("source") or source),
                nodes=int(row.get("nodes") or 1),
            )
            re.compile(entry.model)
        except (KeyError, TypeError, ValueError, re.error) as exc:
            raise ThresholdError(f"{where}: {type(exc).__name__}: {exc}") from None
        if entry.topology not in TOPOLOGIES:
            raise ThresholdError(f"{where}: topology must be one of {', '.join(TOPOLOGIES)}")
        entries.append(entry)
    return tuple(entries)


@once
def load_table() -> tuple[Entry, ...]:
    """The shipped table (read once per process)."""
    try:
        text = resources.files("runbook").joinpath("data", TABLE).read_text(encoding="utf-8")
    except (OSError, ModuleNotFoundError) as exc:
        raise ThresholdError(f"thresholds table {TABLE} is not installed: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ThresholdError(f"{TABLE}: not YAML: {' '.join(str(exc).split())}") from None
    return parse_table(data)


def topology_of(links: Mapping[str, str], gpus: Sequence[str]) -> str | None:
    """`nvlink` when every pair of the GPUs is joined by NVLink (`NV#` in `topo -m`), `pcie`
    when the matrix shows any pair without it, None when the matrix says nothing."""
    names = [g for g in gpus if g.startswith("GPU")]
    if len(names) < 2:
        return None
    pairs = [
        links.get(f"{a}-{b}") or links.get(f"{b}-{a}")
        for i, a in enumerate(names)
        for b in names[i + 1 :]
    ]
    if any(p is None for p in pairs):
        return None
    return "nvlink" if all(str(p).startswith("NV") for p in pairs) else "pcie"


def lookup(
    model: str | None,
    topology: str | None,
    gpus: int | None,
    *,
    nodes: int = 1,
    override: float | None = None,
    table: Iterable[Entry] | None = None,
) -> Threshold:
    """The threshold for a node: the operator's `override` if given, else the first table
    entry matching model, topology, GPU count and node count; unknown otherwise (the reason
    says what was missing)."""
    if override is not None and override > 0:
        return Threshold(override, "given (--var min_busbw)", model, topology, gpus, nodes)
    missing = [
        what
        for what, value in (("GPU model", model), ("topology", topology), ("GPU count", gpus))
        if not value
    ]
    if missing:
        return Threshold(
            None, f"unknown {', '.join(missing)}: no threshold", model, topology, gpus, nodes
        )
    assert model is not None and topology is not None and gpus is not None
    for entry in load_table() if table is None else table:
        if entry.matches(model, topology, gpus, nodes):
            return Threshold(entry.busbw_gbps, entry.source, model, topology, gpus, nodes)
    where = f"{nodes} nodes of " if nodes > 1 else ""
    return Threshold(
        None,
        f"no threshold in {TABLE} for {where}{gpus}× {model} over {topology}",
        model,
        topology,
        gpus,
        nodes,
    )
