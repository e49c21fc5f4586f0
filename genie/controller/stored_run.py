"""One live run, from its start in the run store to its end: the lifecycle every live command uses.

``StoredRun`` (a context manager) records the run in the store (status ``running``), opens a
controller on the testbed, claims the agents, syncs clocks and records every agent's host facts
and clock offset with the run; the command then does its work with ``.ctl`` and stores what it
measured under ``.run_id``. On leaving, the run is finished ``ok``, ``interrupted`` (Ctrl-C) or
``failed`` with the error's one-line reason, whatever went wrong, and the controller, its
transport and the store are closed. ``genie bench`` and ``genie emulate`` both go through it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import msgspec

from genie.controller.local import open_controller
from genie.controller.session import Controller, Timeouts
from genie.errors import GenieError
from genie.store import RunStore
from genie.wire.clock import ClockEstimate
from genie.wire.messages import HelloReply

log = logging.getLogger(__name__)


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
            self.ctl = open_controller(self.testbed, timeouts=self.timeouts)
            self.hellos = self.ctl.connect()
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

    def add_instances(self, spec: Any, instances: Any, streams: int = 1) -> None:
        """Store one Go's instances of ``spec`` under this run (nothing without a store)."""
        if self.store and self.run_id:
            self.store.add_instances(self.run_id, spec, instances, streams=streams)

    def _end(self, exc: BaseException | None) -> None:
        """Finish the run with the status ``exc`` implies; close controller and store."""
        try:
            if self.store and self.run_id:
                status, reason = outcome(exc)
                self.store.finish_run(self.run_id, status, reason)
                log.info("run %s finished: %s %s", self.run_id, status, reason)
        finally:
            if self.ctl is not None:
                self.ctl.close()
                self.ctl.t.close()
                self.ctl = None
            if self.store is not None:
                self.store.close()
                self.store = None


def outcome(exc: BaseException | None) -> tuple[str, str]:
    """(status, reason) a run ends with after ``exc`` (None: it went well)."""
    if exc is None:
        return "ok", ""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", "interrupted by user"
    if isinstance(exc, GenieError):
        return "failed", str(exc)
    return "failed", f"{type(exc).__name__}: {exc}"
