"""Link faults during a run, planned purely: parse a schedule, resolve it on a testbed, and
build the timed ``tc``/``ip`` commands that apply it and the ones that restore the testbed.

A schedule is events separated by ``;`` or new lines (``#`` starts a comment)::

    at 200ms: h2 link rate 100mbit          # both directions of h2's link, until the end
    at 600ms: sw0-p3 down for 50ms          # that interface down, up again 50 ms later
    at 1s: leaf0-spine0 rate 50mbit for 300ms

Targets: ``HOST link`` (the host's one link), ``NODE-IFACE`` (the link of interface IFACE that
genie made on host or switch NODE: ``eth0``, ``p3``) or ``NODE-NODE`` (the link between two
nodes). Actions: ``rate RATE`` (the link's token bucket, both ends), ``down`` (the named end;
``NODE-NODE`` and ``HOST link``: the first end), ``up``; ``for DURATION`` restores that target to
the testbed file's state after the duration. ``loss`` and ``delay`` need netem, which this
kernel lacks: they are refused, never faked. Times are from the run's common start (the first
measured run's Go, after the warm-up runs), in order, at most ``MAX_TIME_S``; at most
``MAX_EVENTS`` events.

Lab (static) testbeds: refused unless the host opts in (``faults = true``) and the interface is
one the testbed file names (``nic``, or a NIC's ``device``); targets are ``HOST-IFACE`` and
every fault needs ``for``: ``genie.faults.lab_plan`` sends each with its own restore over SSH.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from msgspec.structs import replace

from genie.errors import UnitError, UsageError
from genie.testbed.model import Testbed
from genie.testbed.netns_plan import Port, ip, link_ports, shape
from genie.units import format_seconds, parse_bandwidth, parse_duration, parse_fraction

if TYPE_CHECKING:
    from genie.faults.lab_plan import LabPlan

MAX_EVENTS = 64
MAX_TIME_S = 600.0
MAX_FILE_BYTES = 64 * 1024
MAX_DELAY_S = 10.0  # a delay fault's most, one way per link end
MAX_LOSS = 0.5  # a loss fault below this fraction (TCP barely moves above it)
NETEM = ("delay", "loss")  # need sch_netem
UNSUPPORTED = ("jitter", "duplicate", "corrupt", "reorder")


class FaultError(UsageError):
    """A fault schedule that cannot be parsed, resolved or run here."""


@dataclass(frozen=True)
class Event:
    """One parsed event: at ``at_s`` do ``action`` on ``target`` (for ``for_s``, if given)."""

    at_s: float
    target: str
    action: str  # rate | delay | loss | down | up
    rate: float | None = None  # bytes/s
    for_s: float | None = None
    text: str = ""
    delay: float | None = None  # s, one way per link end (delay)
    jitter: float | None = None  # s (delay)
    loss: float | None = None  # fraction of packets (loss)


@dataclass(frozen=True)
class Step:
    """One timed thing to do: its commands, at ``at_s`` from the common start."""

    at_s: float
    label: str
    commands: tuple[tuple[str, ...], ...]
    event: int  # index of the event it belongs to
    restore: bool = False  # the end of a ``for`` window


@dataclass
class FaultPlan:
    """A schedule resolved on a testbed: the timed steps and the commands that restore all."""

    events: list[Event]
    steps: list[Step]
    restore: list[tuple[str, ...]] = field(default_factory=list)
    restore_routes: dict[str, str] = field(default_factory=dict)  # netns -> ip -batch text

    def describe(self) -> list[str]:
        """One line per event, as parsed."""
        return [e.text for e in self.events]

    def down_s(self) -> float:
        """Seconds links are down by the schedule's windows (a down to its ``for`` end or its
        ``up``; a down never brought up counts nothing: the run cannot outlive it)."""
        total = 0.0
        for k, ev in enumerate(self.events):
            if ev.action != "down":
                continue
            ends = [s.at_s for s in self.steps if s.event == k and s.restore]
            total += (ends[0] - ev.at_s) if ends else 0.0
        return total


def read_schedule(value: str) -> str:
    """The schedule text: ``value`` itself, or the file it names (at most 64 KiB)."""
    p = Path(value)
    if "\n" not in value and ":" not in value and p.exists():
        if not p.is_file():
            raise FaultError(f"fault schedule {value}: not a file")
        if p.stat().st_size > MAX_FILE_BYTES:
            raise FaultError(f"fault schedule {value}: larger than {MAX_FILE_BYTES} bytes")
        return p.read_text(errors="replace")
    return value


_EVENT = re.compile(r"at\s+(?P<at>\S+?)\s*:\s*(?P<target>\S+)(?:\s+link)?\s+(?P<action>.+)")


def parse_schedule(text: str) -> list[Event]:
    """The events of a schedule (see the module docstring); a FaultError names the bad one."""
    items: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        items.extend(p.strip() for p in line.split(";"))
    items = [x for x in items if x]
    if not items:
        raise FaultError("empty fault schedule (e.g. 'at 200ms: h1 link rate 100mbit')")
    if len(items) > MAX_EVENTS:
        raise FaultError(f"fault schedule has {len(items)} events; at most {MAX_EVENTS}")
    out: list[Event] = []
    for item in items:
        ev = _parse_event(item)
        if out and ev.at_s < out[-1].at_s:
            raise FaultError(
                f"fault {item!r}: at {format_seconds(ev.at_s)} comes before the previous "
                f"event's {format_seconds(out[-1].at_s)}; list events in time order"
            )
        out.append(ev)
    return out


def _parse_event(item: str) -> Event:
    m = _EVENT.fullmatch(item)
    if not m:
        raise FaultError(
            f"fault {item!r}: use 'at TIME: TARGET ACTION', e.g. 'at 200ms: h2 link rate "
            "100mbit' or 'at 1s: sw0-p3 down for 50ms'"
        )
    try:
        at = parse_duration(m["at"])
    except UnitError as exc:
        raise FaultError(f"fault {item!r}: {exc}") from None
    if at > MAX_TIME_S:
        raise FaultError(f"fault {item!r}: at {m['at']} is beyond {MAX_TIME_S:g} s")
    words = m["action"].split()
    verb = words[0].lower()
    if verb in UNSUPPORTED:
        raise FaultError(
            f"fault {item!r}: genie does not emulate {verb} (rate, delay, loss, down, up)"
        )
    rest, for_s = words[1:], None
    if len(rest) >= 2 and rest[-2].lower() == "for":
        try:
            for_s = parse_duration(rest[-1])
        except UnitError as exc:
            raise FaultError(f"fault {item!r}: {exc}") from None
        if not 0 < for_s <= MAX_TIME_S or at + for_s > MAX_TIME_S:
            raise FaultError(f"fault {item!r}: 'for' must be > 0 and end by {MAX_TIME_S:g} s")
        rest = rest[:-2]
    rate = delay = jitter = loss = None
    if verb == "delay":
        if len(rest) not in (1, 2):
            raise FaultError(f"fault {item!r}: use 'delay DURATION [JITTER]', e.g. 'delay 2ms'")
        try:
            delay = parse_duration(rest[0])
            jitter = parse_duration(rest[1]) if len(rest) == 2 else 0.0
        except UnitError as exc:
            raise FaultError(f"fault {item!r}: {exc}") from None
        if not (0 <= delay <= MAX_DELAY_S and 0 <= jitter <= delay):
            raise FaultError(
                f"fault {item!r}: a delay from 0 to {MAX_DELAY_S:g} s, jitter at most the delay"
            )
    elif verb == "loss":
        if len(rest) != 1:
            raise FaultError(f"fault {item!r}: use 'loss PERCENT', e.g. 'loss 1%'")
        try:
            loss = parse_fraction(rest[0])
        except UnitError as exc:
            raise FaultError(f"fault {item!r}: {exc}") from None
        if loss >= MAX_LOSS:
            raise FaultError(f"fault {item!r}: loss below {MAX_LOSS:.0%}")
    elif verb == "rate":
        if len(rest) != 1:
            raise FaultError(f"fault {item!r}: use 'rate RATE', e.g. 'rate 100mbit'")
        try:
            rate = parse_bandwidth(rest[0])
        except UnitError as exc:
            raise FaultError(f"fault {item!r}: {exc}") from None
    elif verb in ("down", "up"):
        if rest:
            raise FaultError(f"fault {item!r}: '{verb}' takes only 'for DURATION'")
        if verb == "up" and for_s is not None:
            raise FaultError(f"fault {item!r}: 'up' takes no 'for'")
    else:
        raise FaultError(f"fault {item!r}: unknown action {verb!r} (rate, delay, loss, down, up)")
    return Event(at, m["target"], verb, rate, for_s, item, delay, jitter, loss)


@dataclass(frozen=True)
class Target:
    """A resolved target: the link, its two ends, and the end a down/up acts on."""

    link: int
    ports: tuple[Port, Port]
    end: int  # 0 or 1
    label: str


def _node_names(tb: Testbed) -> dict[str, str]:
    """Topology node -> the node a user names (a host's NIC endpoints name their host)."""
    out = {s.name: s.name for s in tb.switches}
    for h in tb.hosts:
        for ep in h.endpoints():
            out[ep] = h.name
    return out


def resolve_target(tb: Testbed, text: str) -> Target:
    """The link and end ``text`` names on ``tb`` (see the module docstring)."""
    ports = link_ports(tb)
    owner = _node_names(tb)
    ends: list[tuple[int, int, str, str]] = []  # (link, end, node, ifname)
    for i, lk in enumerate(tb.links):
        for e, node in enumerate((lk.a, lk.b)):
            ends.append((i, e, owner.get(node, node), ports[i][e].ifname))
    nodes = sorted({n for _, _, n, _ in ends})
    if text in nodes:  # HOST link
        mine = [(i, e) for i, e, n, _ in ends if n == text]
        if len(mine) != 1:
            names = ", ".join(f"{text}-{ports[i][e].ifname}" for i, e in mine)
            raise FaultError(f"fault target {text!r} has {len(mine)} links: name one ({names})")
        i, e = mine[0]
        return Target(i, ports[i], e, f"{text} link ({text}-{ports[i][e].ifname})")
    for cut in [m.start() for m in re.finditer("-", text)]:
        a, b = text[:cut], text[cut + 1 :]
        hit = [(i, e) for i, e, n, f in ends if n == a and f == b]
        if hit:
            i, e = hit[0]
            return Target(i, ports[i], e, text)
        pair = [(i, e) for i, e, n, _ in ends if n == a and owner_of(tb, i, 1 - e, owner) == b]
        if len(pair) == 1:
            i, e = pair[0]
            return Target(i, ports[i], e, text)
        if len(pair) > 1:
            raise FaultError(f"fault target {text!r}: {len(pair)} links join {a} and {b}")
    raise FaultError(
        f"fault target {text!r}: no such link or interface on testbed {tb.name} (use HOST "
        f"link, NODE-IFACE like {ends[0][2]}-{ends[0][3]}, or NODE-NODE; nodes: "
        f"{', '.join(nodes[:12])})"
    )


def owner_of(tb: Testbed, link: int, end: int, owner: dict[str, str]) -> str:
    """The user-facing node at ``end`` of link ``link``."""
    lk = tb.links[link]
    node = lk.a if end == 0 else lk.b
    return owner.get(node, node)


def _shape_cmds(ports: tuple[Port, Port], ev: Event | None) -> tuple[tuple[str, ...], ...]:
    """Both ends as the testbed file has them, but for what ``ev`` sets (None: as the file)."""
    out: list[tuple[str, ...]] = []
    for p in ports:
        if ev is not None and ev.rate is not None:
            p = replace(p, rate=ev.rate)
        if ev is not None and ev.delay is not None:
            p = replace(p, delay=ev.delay, jitter=ev.jitter or 0.0)
        if ev is not None and ev.loss is not None:
            p = replace(p, loss=ev.loss)
        out += [tuple(argv) for argv in shape(p)]
    return tuple(out)


def _fault_label(t: Target, ev: Event) -> str:
    if ev.action == "rate":
        assert ev.rate is not None
        return f"{t.label} rate {ev.rate * 8 / 1e6:g} Mbit/s"
    if ev.action == "delay":
        assert ev.delay is not None
        jit = f" +- {format_seconds(ev.jitter)}" if ev.jitter else ""
        return f"{t.label} delay {format_seconds(ev.delay)}{jit} each way"
    assert ev.loss is not None
    return f"{t.label} loss {ev.loss:.3%} each way"


def _link_cmd(p: Port, state: str) -> tuple[str, ...]:
    return tuple(ip(p.netns, "link", "set", p.ifname, state))


def plan_faults(tb: Testbed, events: list[Event]) -> FaultPlan | LabPlan:
    """Resolve ``events`` on ``tb`` into timed steps and the restore-everything commands (lab
    testbeds: a ``genie.faults.lab_plan.LabPlan``, applied over SSH)."""
    if tb.kind != "netns":
        from genie.faults.lab_plan import plan_lab

        return plan_lab(tb, events)
    steps: list[Step] = []
    touched: dict[int, Target] = {}
    downed: dict[tuple[int, int], int] = {}  # (link, end) -> the event that took it down
    for k, ev in enumerate(events):
        t = resolve_target(tb, ev.target)
        touched.setdefault(t.link, t)
        end = t.ports[t.end]
        if ev.action == "up":  # ends the window of the down it undoes (if any)
            k_down = downed.pop((t.link, t.end), k)
            steps.append(Step(ev.at_s, f"{t.label} up", (_link_cmd(end, "up"),), k_down, True))
            continue
        if ev.action == "down" and ev.for_s is None:
            downed[(t.link, t.end)] = k
        if ev.action in ("rate", *NETEM):
            steps.append(Step(ev.at_s, _fault_label(t, ev), _shape_cmds(t.ports, ev), k))
            undo = _shape_cmds(t.ports, None)
        else:
            steps.append(Step(ev.at_s, f"{t.label} {ev.action}", (_link_cmd(end, ev.action),), k))
            undo = (_link_cmd(end, "up"),)
        if ev.for_s is not None:
            label = f"{t.label} restored ({ev.action} for {format_seconds(ev.for_s)} ended)"
            steps.append(Step(ev.at_s + ev.for_s, label, undo, k, restore=True))
    steps.sort(key=lambda s: s.at_s)  # stable: a window's end after what starts with it
    restore: list[tuple[str, ...]] = []
    for t in touched.values():
        restore.extend(_shape_cmds(t.ports, None))
        restore.extend(_link_cmd(p, "up") for p in t.ports)
    return FaultPlan(events, steps, restore, _route_restore(tb, touched))


def _route_restore(tb: Testbed, touched: dict[int, Target]) -> dict[str, str]:
    """Routed fabrics: per namespace of a touched link's end, its routes as ``replace`` lines
    (a device set down loses its routes; bringing it up does not bring them back)."""
    from genie.testbed import fabric_routes

    if fabric_routes.fabric_kind(tb) != "routed" or not touched:
        return {}
    port_to: dict[tuple[str, str], str] = {}
    ports = link_ports(tb)
    for i, lk in enumerate(tb.links):
        port_to[(lk.a, lk.b)] = ports[i][0].ifname
        port_to[(lk.b, lk.a)] = ports[i][1].ifname
    lines: dict[str, list[str]] = {}
    for s, ls in fabric_routes.switch_route_lines(tb, port_to).items():
        ns = next(x.netns for x in tb.switches if x.name == s)
        lines[ns or ""] = ls
    for h, ls in zip(tb.hosts, fabric_routes.host_route_lines(tb, port_to).values(), strict=True):
        lines[h.netns or ""] = ls
    out = {}
    for t in touched.values():
        for p in t.ports:
            keep = [
                re.sub(r"^(route|address) add ", r"\1 replace ", x)
                for x in lines.get(p.netns, [])
                if x.startswith(("route add", "address add"))
            ]
            if keep:
                out[p.netns] = "".join(x + "\n" for x in keep)
    return out


def check_allowed(tb: Testbed, events: list[Event]) -> None:
    """Refuse schedules this testbed does not allow (see the module docstring)."""
    if tb.kind == "netns":
        return
    for ev in events:
        hosts = [h for h in tb.hosts if ev.target.startswith(h.name + "-")]
        host = max(hosts, key=lambda h: len(h.name), default=None)
        if host is None:
            raise FaultError(
                f"fault {ev.text!r}: on lab testbed {tb.name} a fault names a host's interface "
                "(HOST-IFACE)"
            )
        if not host.faults:
            raise FaultError(
                f"fault {ev.text!r}: host {host.name} of lab testbed {tb.name} does not allow "
                "faults (add 'faults = true' to the host in the testbed file to opt in)"
            )
        named = {d for d in (host.nic, *(n.device for n in host.nics)) if d is not None}
        iface = ev.target[len(host.name) + 1 :]
        if iface not in named:
            raise FaultError(
                f"fault {ev.text!r}: interface {iface or '?'} of {host.name} is not one the "
                f"testbed file names ({', '.join(sorted(named)) or 'none'})"
            )
