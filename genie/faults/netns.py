"""Applying a fault plan (``genie.faults.schedule``) while a run goes on, and undoing it.

``FaultScheduler`` is a context manager around the run. ``start(start_at_ns)`` (the common
start of the first measured run's Go, on the controller clock; later calls are ignored) starts
one daemon thread that
sleeps until each step is due and runs its ``tc``/``ip`` commands (each bounded by
``STEP_TIMEOUT_S``), recording when each was applied, as actually applied. It never touches
the controller, so the control loop is never blocked. On leaving, whatever happened (error,
Ctrl-C), the thread is stopped and every touched link is put back as the testbed file says:
each end's token bucket at its declared rate, both ends up, and on routed fabrics the routes a
downed device lost. ``records()`` is what the run stores and reports.
"""

from __future__ import annotations

import logging
import shlex
import threading
from collections.abc import Callable, Sequence
from typing import Any

from genie.faults.schedule import FaultPlan

log = logging.getLogger(__name__)

STEP_TIMEOUT_S = 5.0


def _default_runner(argv: Sequence[str], stdin: str | None) -> Any:
    from genie.testbed.netns import run_command

    return run_command(argv, stdin, timeout=STEP_TIMEOUT_S)


class FaultScheduler:
    """Run a ``FaultPlan``'s steps timed from a common start; restore on exit (see module)."""

    def __init__(
        self,
        plan: FaultPlan,
        now: Callable[[], int],
        runner: Callable[[Sequence[str], str | None], Any] | None = None,
    ) -> None:
        self.plan = plan
        self.now = now
        self.run = runner or _default_runner
        self.start_at_ns: int | None = None
        self.applied: list[dict] = []
        self.restored: dict = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> FaultScheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, start_at_ns: int) -> None:
        """Begin the schedule at ``start_at_ns`` (controller clock); only the first call counts."""
        if self.start_at_ns is not None or self._stop.is_set():
            return
        self.start_at_ns = int(start_at_ns)
        self._thread = threading.Thread(target=self._loop, name="genie-faults", daemon=True)
        self._thread.start()

    def _exec(self, commands: Sequence[Sequence[str]]) -> str:
        """Run commands in order; the first failure's one-line reason ('' if all went well)."""
        for argv in commands:
            try:
                res = self.run(argv, None)
            except Exception as exc:  # a runner must not kill the scheduler
                return f"`{shlex.join(argv)}`: {type(exc).__name__}: {exc}"
            if res.returncode != 0:
                err = (res.stderr or res.stdout or "").strip().replace("\n", " | ")
                return f"`{shlex.join(argv)}` exit {res.returncode}: {err or 'no output'}"
        return ""

    def _loop(self) -> None:
        assert self.start_at_ns is not None
        for step in self.plan.steps:
            due = self.start_at_ns + round(step.at_s * 1e9)
            if self._stop.wait(max(0.0, (due - self.now()) / 1e9)):
                return
            t0 = self.now()
            err = self._exec(step.commands)
            rec = {
                "event": step.event,
                "label": step.label,
                "planned_s": step.at_s,
                "applied_s": (t0 - self.start_at_ns) / 1e9,
                "took_s": (self.now() - t0) / 1e9,
                "restore": step.restore,
                "ok": not err,
                "error": err,
            }
            if err:
                log.warning("fault %s: %s", step.label, err)
            with self._lock:
                self.applied.append(rec)

    def close(self) -> None:
        """Stop the schedule and restore every touched link to the testbed file's state."""
        if self.restored:
            return
        self._stop.set()
        if self._thread is not None:
            longest = max((len(s.commands) for s in self.plan.steps), default=1)
            self._thread.join(STEP_TIMEOUT_S * longest + 1.0)
        t0 = self.now()
        errors = [e for e in (self._exec([c]) for c in self.plan.restore) if e]
        for ns, text in self.plan.restore_routes.items():
            res = self.run(["ip", "-n", ns, "-batch", "-"], text)
            if res.returncode != 0:
                errors.append(f"routes of {ns}: {(res.stderr or '').strip()[:200]}")
        at = None if self.start_at_ns is None else (t0 - self.start_at_ns) / 1e9
        self.restored = {"at_s": at, "ok": not errors, "errors": errors}
        for e in errors:
            log.error("restoring links after faults: %s", e)

    def records(self) -> dict:
        """What was asked, applied (as applied) and restored, for the store and the report."""
        with self._lock:
            applied = list(self.applied)
        done = {(a["event"], a["restore"]) for a in applied}
        return {
            "schedule": self.plan.describe(),
            "origin_ns": self.start_at_ns,  # the time origin, controller clock ns (None: unstarted)
            "applied": applied,
            "not_applied": [
                {"event": s.event, "label": s.label, "planned_s": s.at_s}
                for s in self.plan.steps
                if (s.event, s.restore) not in done
            ],
            "restored": self.restored,
        }
