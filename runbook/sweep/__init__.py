"""Fleet sweeps: the read-only runbook over an inventory, with bounded concurrency.

::

    inventory.py / kube.py   hosts from ansible-inventory, or GPU nodes and their node agents
    shard.py                 --shard K/N (sha256 of the host name)
    lock.py                  one sweep of an inventory at a time (flock in the state dir)
    pool.py                  the bounded pool and its per-host deadlines
    host.py                  one host: connect, walk the runbook (executor.execute), classify
    knownhosts.py            each known_hosts file parsed once per sweep, per-host extracts
    run.py                   a whole sweep, proposals into the approval queue (never run)
    analyze.py               analyze-dir: fetched bundles through the same runbook
    merge.py                 sweep-merge: shard reports into one
    results.py               HostResult / SweepResult (sweep.json's model)
    reports.py               sweep.md, junit.xml, runbook.prom (rendered by runbook.render)
    checkpoint.py            progress.jsonl: each host's result as it completes (--resume)
    plan.py                  the probes for roles/evidence_collect (collect-plan)
"""

from runbook.sweep.results import HostResult, HostStatus, SweepResult

__all__ = ["HostResult", "HostStatus", "SweepResult"]
