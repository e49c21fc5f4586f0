"""A data plane that reports counter deltas with every Go's result (``genie_agent.counters``).

``CountingDataPlane`` wraps the agent's data plane: when a job is prepared it chooses the job's
counter sources (its RDMA ports, the stack on TCP runs) and takes a snapshot; when a Go's result
is posted it takes another and puts the deltas into the ``Result`` (``counters``). The snapshot
after Go k is the one before Go k+1: snapshots are taken on the worker that posts, never on the
control thread, so a Go starts when it was asked to. A source that cannot be read is left out;
reading counters never fails a run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import msgspec

from genie.wire.messages import Go, Prepare, Result
from genie_agent.counters import CounterReader, Snapshot, deltas
from genie_agent.plan import AgentPlan
from genie_agent.state import DataPlane, Event


class CountingDataPlane:
    """``inner`` with counter deltas added to each Go's Result (see the module docstring)."""

    def __init__(
        self, inner: DataPlane, agent_id: str, reader: CounterReader, log: Callable[[str], None]
    ) -> None:
        self.inner = inner
        self.agent_id = agent_id
        self.reader = reader
        self.log = log
        self._before: tuple[str, int, Snapshot] | None = None  # (job, epoch, snapshot)
        self._failed = False

    def endpoint(self) -> tuple[str, int]:
        """The inner plane's data listener."""
        return self.inner.endpoint()

    def _snap(self) -> Snapshot:
        try:
            return self.reader.snapshot()
        except Exception as exc:  # counters never fail a run
            if not self._failed:
                self.log(f"counters: cannot read them ({type(exc).__name__}: {exc}); left out")
                self._failed = True
            return {}

    def prepare(self, plan: AgentPlan, prep: Prepare, post: Callable[[Event], None]) -> None:
        """Prepare the job; once prepared, its counters' first snapshot."""
        opts = prep.options
        named = []
        if opts.transport == "rdma":
            named = [d for d in (opts.rdma.devices.get(self.agent_id, ""), opts.rdma.device) if d]
        self._before = None
        try:
            self.reader.configure(opts.transport, named)
        except Exception as exc:
            self.log(f"counters: cannot find their sources ({type(exc).__name__}: {exc})")

        def posted(ev: Event) -> None:
            if ev.kind == "prepared":
                self._before = (ev.job, ev.epoch, self._snap())
            post(ev)

        self.inner.prepare(plan, prep, posted)

    def go(self, go: Go, start_local_ns: int, post: Callable[[Event], None]) -> None:
        """Run the Go; its Result carries the deltas since the last snapshot."""

        def posted(ev: Event) -> None:
            if ev.kind == "result" and isinstance(ev.msg, Result):
                after = self._snap()
                was = self._before
                if was is not None and was[:2] == (ev.job, ev.epoch) and after:
                    sets = deltas(was[2], after)
                    if sets:
                        ev = replace(ev, msg=msgspec.structs.replace(ev.msg, counters=sets))
                self._before = (ev.job, ev.epoch, after)
            post(ev)

        self.inner.go(go, start_local_ns, posted)

    def release(self) -> None:
        """Release the job (its snapshot goes with it)."""
        self._before = None
        self.inner.release()
