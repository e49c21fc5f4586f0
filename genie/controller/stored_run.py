"""One live run, from its start in the run store to its end: the lifecycle every live command uses.

``StoredRun`` (a context manager) records the run in the store (status ``running``), opens a
controller on the testbed, claims the agents, syncs clocks and records every agent's host facts
and clock offset with the run; the command then does its work with ``.ctl`` and stores what it
measured under ``.run_id``. On leaving, the run is finished ``ok``, ``interrupted`` (Ctrl-C,
SIGTERM: the CLI turns it into an interrupt) or ``failed`` with the error's one-line reason,
whatever went wrong, and the controller, its transport and the store are closed. ``genie
bench`` and ``genie emulate`` both go through it. The NIC and stack counters the agents report
with each Go are stored as they come (``RunStore.add_counters``).

The controller beats from a keepalive thread while the command works between phases (plans,
prices, stores), so agents never drop a job because the run store made it wait. Recording the
end waits for a store lock up to ``FINISH_WAIT_S`` (the run must not stay ``running``); agents
that never answer are named with what to run to start them. A run ends by reading itself back
from the store file: one deleted or replaced meanwhile is "run NOT stored" with rc != 0, and
what was measured goes to a recovery file beside it (``RunStore.verify_run``).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from genie.controller.faults import AGENT_DIED, fault
from genie.controller.local import local_deaths, open_controller, start_hint
from genie.controller.session import Controller, Timeouts
from genie.errors import AgentUnreachable, GenieError, StoreBusy, StoreError
from genie.store import RunStore
from genie.wire.clock import ClockEstimate
from genie.wire.messages import HelloReply

log = logging.getLogger(__name__)

FINISH_WAIT_S = 120.0  # recording a run's end waits this long for another process's store lock


class StoredRun:
    """A live run recorded in the store (see the module docstring)."""

    def __init__(
        self,
        testbed: Any,
        testbed_path: str | Path,
        command: str,
        *,
        store: str | Path | None,
        meta: dict[str, Any] | None = None,
        workload_hash: str = "",
        timeouts: Timeouts | None = None,
        sync_rounds: int = 16,
    ) -> None:
        self.testbed = testbed
        self.testbed_path = Path(testbed_path)
        self.command = command
        self.store_path = store
        self.meta = dict(meta or {})
        self.workload_hash = workload_hash
        self.timeouts = timeouts
        self.sync_rounds = sync_rounds
        self.store: RunStore | None = None
        self.run_id: str | None = None
        self.ctl: Controller | None = None
        self.hellos: dict[str, HelloReply] = {}
        self.offsets: dict[str, ClockEstimate] = {}
        self.stored = 0  # instances written to the store
        self.goes = 0  # Goes whose counters were written to the store

    def __enter__(self) -> StoredRun:
        if self.store_path:
            self.store = RunStore(self.store_path)
            self.run_id = self.store.start_run(
                self.command,
                testbed_name=self.testbed.name,
                testbed_text=self.testbed_path.read_text(errors="replace"),
                workload_hash=self.workload_hash,
                meta=self.meta,
            )
            log.info("run %s started in %s", self.run_id, self.store_path)
        try:
            source = str(self.testbed_path)
            dead = local_deaths(self.testbed, source)  # a local cluster's agent died before
            if dead:
                raise fault(AGENT_DIED, "; ".join(dead.values()), *dead)
            self.ctl = open_controller(self.testbed, timeouts=self.timeouts, source=source)
            try:
                self.hellos = self.ctl.connect()
            except AgentUnreachable as exc:
                raise AgentUnreachable(f"{exc}; {start_hint(self.testbed, source)}") from None
            self.ctl.start_keepalive()  # (open_controller's connect did; explicit here)
            if self.store and self.run_id:
                self.ctl.on_counters = self._add_counters
            self.offsets = self.ctl.sync_clocks(self.sync_rounds)
            if self.store and self.run_id:
                self.store.update_run(
                    self.run_id,
                    host_facts={a: msgspec.to_builtins(h.facts) for a, h in self.hellos.items()},
                    clock_offsets={a: msgspec.to_builtins(e) for a, e in self.offsets.items()},
                )
        except BaseException as exc:
            self._end(exc)
            raise
        return self

    def __exit__(self, exc_type, exc: BaseException | None, tb) -> None:
        self._end(exc)

    def update_meta(self, **extra: Any) -> None:
        """Add ``extra`` to the run's stored meta (nothing without a store)."""
        self.meta.update(extra)
        if self.store and self.run_id:
            self.store.update_run(self.run_id, meta=self.meta)

    def add_instances(self, spec: Any, instances: Any, streams: int = 1) -> None:
        """Store one Go's instances of ``spec`` under this run (nothing without a store)."""
        if self.store and self.run_id:
            instances = list(instances)
            self.store.add_instances(self.run_id, spec, instances, streams=streams)
            self.stored += len(instances)

    def _add_counters(self, spec: Any, iterations: int, sets: dict[str, list[Any]]) -> None:
        """Store one Go's NIC and stack counter deltas (the controller's ``on_counters``)."""
        if self.store and self.run_id:
            self.store.add_counters(self.run_id, self.goes, spec, iterations, sets)
            self.goes += 1

    def _end(self, exc: BaseException | None) -> None:
        """Finish the run with the status ``exc`` implies (its wire's conditions and TCP
        retransmissions recorded with it); close controller and store."""
        try:
            if self.ctl is not None and (self.ctl.conditions or self.ctl.retransmits):
                with contextlib.suppress(GenieError):
                    self.update_meta(
                        conditions={
                            a: msgspec.to_builtins(c) for a, c in self.ctl.conditions.items()
                        },
                        retransmits=dict(self.ctl.retransmits),
                    )
            if self.store and self.run_id:
                status, reason = outcome(exc)
                self._finish(status, reason)
                log.info("run %s finished: %s %s", self.run_id, status, reason)
                self._verify(exc)
        finally:
            if self.ctl is not None:
                self.ctl.close()
                self.ctl.t.close()
                self.ctl = None
            if self.store is not None:
                self.store.close()
                self.store = None

    def _finish(self, status: str, reason: str) -> None:
        """Record the run's end, waiting (bounded) for a store lock held by another process."""
        assert self.store is not None and self.run_id is not None
        deadline = time.monotonic() + FINISH_WAIT_S
        while True:
            try:
                self.store.finish_run(self.run_id, status, reason)
                return
            except StoreBusy as busy:
                if time.monotonic() >= deadline:
                    print(
                        f"genie: warning: run {self.run_id} stays 'running' in "
                        f"{self.store.path}: {busy}",
                        file=sys.stderr,
                    )
                    return
                log.warning("run %s: %s; still trying to record its end", self.run_id, busy)

    def _verify(self, exc: BaseException | None) -> None:
        """Read the run back from the store file: "run NOT stored" (StoreError) if it is not
        there whole; after a failure, that is a warning beside the run's own error."""
        assert self.store is not None and self.run_id is not None
        try:
            self.store.verify_run(self.run_id, self.stored)
        except StoreError as lost:
            if exc is None:
                raise
            print(f"genie: warning: {lost}", file=sys.stderr)


def outcome(exc: BaseException | None) -> tuple[str, str]:
    """(status, reason) a run ends with after ``exc`` (None: it went well)."""
    if exc is None:
        return "ok", ""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", str(exc) or "interrupted by user"
    if isinstance(exc, GenieError):
        return "failed", str(exc)
    return "failed", f"{type(exc).__name__}: {exc}"
