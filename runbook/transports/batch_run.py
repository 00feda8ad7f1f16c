"""The bookkeeping of one batch as it runs (transports/batch.py has its script): which probe
runs, when it started, its result once its end marks came on both streams, the hand-back of
the probes after one that takes long. The SSH transport (a channel) and the kubectl one (an
exec) read their streams and stop a batch in their own ways; what they do with the pieces
is this.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runbook.transports import batch
from runbook.transports.base import MAX_CAPTURE_BYTES, CommandResult, Deliver, Probe, Spill, decode
from runbook.transports.marks import Gate, start_mark, wrap_for_pgid

#: a probe of a batch that has run this long hands the probes queued after it to another
#: channel or exec: a hung `nvidia-smi` must not hold back the rest of the walk's evidence
BATCH_PATIENCE_S = 0.25


@dataclass(frozen=True)
class Launch:
    """One batch as it is sent: its probes, its clock and its tokens."""

    #: the first probes given that one script holds, up to one with another frame token
    probes: Sequence[Probe]
    start: float
    #: when the caller's time is up (`within` of run_batch), or infinity
    limit: float
    #: the cancel's, seen in the command line
    token: str
    #: the start marks', sent on the input
    begin: str
    #: the end marks', sent on the input
    secret: str
    #: one frame token a batch (the walk's): a probe with another starts the next batch
    frame: str

    @property
    def mark(self) -> bytes:
        return batch.mark_for(self.secret)

    def command(self) -> bytes:
        """The script, run in a process group of its own that it says (marks.wrap_for_pgid)."""
        script = batch.script(
            [p.command for p in self.probes], [bool(p.secret) for p in self.probes]
        )
        return wrap_for_pgid(script, self.token).encode("utf-8", "surrogateescape")

    def input(self) -> bytes:
        """What the script reads first on its input: the tokens not on its command line."""
        return f"{self.begin}\n{self.secret}\n{self.frame}\n".encode("ascii")


def launch(probes: Sequence[Probe], within: float | None) -> Launch:
    """The batch that starts with `probes[0]` (at least it), its tokens made now."""
    start = time.monotonic()
    frame = next((p.secret for p in probes if p.secret), "")
    count = batch.fits([p.command for p in probes], [bool(p.secret) for p in probes])
    count = next((i for i, p in enumerate(probes[:count]) if p.secret not in ("", frame)), count)
    return Launch(
        probes=probes[:count],
        start=start,
        limit=math.inf if within is None else start + within,
        token=secrets.token_hex(8),
        begin=secrets.token_hex(16),
        secret=secrets.token_hex(16),
        frame=frame,
    )


class BatchRun:
    """One batch's probes as their outputs arrive. A transport feeds `_out` and `_err` (the
    gates in front of the splitters), calls `_advance` as time goes, and says how the batch's
    shell is asked to stop (`_ask_to_stop`)."""

    #: whether the probes after one cut short (timed out, or its stream ended) are handed
    #: back with a request to the shell to stop before the next one
    ask_to_stop_after_cut: bool = True

    def __init__(self, probes: Sequence[Probe], deliver: Deliver, mark: bytes, begin: str) -> None:
        self.probes = probes
        self.deliver = deliver
        self.out = batch.Splitter(mark, with_status=True, limit=MAX_CAPTURE_BYTES)
        self.err = batch.Splitter(mark, with_status=False, limit=MAX_CAPTURE_BYTES)
        #: both streams as they come, what came before the start marks left out
        self._out = Gate(self.out, start_mark(begin))
        self._err = Gate(self.err, start_mark(begin), with_pgid=True)
        #: the first probe not yet delivered, and when it started (the one before it ended)
        self.current = 0
        self.began = 0.0
        #: where the probes handed back start, once they have been
        self.handed_back: int | None = None
        #: when the script was seen running on the node (its start mark came)
        self.running_since: float | None = None

    @property
    def _end(self) -> int:
        return len(self.probes) if self.handed_back is None else self.handed_back

    def _advance(self, now: float) -> bool:
        """Note the script running once it said its process group, deliver the probes whose
        end marks came; whether probes of the batch are still to come."""
        if self.running_since is None and self._err.pgid is not None:
            self.running_since = now
        self._deliver_finished(now)
        return self.current < self._end

    def _deadline(self, limit: float) -> float:
        """When the running probe times out (`limit`: the walk's own end)."""
        return min(self.began + self.probes[self.current].timeout, limit)

    def _patience_ends(self) -> float | None:
        """When the running probe has kept those after it waiting long enough: counted once
        the script runs on the node (a slow login holds back every channel alike), and never
        for the last probe the batch still has."""
        if self.running_since is None or self.current + 1 >= self._end:
            return None
        return max(self.began, self.running_since) + BATCH_PATIENCE_S

    def _deliver_finished(self, now: float) -> None:
        out, err = self.out.pieces, self.err.pieces
        while out and err and self.current < self._end:
            stdout, out_cut, status = out.popleft()
            stderr, err_cut, _ = err.popleft()
            self._settle_current(now, stdout, stderr, out_cut or err_cut, exited=status)

    def _settle_current(
        self, now: float, stdout: bytes, stderr: bytes, truncated: bool, **outcome: Any
    ) -> None:
        """Deliver the running probe's result (`outcome`: its exit, timeout or error) and move
        on to the next, which started when this one ended."""
        probe = self.probes[self.current]
        self.deliver(
            self.current,
            CommandResult(
                name=probe.name,
                command=probe.command,
                stdout=decode(stdout),
                stderr=decode(stderr),
                duration=now - self.began,
                truncated=truncated,
                **outcome,
            ),
        )
        self.current += 1
        self.began = now

    def _hand_back(self, index: int, spill: Spill, *, ask_to_stop: bool = True) -> None:
        """The probes from `index` on go back to the caller; the shell is asked to stop before
        the next one (once it said its process group)."""
        self.handed_back = index
        spill(index)
        if ask_to_stop and self._err.pgid is not None:
            self._ask_to_stop(self._err.pgid)

    def _ask_to_stop(self, pgid: int) -> None:
        raise NotImplementedError

    def _cut_short(self, now: float, spill: Spill, *, timed_out: bool, error: str | None) -> None:
        """The running probe ends with what it wrote so far (timed out, or with `error`); the
        probes after it are handed back."""
        if self.current >= self._end:
            return
        stdout, out_cut = self.out.partial()
        stderr, err_cut = self.err.partial()
        end = self._end
        self._settle_current(
            now, stdout, stderr, out_cut or err_cut, timed_out=timed_out, error=error
        )
        if self.current < end:
            self._hand_back(self.current, spill, ask_to_stop=self.ask_to_stop_after_cut)
