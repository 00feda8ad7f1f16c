"""`runbook estimate-memory`: the pod's host-memory peak term by term, and the request/limit it
calls for, from a bundle's measurements and the operator's options (runbook.remedies.estimate).

The bundle is parsed as a run parses it: the shipped runbook's probes of the stages whose
parsers are `cgroup`, `procmem` and `kube`, read back from the bundle and split the same way,
through the same registered parsers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.table import Table

from runbook.cli.options import format_option
from runbook.output import output_console

if TYPE_CHECKING:
    from runbook.remedies.advice import Advice
    from runbook.remedies.estimate import Estimate

#: the parsers whose facts the estimate reads
PARSERS = ("kube", "cgroup", "procmem")
RUNBOOK = "nccl-init-failure"


def bundle_path(path: str) -> Path:
    """A bundle, or a run directory (its `bundle/`)."""
    p = Path(path)
    if (
        p.is_dir()
        and not (p / "bundle.yaml").is_file()
        and (p / "bundle" / "bundle.yaml").is_file()
    ):
        return p / "bundle"
    return p


def bundle_facts(path: str, variables: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The `kube`, `cgroup` and `procmem` facts of a bundle (or run directory)."""
    from runbook import bundle as bundle_mod
    from runbook import parsers
    from runbook.spec import load_file, resolve
    from runbook.transports import framing

    runbook = load_file(resolve(RUNBOOK))
    opened = bundle_mod.Bundle.open(bundle_path(path))
    try:
        ctx = dict(bundle_mod.context_of(opened.meta))
        ctx["vars"] = {
            **{
                k: v
                for k, v in (("pod", opened.meta.pod), ("namespace", opened.meta.namespace))
                if v
            },
            **(variables or {}),
        }
        facts: dict[str, Any] = {}
        for stage in runbook.stages:
            wanted = [p for p in stage.parse if p in PARSERS]
            if not wanted:
                continue
            files = {}
            for item in stage.collect:
                if bundle_mod.is_multi(item.name):
                    token = framing.new_token()
                    joined = opened.read_multi(item.name, token=token)
                    pieces = bundle_mod.split_multi(joined, token) if joined.collected else [joined]
                else:
                    pieces = [opened.read(item.name)]
                files.update({piece.name: piece for piece in pieces})
            for name in wanted:
                facts[name] = parsers.get(name).func(files, ctx)
    finally:
        opened.close()
    return facts


def _headroom_default() -> float:
    from runbook.spec import load_file, resolve

    value = load_file(resolve(RUNBOOK)).vars.get("memory_headroom", 1.2)
    return float(value) if isinstance(value, int | float) else 1.2


def _render_text(console: Console, est: Estimate, advice: Advice) -> None:
    from runbook.remedies.estimate import NAMES
    from runbook.units import human

    table = Table(title="pod host-memory peak")
    table.add_column("term")
    table.add_column("formula")
    table.add_column("bytes", justify="right")
    for term in est.terms:
        table.add_row(term.name, term.formula, human(term.bytes))
    table.add_row("[bold]pod peak[/]", est.basis, f"[bold]{human(est.peak_bytes)}[/]")
    console.print(table)
    i = est.inputs
    console.print("inputs:")
    for name, (kind, _what) in NAMES.items():
        item = i.get(name)
        if item.known:
            value = human(item.value) if kind == "size" else f"{item.value:g}"
            console.print(f"  {name.replace('_', '-')} {value}: {item.source}")
    console.print(
        f"request [bold]{est.request_quantity}[/] (peak × {i.request_factor.value:g}), "
        f"limit [bold]{est.limit_quantity}[/] (peak × {i.headroom.value:g})"
    )
    if est.allocatable_bytes is not None:
        console.print(
            f"node allocatable {human(est.allocatable_bytes)} less "
            f"{human(est.system_reserved_bytes)} system headroom: limits up to "
            f"{human(est.max_limit_bytes)} accepted"
        )
    for warning in est.warnings:
        console.print(f"[yellow]warning[/]: {warning}")
    if advice.lines():
        console.print("reduce the peak first:")
        for line in advice.lines():
            console.print(f"  - {line}")
    if est.refused:
        console.print(f"[red bold]refused[/]: {est.refused}")


SIZE = "SIZE"


@click.command("estimate-memory")
@click.argument("bundle", metavar="[BUNDLE_OR_RUN_DIR]", required=False, type=click.Path())
@click.option("--ranks", type=click.IntRange(min=1), help="Ranks in the pod.")
@click.option("--per-rank-cache", metavar=SIZE, help="Anonymous memory of one rank (12Gi, 4GiB).")
@click.option("--workers", type=click.IntRange(min=0), help="DataLoader workers per rank.")
@click.option("--worker-cache", metavar=SIZE, help="One worker's own memory.")
@click.option(
    "--prefetch",
    type=click.IntRange(min=0),
    help="Batches in flight per rank (PyTorch: prefetch_factor × num_workers).",
)
@click.option("--batch-buffer", metavar=SIZE, help="Host memory of one batch.")
@click.option("--pinned", metavar=SIZE, help="Pinned host buffers per rank.")
@click.option("--shm", metavar=SIZE, help="tmpfs (/dev/shm) the pod fills.")
@click.option("--other", metavar=SIZE, help="Other processes in the pod (sidecars, launcher).")
@click.option(
    "--headroom",
    type=click.FloatRange(min=1.0),
    help="limit = peak × headroom (default: the runbook's memory_headroom, 1.2).",
)
@click.option(
    "--request-factor",
    type=click.FloatRange(min=0.0, min_open=True),
    help="request = peak × factor (default 1.0).",
)
@click.option("--allocatable", metavar=SIZE, help="The node's allocatable memory.")
@click.option(
    "--system-reserved",
    metavar=SIZE,
    help="What the node keeps for kubelet, runtime and kernel (default max(1Gi, 5%)).",
)
@click.option("--rank-comm", metavar="REGEX", help="Process name of the ranks, if renamed.")
@format_option("text", "json", default="text")
def estimate_memory(bundle: str | None, fmt: str, rank_comm: str | None, **options: Any) -> None:
    """The pod's host-memory peak, term by term, and the request/limit it calls for.

    \b
      per-rank cache × ranks
    + worker cache × workers × ranks
    + prefetch × batch buffer × ranks
    + pinned buffers × ranks
    + tmpfs/shmem + other processes
    = pod peak;  request = peak × factor, limit = peak × headroom (rounded up to Mi)

    Measured values come from BUNDLE_OR_RUN_DIR (a bundle, .tar.gz, or a run directory: each
    process of the pod cgroup, the cgroup's shmem and peak, the node's allocatable); every
    option overrides what was measured. Sizes: 12Gi, 512Mi, 4GiB, 1.5G (G is 10^9), bytes.

    Exit status: 0 the limit passes the node guard; 1 the guard refuses it (the limit is at
    or above the node's allocatable, or above allocatable less the system headroom); 2 bad
    input or nothing to estimate from.
    """
    from runbook.remedies import advice as advice_mod
    from runbook.remedies import estimate

    facts = bundle_facts(bundle, {"rank_comm": rank_comm} if rank_comm else None) if bundle else {}
    overrides = {k: v for k, v in options.items() if v is not None}
    defaulted = set()
    if "headroom" not in overrides:
        overrides["headroom"] = _headroom_default()
        defaulted.add("headroom")

    def given(name: str) -> str:
        if name in defaulted:
            return "default: runbook var memory_headroom"
        return "--" + name.replace("_", "-")

    result = estimate.from_facts(facts, overrides, given=given)
    advice = advice_mod.advise(result)
    if fmt == "json":
        data = result.to_dict()
        data["advice"] = list(advice.lines())
        data["describe"] = list(result.describe())
        click.echo(json.dumps(data, indent=2))
    else:
        _render_text(output_console(), result, advice)
    if result.refused:
        raise click.exceptions.Exit(1)


__all__ = ["bundle_facts", "estimate_memory"]
