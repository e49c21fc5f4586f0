"""Link faults on lab hosts, planned purely: which host interfaces a schedule touches, and the
shell text sent over SSH that applies each fault and its own restore on the host itself.

Setting a lab link down can cut the SSH session that would set it up again, so each event goes
to its host ahead of time as ONE detached command (``setsid sh -c '...'``): sleep until due,
apply, sleep the ``for`` window, restore, logging host-clock times to a file genie reads back
after the run. A lost session never leaves a link down: every ``down`` and ``rate`` on a lab
host needs ``for DURATION`` (``up`` is refused: each fault brings its own restore). The run's end
cancels faults still pending and restores every touched interface again (``end_script``).

Interfaces come from the testbed file (a host's ``nic`` or a NIC's ``device``), but the file
is input: every name must match ``IFACE`` and is quoted with ``shlex``. A rate fault puts back
the root qdisc read before the run (``restore_qdisc``): the kernel default, or a ``tbf``; any
other root qdisc is refused rather than guessed. Commands run as root, or through ``sudo -n``
where the SSH user is not root.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass

from genie.faults.schedule import Event, FaultError, check_allowed
from genie.testbed.model import Testbed

IFACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}")  # Linux: at most 15 bytes (IFNAMSIZ)
TOKEN = re.compile(r"[a-z0-9]{8,32}")
DEFAULT_QDISCS = ("noqueue", "mq", "pfifo_fast", "fq_codel", "fq", "pfifo", "cake", "sfq")
SUDO = 'S=; [ "$(id -u)" = 0 ] || S="sudo -n"'  # root, or passwordless sudo for ip/tc


@dataclass(frozen=True)
class LabFault:
    """One event on one lab host's interface (every one carries its restore window)."""

    event: int
    host: str
    iface: str
    action: str  # rate | down
    at_s: float
    for_s: float
    rate: float | None = None  # bytes/s

    @property
    def label(self) -> str:
        """What a person reads."""
        what = f"rate {self.rate * 8 / 1e6:g} Mbit/s" if self.rate is not None else "down"
        return f"{self.host}-{self.iface} {what}"


@dataclass
class LabPlan:
    """A schedule resolved on a lab testbed: one ``LabFault`` per event."""

    events: list[Event]
    faults: list[LabFault]

    def describe(self) -> list[str]:
        """One line per event, as parsed."""
        return [e.text for e in self.events]

    def down_s(self) -> float:
        """Seconds links are down by the schedule."""
        return sum(f.for_s for f in self.faults if f.action == "down")

    def hosts(self) -> list[str]:
        """The hosts the schedule touches, in order of first use."""
        return list(dict.fromkeys(f.host for f in self.faults))


def check_iface(name: str) -> str:
    """``name`` if it is a plain interface name, else a FaultError (no shell from a file)."""
    if not IFACE.fullmatch(name):
        raise FaultError(
            f"interface name {name!r} is not a plain interface name (letters, digits, '_', '.', "
            "'-', at most 15, not starting with '-'): genie will not put it in a command"
        )
    return name


def plan_lab(tb: Testbed, events: list[Event]) -> LabPlan:
    """Resolve ``events`` on lab testbed ``tb`` (opt-in, named interfaces, a ``for`` each)."""
    check_allowed(tb, events)
    faults = []
    for k, ev in enumerate(events):
        host = max(
            (h for h in tb.hosts if ev.target.startswith(h.name + "-")), key=lambda h: len(h.name)
        )
        iface = check_iface(ev.target[len(host.name) + 1 :])
        if ev.action in ("delay", "loss"):
            raise FaultError(
                f"fault {ev.text!r}: {ev.action} faults run on netns testbeds; on lab hosts "
                "genie applies rate and down only"
            )
        if ev.action == "up":
            raise FaultError(
                f"fault {ev.text!r}: on lab hosts every fault carries its own restore ('down "
                "for DURATION'); 'up' is not needed and not sent"
            )
        if ev.for_s is None:
            raise FaultError(
                f"fault {ev.text!r}: on lab host {host.name} give 'for DURATION' (a link left "
                "down could cut the SSH session that would restore it)"
            )
        faults.append(LabFault(k, host.name, iface, ev.action, ev.at_s, ev.for_s, ev.rate))
    return LabPlan(events, faults)


def qdisc_query(iface: str) -> str:
    """Shell text printing ``iface``'s root qdisc as tc JSON (fails if there is no such one)."""
    return f"tc -j qdisc show dev {shlex.quote(check_iface(iface))} root"


def restore_qdisc(iface: str, shown: str) -> list[str]:
    """The argv that puts back the root qdisc ``shown`` (``tc -j qdisc show ... root``)."""
    dev = check_iface(iface)
    try:
        roots = [q for q in json.loads(shown) if q.get("root")]
    except (ValueError, AttributeError, TypeError):
        raise FaultError(f"{dev}: unreadable qdisc listing {shown[:80]!r}") from None
    kind = roots[0].get("kind") if roots else "noqueue"
    if kind in DEFAULT_QDISCS:  # deleting genie's tbf brings the kernel's default back
        return ["tc", "qdisc", "del", "dev", dev, "root"]
    opts = roots[0].get("options") or {}
    if kind == "tbf" and all(
        isinstance(opts.get(k), int | float) for k in ("rate", "burst", "lat")
    ):
        return [
            "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
            "rate", f"{round(opts['rate'] * 8)}bit", "burst", str(int(opts["burst"])),
            "latency", f"{int(opts['lat'])}us",
        ]  # fmt: skip
    raise FaultError(
        f"{dev} has root qdisc {kind!r}, which genie cannot put back after a rate fault; "
        "leave rate faults off this interface or remove that qdisc"
    )


def _tbf(dev: str, rate: float) -> list[str]:
    from genie.testbed.netns_plan import tbf_params

    bits, burst, limit = tbf_params(rate, 1500, None)
    return [
        "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
        "rate", f"{bits}bit", "burst", str(burst), "limit", str(limit),
    ]  # fmt: skip


def _sudo(argv: list[str]) -> str:
    return "$S " + shlex.join(argv)


def apply_restore(f: LabFault, qdisc_back: list[str] | None) -> tuple[str, str]:
    """The shell commands that apply ``f`` and undo it (``qdisc_back``: for a rate fault)."""
    dev = check_iface(f.iface)
    if f.action == "down":
        return (_sudo(["ip", "link", "set", "dev", dev, "down"]),
                _sudo(["ip", "link", "set", "dev", dev, "up"]))  # fmt: skip
    if qdisc_back is None or f.rate is None:
        raise FaultError(f"{f.label}: a rate fault needs the qdisc to put back")
    return _sudo(_tbf(dev, f.rate)), _sudo(qdisc_back)


def event_script(f: LabFault, delay_s: float, log: str, token: str, undo: tuple[str, str]) -> str:
    """ONE detached command: log landing, sleep ``delay_s``, apply, sleep the window, restore,
    logging each host-clock time; prints the detached shell's pid (see the module docstring)."""
    if not TOKEN.fullmatch(token):
        raise FaultError(f"bad fault token {token!r}")
    apply, restore = undo
    stamp = "$(date +%s.%N)"
    body = "; ".join(
        [
            SUDO,
            f'echo "landed {stamp}" > {log}',
            f"sleep {max(0.0, delay_s):.6f}",
            f'if {apply}; then echo "applied {stamp}"; else echo "failed {stamp}"; fi '
            f">> {log} 2>&1",
            f"sleep {f.for_s:.6f}",
            f'if {restore}; then echo "restored {stamp}"; else echo "unrestored {stamp}"; fi '
            f">> {log} 2>&1",
        ]
    )
    return (
        f"mkdir -p {log.rsplit('/', 1)[0]} && setsid sh -c {shlex.quote(body)} "
        f"genie-fault-{token} </dev/null >/dev/null 2>&1 & echo $!"
    )


def end_script(
    token: str, pids: list[int], logs: str, restores: list[str], ifaces: list[str]
) -> str:
    """The run's end on one host: cancel this run's pending faults (by pid, only if still
    genie's), print their logs (in the shell-quoted folder ``logs``), restore every touched
    interface, print its state."""
    if not TOKEN.fullmatch(token):
        raise FaultError(f"bad fault token {token!r}")
    kills = " ".join(str(int(p)) for p in pids)
    lines = [
        SUDO,
        f"for p in {kills or ':'}; do case $p in :) ;; *) "
        f"grep -q genie-fault-{token} /proc/$p/cmdline 2>/dev/null && kill -TERM -- -$p;; esac; "
        "done",
        f'for f in {logs}/{token}-*.log; do [ -f "$f" ] && echo "log ${{f##*-}} $(tr "\\n" " " '
        f'< "$f")" && rm -f "$f"; done',
        *(f"{r} 2>/dev/null" for r in restores),
        *(
            f'echo "state {shlex.quote(i)} $(ip -j link show dev {shlex.quote(check_iface(i))})'
            f' $({qdisc_query(i)})"'
            for i in ifaces
        ),
    ]
    return "; ".join(lines)
