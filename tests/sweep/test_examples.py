"""The shipped scheduling examples hold together: every `runbook` command line in them parses
with the real CLI (flags, choices, types), the Kubernetes CronJob runs as many shards as it
has pods and only the API access a sweep needs, and the systemd units and the cron line treat
findings (1) and unreachable hosts (3) as results, not failures."""

from __future__ import annotations

import configparser
import glob
import re
import shlex
from pathlib import Path
from typing import Any

import click
import yaml

from runbook.cli.app import cli
from tests.sweep.helpers import REPO

EXAMPLES = REPO / "examples" / "scheduling"


def parses(argv: list[str]) -> click.Context:
    """Parse a `runbook …` command line with the real CLI, running nothing."""
    assert argv[0].endswith("runbook"), argv
    command = cli.commands[argv[1]]
    if isinstance(command, click.Group):  # `runbook approvals publish …`
        return command.commands[argv[2]].make_context(argv[2], argv[3:])
    return command.make_context(argv[1], argv[2:])


def _unit(name: str) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(EXAMPLES / name)
    return unit


def test_the_systemd_service_and_timer() -> None:
    service, timer = _unit("runbook-sweep.service"), _unit("runbook-sweep.timer")
    ctx = parses(shlex.split(service["Service"]["ExecStart"]))
    assert ctx.params["forks"] == 64 and ctx.params["inventory"]
    assert service["Service"]["Type"] == "oneshot"
    assert set(service["Service"]["SuccessExitStatus"].split()) == {"1", "3"}
    # runbook writes the metrics atomically itself; a copy by install/cp afterwards is not
    assert ctx.params["textfile_dir"] == "/var/lib/node_exporter/textfile_collector"
    assert "ExecStartPost" not in service["Service"]
    assert ctx.params["textfile_dir"] in service["Service"]["ReadWritePaths"].split()
    assert timer["Timer"]["OnCalendar"] and timer["Timer"]["Persistent"] == "true"
    assert timer["Install"]["WantedBy"] == "timers.target"


def test_the_cron_line() -> None:
    lines = [
        line
        for line in (EXAMPLES / "runbook-sweep.cron").read_text().splitlines()
        if line and not line.startswith("#") and not re.match(r"^[A-Z_]+=", line)
    ]
    (line,) = lines
    fields = line.split(None, 6)
    assert fields[5] == "runbook"  # /etc/cron.d names the user
    command, after = fields[6].split(">>", 1)
    ctx = parses(shlex.split(command))
    assert ctx.info_name == "sweep" and ctx.params["report_dir"] and ctx.params["textfile_dir"]
    assert ";" not in after and "install" not in after  # no copy after the sweep


def test_the_approval_queue_is_published_on_a_timer_and_from_cron() -> None:
    service = _unit("runbook-approvals-publish.service")
    timer = _unit("runbook-approvals-publish.timer")
    ctx = parses(shlex.split(service["Service"]["ExecStart"]))
    assert ctx.info_name == "publish"
    assert ctx.params["textfile_dir"] in service["Service"]["ReadWritePaths"].split()
    assert service["Service"]["EnvironmentFile"].startswith("-/")  # the webhook, optional
    assert timer["Timer"]["OnCalendar"] and timer["Install"]["WantedBy"] == "timers.target"
    (line,) = [
        line
        for line in (EXAMPLES / "runbook-approvals-publish.cron").read_text().splitlines()
        if line and not line.startswith("#") and not re.match(r"^[A-Z_]+=", line)
    ]
    fields = line.split(None, 6)
    assert fields[5] == "runbook"
    ctx = parses(shlex.split(fields[6].split(">>", 1)[0]))
    assert ctx.params["textfile_dir"]


def _docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / "kubernetes-cronjob.yaml").read_text()) if d]


def _script_command(script: str, values: dict[str, str]) -> list[str]:
    """The `runbook …` invocation of a container's shell script, its shell variables set."""
    joined = script.replace("\\\n", " ")
    (line,) = [line.strip() for line in joined.splitlines() if line.strip().startswith("runbook ")]
    for name, value in values.items():
        line = line.replace(f"${name}", value)
    words = []
    for word in shlex.split(line):  # the shell's globbing too
        words += sorted(glob.glob(word)) if "*" in word else [word]
    return words


def test_the_kubernetes_cronjob_runs_one_shard_per_pod_then_merges(tmp_path: Path) -> None:
    docs = _docs()
    cronjobs = {d["metadata"]["name"]: d for d in docs if d["kind"] == "CronJob"}
    sweep = cronjobs["runbook-sweep"]["spec"]
    assert sweep["concurrencyPolicy"] == "Forbid"
    job = sweep["jobTemplate"]["spec"]
    assert job["completionMode"] == "Indexed"
    pods = job["completions"]
    assert job["parallelism"] == pods
    (container,) = job["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SHARDS"] == str(pods)
    # every shard queues into one shared approval queue; its password only from the Secret
    shared = env["RUNBOOK_DB"]
    assert shared.startswith("postgresql://") and ":" not in shared.split("@")[0][13:]
    (password,) = [e for e in container["env"] if e["name"] == "PGPASSWORD"]
    assert "secretKeyRef" in password["valueFrom"]
    for index in range(pods):
        argv = _script_command(
            container["args"][0],
            {"k": str(index + 1), "SHARDS": env["SHARDS"], "day": "2026-01-01",
             "RUNBOOK_DB": shared},
        )  # fmt: skip
        ctx = parses(argv)
        assert ctx.params["shard"] == f"{index + 1}/{pods}"
        assert ctx.params["kube_selector"] and ctx.params["db"] == shared
    assert "k=$((JOB_COMPLETION_INDEX + 1))" in container["args"][0]
    (merge,) = cronjobs["runbook-sweep-merge"]["spec"]["jobTemplate"]["spec"]["template"]["spec"][
        "containers"
    ]
    for k in range(1, pods + 1):  # what the shard pods left on the shared volume
        (tmp_path / "2026-01-01" / f"shard-{k}").mkdir(parents=True)
    script = merge["args"][0].replace("/reports/", f"{tmp_path}/")
    ctx = parses(_script_command(script, {"day": "2026-01-01"}))
    assert ctx.info_name == "sweep-merge" and len(ctx.params["dirs"]) == pods


def test_the_cronjob_may_read_nodes_and_exec_into_agents_and_nothing_more() -> None:
    rules = [r for d in _docs() if d["kind"] in ("Role", "ClusterRole") for r in d["rules"]]
    granted = {(res, verb) for r in rules for res in r["resources"] for verb in r["verbs"]}
    assert granted == {
        ("nodes", "get"),
        ("nodes", "list"),
        ("pods", "get"),
        ("pods", "list"),
        ("pods/exec", "create"),
    }


def test_the_readme_names_every_example() -> None:
    readme = (EXAMPLES / "README.md").read_text()
    for path in EXAMPLES.iterdir():
        if path.name != "README.md":
            assert f"`{path.name}`" in readme, path.name
    assert Path(REPO / "docs" / "sweep.md").read_text().count("examples/scheduling") >= 1
