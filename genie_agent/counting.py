"""A data plane that reports counter deltas with every Go's result (``genie_agent.counters``).

``CountingDataPlane`` wraps the agent's data plane: when a job is prepared it chooses the job's
counter sources (its RDMA ports, the stack on TCP runs) and takes a snapshot; when a Go's result
is posted it takes another and puts the deltas into the ``Result`` (``counters``). The snapshot
after Go k is the one before Go k+1: snapshots are taken on the worker that posts, never on the
control thread, so a Go starts when it was asked to. A Go still running ``period_s`` after its
start is sampled by a thread of its own every ``period_s`` (at most ``MAX_SAMPLES`` samples: past
that every other one is dropped and the period doubles, so they span the whole Go). A source that
cannot be read is left out; reading counters never fails a run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

import msgspec

from genie.wire.counters import MAX_SAMPLES, SAMPLE_S
from genie.wire.messages import Go, Prepare, Result
from genie_agent.counters import CounterReader, Snapshot, deltas, with_samples
from genie_agent.plan import AgentPlan
from genie_agent.state import DataPlane, Event


class CountingDataPlane:
    """``inner`` with counter deltas added to each Go's Result (see the module docstring)."""

    def __init__(
        self,
        inner: DataPlane,
        agent_id: str,
        reader: CounterReader,
        log: Callable[[str], None],
        period_s: float = SAMPLE_S,
    ) -> None:
        self.inner = inner
        self.period_s = period_s  # a Go running longer is sampled this often (0: never)
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
        """Run the Go; its Result carries the deltas since the last snapshot (and, on a long
        Go, the samples taken while it ran)."""
        sampler = None
        if self._before is not None and self.period_s > 0:
            sampler = _Sampler(self._snap, start_local_ns, self.period_s)
            sampler.start()

        def posted(ev: Event) -> None:
            samples = sampler.finish() if sampler is not None else []
            if ev.kind == "result" and isinstance(ev.msg, Result):
                after = self._snap()
                was = self._before
                if was is not None and was[:2] == (ev.job, ev.epoch) and after:
                    sets = with_samples(deltas(was[2], after), was[2], samples)
                    if sets:
                        ev = replace(ev, msg=msgspec.structs.replace(ev.msg, counters=sets))
                self._before = (ev.job, ev.epoch, after)
            post(ev)

        try:
            self.inner.go(go, start_local_ns, posted)
        except BaseException:
            if sampler is not None:
                sampler.finish()
            raise

    def release(self) -> None:
        """Release the job (its snapshot goes with it)."""
        self._before = None
        self.inner.release()


class _Sampler:
    """Snapshots every ``period_s`` from ``start_ns`` (monotonic) on, until ``finish``."""

    def __init__(self, snap: Callable[[], Snapshot], start_ns: int, period_s: float) -> None:
        self.snap = snap
        self.start_ns = start_ns
        self.period_ns = int(period_s * 1e9)
        self.samples: list[tuple[int, Snapshot]] = []  # (ms since the start, snapshot)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="genie-counters", daemon=True)

    def start(self) -> None:
        """Start sampling (the first sample one period after the Go's start)."""
        self.thread.start()

    def _run(self) -> None:
        due = self.start_ns + self.period_ns
        while not self.stop.wait(max(0.0, (due - time.monotonic_ns()) / 1e9)):
            got = self.snap()
            now = time.monotonic_ns()
            self.samples.append(((now - self.start_ns) // 1_000_000, got))
            if len(self.samples) > MAX_SAMPLES:  # keep them spread over the whole Go
                self.samples = self.samples[1::2]
                self.period_ns *= 2
            due = max(due + self.period_ns, now)

    def finish(self) -> list[tuple[int, Snapshot]]:
        """Stop sampling; the samples taken (in order)."""
        self.stop.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout=5.0)
        return list(self.samples)
