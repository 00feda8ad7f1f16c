"""The guided walk on a terminal: each stage, what it ran, what it found, where it goes and why.

rich renders colour on a TTY and plain text elsewhere (CI logs, pipes)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape

from runbook.conductor import StageRecord, StageStatus
from runbook.spec.models import Stage
from runbook.transports.base import CommandResult, Probe
from runbook.verdict import Verdict

_STATUS_STYLE = {
    StageStatus.OK: "green",
    StageStatus.ANOMALY: "bold red",
    StageStatus.NOT_COLLECTED: "yellow",
    StageStatus.ERROR: "magenta",
    StageStatus.SKIPPED: "dim",
    StageStatus.UNRECOGNIZED: "yellow",
}


def _short(text: str, width: int = 110) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


class GuidedConsole:
    def __init__(self, console: Console | None = None, *, verbose: bool = False) -> None:
        from runbook.output import quiet

        self.console = console or Console(highlight=False)
        self.verbose = verbose
        #: -q: the findings and the verdict only, not the walk that led to them
        self.quiet = quiet()

    def stage_started(self, stage: Stage, index: int, total: int, probes: Sequence[Probe]) -> None:
        if self.quiet:
            return
        self.console.print(
            f"\n[bold]━━ {index}/{total} {escape(stage.title)}[/] [dim]({stage.id})[/]"
        )

    def probe_done(self, stage: Stage, result: CommandResult) -> None:
        if self.quiet:
            return
        state = result.failure or f"exit {result.exited}"
        style = "dim" if result.failure is None else "yellow"
        self.console.print(
            f"  [cyan]$[/] {escape(_short(result.command, 72))} [dim]→ {escape(result.name)}[/]"
            f"  [{style}]{escape(state)}"
            f" {result.duration:.2f}s[/]"
        )
        if self.verbose and result.stdout:
            for line in result.stdout.splitlines()[:5]:
                self.console.print(f"    [dim]{escape(_short(line))}[/]")

    def stage_done(self, stage: Stage, record: StageRecord) -> None:
        if record.status is StageStatus.SKIPPED:
            if self.quiet:
                return
            # numbered by stage_started like every stage; the reason is the runbook's sentence
            why = record.reason.removeprefix("skipped: ")
            where = record.next or "end of runbook"
            self.console.print(f"  [dim]skipped[/] → {escape(where)} [dim]({escape(why)})[/]")
            return
        for finding in record.findings:
            cause = f" [dim]→ {finding.cause}[/]" if finding.cause else ""
            self.console.print(f"  [bold red]![/] {escape(finding.text)}{cause}")
        for error in record.errors:
            self.console.print(f"  [magenta]error:[/] {escape(_short(error))}")
        for out in record.ruled_out:
            self.console.print(f"  [green]✓[/] not {out['cause']}: {escape(out['because'])}")
        style = _STATUS_STYLE[record.status]
        where = record.next or "end of runbook"
        self.console.print(
            f"  [{style}]{record.status.value}[/] → {escape(where)}"
            f" [dim]({escape(record.reason)})[/]"
        )

    def run_done(self, verdict: Verdict) -> None:
        render_verdict(self.console, verdict)


def render_verdict(console: Console, verdict: Verdict) -> None:
    cause = verdict.root_cause
    style = "green" if cause == "healthy" else "bold red"
    console.print(
        f"\n[bold]Verdict for {escape(verdict.node)}:[/] [{style}]{cause}[/]"
        f" (confidence {verdict.confidence})"
    )
    if verdict.surfaced_as:
        console.print(f"  surfaced as: {escape(_short(verdict.surfaced_as))}")
    first = verdict.first_anomaly
    if first:
        when = f" at {first.time}" if first.time else ""
        console.print(
            f"  first anomaly: {escape(first.where)}{escape(when)}: "
            f"{escape(_short(first.text or ''))}"
        )
    if verdict.chain:
        console.print("  evidence chain:")
        for link in verdict.chain:
            console.print(f"    ↓ {escape('[' + link.stage + ']')} {escape(link.finding)}")
    if verdict.also_seen:
        console.print("  also seen (not part of the chain):")
        for link in verdict.also_seen:
            console.print(f"    · {escape('[' + link.stage + ']')} {escape(link.finding)}")
    for out in verdict.ruled_out:
        console.print(f"  ruled out {out.cause}: {escape(out.because)}")
    for stage in verdict.stages:
        # a stage whose parser or rule failed, or whose files were not understood, says so
        for error in stage.errors:
            console.print(f"  [magenta]stage {escape(stage.id)} error:[/] {escape(error)}")
        if stage.status == "unrecognized-format":
            console.print(
                f"  [yellow]stage {escape(stage.id)}:[/] its files were read but no line was "
                "understood (unrecognized format): nothing is ruled out from them"
            )
    for proposal in verdict.proposals:
        if proposal.missing:
            gate = "advice; missing: " + "; ".join(proposal.missing)
            console.print(f"  proposal [bold]{proposal.kind}[/] ({escape(gate)})")
            continue
        gate = "needs approval" if proposal.requires_approval else "no change"
        console.print(f"  proposal [bold]{proposal.kind}[/] ({gate}): {escape(proposal.summary)}")
