"""The recovery check's collective test (`nccl-tests/recovery-*.txt`, one file per repeated
`all_reduce_perf` run, each ending in the runbook's `# runbook: exit status N` trailer), judged
against the node's GPUs (`nvidia-smi-L.txt`, `nvidia-smi-q.txt`, `nvidia-smi-topo-m.txt`) and,
for a multi-node run, its HCAs (`ibv-devinfo.txt`).

The criteria and the causes they name are runbook.parsers.verify_criteria's; the thresholds
come from runbook/data/busbw-thresholds.yaml unless `min_busbw` is given. Variables read:
`gpus`, `nodes`, `hosts`, `nics`, `nccl_version`, `ib_gid_index`, `min_busbw`, `max_spread_pct`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from runbook.parsers._common import files_under, is_collected, iter_lines
from runbook.parsers.busbw_thresholds import Threshold, ThresholdError, lookup, topology_of
from runbook.parsers.ibv_devinfo import parse_ibv_devinfo
from runbook.parsers.nvidia_smi import (
    F_DETAILS,
    F_LIST,
    F_TOPOLOGY,
    parse_list,
    parse_q,
    parse_topo,
)
from runbook.parsers.registry import Files, register
from runbook.parsers.verify_criteria import Expectation, RunInput, evaluate, run_facts

PREFIX = "nccl-tests/recovery-"
F_IBV = "ibv-devinfo.txt"


def _text(files: Files, name: str) -> str | None:
    result = files.get(name)
    return result.stdout if is_collected(result) and result.exited in (0, None) else None


def _number(value: Any) -> float | None:
    """A positive, finite number (`--var nodes=inf` is not one), else None."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if 0 < number < math.inf else None


def _names(value: Any) -> list[str]:
    if isinstance(value, list | tuple):
        return [str(v).strip() for v in value if str(v).strip()]
    return [p.strip() for p in str(value or "").split(",") if p.strip()]


def gpu_facts(files: Files) -> dict[str, Any]:
    """Model, count and intra-node topology of the node's GPUs."""
    names: list[str] = []
    text = _text(files, F_LIST)
    if text is not None:
        names = [g.name for g in parse_list(iter_lines(text))]
    text = _text(files, F_DETAILS)
    if not names and text is not None:
        names = [g.product_name for g in parse_q(iter_lines(text)).gpus if g.product_name]
    topology = None
    text = _text(files, F_TOPOLOGY)
    if text is not None:
        topo = parse_topo(iter_lines(text))
        topology = topology_of(topo.links, topo.gpus)
    models = sorted(set(names))
    return {
        "names": names,
        "model": names[0] if names else None,
        "mixed": len(models) > 1,
        "count": len(names) or None,
        "topology": topology,
    }


@register("nccl_recovery", "nccl-tests/recovery-*.txt: the recovery check's pass criteria")
def nccl_recovery_facts(files: Files, context: Mapping[str, Any]) -> dict[str, Any]:
    variables = context.get("vars")
    v: Mapping[str, Any] = variables if isinstance(variables, Mapping) else {}
    gpu = gpu_facts(files)
    runs = [
        RunInput(name, list(res.lines()), res.exited)
        for name, res in files_under(files, PREFIX)
        if is_collected(res)
    ]
    nodes = int(_number(v.get("nodes")) or 1)
    given_gpus = _number(v.get("gpus"))
    per_node = int(given_gpus) if given_gpus else gpu["count"]
    if not gpu["model"] and runs:
        # no nvidia-smi: the test names its devices (`# Rank 0 ... device 0 [..] NAME`)
        devices = run_facts(runs[0])["devices"]
        gpu = {**gpu, "model": devices[0] if devices else None}
    try:
        threshold = lookup(gpu["model"], gpu["topology"], per_node, nodes=nodes,
                           override=_number(v.get("min_busbw")))
    except ThresholdError as exc:
        threshold = Threshold(None, exc.one_line(), gpu["model"], gpu["topology"], per_node)
    ibv = _text(files, F_IBV)
    expect = Expectation(
        threshold=threshold,
        ranks=per_node * nodes if per_node else None,
        nodes=nodes,
        max_spread_pct=_number(v.get("max_spread_pct")) or 10.0,
        topology=gpu["topology"],
        hosts=_names(v.get("hosts")),
        nics=_names(v.get("nics")),
        nccl_version=str(v.get("nccl_version") or "") or None,
        gid_index=str(v.get("ib_gid_index") or "") or None,
        ports=parse_ibv_devinfo(iter_lines(ibv)) if ibv is not None else (),
    )
    out = evaluate(runs, expect)
    out["gpu"] = gpu
    return out
