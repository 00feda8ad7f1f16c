"""The desk in a real browser: headless Chromium (Debian's, driven by Playwright) signs in
through a real OpenID Connect provider run locally (oidc-provider-mock), lists the queue, opens
a proposal, runs its check mode and sees the diff, approves a shm-size-limit patch that then
runs (re-checked over SSH on a test host whose /dev/shm a real job filled, then the real
playbook through ansible-runner patching the workload's manifest), and sees the output and the
result; denies another with a reason; a node drain waits for a second person; a page served
from another origin cannot approve; an evidence line carrying <script> stays text; the page
fits a 390-px phone.

The desk is the real `runbook desk serve` (uvicorn) on 127.0.0.1; the store real SQLite. The
drain's plan is queued by hand (no Kubernetes API runs here): what is asserted of it is the
two-person rule, which comes before the cluster is asked anything.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from runbook import config as config_mod
from runbook.remedies.approval import Desk
from runbook.remedies.plans import Target
from runbook.verdict import Verdict
from tests.desk.conftest import DeskServer, oidc_desk, start_desk, stop_desk
from tests.desk.queueing import HOSTILE, enqueue
from tests.hosts.harness import HostNetwork
from tests.scenarios.cgroups import MIB
from tests.scenarios.conftest import (  # noqa: F401 (the scenario suite's fixtures)
    _sweep_stale_cgroups,
    diagnose,
    job_on_node,
    memory_cgroups,
    nodes,
    scenario_hosts,
)
from tests.scenarios.job import RankSpec
from tests.tools import manifests

pytestmark = [pytest.mark.live, pytest.mark.ssh, pytest.mark.ansible]

SHOTS = Path("/work/helpers/shots")
CHROMIUM = "/usr/bin/chromium"
MANIFEST = manifests.job()


#: a drain's plan as kinds/drain.py makes it, for a cluster that is not there (no API server
#: can run here): its guard asks kubectl, which fails on the missing kubeconfig
DRAIN_PLAN = {
    "playbook": "node-drain.yml",
    "inventory": {},
    "runs_on": "this machine (local)",
    "extravars": {
        "node_drain_node": "gpu-node-12",
        "node_drain_kubeconfig": "/nonexistent/kubeconfig",
    },
    "guard": {
        "node": "gpu-node-12",
        "pool_selector": "nvidia.com/gpu.present=true",
        "max_cordoned": 1,
        "max_fraction": 0.1,
    },
}


class Incident:
    def __init__(
        self, server: DeskServer, shm: str, deny: str, drain: str, hostile: str, manifest: Path
    ) -> None:
        self.server, self.shm, self.deny, self.drain = server, shm, deny, drain
        self.hostile, self.manifest = hostile, manifest


@pytest.fixture(scope="module")
def incident(
    job_on_node: Any,  # noqa: F811
    host_network: HostNetwork,
    oidc_provider: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Incident]:
    """A shm-exhausted incident for real on a test host (tests/scenarios), its shm-size-limit
    proposal queued against that host and a workload manifest; three more proposals beside it
    (one to deny, a drain, one whose evidence holds markup); the desk serving them."""
    ranks = [RankSpec(fail="shm-segment", shm_segment_mib=3) for _ in range(2)]
    outcome = job_on_node("desk-shm", ranks, shm_bytes=4 * MIB)
    verdict = outcome.diagnosis.verdict
    assert verdict["root_cause"] == "shm-exhausted", outcome.diagnosis.explain()
    root = tmp_path_factory.mktemp("desk-browser")
    manifest = root / "job.yaml"
    manifest.write_text(MANIFEST)
    # every sign-in here comes from 127.0.0.1: the per-client limit is raised for the test
    server = start_desk(root / "desk", oidc_desk(oidc_provider, login_attempts=1000))
    try:
        host = outcome.host
        target = Target(
            url=f"ssh://root@{host.address}:{host.port}",
            identities=(str(host_network.client_key.private_path),),
            known_hosts=str(host_network.known_hosts_path),
            connect_timeout=5.0,
        )
        variables = {
            "app_log_dir": str(outcome.log_dir),
            "nccl_log_dir": str(outcome.log_dir),
            "cgroup_dir": str(outcome.cgroup.path),
            "manifest": str(manifest),
        }
        with Desk(config_mod.load(None, db=str(server.db))) as desk:
            queued = desk.queue_verdict(
                Verdict.from_json(verdict),
                node=host.name,
                target=target,
                runbook_id="nccl-init-failure",
                variables=variables,
                run_dir=None,
                requested_by="sweep",
            )
        (shm,) = [q.proposal.id for q in queued if q.proposal.kind == "shm-size-limit"]
        deny = enqueue(server.db, node="gpu-node-11", n=1)
        drain = enqueue(
            server.db,
            kind="node-drain",
            node="gpu-node-12",
            n=2,
            requested_by="alice@example.org",
            plan=DRAIN_PLAN,
        )
        hostile = enqueue(server.db, node="gpu-node-13", n=3, text=HOSTILE)
        yield Incident(server, shm, deny, drain, hostile, manifest)
    finally:
        stop_desk(server)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        yield launched
        launched.close()


def signed_in(browser: Any, incident: Incident, sub: str, **context: Any) -> Any:
    """A browser context of its own (cookies and all) signed in as `sub` through the
    provider's sign-in page."""
    ctx = browser.new_context(**context)
    page = ctx.new_page()
    page.goto(incident.server.url + "/queue")
    assert page.url.endswith("/login"), page.url
    page.click("#signin")
    page.click(f"button[name=sub][value={sub}]")  # the provider's page: a predefined person
    page.wait_for_url("**/queue")
    return page


def wait_for_run(page: Any, timeout: float = 240.0) -> str:
    """Reload (as the page itself does every 2 s) until the run's section says it ended."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        heading = page.locator("#run h2").inner_text() if page.locator("#run h2").count() else ""
        if heading and "running" not in heading:
            return str(heading)
        time.sleep(1.0)
        page.reload()
    raise AssertionError(f"the run did not end in {timeout} s: {page.locator('#run').inner_text()}")


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / name), full_page=True)


def test_sign_in_through_the_provider_lists_the_queue(browser: Any, incident: Incident) -> None:
    page = signed_in(browser, incident, "alice")
    assert "alice@example.org" in page.locator("header").inner_text()
    listed = page.locator("#queue").inner_text()
    for pid in (incident.shm, incident.deny, incident.drain, incident.hostile):
        assert pid in listed
    assert "4 pending proposals" in page.locator("#count").inner_text()
    page.select_option("select[name=kind]", "node-drain")
    page.click("button:text('filter')")
    assert "1 pending proposal" in page.locator("#count").inner_text()
    page.goto(incident.server.url + "/queue")
    shot(page, "desk-queue.png")
    page.context.close()


def test_a_proposal_shows_its_evidence_target_and_check_mode_diff(
    browser: Any, incident: Incident
) -> None:
    page = signed_in(browser, incident, "alice")
    page.click(f"a:text('{incident.shm}')")
    assert "posix_fallocate" in page.locator("#first-anomaly").inner_text()
    target = page.locator("#target").inner_text()
    assert "root" in target and "ssh://root@" in target and "none (direct)" in target
    assert "shm-size-limit.yml" in page.locator("#plan").inner_text()
    page.click("#preview")
    assert "checked" in wait_for_run(page)
    diff = page.locator("#diff-text").inner_text()
    assert "sizeLimit" in diff, diff
    assert "sizeLimit" not in incident.manifest.read_text()  # check mode changed nothing
    assert "by root as alice@example.org" in page.locator("#diff").inner_text()
    shot(page, "desk-proposal.png")
    page.context.close()


def test_approving_the_shm_patch_runs_it_and_shows_its_output_and_result(
    browser: Any, incident: Incident
) -> None:
    page = signed_in(browser, incident, "bob")
    page.goto(f"{incident.server.url}/p/{incident.shm}")
    page.click("#approve")
    # the run's output while it runs (the re-check over SSH and two Ansible runs take seconds)
    end = time.monotonic() + 30
    while f"approving {incident.shm}" not in page.locator("#output").inner_text():
        assert time.monotonic() < end, page.locator("#run").inner_text()
        time.sleep(0.5)
        page.reload()
    assert "running" in page.locator("#run h2").inner_text()
    assert page.locator("meta[http-equiv=refresh]").count() == 1
    assert "succeeded" in wait_for_run(page)
    assert page.locator("meta[http-equiv=refresh]").count() == 0
    output = page.locator("#output").inner_text()
    assert f"approving {incident.shm}" in output and "re-checking the node first" in output
    assert f"{incident.shm} succeeded" in output, output
    assert "check that the fix held" in output or page.locator("#verify").count() == 1
    assert page.locator("#state").inner_text() == "succeeded"
    assert "as bob@example.org" in page.locator("#result-line").inner_text()
    size = yaml.safe_load(incident.manifest.read_text())["spec"]["template"]["spec"]
    assert size["volumes"][0]["emptyDir"]["sizeLimit"], incident.manifest.read_text()
    trail = page.locator("#audit").inner_text()
    for event in ("rechecked", "approved", "check", "executed"):
        assert event in trail, trail
    assert "audit chain intact" in page.locator("#audit #chain").inner_text()
    shot(page, "desk-proposal-succeeded.png")
    # the recovery check, as `runbook verify` runs it on the node (the GPU tools are shims)
    page.click("#verify")
    heading = wait_for_run(page, timeout=300)
    status = page.locator("#verification").inner_text()
    assert status.split(":")[0] in ("verified", "failed-verification"), (heading, status)
    assert "recovery check of" in page.locator("#output").inner_text()
    shot(page, "desk-proposal-recovery-check.png")
    page.context.close()


def test_denying_records_the_reason(browser: Any, incident: Incident) -> None:
    page = signed_in(browser, incident, "alice")
    page.goto(f"{incident.server.url}/p/{incident.deny}")
    page.fill("#reason", "the job was rescheduled on another pool")
    page.click("#deny")
    assert page.locator("#state").inner_text() == "denied"
    assert "the job was rescheduled on another pool" in page.locator("#result-line").inner_text()
    page.context.close()


def test_a_drain_queued_by_alice_waits_for_a_second_person(
    browser: Any, incident: Incident
) -> None:
    alice = signed_in(browser, incident, "alice")
    alice.goto(f"{incident.server.url}/p/{incident.drain}")
    assert "needs a second person" in alice.locator("#two-person").inner_text()
    alice.click("#approve")
    heading = wait_for_run(alice, timeout=60)
    assert "refused" in heading
    assert "you queued it" in alice.locator("#output").inner_text()
    assert alice.locator("#state").inner_text() == "pending"
    bob = signed_in(browser, incident, "bob")
    bob.goto(f"{incident.server.url}/p/{incident.drain}")
    assert "alice@example.org" in bob.locator("#two-person").inner_text()
    bob.click("#approve")
    wait_for_run(bob, timeout=120)
    output = bob.locator("#output").inner_text()
    # past the rule: the drain meets its blast-radius guard (no cluster here), never the rule
    assert "second person" not in output and "one more approval" not in output, output
    assert "kubectl get nodes" in output, output  # the live guard asked the cluster
    alice.context.close()
    bob.context.close()


class _Attacker(http.server.BaseHTTPRequestHandler):
    html = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(self.html)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_page_from_another_origin_cannot_approve(browser: Any, incident: Incident) -> None:
    target = f"{incident.server.url}/p/{incident.hostile}"
    _Attacker.html = (
        f'<form method="post" action="{target}/approve"><input type="hidden" name="csrf" '
        'value="guessed"><button id="go" type="submit">win a prize</button></form>'
    ).encode()
    evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Attacker)
    thread = threading.Thread(target=evil.serve_forever, daemon=True)
    thread.start()
    try:
        page = signed_in(browser, incident, "alice")
        page.goto(f"http://127.0.0.1:{evil.server_address[1]}/")
        page.click("#go")
        page.wait_for_load_state()
        assert "refused" in page.locator("#message").inner_text()
        page.goto(f"{incident.server.url}/p/{incident.hostile}")
        assert page.locator("#state").inner_text() == "pending"
        assert page.locator("#run").count() == 0
        page.context.close()
    finally:
        evil.shutdown()
        evil.server_close()


def test_an_evidence_line_carrying_script_shows_as_text(browser: Any, incident: Incident) -> None:
    page = signed_in(browser, incident, "alice")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{incident.server.url}/p/{incident.hostile}")
    assert '<script>document.title="owned"</script>' in page.locator("#first-anomaly").inner_text()
    assert page.title() != "owned" and not dialogs
    assert page.locator("#verdict a").count() == 0  # the javascript: links are text
    assert page.locator("#verdict img").count() == 0
    page.context.close()


def test_the_phone_layout_fits_390_pixels(browser: Any, incident: Incident) -> None:
    page = signed_in(
        browser,
        incident,
        "alice",
        viewport={"width": 390, "height": 844},
        device_scale_factor=2,
        is_mobile=True,
    )
    for path, name in (
        ("/queue", "desk-phone-queue.png"),
        (f"/p/{incident.shm}", "desk-phone-proposal.png"),
    ):
        page.goto(incident.server.url + path)
        shot(page, name)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, (path, width)
    page.context.close()
