"""A calibration of the cost model and how it prices a topology.

Parameters, per link class (``host NIC``: a link with a host at one end, the host's own port and
its switch port; ``uplink``: a switch-to-switch link, e.g. a leaf's uplink to a spine;
``intra-host``: the path between ranks of one host; ``link_class`` says which a link is):

* ``latency_s``: latency per hop (each link of a route adds it; intra-host: the one hop);
* ``bandwidth_fraction``: the fraction of each link's payload rate (its declared rate less the
  transport's packet headers, ``genie.testbed.to_topology``) a message gets, at most 1 (the
  wire cannot carry more payload than that); the calibrated rate is payload rate x fraction;
* ``message_s``: a per-message cost on top of the hops (host NIC only: every message between
  hosts pays it once; zero unless the data separate it from the hops, i.e. messages crossed
  different numbers of host NIC links);

and for the whole software stack ``step_overhead_s``: what a rank spends on each SEND, REDUCE
and COPY step, one after another (``genie.collectives.flowsim``). Each value carries its 1-sigma
uncertainty from the fit (None: not fitted, kept at its nominal value; the notes say why). A
class a calibration lacks (a star has no uplinks; a run with one rank per host no intra-host
path) keeps the nominal values of the topology it prices.

Calibrations stored before the link classes were split have one class ``inter-host`` for every
link of the topology; they load as before, their values applying to host NICs and uplinks alike
(``Calibration.__post_init__`` maps the class, and a note says so).

``calibrate_topology`` applies a calibration to any ``genie.collectives.topology.Topology`` (the
testbed's, or a target fabric's: its line rates times the fitted fractions), ``at_params`` builds
the topology for a raw parameter vector during the fit. The topology's ``model`` then names the
calibration, so every report says which model priced its numbers.

A calibration is bound to the fabric it was fitted on: ``identity`` of the nominal topology
(hosts, links with their rates and latencies, intra-host path) and the runs' recorded wire
``conditions``. ``calibrate_topology`` refuses a topology whose identity differs, in one line
naming what differs (``mismatch``). ``offered``: whether ``--calibration latest`` may pick it
(no bound binds and the held-back error improves by a clear margin; ``verdict`` says why).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from genie.collectives.topology import Link, Topology
from genie.errors import CalibrationError

NIC, UPLINK, INTRA = "host NIC", "uplink", "intra-host"
CLASSES = (NIC, UPLINK, INTRA)
LEGACY_INTER = "inter-host"  # the one class of every link, in calibrations stored before the split
# the prefix of each class's parameters in the fit's vector
PREFIX = {NIC: "nic", UPLINK: "uplink", INTRA: "intra"}

# the fit's parameter vector: names, in order (bandwidths enter as inverse fractions, so the
# model's time is linear in every parameter along one critical path)
PARAMS = (
    "step_overhead_s",
    "nic.latency_s",
    "nic.message_s",
    "nic.inv_fraction",
    "uplink.latency_s",
    "uplink.inv_fraction",
    "intra.latency_s",
    "intra.inv_fraction",
)


class ClassParams(msgspec.Struct, frozen=True, kw_only=True):
    """Fitted parameters of one link class, each with its 1-sigma uncertainty (None: not fitted)."""

    latency_s: float
    bandwidth_fraction: float = 1.0
    message_s: float = 0.0
    latency_err_s: float | None = None
    bandwidth_fraction_err: float | None = None
    message_err_s: float | None = None
    at_bound: bool = False  # the fraction is held at 1 (the fit wanted more than the payload rate)


class Calibration(msgspec.Struct, kw_only=True):
    """One calibration: parameters, where they came from, and how well they predict."""

    cal_id: str = ""
    created_at: float = 0.0
    testbed_name: str = ""
    runs: list[str] = []
    step_overhead_s: float = 0.0
    step_overhead_err_s: float | None = None
    classes: dict[str, ClassParams] = {}
    holdout: str = ""  # which points were held back, in words
    points_fit: int = 0
    points_held: int = 0
    # MAPE in percent: nominal/calibrated model on the fit points and on the held-back points
    mape: dict[str, float | None] = {}
    notes: list[str] = []
    rows: list[dict[str, Any]] = []  # per point: label, measured, nominal, calibrated, held
    # the bounds the fit ran into, in words ("host NIC bandwidth fraction held at 100 % ...")
    bounds: list[str] = []
    offered: bool = False  # whether --calibration latest may pick it (see verdict)
    verdict: str = ""  # why it is offered or not, in one phrase
    identity: dict[str, str] = {}  # of the nominal topology it was fitted on (``identity``)
    conditions: dict[str, str] = {}  # the fit runs' wire conditions, flattened
    # time-weighted error in percent (sum |model - measured| / sum measured), keys as ``mape``
    weighted: dict[str, float | None] = {}
    # the points below a share of the measured time, reported apart: share, points_below, and
    # the MAPE (nominal, calibrated) of those ("below") and of the rest ("rest")
    apart: dict[str, Any] = {}
    # error on other runs (``genie calibrate --validate``): runs, MAPE nominal/calibrated, rows
    validation: dict[str, Any] = {}

    def __post_init__(self) -> None:
        """A calibration stored with one ``inter-host`` class applies it to host NICs and
        uplinks alike (the module docstring)."""
        legacy = self.classes.get(LEGACY_INTER)
        if legacy is None:
            return
        classes = {k: v for k, v in self.classes.items() if k != LEGACY_INTER}
        classes.setdefault(NIC, legacy)
        classes.setdefault(
            UPLINK, msgspec.structs.replace(legacy, message_s=0.0, message_err_s=None)
        )
        self.classes = {k: classes[k] for k in (*CLASSES, *classes) if k in classes}
        self.notes = [
            *self.notes,
            f"stored with one {LEGACY_INTER} class (before host NICs and uplinks were fitted "
            "apart): its values apply to both",
        ]

    def to_dict(self) -> dict[str, Any]:
        """The calibration as plain data (what the store keeps; ``genie calibrate --json``)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out

    @property
    def label(self) -> str:
        """What reports print for numbers this calibration priced."""
        return f"calibrated {self.cal_id}" if self.cal_id else "calibrated (unsaved)"

    def describe(self) -> str:
        """One line: the parameters with their uncertainties."""
        parts = [f"step overhead {_us(self.step_overhead_s, self.step_overhead_err_s)}"]
        for name in (*CLASSES, *(k for k in self.classes if k not in CLASSES)):
            c = self.classes.get(name)
            if c is None:
                parts.append(f"{name}: nominal (not fitted)")
                continue
            fr = (
                f"{c.bandwidth_fraction:.1%} (held at the bound)"
                if c.at_bound
                else _pct(c.bandwidth_fraction, c.bandwidth_fraction_err)
            )
            text = f"{name}: {fr} of the payload rate, {_us(c.latency_s, c.latency_err_s)} per hop"
            if c.message_s or c.message_err_s is not None:
                text += f", {_us(c.message_s, c.message_err_s)} per message"
            parts.append(text)
        return "; ".join(parts)


def _us(v: float, err: float | None) -> str:
    if err is None:
        return f"{v * 1e6:.3g} us (not fitted)"
    return f"{v * 1e6:.3g} ± {err * 1e6:.2g} us"


def _pct(v: float, err: float | None) -> str:
    if err is None:
        return f"{v:.1%} (not fitted)"
    return f"{v:.1%} ± {err:.1%}"


def link_class(topology: Topology, link: Link) -> str:
    """``host NIC`` for a link with a host (endpoint) at one end, else ``uplink``."""
    return _class_of(set(topology.hosts), link)


def _class_of(hosts: set[str], link: Link) -> str:
    return NIC if link.src in hosts or link.dst in hosts else UPLINK


def nominal_params(topology: Topology) -> dict[str, float]:
    """The parameter vector that reproduces ``topology`` as declared (mean latency per class;
    a class without links takes the mean of all links)."""
    lats: dict[str, list[float]] = {NIC: [], UPLINK: []}
    hosts = set(topology.hosts)
    for lk in topology.links:
        lats[_class_of(hosts, lk)].append(lk.latency)
    every = lats[NIC] + lats[UPLINK]

    def mean(xs: list[float]) -> float:
        xs = xs or every
        return sum(xs) / len(xs) if xs else 0.0

    return {
        "step_overhead_s": topology.step_overhead,
        "nic.latency_s": mean(lats[NIC]),
        "nic.message_s": topology.message_latency,
        "nic.inv_fraction": 1.0,
        "uplink.latency_s": mean(lats[UPLINK]),
        "uplink.inv_fraction": 1.0,
        "intra.latency_s": topology.intra_latency,
        "intra.inv_fraction": 1.0,
    }


def at_params(topology: Topology, p: Mapping[str, float], model: str = "") -> Topology:
    """``topology`` with the parameters ``p`` (line rates from ``topology``, see module doc)."""
    if any(p[f"{x}.inv_fraction"] <= 0 for x in PREFIX.values()):
        raise CalibrationError("a bandwidth fraction must be positive")
    per = {
        name: (p[f"{PREFIX[name]}.inv_fraction"], p[f"{PREFIX[name]}.latency_s"])
        for name in (NIC, UPLINK)
    }
    hosts = set(topology.hosts)

    def link(lk: Link) -> Link:
        inv, lat = per[_class_of(hosts, lk)]
        return Link(lk.src, lk.dst, lk.bandwidth / inv, lat)

    return topology.derive(
        link=link,
        intra_bandwidth=topology.intra_bandwidth / p["intra.inv_fraction"],
        intra_latency=p["intra.latency_s"],
        message_latency=p["nic.message_s"],
        step_overhead=p["step_overhead_s"],
        model=model,
    )


def params_of(cal: Calibration, topology: Topology) -> dict[str, float]:
    """The parameter vector of ``cal`` (a class it lacks keeps ``topology``'s nominal values)."""
    p = nominal_params(topology)
    p["step_overhead_s"] = cal.step_overhead_s
    for name, prefix in PREFIX.items():
        c = cal.classes.get(name)
        if c is None:
            continue
        p[f"{prefix}.latency_s"] = c.latency_s
        p[f"{prefix}.inv_fraction"] = 1.0 / c.bandwidth_fraction
        if name == NIC:
            p["nic.message_s"] = c.message_s
    return p


NOT_ASKED = "nominal model: no calibration asked for (--calibration none)"
NONE_OFFERED = (
    "nominal model: no offered calibration of this testbed and fabric in the run store (genie "
    "calibrate RUN; --calibration ID names one)"
)


def nominal_reason(asked: str | None) -> str:
    """Why a run asking ``--calibration asked`` priced with the nominal model only."""
    return NOT_ASKED if asked in (None, "", "none") else NONE_OFFERED


def identity(topology: Topology) -> dict[str, str]:
    """What makes a fabric the one a calibration was fitted on, as ``name -> value`` strings."""
    import hashlib  # here, not at the top: loading OpenSSL is felt in every command's start-up

    links = sorted((lk.src, lk.dst, lk.bandwidth, lk.latency) for lk in topology.links)
    rates = sorted({lk.bandwidth for lk in topology.links})
    lats = sorted({lk.latency for lk in topology.links})
    wiring = repr((topology.hosts, topology.switches, [lk[:2] for lk in links]))
    return {
        "shape": topology.kind,
        "hosts": str(len(topology.hosts)),
        "switches": str(len(topology.switches)),
        "links": str(len(links)),
        "link payload rates (bytes/s)": ", ".join(f"{r:.6g}" for r in rates) or "-",
        "link latencies (s)": ", ".join(f"{x:.6g}" for x in lats) or "-",
        "intra-host path": f"{topology.intra_bandwidth:.6g} B/s, {topology.intra_latency:.6g} s",
        "wiring": hashlib.sha256(wiring.encode()).hexdigest()[:12],
    }


def mismatch(bound: Mapping[str, str], other: Mapping[str, str]) -> list[str]:
    """What differs between two identities (or two flattened conditions), one phrase each."""
    return [
        f"{k}: {bound.get(k, '?')} vs {other.get(k, '?')}"
        for k in sorted(set(bound) | set(other))
        if bound.get(k) != other.get(k)
    ]


def check_fabric(cal: Calibration, topology: Topology) -> None:
    """Refuse, in one line naming what differs, a topology not the one ``cal`` was fitted on."""
    if not cal.identity:
        return
    diff = mismatch(cal.identity, identity(topology))
    if diff:
        raise CalibrationError(
            f"calibration {cal.cal_id or '(unsaved)'} of testbed {cal.testbed_name} is bound to "
            f"the fabric it was fitted on; this one differs ({'; '.join(diff[:3])}"
            f"{'; ...' if len(diff) > 3 else ''}): price it nominally (--calibration none)"
        )


def check_conditions(cal: Calibration, conditions: Mapping[str, str]) -> list[str]:
    """What differs between ``cal``'s recorded conditions and a run's (flattened): [] = match.

    Either side recorded none: nothing to compare (an empty list)."""
    if not cal.conditions or not conditions:
        return []
    diff = mismatch(cal.conditions, conditions)
    return sorted(diff, key=lambda d: "?" in d)  # what both recorded, and differs, first


def conditions_refusal(cal: Calibration | None, conditions: Mapping[str, Any]) -> str:
    """One line when ``cal`` was fitted under other wire conditions than a run's (its agents'
    ``WireConditions``, as structs or plain data); "" when they match or either recorded none."""
    if cal is None:
        return ""
    from genie.wire.conditions import flatten

    got = flatten({a: msgspec.to_builtins(c) for a, c in conditions.items()})
    diff = check_conditions(cal, got)
    if not diff:
        return ""
    return (
        f"calibration {cal.cal_id} not applied: it was fitted under other conditions "
        f"({'; '.join(diff[:3])}{'; ...' if len(diff) > 3 else ''}); nominal model only"
    )


def calibrate_topology(topology: Topology, cal: Calibration) -> Topology:
    """``topology`` priced with ``cal`` (payload rates x fitted fractions, fitted latencies...);
    a CalibrationError when ``topology`` is not the fabric ``cal`` was fitted on."""
    check_fabric(cal, topology)
    return at_params(topology, params_of(cal, topology), model=f"{cal.label}")


def scaled_topology(topology: Topology, bandwidth: float = 1.0, time: float = 1.0) -> Topology:
    """``topology`` with every bandwidth times ``bandwidth`` and every fixed time (latencies,
    per-message cost, step overhead) times ``time`` (for time dilation)."""
    return topology.derive(
        link=lambda lk: Link(lk.src, lk.dst, lk.bandwidth * bandwidth, lk.latency * time),
        intra_bandwidth=topology.intra_bandwidth * bandwidth,
        intra_latency=topology.intra_latency * time,
        message_latency=topology.message_latency * time,
        step_overhead=topology.step_overhead * time,
    )
