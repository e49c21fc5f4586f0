"""Applying a lab fault plan (``genie.faults.lab_plan``) over the deploy layer's SSH.

The host logs each event's times under ``<remote root>/faults/<token>-<event>.log``.

``LabFaultScheduler`` has ``FaultScheduler``'s interface (context manager, ``start``,
``close``, ``records``). Entering it connects to every touched host (``genie.deploy.ssh``),
measures the round trip and reads the root qdisc of each interface a rate fault touches.
``start(start_at_ns)`` (the run's common start, controller clock; later calls ignored) sends,
from a daemon thread and right away, every event to its host as one detached command that
sleeps until due, applies, and restores on the host itself: the delay is the time left on the
controller clock less the measured round trip of a command (opening the channel and
starting the shell come before it runs), so the host's sleep starts as the command lands.
``close()`` runs the end-of-run script on each host (cancel what is still pending, restore,
report): applied times come back from the host's log (host-clock differences from
the landing, placed on the controller clock at the estimated landing); a host that cannot be
reached then leaves them ``unconfirmed`` (its faults still restore themselves).
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import threading
from collections.abc import Callable
from typing import Any

from genie.deploy.ssh import shell_path
from genie.errors import GenieError
from genie.faults.lab_plan import (
    SUDO,
    TOKEN,
    LabPlan,
    apply_restore,
    end_script,
    event_script,
    qdisc_query,
    restore_qdisc,
)

log = logging.getLogger(__name__)

STEP_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 5.0


def log_dir(root: str) -> str:
    """The shell-quoted folder of the hosts' fault logs under the deploy's remote root."""
    return shell_path(root.rstrip("/") + "/faults")


def log_path(root: str, token: str, event: int) -> str:
    """Where a host logs event ``event``'s times."""
    if not TOKEN.fullmatch(token):
        raise GenieError(f"bad fault token {token!r}")
    return f"{log_dir(root)}/{token}-{int(event)}.log"


def _remote(access: Any) -> Any:
    from genie.deploy.ssh import Remote

    return Remote(access, connect_timeout=CONNECT_TIMEOUT_S).open()


class LabFaultScheduler:
    """Send a ``LabPlan``'s events ahead of time, each with its own restore (see module)."""

    def __init__(
        self,
        plan: LabPlan,
        now: Callable[[], int],
        access: dict[str, Any],
        connect: Callable[[Any], Any] = _remote,
    ) -> None:
        self.plan = plan
        self.now = now
        self.access = access
        self.connect = connect
        self.token = secrets.token_hex(8)
        self.remotes: dict[str, Any] = {}
        self.landing_ns: dict[str, int] = {}
        self.qdisc_back: dict[tuple[str, str], list[str]] = {}
        self.sent: dict[int, dict] = {}  # event -> landed_ns (controller), pid, error
        self.start_at_ns: int | None = None
        self.applied: list[dict] = []
        self.restored: dict = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def __enter__(self) -> LabFaultScheduler:
        try:
            self.arm()
        except BaseException:
            self._close_remotes()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def arm(self) -> None:
        """Connect to every touched host, time a round trip, read the qdiscs to put back."""
        for host in self.plan.hosts():
            if host not in self.access:
                raise GenieError(f"lab host {host}: no SSH access in the testbed's [deploy]")
            r = self.remotes[host] = self.connect(self.access[host])
            trips = []
            for _ in range(3):
                t0 = self.now()
                r.run("true", f"{host}: round trip", timeout=STEP_TIMEOUT_S)
                trips.append(self.now() - t0)
            # opening the channel and starting the shell come before a command runs; its
            # reply is one packet: a command lands about one whole round trip after it is sent
            self.landing_ns[host] = sorted(trips)[1]
        for f in self.plan.faults:
            if f.action == "rate" and (f.host, f.iface) not in self.qdisc_back:
                res = self.remotes[f.host].run(
                    f"{SUDO}; $S {qdisc_query(f.iface)}",
                    f"{f.host}: reading {f.iface}'s qdisc",
                    timeout=STEP_TIMEOUT_S,
                )
                self.qdisc_back[(f.host, f.iface)] = restore_qdisc(f.iface, res.stdout)

    def start(self, start_at_ns: int) -> None:
        """Send every event now, timed from ``start_at_ns``; only the first call counts."""
        if self.start_at_ns is not None or self._stop.is_set():
            return
        self.start_at_ns = int(start_at_ns)
        self._thread = threading.Thread(target=self._send_all, name="genie-lab-faults", daemon=True)
        self._thread.start()

    def _send_all(self) -> None:
        assert self.start_at_ns is not None
        for f in self.plan.faults:
            if self._stop.is_set():
                return
            root = self.access[f.host].remote_root
            undo = apply_restore(f, self.qdisc_back.get((f.host, f.iface)))
            t0 = self.now()
            due = self.start_at_ns + round(f.at_s * 1e9)
            delay = (due - t0 - self.landing_ns[f.host]) / 1e9
            script = event_script(f, delay, log_path(root, self.token, f.event), self.token, undo)
            rec: dict[str, Any] = {"landed_ns": t0 + self.landing_ns[f.host], "pid": None}
            try:
                res = self.remotes[f.host].run(
                    script, f"{f.host}: sending '{f.label}'", STEP_TIMEOUT_S
                )
                rec["pid"] = int(res.stdout.split()[-1])
            except (GenieError, ValueError, IndexError) as exc:
                rec["error"] = str(exc)
                log.warning("fault %s not sent: %s", f.label, exc)
            with self._lock:
                self.sent[f.event] = rec

    def close(self) -> None:
        """Cancel what is pending, restore every touched interface, read back what happened."""
        if self.restored:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(STEP_TIMEOUT_S * len(self.plan.faults) + 1.0)
        t0 = self.now()
        errors: list[str] = []
        logs: dict[int, list[str]] = {}
        for host in self.plan.hosts():
            try:
                out = self._end(host)
            except GenieError as exc:
                errors.append(
                    f"{host}: {exc} (its faults restore themselves on the host; applied times "
                    "unconfirmed)"
                )
                continue
            for line in out.splitlines():
                word, _, rest = line.partition(" ")
                if word == "log":
                    name, _, text = rest.partition(" ")
                    logs[int(name.split(".")[0])] = text.split()
                elif word == "state":
                    errors.extend(self._check_state(host, rest))
        self._close_remotes()
        self._record(logs)
        at = None if self.start_at_ns is None else (t0 - self.start_at_ns) / 1e9
        self.restored = {"at_s": at, "ok": not errors, "errors": errors}
        for e in errors:
            log.error("restoring lab links after faults: %s", e)

    def _end(self, host: str) -> str:
        mine = [f for f in self.plan.faults if f.host == host]
        pids = [self.sent.get(f.event, {}).get("pid") for f in mine]
        restores = []
        ifaces = list(dict.fromkeys(f.iface for f in mine))
        for f in mine:
            restores.append(apply_restore(f, self.qdisc_back.get((host, f.iface)))[1])
        logs = log_dir(self.access[host].remote_root)
        script = end_script(self.token, [p for p in pids if p], logs, restores, ifaces)
        try:
            return self.remotes[host].run(script, f"{host}: end of faults", STEP_TIMEOUT_S).stdout
        except GenieError:  # the session may have been cut: one fresh connection
            self.remotes[host] = self.connect(self.access[host])
            return self.remotes[host].run(script, f"{host}: end of faults", STEP_TIMEOUT_S).stdout

    def _check_state(self, host: str, rest: str) -> list[str]:
        """The interface is up and its root qdisc is the one read before the run."""
        iface, _, text = rest.partition(" ")
        dec = json.JSONDecoder()
        try:
            link, end = dec.raw_decode(text.strip())
            qdisc, _ = dec.raw_decode(text.strip()[end:].strip())
        except ValueError:
            return [f"{host}-{iface}: unreadable state after restore"]
        out = []
        if "UP" not in (link[0].get("flags") or []):
            out.append(f"{host}-{iface}: still down after restore")
        back = self.qdisc_back.get((host, iface))
        root = [q for q in qdisc if q.get("root")]
        kind = root[0].get("kind") if root else None
        if back and (kind == "tbf") != (back[2] == "replace"):  # del: the default is back
            out.append(f"{host}-{iface}: root qdisc {kind} after restore")
        return out

    def _record(self, logs: dict[int, list[str]]) -> None:
        for f in self.plan.faults:
            sent = self.sent.get(f.event)
            words = logs.get(f.event)
            stamps: dict[str, float] = {}
            for w, v in zip(words or [], (words or [])[1:], strict=False):
                if w in ("landed", "applied", "failed", "restored", "unrestored"):
                    with contextlib.suppress(ValueError):
                        stamps[w] = float(v)
            for restore, ok_key, bad_key, planned in (
                (False, "applied", "failed", f.at_s),
                (True, "restored", "unrestored", f.at_s + f.for_s),
            ):
                label = f.label if not restore else f"{f.label} restored (for {f.for_s:g} s ended)"
                rec: dict[str, Any] = {
                    "event": f.event,
                    "label": label,
                    "planned_s": planned,
                    "applied_s": None,
                    "took_s": None,
                    "restore": restore,
                }
                if sent is None or sent.get("error"):
                    rec.update(ok=False, error=(sent or {}).get("error", "not sent"))
                elif words is None:
                    rec.update(ok=False, error="unconfirmed: the host's log could not be read")
                elif ok_key in stamps and "landed" in stamps and self.start_at_ns is not None:
                    at = sent["landed_ns"] + (stamps[ok_key] - stamps["landed"]) * 1e9
                    rec.update(applied_s=(at - self.start_at_ns) / 1e9, ok=True, error="")
                elif bad_key in stamps:
                    rec.update(ok=False, error=f"the host's command failed ({bad_key})")
                else:
                    continue  # cancelled before it was due: reported as not applied
                self.applied.append(rec)

    def _close_remotes(self) -> None:
        for r in self.remotes.values():
            r.close()

    def records(self) -> dict:
        """What was asked, applied (as the hosts logged it) and restored."""
        done = {(a["event"], a["restore"]) for a in self.applied}
        not_applied = []
        for f in self.plan.faults:
            for restore, planned in ((False, f.at_s), (True, f.at_s + f.for_s)):
                if (f.event, restore) not in done:
                    not_applied.append({"event": f.event, "label": f.label, "planned_s": planned})
        return {
            "schedule": self.plan.describe(),
            "origin_ns": self.start_at_ns,  # the time origin, controller clock ns (None: unstarted)
            "applied": list(self.applied),
            "not_applied": not_applied,
            "restored": self.restored,
        }
