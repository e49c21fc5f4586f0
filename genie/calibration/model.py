"""A calibration of the cost model and how it prices a topology.

Parameters, per link class (``inter-host``: every link of the topology; ``intra-host``: the path
between ranks of one host):

* ``latency_s``: latency per hop (each link of a route adds it; intra-host: the one hop);
* ``bandwidth_fraction``: the fraction of each link's line rate (its declared rate) a message
  gets; the calibrated rate is line rate x fraction;
* ``message_s``: a per-message cost on top of the hops (inter-host only; zero unless the data
  separate it from the hops, i.e. messages crossed different numbers of hops);

and for the whole software stack ``step_overhead_s``: what a rank spends on each SEND, REDUCE
and COPY step, one after another (``genie.collectives.flowsim``). Each value carries its 1-sigma
uncertainty from the fit (None: not fitted, kept at its nominal value; the notes say why).

``calibrate_topology`` applies a calibration to any ``genie.collectives.topology.Topology`` (the
testbed's, or a target fabric's: its line rates times the fitted fractions), ``at_params`` builds
the topology for a raw parameter vector during the fit. The topology's ``model`` then names the
calibration, so every report says which model priced its numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from genie.collectives.topology import Link, Topology
from genie.errors import CalibrationError

INTER, INTRA = "inter-host", "intra-host"
CLASSES = (INTER, INTRA)

# the fit's parameter vector: names, in order (bandwidths enter as inverse fractions, so the
# model's time is linear in every parameter along one critical path)
PARAMS = (
    "step_overhead_s",
    "inter.latency_s",
    "inter.message_s",
    "inter.inv_fraction",
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
        for name, c in self.classes.items():
            text = (
                f"{name}: {_pct(c.bandwidth_fraction, c.bandwidth_fraction_err)} of line rate, "
                f"{_us(c.latency_s, c.latency_err_s)} per hop"
            )
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


def nominal_params(topology: Topology) -> dict[str, float]:
    """The parameter vector that reproduces ``topology`` as declared (mean link latency)."""
    lats = [lk.latency for lk in topology.links]
    return {
        "step_overhead_s": topology.step_overhead,
        "inter.latency_s": sum(lats) / len(lats) if lats else 0.0,
        "inter.message_s": topology.message_latency,
        "inter.inv_fraction": 1.0,
        "intra.latency_s": topology.intra_latency,
        "intra.inv_fraction": 1.0,
    }


def at_params(topology: Topology, p: Mapping[str, float], model: str = "") -> Topology:
    """``topology`` with the parameters ``p`` (line rates from ``topology``, see module doc)."""
    if p["inter.inv_fraction"] <= 0 or p["intra.inv_fraction"] <= 0:
        raise CalibrationError("a bandwidth fraction must be positive")
    inv, lat = p["inter.inv_fraction"], p["inter.latency_s"]
    return topology.derive(
        link=lambda lk: Link(lk.src, lk.dst, lk.bandwidth / inv, lat),
        intra_bandwidth=topology.intra_bandwidth / p["intra.inv_fraction"],
        intra_latency=p["intra.latency_s"],
        message_latency=p["inter.message_s"],
        step_overhead=p["step_overhead_s"],
        model=model,
    )


def params_of(cal: Calibration, topology: Topology) -> dict[str, float]:
    """The parameter vector of ``cal`` (a class it lacks keeps ``topology``'s nominal values)."""
    p = nominal_params(topology)
    p["step_overhead_s"] = cal.step_overhead_s
    for prefix, name in (("inter", INTER), ("intra", INTRA)):
        c = cal.classes.get(name)
        if c is None:
            continue
        p[f"{prefix}.latency_s"] = c.latency_s
        p[f"{prefix}.inv_fraction"] = 1.0 / c.bandwidth_fraction
        if prefix == "inter":
            p["inter.message_s"] = c.message_s
    return p


def calibrate_topology(topology: Topology, cal: Calibration) -> Topology:
    """``topology`` priced with ``cal`` (line rates x fitted fractions, fitted latencies...)."""
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
